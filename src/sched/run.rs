//! One run of an executable in flight: its mailboxes (the futures of transferred buffers), its
//! pre-encoded command buffers, and the bookkeeping that says when it is done.

use crate::job::transport::{Message, RunKey, Transport};
use crate::program::{Executable, HostData, Op};
use crate::trace::{Direction, EventMeta, Tracer, TransferKind};
use crate::{Error, Result};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// How the host prepares the work of a run (Pathways §4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DispatchMode {
    /// The host prepares node i+1 only after node i's outputs are ready.
    Sequential,
    /// All host work (command encoding) is done up front, in parallel per device; dependencies
    /// are kept by queue order on one device and by transfer futures across devices.
    Parallel,
}

impl DispatchMode {
    pub fn name(self) -> &'static str {
        match self {
            Self::Sequential => "sequential",
            Self::Parallel => "parallel",
        }
    }
}

/// Options of one run.
#[derive(Debug, Clone, Copy)]
pub struct RunOptions {
    pub mode: DispatchMode,
    /// Put on every trace event of the run: a caller's tag for a run that is one microbatch's
    /// work. (The pipeline executor runs a whole step as one program and numbers its ops'
    /// events itself.)
    pub microbatch: Option<u32>,
    /// Keep this run's trace events (kernels GPU-timestamped where the adapter can) for
    /// [`RunHandle::wait_traced`](super::RunHandle::wait_traced), whether or not the runtime's own
    /// tracer is on.
    pub trace: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            mode: DispatchMode::Parallel,
            microbatch: None,
            trace: false,
        }
    }
}

/// What one device does for one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Arg: write the host data of this shard.
    Upload {
        shard: usize,
    },
    Kernel {
        shard: usize,
    },
    /// Transfer, on the source: copy the shard to staging and map it (fills the mailbox).
    Send {
        shard: usize,
    },
    /// Collective member: the same for its own shard.
    Stage {
        shard: usize,
    },
    /// Ragged all-to-all member: once its counts are on the host, copy its shard's live rows
    /// to staging and map them (recorded then, never up front).
    StageLive {
        shard: usize,
    },
    /// Result: copy to staging and map it.
    Download {
        shard: usize,
    },
    /// Transfer, on the destination: wait for the mailbox, write the shard.
    Recv {
        shard: usize,
    },
    /// Collective member: wait for every member's mailbox, then combine.
    Gather {
        shard: usize,
    },
}

impl Role {
    pub fn shard(self) -> usize {
        match self {
            Role::Upload { shard }
            | Role::Kernel { shard }
            | Role::Send { shard }
            | Role::Stage { shard }
            | Role::StageLive { shard }
            | Role::Download { shard }
            | Role::Recv { shard }
            | Role::Gather { shard } => shard,
        }
    }

    /// Roles that wait for other devices run after the ones that never wait.
    pub fn waits(self) -> bool {
        matches!(self, Role::Recv { .. } | Role::Gather { .. })
    }

    /// Roles whose command buffer can be recorded ahead of time.
    pub fn records_commands(self) -> bool {
        match self {
            Role::Kernel { .. }
            | Role::Send { .. }
            | Role::Stage { .. }
            | Role::Download { .. } => true,
            Role::Upload { .. }
            | Role::Recv { .. }
            | Role::Gather { .. }
            | Role::StageLive { .. } => false,
        }
    }
    /// What a transfer of this role moves data for on a node of `op`, and which way; `None`
    /// for a kernel.
    pub fn transfer(self, op: &Op) -> Option<(TransferKind, Direction)> {
        let collective = match op {
            Op::AllReduce(_) => TransferKind::AllReduce,
            _ => TransferKind::AllToAll,
        };
        Some(match self {
            Role::Kernel { .. } => return None,
            Role::Upload { .. } => (TransferKind::Host, Direction::In),
            Role::Download { .. } => (TransferKind::Host, Direction::Out),
            Role::Send { .. } => (TransferKind::PointToPoint, Direction::Out),
            Role::Recv { .. } => (TransferKind::PointToPoint, Direction::In),
            Role::Stage { .. } | Role::StageLive { .. } => (collective, Direction::Out),
            Role::Gather { .. } => (collective, Direction::In),
        })
    }
}

/// What every device of a node does: `(logical device, its roles)`.
pub(crate) type NodeRoles = Vec<(usize, Vec<Role>)>;

/// The roles of this process's devices for `node`, keyed by the program's logical device (other
/// ranks' devices do their own).
pub(crate) fn roles(exec: &Executable, node: usize) -> NodeRoles {
    let prog = exec.program();
    let n = &prog.nodes()[node];
    let mut out: Vec<(usize, Vec<Role>)> = Vec::new();
    let mut add = |d: usize, r: Role| {
        if !exec.devices()[d].is_local() {
            return;
        }
        match out.iter_mut().find(|(x, _)| *x == d) {
            Some((_, v)) => v.push(r),
            None => out.push((d, vec![r])),
        }
    };
    for (shard, &d) in n.gang.iter().enumerate() {
        match n.op {
            Op::Arg { .. } => add(d, Role::Upload { shard }),
            Op::Constant { .. } | Op::Variable { .. } => {}
            // An idle shard has nothing to do, and its outputs are ready as they are.
            Op::Kernel(_) if !n.runs_on(shard) => {}
            Op::Kernel(_) => add(d, Role::Kernel { shard }),
            Op::Transfer => {
                add(prog.value(n.inputs[0]).gang[shard], Role::Send { shard });
                add(d, Role::Recv { shard });
            }
            Op::Send => add(d, Role::Send { shard }),
            Op::Recv => add(d, Role::Recv { shard }),
            Op::AllToAll(_, ref regroup) if regroup.ragged.is_some() => {
                add(d, Role::StageLive { shard });
                add(d, Role::Gather { shard });
            }
            Op::AllToAll(..) | Op::AllReduce(_) => {
                add(d, Role::Stage { shard });
                add(d, Role::Gather { shard });
            }
            Op::Result { .. } => add(d, Role::Download { shard }),
        }
    }
    for (_, v) in &mut out {
        v.sort_by_key(|r| r.waits());
    }
    out
}

/// A run in flight.
#[derive(Debug)]
pub(crate) struct RunState {
    pub id: u64,
    pub client: usize,
    pub exec: Arc<Executable>,
    pub slot: usize,
    pub opts: RunOptions,
    pub args: Vec<HostData>,
    /// Where the run's events go: the runtime's tracer, or (when the run keeps its events, see
    /// [`RunOptions::trace`]) a tracer of its own that forwards to it.
    pub trace: Tracer,
    /// Kernels write GPU timestamps (the run is traced and GPU times were asked for).
    pub gpu_timed: bool,
    /// Kernels of this run whose GPU timestamps are not turned into events yet.
    pub stamps_pending: AtomicUsize,
    /// `[node][shard]`: host bytes sent by a transfer, staged by a collective member, or read back.
    pub mail: Vec<Vec<OnceLock<Vec<u8>>>>,
    /// `[node][shard]`: an all-reduce's sum, made once per group by its first member to gather
    /// and kept under the group's first shard ([`super::reduce`]).
    pub reduced: Vec<Vec<OnceLock<Vec<u8>>>>,
    /// `[node][shard][role waits]`: command buffers recorded ahead of time (parallel dispatch).
    pub prepared: Vec<Vec<[Mutex<Option<Recorded>>; 2]>>,
    /// `[node][shard]`: host clock (tracer ns) when the shard's commands were submitted.
    pub submitted_ns: Vec<Vec<AtomicU64>>,
    /// `[logical device]`: the runtime worker that runs it; `None` for another rank's device.
    pub workers: Vec<Option<usize>>,
    /// The job-wide key of a run spanning ranks.
    pub key: Option<RunKey>,
    /// The job's transport, for a run spanning ranks: where its first error goes.
    ranks: Option<Arc<dyn Transport>>,
    /// `[node]`: what each device does for the node, worked out once per run.
    pub roles: Vec<NodeRoles>,
    /// The logical devices that do something for the run, ascending.
    used: Vec<usize>,
    /// `[node]`: roles of the node not yet complete (outputs not ready).
    pub node_pending: Vec<AtomicUsize>,
    /// Device tasks not yet finished.
    pub tasks_left: AtomicUsize,
    /// GPU callbacks not yet run; the slot's buffers are reused only once this is 0.
    pub callbacks: AtomicUsize,
    pub error: OnceLock<Error>,
    released: AtomicBool,
    pub admitted: AtomicBool,
    /// Its caller drives it, or is about to ([`super::worker::drive`]): admission rings no
    /// worker for it, and workers leave its tasks queued until the caller gives it back.
    pub caller_drives: AtomicBool,
    last_progress: Mutex<Instant>,
    done: (Mutex<bool>, Condvar),
}

/// Where a run comes from and goes: its client, the runtime worker of each of its logical
/// devices, and how to trace it.
#[derive(Debug)]
pub(crate) struct RunEnv {
    pub client: usize,
    pub workers: Vec<Option<usize>>,
    pub key: Option<RunKey>,
    /// The job's transport (runs spanning ranks only).
    pub ranks: Option<Arc<dyn Transport>>,
    /// The runtime's tracer.
    pub tracer: Tracer,
    /// Whether the runtime times kernels with GPU timestamps when a run is traced.
    pub gpu_timestamps: bool,
}

impl RunState {
    pub fn new(
        id: u64,
        exec: Arc<Executable>,
        slot: usize,
        opts: RunOptions,
        args: Vec<HostData>,
        env: RunEnv,
    ) -> Self {
        let RunEnv {
            client,
            workers,
            key,
            ranks,
            tracer,
            gpu_timestamps,
        } = env;
        let trace = if opts.trace {
            Tracer::forwarding_to(&tracer)
        } else {
            tracer
        };
        let gpu_timed = gpu_timestamps && trace.is_on();
        let nodes = exec.program().nodes();
        let per_shard = |n: &crate::program::Node| n.gang.len();
        let roles: Vec<NodeRoles> = (0..nodes.len()).map(|i| roles(&exec, i)).collect();
        let mut used: Vec<usize> = roles
            .iter()
            .flat_map(|per_device| per_device.iter().map(|(d, _)| *d))
            .collect();
        used.sort_unstable();
        used.dedup();
        let node_pending = roles
            .iter()
            .map(|per_device| AtomicUsize::new(per_device.iter().map(|(_, r)| r.len()).sum()))
            .collect();
        Self {
            id,
            client,
            workers,
            key,
            slot,
            opts,
            args,
            trace,
            gpu_timed,
            stamps_pending: AtomicUsize::new(0),
            mail: nodes
                .iter()
                .map(|n| (0..per_shard(n)).map(|_| OnceLock::new()).collect())
                .collect(),
            reduced: nodes
                .iter()
                .map(|n| match n.op {
                    Op::AllReduce(_) => (0..per_shard(n)).map(|_| OnceLock::new()).collect(),
                    _ => Vec::new(),
                })
                .collect(),
            prepared: nodes
                .iter()
                .map(|n| {
                    (0..per_shard(n))
                        .map(|_| [Mutex::new(None), Mutex::new(None)])
                        .collect()
                })
                .collect(),
            submitted_ns: nodes
                .iter()
                .map(|n| (0..per_shard(n)).map(|_| AtomicU64::new(0)).collect())
                .collect(),
            node_pending,
            roles,
            used,
            tasks_left: AtomicUsize::new(0),
            callbacks: AtomicUsize::new(0),
            error: OnceLock::new(),
            ranks,
            released: AtomicBool::new(false),
            admitted: AtomicBool::new(false),
            caller_drives: AtomicBool::new(false),
            last_progress: Mutex::new(Instant::now()),
            done: (Mutex::new(false), Condvar::new()),
            exec,
        }
    }

    /// The id linking a transfer's send and receive events: unique per run, node and shard.
    pub fn flow_id(&self, node: usize, shard: usize) -> Option<u64> {
        // A run of the job is the same run on every rank: its key, so the two ends of a
        // transfer between ranks pair up in the gathered trace.
        let base = self.key.map_or(self.id, |k| {
            (k.client.rotate_left(21) ^ k.seq) & ((1 << 43) - 1)
        });
        (node < 1 << 12 && shard < 1 << 8)
            .then_some((base << 20) | ((node as u64) << 8) | shard as u64)
    }

    /// `meta` with this run's program, `node` and microbatch ids.
    pub fn event_meta(&self, meta: EventMeta, node: usize) -> EventMeta {
        let m = meta.program(self.exec.id()).node(node as u32);
        match self.opts.microbatch {
            Some(mb) => m.microbatch(mb),
            None => m,
        }
    }

    pub fn failed(&self) -> bool {
        self.error.get().is_some()
    }

    /// Records the first error; the run's other tasks are skipped and its client is told. A
    /// run spanning ranks also tells the other ranks ([`Message::Failed`]): their part of it
    /// ends now, instead of waiting out the device timeout for data this rank will not send.
    pub fn fail(&self, e: Error) {
        if self.error.set(e).is_ok()
            && let (Some(key), Some(ranks), Some(first)) = (self.key, &self.ranks, self.error.get())
        {
            let reason = first.to_string();
            for to in (0..ranks.size()).filter(|&r| r != ranks.rank()) {
                // A rank that cannot be reached is the watchdog's to find.
                let _ = ranks.send(
                    to,
                    Message::Failed {
                        run: key,
                        reason: reason.clone(),
                    },
                );
            }
        }
        self.signal();
    }

    /// Ends the run with another rank's error for it, which that rank told every rank.
    pub fn failed_elsewhere(&self, e: Error) {
        let _ = self.error.set(e);
        self.signal();
    }

    /// Takes the command buffer recorded ahead of time for `role`, if any.
    pub fn take_prepared(&self, node: usize, role: Role) -> Option<Recorded> {
        self.prepared[node][role.shard()][role.waits() as usize]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    pub fn put_prepared(&self, node: usize, role: Role, recorded: Recorded) {
        *self.prepared[node][role.shard()][role.waits() as usize]
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(recorded);
    }

    pub fn progress(&self) {
        *self
            .last_progress
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Instant::now();
    }

    /// How long since the run last made progress.
    pub fn idle_for(&self) -> Duration {
        self.last_progress
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .elapsed()
    }

    /// The one device of this process the run uses, when it uses just one.
    pub fn only_device(&self) -> Option<usize> {
        match self.used[..] {
            [d] => Some(d),
            _ => None,
        }
    }

    /// One role of `node` finished: its part of the node's outputs is ready.
    pub fn role_done(&self, node: usize) {
        self.node_pending[node].fetch_sub(1, Ordering::AcqRel);
        self.progress();
        if self.results_ready() {
            self.signal();
        }
    }

    pub fn node_ready(&self, node: usize) -> bool {
        self.node_pending[node].load(Ordering::Acquire) == 0
    }

    /// Every result read back, here or (another rank's shards) sent from there.
    pub fn results_ready(&self) -> bool {
        self.exec
            .program()
            .result_nodes()
            .iter()
            .all(|&node| self.node_ready(node) && self.mail[node].iter().all(|m| m.get().is_some()))
    }

    /// The run's last task finished: wakes its waiter only if the results are in too, since
    /// a waiter woken before them just sleeps again (a futile switch on every run whose
    /// results are read back after its last submit, which is most). Under the waiter's lock,
    /// so that this and [`Self::role_done`]'s check cannot both miss the other's update.
    pub fn tasks_finished(&self) {
        let (lock, cv) = &self.done;
        let mut done = lock.lock().unwrap_or_else(PoisonError::into_inner);
        if self.results_ready() || self.error.get().is_some() {
            *done = true;
            cv.notify_all();
        }
    }

    pub fn signal(&self) {
        let (lock, cv) = &self.done;
        *lock.lock().unwrap_or_else(PoisonError::into_inner) = true;
        cv.notify_all();
    }

    /// Gives the slot back once no task and no GPU callback of the run can touch it any more.
    pub fn release_if_idle(&self) {
        if self.tasks_left.load(Ordering::Acquire) == 0
            && self.callbacks.load(Ordering::Acquire) == 0
            && !self.released.swap(true, Ordering::AcqRel)
        {
            self.exec.release_slot(self.slot);
        }
    }

    /// One of this run's kernels' GPU times became an event (or will never come).
    pub fn stamp_done(&self) {
        if self.stamps_pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.signal();
        }
    }

    /// The loss of one of this process's devices that the run uses, if one is lost.
    fn lost_device(&self) -> Option<Error> {
        (self.used.iter())
            .filter_map(|&d| self.exec.devices[d].local())
            .find_map(crate::Device::loss)
    }

    /// After [`Self::wait`]: blocks until every kernel's GPU times are events, then takes the
    /// run's events. Device workers resolve a traced run's timestamps as soon as its last task
    /// on the device is submitted, so this is one GPU round trip at most.
    pub fn wait_events(&self, timeout: Duration) -> Result<Vec<crate::trace::Event>> {
        let (lock, cv) = &self.done;
        let mut done = lock.lock().unwrap_or_else(PoisonError::into_inner);
        let start = Instant::now();
        while self.stamps_pending.load(Ordering::Acquire) > 0 {
            if let Some(e) = self.error.get() {
                return Err(e.clone_for_report());
            }
            // A device lost after the results came back never maps its timestamps: its loss,
            // not a timeout, is the answer.
            if let Some(lost) = self.lost_device() {
                return Err(lost);
            }
            if start.elapsed() > timeout {
                return Err(Error::Timeout {
                    what: format!(
                        "GPU timestamps of run {} of program {:?}",
                        self.id,
                        self.exec.program().name()
                    ),
                    waited_ms: start.elapsed().as_millis() as u64,
                });
            }
            done = cv
                .wait_timeout(done, Duration::from_millis(20))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        drop(done);
        if !self.opts.trace {
            // The runtime's own tracer: its events are not the run's to take.
            return Ok(Vec::new());
        }
        let mut events = self.trace.take_events();
        events.sort_by_key(|e| (e.start_ns, e.end_ns));
        Ok(events)
    }

    /// Blocks until the results are read back or the run failed. A lost device of the run is
    /// its [`Error::DeviceLost`]; no progress for `timeout` is [`Error::Timeout`]. Result i:
    /// every shard's bytes, one after another.
    pub fn wait(&self, timeout: Duration) -> Result<Vec<Vec<u8>>> {
        let (lock, cv) = &self.done;
        let mut done = lock.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(e) = self.error.get() {
                return Err(e.clone_for_report());
            }
            // Every task submitted too: work after the results (in-place updates of variables)
            // is queued on its devices before the caller can read those variables.
            if *done && self.results_ready() && self.tasks_left.load(Ordering::Acquire) == 0 {
                break;
            }
            // A device lost after its tasks were submitted never calls back with what they
            // read: its loss, not a timeout, is the answer.
            if let Some(lost) = self.lost_device() {
                return Err(lost);
            }
            let idle = self.idle_for();
            // Queued behind admission is not a stall; admitted without progress is.
            if idle > timeout && self.admitted.load(Ordering::Acquire) {
                return Err(Error::Timeout {
                    what: format!(
                        "run {} of program {:?} (no progress)",
                        self.id,
                        self.exec.program().name()
                    ),
                    waited_ms: idle.as_millis() as u64,
                });
            }
            done = cv
                .wait_timeout(done, Duration::from_millis(50))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        drop(done);
        let mut results = vec![Vec::new(); self.exec.program().results().len()];
        for (index, &node) in self.exec.program().result_nodes().iter().enumerate() {
            for shard in &self.mail[node] {
                results[index].extend_from_slice(shard.get().map(Vec::as_slice).unwrap_or(&[]));
            }
        }
        Ok(results)
    }
}

/// A recorded command buffer and the number of completion callbacks it will fire.
#[derive(Debug)]
pub(crate) struct Recorded {
    /// `None`: the role's commands (and callbacks) are in an earlier role's buffer.
    pub commands: Option<wgpu::CommandBuffer>,
    pub callbacks: usize,
    /// The timestamp pair the kernel writes, resolved later by the device's worker.
    pub stamp: Option<u32>,
}
