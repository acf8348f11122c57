//! The controller against the in-memory API server: plans, approval, leader election, requests.
#![allow(clippy::unwrap_used)] // test and benchmark code: a failed unwrap is a failed run

mod approve;
mod do_not_disrupt;
mod hostile;
mod leader;
mod plan_live;
mod plans;
mod requests;
