//! Shared by the controller's integration tests.
#![allow(dead_code)]

pub mod mock_api;
pub mod world;
