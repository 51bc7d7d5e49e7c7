//! Programs, the client API of Pathways (§4.2): a dataflow graph with one node per *sharded*
//! computation, built with [`ProgramBuilder`] and compiled once for a slice of devices into an
//! [`Executable`] whose pipelines, buffers and bind groups every run reuses.

pub mod access;
mod builder;
mod chain;
mod compile;
mod gang;
mod ir;
mod regroup;
mod variables;

pub use builder::ProgramBuilder;
pub use chain::{chain, chain_reference};
pub use compile::{CompileOptions, Executable};
pub use gang::{DEFAULT_AXIS, Gang};
pub use ir::{HostData, KernelNode, Node, Op, Program, Value, ValueInfo};
pub use regroup::{CountsSide, Placed, Ragged, Regroup, RowBlock};
pub use variables::Variables;
