//! Moving data between devices: host-staged transfers and the expert-parallel all-to-all within
//! a process, and the transports that carry a job's data between its processes
//! ([`transport`]: the seam; [`loopback`]: ranks in one process; `mpi`, with the `mpi` feature:
//! OpenMPI across processes and hosts).

pub mod all_to_all;
pub mod loopback;
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod transfer;
pub mod transport;

pub use all_to_all::{AllToAll, ExpertBatch};
