//! What a device's worker is handed and what it holds between turns: the GPU callbacks' news
//! ([`Completion`], pushed into its [`Inbox`]), a gang's work on the device ([`Task`]), the
//! doorbell that wakes it ([`Bell`]) and its own state ([`Core`]). Below both the scheduler's
//! shared state, which holds one of each per device, and the worker, which consumes them.

use super::clock::GpuClock;
use super::run::{Role, RunState};
use super::timestamps::TimestampRing;
use crate::{Device, Error};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// A GPU callback's news, handed to the device's worker (callbacks themselves only push here).
#[derive(Debug)]
pub(crate) enum Completion {
    Mapped {
        run: Arc<RunState>,
        node: usize,
        shard: usize,
        role: Role,
        buffer: wgpu::Buffer,
        len: u64,
        /// What the host puts before the bytes read back: a ragged stage's counts header
        /// ([`crate::program::Regroup::packed`]); empty for the rest.
        head: Vec<u8>,
        result: std::result::Result<(), wgpu::BufferAsyncError>,
    },
    WorkDone {
        run: Arc<RunState>,
        node: usize,
        shard: usize,
        at_ns: u64,
        host_timed: bool,
    },
    /// A resolved batch of timestamp pairs, in the order of `kernels`.
    Timestamps {
        kernels: Vec<(Arc<RunState>, usize)>,
        buffer: wgpu::Buffer,
        result: std::result::Result<(), wgpu::BufferAsyncError>,
    },
}

/// Completions waiting for a worker, and how many callbacks its device still owes.
#[derive(Debug)]
pub(crate) struct Inbox {
    items: Mutex<Vec<Completion>>,
    pub outstanding: AtomicUsize,
    /// The device's timestamp queries, when it has them.
    pub ring: Option<TimestampRing>,
    /// The device's GPU clock on the host's, calibrated when a run first needs it (`None`
    /// inside: calibration failed, so kernels are host-timed).
    clock: OnceLock<Option<GpuClock>>,
}

impl Inbox {
    pub fn new(device: &Device) -> Self {
        Self {
            items: Mutex::default(),
            outstanding: AtomicUsize::new(0),
            ring: TimestampRing::new(device),
            clock: OnceLock::new(),
        }
    }

    /// The device's clock mapping, calibrated on first use (a few round trips on its queue).
    pub fn clock(&self, device: &Device) -> Option<&GpuClock> {
        self.clock
            .get_or_init(|| GpuClock::calibrate(device))
            .as_ref()
    }

    pub fn push(&self, c: Completion) {
        self.items
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(c);
    }

    pub(super) fn take(&self) -> Vec<Completion> {
        std::mem::take(&mut *self.items.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// A gang's work on one device.
#[derive(Debug)]
pub(crate) struct Task {
    pub seq: u64,
    pub run: Arc<RunState>,
    pub node: usize,
    pub roles: Vec<Role>,
    pub next: usize,
    /// When the task first had to wait, and for what.
    pub blocked: Option<(Instant, String)>,
    /// What the last check of whether it may run ahead of the earlier active tasks found.
    pub ahead: Ahead,
}

/// Whether a task may run ahead of the earlier tasks of its worker's active list. The answer
/// depends only on the two nodes of each pair, and the earlier tasks only ever leave the list
/// (later ones join behind), so a task cleared once stays cleared, and one that must wait for an
/// earlier task must wait for as long as that task is active: neither is checked again. With up
/// to `RUN_AHEAD` (`worker/`) active tasks, checking every pair on every turn took a device worker's host
/// time on CPU-backed adapters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Ahead {
    #[default]
    Unchecked,
    Cleared,
    /// Waits for the active task of this sequence number.
    WaitsOn(u64),
}

/// A device worker's state. Its thread holds it for one turn at a time, and lends it between
/// turns to a caller that drives its own one-device run (`worker::drive`).
#[derive(Debug, Default)]
pub(crate) struct Core {
    /// The device's tasks in progress, oldest first.
    pub(super) active: Vec<Task>,
    /// Since when the worker drains its device to shut down.
    pub(super) shutdown_since: Option<Instant>,
    /// Host-timed kernels: when the previous one ended, so intervals on the lane never overlap.
    pub(super) last_kernel_end: u64,
    /// Set once the device is lost or this worker panicked: every later task of the device fails
    /// with it (a panic may have left the worker's state half-updated).
    pub(super) broken: Option<Error>,
    /// Submitted kernels whose timestamp pair is not resolved yet: (pair, run, node).
    pub(super) stamps: Vec<(u32, Arc<RunState>, usize)>,
    /// When the oldest of `stamps` was submitted.
    pub(super) stamps_since: Option<Instant>,
    /// Command buffers in sequence order not yet handed to the queue: consecutive kernels go in
    /// one submission (each `Queue::submit` costs a maintenance pass). Flushed before the worker
    /// waits, writes a buffer (queue writes land before the next submission's commands) or
    /// resolves timestamps, and every `SUBMIT_BATCH` buffers.
    pub(super) unsubmitted: Vec<wgpu::CommandBuffer>,
    /// Since when (trace ns) no task could move, and the task the device waits on.
    pub(super) stall: Option<(u64, Arc<RunState>, usize, String)>,
}

impl Core {
    /// The device is lost (or the worker panicked): every later task fails with the first error.
    pub(super) fn lose(&mut self, e: Error) {
        self.broken.get_or_insert(e);
    }
}

/// A worker's doorbell: rung when it may have something to do, waited on when it has nothing.
/// A ring while the worker is busy is kept, so a wake between its last look at its queue and
/// its wait is never lost.
#[derive(Debug, Default)]
pub(crate) struct Bell {
    rung: Mutex<bool>,
    cv: Condvar,
}

impl Bell {
    pub fn ring(&self) {
        *self.rung.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.cv.notify_one();
    }

    /// Returns once rung (at once if it was rung since the last wait) or after `timeout`.
    pub fn wait(&self, timeout: Duration) {
        let mut rung = self.rung.lock().unwrap_or_else(PoisonError::into_inner);
        if !*rung {
            rung = self
                .cv
                .wait_timeout(rung, timeout)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        *rung = false;
    }
}
