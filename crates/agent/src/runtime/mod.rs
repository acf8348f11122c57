//! The agent's loop ([`agent_loop::Agent`]: observe, decide, record, act, one round at a time),
//! the status and conditions it writes, and its backoff and
//! its metrics.

pub(crate) mod agent_loop;
pub(crate) mod backoff;
pub(crate) mod conditions;
pub(crate) mod metrics;
pub(crate) mod status;
