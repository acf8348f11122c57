//! Dynamic Resource Allocation with NVIDIA's DRA driver (`gpu.nvidia.com`): which nodes it
//! advertises and how ([`stack`]), and how its device selectors read a device ([`selector`]).

pub mod selector;
pub mod stack;
