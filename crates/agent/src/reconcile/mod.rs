//! The agent's reconfiguration state machine: observe, diff per GPU, cordon (only when
//! needed), drain, repartition through NVML, verify, re-advertise, uncordon, ready.
//!
//! Pure decisions live in small modules ([`work`], [`decide`], [`cordon`], [`disruption`],
//! [`advertise`], [`backoff`], [`conditions`], [`status`]) so they can be tested without a
//! cluster; [`Agent`] wires them to Kubernetes, NVML and the kubelet.
//!
//! Crash safety: every step is written to `MigNode.status` before it is taken, and each round
//! starts from a fresh observation, so a restarted agent decides the same step again (every
//! step is idempotent: a destroy that finds nothing is done, a create is only decided when the
//! instance is missing, cordon and uncordon patches carry the node's resourceVersion).

mod act;
pub mod advertise;
pub mod backoff;
pub mod conditions;
pub mod cordon;
pub mod decide;
pub mod drain;
mod draining;
pub mod policy;
mod round;
mod runner;
pub mod sources;
pub mod status;
mod watch;
pub mod work;

pub use round::half_built_summary;
pub use runner::{Agent, AgentConfig, StepError};
pub use sources::{Clock, DeviceAssignments, KubeletPodResources, SharedAssignments, StepHook, StepPoint};
