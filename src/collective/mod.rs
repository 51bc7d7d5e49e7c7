//! The transports that carry a job's data between its processes ([`transport`]: the seam;
//! [`loopback`]: ranks in one process; `mpi`, with the `mpi` feature: OpenMPI across processes
//! and hosts). Within a process, programs move data with the runtime's transfer and collective
//! nodes (`Op::Transfer`, `Op::AllToAll`, `Op::AllReduce`), staged through the host mailbox.

pub mod loopback;
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod transport;
