//! Running programs, Pathways-style: a resource manager lends slices of devices, one gang
//! scheduler orders every sharded computation, and per-device workers dispatch sequentially or with
//! parallel asynchronous dispatch; a caller waiting on its own one-device run drives it itself
//! while the device's worker is idle.
//!
//! The files point one way, each using only those listed before it:
//! - plain parts: `clock.rs` (a device's GPU clock), `reduce.rs`, `threads.rs` (which threads
//!   are the runtime's), `timestamps.rs`, `resources.rs` (slices), `options.rs` (the runtime's
//!   options, admission policy and client stats);
//! - `run.rs`: one submitted run's state, its roles per device and its pre-recorded buffers;
//! - `ragged.rs`: a ragged all-to-all member's counts and live rows, read from its run's mail;
//! - `mailbox.rs`: what a device's worker is handed and holds (completions, inbox, tasks, its
//!   doorbell and its state between turns);
//! - `record.rs`: recording a role's command buffer; `remote.rs`: the link to other ranks;
//!   `clients.rs`: the client table;
//! - `state.rs`: what the runtime and the workers share, and admission;
//! - `worker/`: a device's loop (`mod.rs`), a caller driving its own run (`drive.rs`), GPU
//!   callbacks (`callbacks.rs`);
//! - `runtime.rs`: the handles clients hold, on top.
mod clients;
mod clock;
mod mailbox;
mod options;
mod ragged;
mod record;
mod reduce;
mod remote;
mod resources;
mod run;
mod runtime;
mod state;
pub mod threads;
mod timestamps;
mod worker;

pub use options::{ClientStats, GANG_ORDER_KEEP, Policy, RuntimeOptions};
pub use resources::{ResourceManager, Slice, SliceRequest};
pub use run::{DispatchMode, RunOptions};
pub use runtime::{Client, Quieter, RunHandle, Runtime};
pub use state::GangRecord;
