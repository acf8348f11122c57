//! The whole operator on a simulated cluster, and the demo.
#![allow(clippy::unwrap_used)] // test and benchmark code: a failed unwrap is a failed run

mod demo;
mod gangs;
mod operator;
mod rightsizing;
mod simcluster;
mod whole;
