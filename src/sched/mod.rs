//! Running programs, Pathways-style: a resource manager lends slices of devices, one gang
//! scheduler orders every sharded computation, and per-device workers dispatch sequentially or with
//! parallel asynchronous dispatch.

mod clients;
mod clock;
mod record;
mod reduce;
mod remote;
mod resources;
mod run;
mod runtime;
mod timestamps;
mod worker;

pub use resources::{ResourceManager, Slice, SliceRequest};
pub use run::{DispatchMode, RunOptions};
pub use runtime::{
    Client, ClientStats, GANG_ORDER_KEEP, GangRecord, Policy, RunHandle, Runtime, RuntimeOptions,
};
