//! Right-sizing: pods that hold a whole GPU for a slice's work. The agents measure what each
//! pod uses of its whole GPU (`MigNode.status.usage`); [`recommend`] turns that into a MIG
//! profile per workload with the patch to apply; [`prometheus`] reads the same from
//! dcgm-exporter's metrics; [`admission`] is what the (opt-in) [`webhook`] does to a new pod.

pub mod admission;
pub mod prometheus;
pub mod recommend;
pub mod webhook;
