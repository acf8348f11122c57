//! Pure decisions: what changes on each GPU, the next step, and the rules a drain follows.

pub mod drain_rules;
pub mod gpu_diff;
pub mod next_step;
