//! Dynamic Resource Allocation with NVIDIA's DRA driver (`gpu.nvidia.com`): how its device
//! selectors read a device ([`selector`]).

pub mod selector;
