//! The whole operator on a simulated cluster, and the demo.

mod demo;
mod operator;
mod simcluster;
