//! The `geometer` command line: one module per subcommand over the library crates
//! (`geometer-api`, `geometer-controller`, `geometer-agent`, and with the `demo` feature the
//! in-memory API server, the simulated cluster and the trace simulator).

pub mod cli;
