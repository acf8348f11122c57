//! The agent's loop ([`agent_loop::Agent`]: observe, decide, record, act, one round at a time),
//! the status and conditions it writes, and its backoff.

pub mod agent_loop;
pub mod backoff;
pub mod conditions;
pub mod status;
