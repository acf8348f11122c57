//! Pure decisions: what changes on each GPU, the next step, and the rules a drain follows.

pub(crate) mod drain_rules;
pub(crate) mod gpu_diff;
pub(crate) mod mig_mode;
pub(crate) mod next_step;
