//! The trace simulator: parsers, models, accounting, strategies, CLI.

mod accounting;
mod cli;
mod models;
mod parsers;
mod planned;
mod promises;
