//! The offline CLI: catalog, geometry, plan and recommend.
#![allow(clippy::unwrap_used)] // test and benchmark code: a failed unwrap is a failed run

mod catalog_geometry;
mod device_check;
mod dra;
mod dynamic_mig;
mod hostile;
mod plan;
mod recommend;

use std::io::Write;
use std::process::{Command, Output, Stdio};

/// `geometer ARGS`, with `stdin` on its standard input when given.
pub(crate) fn geometer(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_geometer"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("geometer runs");
    if let Some(text) = stdin {
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    }
    drop(child.stdin.take());
    child.wait_with_output().unwrap()
}
