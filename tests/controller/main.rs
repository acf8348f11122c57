//! The controller against the in-memory API server: plans, approval, leader election, requests.

mod approve;
mod do_not_disrupt;
mod leader;
mod plan_live;
mod plans;
mod requests;
