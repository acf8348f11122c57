//! The GPU catalog: the built-in models, the names the device plugin advertises, and user
//! catalog files. One test binary per concern of the solver crate (catalog, geometry, planner).

mod builtin;
mod device_plugin;
mod overrides;
