//! The trace simulator: parsers, models, accounting, strategies, CLI.
#![allow(clippy::unwrap_used)] // test and benchmark code: a failed unwrap is a failed run

mod accounting;
mod cli;
mod gangs;
mod models;
mod parsers;
mod planned;
mod promises;
mod whole;
