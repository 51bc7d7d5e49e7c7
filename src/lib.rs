//! gangway: Pathways-style sharded ML work on every GPU a machine has, through portable WebGPU.
//!
//! - Foundations every layer uses and that use nothing above them: [`DType`] ([`dtype`]),
//!   [`table`] (Markdown tables), [`fsutil`] (crash-safe writes); and [`Error`], whose file
//!   imports no feature module (the schedules' and meshes' own error enums are defined there).
//! - [`device`]: find every adapter on every backend, split adapters into virtual devices.
//! - [`mesh`]: the one [`Mesh`] (devices plus named axes: the job's global mesh, and what every
//!   workload takes) and its shape [`MeshShape`], which a program's [`program::Gang`] is laid
//!   out as and a slice of the resource manager is asked for by;
//!   [`NamedSharding`]: how values lie over a mesh.
//! - [`kernels`]: WGSL kernels, each a [`kernels::Kernel`] type a program node holds: matmul
//!   (five variants and an autotuner), attention, MoE router, dispatch/combine, the training
//!   kernels.
//! - [`program`], [`sched`]: programs (sharded dataflow graphs) and the one runtime per process
//!   that gang-schedules them.
//! - [`job`]: the processes (ranks) one program runs on, the job's global mesh, and the transports
//!   between them (in-process ranks, MPI).
//! - [`train`]: the one [`train::Trainer`] of every [`train::StepModel`], its step builder,
//!   splits, checkpoints and training loop.
//! - The models, each a `StepModel`: [`moe`] (the MoE LM), [`transformer`], [`mlp_lm`] (the
//!   smallest). The workloads: [`pipeline`], [`btm`] (over any model), [`moe_layer`] (the demo);
//!   [`bench`] and [`plan`]: measuring them, and predicting them at scale; [`trace`]: what
//!   happened, when.
//! - [`live`]: any job watched while it runs: its hello, trace events, metrics and end served
//!   over TCP to bounded per-client queues, and the one client that reads them.

pub mod bench;
pub mod btm;
pub mod data;
pub mod device;
pub mod dtype;
mod error;
pub mod fsutil;
pub mod job;
pub mod kernels;
pub mod live;
pub mod mesh;
pub mod mlp_lm;
pub mod moe;
pub mod moe_layer;
pub mod named_sharding;
pub mod pipeline;
pub mod plan;
pub mod program;
mod rng;
pub mod sched;
pub mod table;
pub mod tensor;
pub mod trace;
pub mod train;
pub mod transformer;

pub use device::{Device, DeviceInfo, DeviceList, DiscoveryOptions, MeshDevice, discover};
pub use dtype::DType;
pub use error::{Error, Result};
pub use job::Job;
pub use mesh::{Mesh, MeshError, MeshShape};
pub use named_sharding::NamedSharding;
pub use rng::Rng;
pub use tensor::Tensor;
