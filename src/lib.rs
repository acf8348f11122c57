//! Geometer: the operator, the node agent and the CLI.
