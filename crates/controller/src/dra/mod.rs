//! Dynamic Resource Allocation with NVIDIA's DRA driver (`gpu.nvidia.com`): which nodes it
//! advertises and how ([`stack`]), the objects planning reads ([`objects`], slices as [`published`]), who holds each
//! device ([`holders`]), the devices Geometer could make ([`offers`]), what pending claims ask
//! for as MIG profiles ([`demand`]), how device selectors read a device ([`selector`]), and
//! which claims fragmentation blocks on DynamicMIG nodes ([`fragmentation`]) and how room is
//! opened for them by moving pods ([`compaction`]).

pub mod compaction;
pub mod demand;
pub mod fragmentation;
pub mod holders;
pub mod objects;
pub mod offers;
pub mod published;
pub mod selector;
pub mod stack;
