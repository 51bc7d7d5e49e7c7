//! Running programs, Pathways-style: a resource manager lends slices of devices, one gang
//! scheduler orders every sharded computation, and per-device workers dispatch sequentially or with
//! parallel asynchronous dispatch; a caller waiting on its own one-device run drives it itself
//! while the device's worker is idle. `state.rs` holds what the runtime and the workers share (and
//! admission); `runtime.rs` the handles clients hold; `worker.rs` a device's loop and its state,
//! which a caller may borrow; `record.rs` the command buffers; `threads.rs` which threads are the
//! runtime's.

mod clients;
mod clock;
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

pub use resources::{ResourceManager, Slice, SliceRequest};
pub use run::{DispatchMode, RunOptions};
pub use runtime::{Client, ClientStats, Policy, RunHandle, Runtime, RuntimeOptions};
pub use state::{GANG_ORDER_KEEP, GangRecord};
