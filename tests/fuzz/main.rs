//! Fuzzing of every parser that reads a user's file: cluster snapshots, catalogs, policy
//! files, traces (Geometer CSV and YAML, Alibaba's CSV) and mig-parted configs. Each gets
//! mutations of the committed corpus (`tests/fuzz/corpus/<parser>/`: real files and the
//! hostile ones found so far) and arbitrary bytes, for a bounded number of cases
//! (`GEOMETER_FUZZ_CASES`, default 200 per parser). A panic, an input that takes longer than
//! a minute, or a single allocation over 256 MiB is a failure; allocations over 2 GiB are
//! refused outright so that a bad one ends the run instead of the machine.
#![allow(clippy::unwrap_used)] // test and benchmark code: a failed unwrap is a failed run

mod allocations;
mod mutate;
mod parsers;

#[global_allocator]
static ALLOCATOR: allocations::Bounded = allocations::Bounded;
