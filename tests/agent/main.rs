//! The node agent: its steps, drain, crashes, requests, NVML backends and CLI.
#![allow(clippy::unwrap_used)] // test and benchmark code: a failed unwrap is a failed run

mod cli;
mod crash;
mod deploy;
mod drain;
mod gpu_operator;
mod mig_mode;
mod nvml_fake_driver;
mod nvml_inventory;
mod nvml_probe;
mod nvml_real;
mod nvml_sim;
mod requests;
mod shared_devices;
mod steps;
mod unreadable;
