//! The bounds every input is read against: what one node, GPU, pod, plan or object may hold.
//! The CRD schemas carry them (so the API server refuses what the controller could not
//! read), the adapter checks them on pods and nodes, and errors name them.

/// Most GPUs one node may have (HGX boards carry 8; 16 leaves room for larger ones).
pub const MAX_GPUS_PER_NODE: usize = 16;
/// Most instances in one GPU's geometry (the largest grid has 12 placement units).
pub const MAX_INSTANCES_PER_GPU: usize = 16;
/// Most MIG slices of one profile one pod may request: every slice the largest node could
/// hold. A request above it can never be scheduled and is refused as invalid.
pub const MAX_SLICES_PER_POD: u64 = (MAX_GPUS_PER_NODE * MAX_INSTANCES_PER_GPU) as u64;
/// Most nodes one plan may change.
pub const MAX_PLAN_NODES: usize = 1000;
/// Most evictions one plan lists.
pub const MAX_PLAN_EVICTIONS: usize = 1000;
/// Most met (or unmet) demand entries a plan lists; the summary counts all of them.
pub const MAX_PLAN_DEMAND_ENTRIES: usize = 2000;
/// Most pods one shared device (a GPU or MIG device with time-slicing or MPS replicas) is
/// listed with: far above the replica counts NVIDIA's device plugin documents (tens per GPU).
pub const MAX_PODS_SHARING_A_DEVICE: usize = 1024;
/// Pods whose whole-GPU use a MigNode reports: one per whole GPU at most.
pub const MAX_MEASURED_PODS_PER_NODE: usize = MAX_GPUS_PER_NODE;
/// Longest free text (messages, reasons) in a Geometer object, as for a condition's message
/// (apimachinery `metav1.Condition.Message`, `maxLength=32768`).
pub const MAX_MESSAGE_BYTES: usize = 32768;
/// Longest short string (names, profiles, UUIDs, keys) in a Geometer object: a DNS subdomain
/// (253) plus a prefix, as label and annotation keys are.
pub const MAX_NAME_BYTES: usize = 317;
pub use geometer_solver::words::{cut, quote, quoted, MAX_QUOTED_VALUE_CHARS};
