//! What a runtime is set up with ([`RuntimeOptions`], its admission [`Policy`]) and what it
//! reports of each client ([`ClientStats`]): plain data at the bottom of the scheduler, which
//! every file above may read.

use crate::job::Job;
use crate::trace::Tracer;

/// How admission orders runs of different clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Policy {
    /// In the order they were submitted.
    Fifo,
    /// Each client gets admissions in proportion to its share (stride scheduling).
    Proportional,
}

#[derive(Debug, Clone)]
pub struct RuntimeOptions {
    pub policy: Policy,
    /// Runs admitted (given sequence numbers) and not yet finished, over all clients. Small
    /// values make the policy bite; large ones let more work overlap.
    pub max_in_flight: usize,
    pub tracer: Tracer,
    /// Time traced kernels with GPU timestamp queries where the adapter has them (else host
    /// timing around submit and completion, marked as such). On lavapipe the timestamp writes
    /// alone cost ~15-20% of the dispatch rate of tiny kernels (host timing: ~1%);
    /// `GANGWAY_GPU_TIMESTAMPS=off` turns them off.
    pub gpu_timestamps: bool,
    /// The job the runtime is part of: alone (the default), or one rank of several, whose
    /// devices form one mesh ([`super::Runtime::mesh`]) that programs may span.
    pub job: Job,
    /// Gangs each device remembers for [`super::Runtime::gang_order`]: the newest, from this
    /// many down to half of it ([`GANG_ORDER_KEEP`] by default, about 4 MB a device once
    /// full). 0 records none: a long-lived runtime that never reads its order (the viewer's)
    /// keeps no memory for it, where the record would grow for its first twenty minutes.
    pub gang_order_keep: usize,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        Self {
            policy: Policy::Fifo,
            max_in_flight: 16,
            tracer: Tracer::off(),
            gpu_timestamps: std::env::var("GANGWAY_GPU_TIMESTAMPS").map_or(true, |v| v != "off"),
            job: Job::single(),
            gang_order_keep: GANG_ORDER_KEEP,
        }
    }
}

/// Gangs each device remembers by default ([`RuntimeOptions::gang_order_keep`]). Unbounded,
/// every gang added 40 bytes for good: the viewer's live workload grew by about 14 MB a minute.
pub const GANG_ORDER_KEEP: usize = 1 << 16;

/// What a client has been given so far.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ClientStats {
    pub name: String,
    pub share: u32,
    pub admitted: u64,
    pub finished: u64,
    /// Runs that their caller drove to their end on its own thread
    /// ([`super::Client::submit_and_drive`]).
    pub driven: u64,
}
