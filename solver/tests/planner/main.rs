//! The planner: scenarios with known answers, expected pods, properties of every plan, the
//! stabilisation window's empty GPUs, and the exact optimiser it is checked against.

mod expected;
mod gangs;
mod optimal;
mod properties;
mod scenarios;
mod spread;
mod support;
mod whole;
mod window;
