//! Moving data between devices: host-staged transfers and the expert-parallel all-to-all.

pub mod all_to_all;
pub mod transfer;

pub use all_to_all::{AllToAll, ExpertBatch};
