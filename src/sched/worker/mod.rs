//! One worker per device: it takes the device's gangs in the scheduler's sequence order,
//! submits their (pre-recorded or just-recorded) commands, waits for transfer futures, and turns
//! GPU callbacks into ready outputs and trace events. Its state ([`Core`]) is its thread's during
//! a turn; between turns (while the thread sleeps or polls the GPU) a caller waiting on its own
//! one-device run may take it and drive that run itself ([`drive`]).
//!
//! Under parallel dispatch, a gang waiting on other devices (a receive, a collective's gather)
//! does not hold the device: later gangs of the same run that touch no storage it still needs
//! run meanwhile (see [`crate::program::access`]), so sends go out as early and receives wait
//! as late as the dependencies allow. Nothing of another run goes ahead, and a program that
//! keeps its order
//! ([`crate::program::ProgramBuilder::keep_order`]) runs strictly in sequence, except inside one
//! of its overlap groups ([`crate::program::ProgramBuilder::set_overlap_group`]). Going ahead only
//! ever makes a device's data available sooner, so the gang order's promise (no deadlock between
//! concurrent programs' collectives) holds. Time in which no gang could move is a wait event.

mod callbacks;
mod drive;
pub(crate) use drive::drive;

use super::mailbox::{Ahead, Core, Inbox, Task};
use super::record::{record, record_live};
use super::reduce;
use super::run::{DispatchMode, Recorded, Role, RunState};
use super::state::{GangRecord, Shared};
use super::timestamps::BATCH;
use crate::program::Op;
use crate::trace::{EventMeta, FlowRole};
use crate::{Device, Error, Result};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

enum Step {
    Done,
    Blocked(String),
}

/// One turn of a device's worker, by whichever thread holds its [`Core`].
struct Worker<'a> {
    shared: &'a Shared,
    index: usize,
    device: &'a Device,
    inbox: &'a Arc<Inbox>,
    core: &'a mut Core,
}

/// How a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turn {
    /// Shut down: the thread exits.
    Exit,
    /// More may be done at once.
    Again,
    /// Nothing to do until the GPU calls back: poll the device (a worker's thread without the
    /// core, so a caller may drive its run meanwhile; a thread can poll while another does).
    Poll,
    /// Nothing to do and no GPU callback owed: wait for the doorbell.
    Sleep,
}

/// The most command buffers one queue submission carries.
const SUBMIT_BATCH: usize = 32;

/// The most tasks a worker runs ahead of one that waits on other devices.
const RUN_AHEAD: usize = 64;

/// How long one poll of the device's own work lasts. Other devices' data arriving does not end
/// it; shorter polls (250 µs was tried) cost more CPU than they save on CPU-backed adapters.
const POLL: Duration = Duration::from_millis(2);

/// How long a caller retries to take a busy worker's core before leaving it the run.
const TAKE_OVER: Duration = Duration::from_micros(200);

/// The longest a traced kernel's GPU times wait for their batch to be resolved.
const STAMP_LATENCY: Duration = Duration::from_millis(100);

pub(crate) fn spawn(
    shared: Arc<Shared>,
    index: usize,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let name = format!("gangway device {}", shared.devices[index].id());
    std::thread::Builder::new().name(name).spawn(move || {
        super::threads::register_current();
        loop {
            let turn = {
                let mut core = shared.cores[index]
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                Worker::new(&shared, index, &mut core).turn_caught()
            };
            // Both waits without the core, so a caller may drive its run meanwhile.
            match turn {
                Turn::Exit => return,
                Turn::Again => {}
                Turn::Poll => {
                    if let Err(e) = shared.devices[index].poll(POLL) {
                        shared.cores[index]
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .lose(e);
                    }
                }
                Turn::Sleep => shared.bells[index].wait(Duration::from_millis(5)),
            }
        }
    })
}

impl<'a> Worker<'a> {
    fn new(shared: &'a Shared, index: usize, core: &'a mut Core) -> Self {
        Self {
            shared,
            index,
            device: &shared.devices[index],
            inbox: &shared.inboxes[index],
            core,
        }
    }

    /// One turn. A panic fails the run it was serving and breaks the worker, which then fails
    /// every later task at once instead of leaving runs to time out, while it still drains GPU
    /// callbacks so runs already past this device finish.
    fn turn_caught(&mut self) -> Turn {
        let mut active = std::mem::take(&mut self.core.active);
        let mut shutdown_since = self.core.shutdown_since.take();
        let turn = catch_unwind(AssertUnwindSafe(|| {
            self.turn(&mut active, &mut shutdown_since)
        }));
        let turn = match turn {
            Ok(t) => t,
            Err(payload) => {
                let e =
                    Error::panicked(format!("device {} worker", self.device.label()), &*payload);
                self.core.lose(e.clone_for_report());
                for task in std::mem::take(&mut active) {
                    task.run.fail(e.clone_for_report());
                    self.finish(task, false);
                }
                Turn::Again
            }
        };
        self.core.active = active;
        self.core.shutdown_since = shutdown_since;
        turn
    }

    /// The next task of the device's queue, recorded in the gang order; `None` when the queue is
    /// empty, or (given a run and its active tasks) its front is not that run's or may not pass
    /// them ([`crate::program::Program::may_pass`]).
    fn pop(&mut self, ahead_of: Option<(&Arc<RunState>, &[Task])>) -> Option<Task> {
        let mut state = self.shared.lock();
        let queue = &mut state.queues[self.index];
        if let Some((run, active)) = ahead_of {
            let passes = queue.front().is_some_and(|t| {
                Arc::ptr_eq(&t.run, run)
                    && active
                        .iter()
                        .all(|a| run.exec.program().may_pass(a.node, t.node))
            });
            if !passes {
                return None;
            }
        }
        // A caller about to drive its own run takes it from here (see [`drive`]): the worker
        // ends its turn, so the caller finds the core free.
        if queue
            .front()
            .is_some_and(|t| t.run.caller_drives.load(Ordering::Acquire))
        {
            return None;
        }
        let task = queue.pop_front()?;
        let keep = self.shared.opts.gang_order_keep;
        if keep == 0 {
            return Some(task);
        }
        let order = &mut state.order[self.index];
        if order.len() >= keep {
            // Bounded, so a runtime that runs for hours keeps constant memory.
            order.drain(..(keep / 2).max(1));
        }
        order.push(GangRecord {
            seq: task.seq,
            run: task.run.id,
            program: task.run.exec.id(),
            node: task.node,
            client: task.run.client,
            key: task.run.key,
        });
        Some(task)
    }

    /// The first of the (unfinished, earlier) `ahead` tasks that `task` may not run ahead of, by
    /// sequence number; `None` when it may run while they all wait: the run lets nodes run ahead
    /// (parallel dispatch, no kept order) and `task` touches no storage they still read or
    /// write.
    fn blocker(ahead: &[Task], task: &Task) -> Option<u64> {
        let run = &task.run;
        let access = &run.exec.access;
        let program = run.exec.program();
        let parallel = run.opts.mode == DispatchMode::Parallel;
        ahead
            .iter()
            .find(|t| {
                !(parallel
                    && Arc::ptr_eq(&t.run, run)
                    && program.may_pass(t.node, task.node)
                    && !access[task.node].conflicts_with(&access[t.node]))
            })
            .map(|t| t.seq)
    }

    /// Whether `active[i]` must wait for an earlier active task, checked at most once per
    /// blocker (see [`Ahead`]).
    fn waits(active: &mut [Task], i: usize) -> bool {
        let (earlier, rest) = active.split_at_mut(i);
        let task = &mut rest[0];
        match task.ahead {
            Ahead::Cleared => false,
            Ahead::WaitsOn(seq) if earlier.iter().any(|t| t.seq == seq) => true,
            _ => match Self::blocker(earlier, task) {
                None => {
                    task.ahead = Ahead::Cleared;
                    false
                }
                Some(seq) => {
                    task.ahead = Ahead::WaitsOn(seq);
                    true
                }
            },
        }
    }

    /// One turn of the loop: completions, then every active task as far as it can go, then
    /// idling. A task waiting on other devices (a receive, a collective's gather) does not hold
    /// the device: later tasks of the same run that do not depend on it (in storage, see
    /// [`crate::program::access`]) run meanwhile, at most [`RUN_AHEAD`] of them, so sends go out
    /// early and receives wait late.
    fn turn(&mut self, active: &mut Vec<Task>, shutdown_since: &mut Option<Instant>) -> Turn {
        self.drain_completions();
        if active.is_empty() {
            {
                let state = self.shared.lock();
                if state.shutdown && state.queues[self.index].is_empty() {
                    // Drain the GPU's callbacks, but never wait on them past the timeout.
                    let since = *shutdown_since.get_or_insert_with(Instant::now);
                    // Kernels' GPU times still waiting for their batch: resolve them now.
                    if !self.core.stamps.is_empty() {
                        drop(state);
                        self.resolve_stamps();
                        return Turn::Again;
                    }
                    if self.inbox.outstanding.load(Ordering::Acquire) == 0
                        || self.core.broken.is_some()
                        || since.elapsed() > self.device.wait_timeout()
                    {
                        return Turn::Exit;
                    }
                }
            }
            match self.pop(None) {
                Some(t) => active.push(t),
                None => return self.idle(),
            }
        }
        let mut progressed = false;
        let mut i = 0;
        while i < active.len() {
            if i > 0 && Self::waits(active, i) {
                // It needs what an earlier task still reads or writes: it waits its turn, but
                // later tasks that touch neither may still go.
                i += 1;
                continue;
            }
            let before = active[i].next;
            match self.step(&mut active[i]) {
                Step::Done => {
                    let task = active.remove(i);
                    let more = !active.is_empty();
                    self.finish(task, more);
                    progressed = true;
                }
                Step::Blocked(reason) => {
                    progressed |= active[i].next != before;
                    let task = &mut active[i];
                    task.blocked.get_or_insert_with(|| (Instant::now(), reason));
                    i += 1;
                }
            }
        }
        // Everything active waits: take the run's next task, to run it ahead if it may.
        if i == active.len()
            && active.len() <= RUN_AHEAD
            && let Some(first) = active.first().map(|t| t.run.clone())
            && first.opts.mode == DispatchMode::Parallel
            && let Some(next) = self.pop(Some((&first, active)))
        {
            active.push(next);
            progressed = true;
        }
        if progressed {
            self.end_stall();
            return Turn::Again;
        }
        // Nothing could move: the device waits on the oldest task.
        if let Some(task) = active.first() {
            let Some((since, reason)) = task.blocked.clone() else {
                return Turn::Again;
            };
            self.core.stall.get_or_insert_with(|| {
                let now = task.run.trace.now_ns();
                (now, task.run.clone(), task.node, reason.clone())
            });
            if since.elapsed() > self.device.wait_timeout() {
                let e = Error::Timeout {
                    what: format!(
                        "device {}: {} of program {:?} (run {}) waiting for {reason}",
                        self.device.label(),
                        task.run.exec.program().nodes()[task.node].name,
                        task.run.exec.program().name(),
                        task.run.id
                    ),
                    waited_ms: since.elapsed().as_millis() as u64,
                };
                task.run.fail(e);
                return Turn::Again;
            }
        }
        self.idle()
    }

    /// The device stalled (no task could move) from the stall's start until now: a wait event
    /// of the task it waited on.
    fn end_stall(&mut self) {
        if let Some((start_ns, run, node, reason)) = self.core.stall.take() {
            let end = run.trace.now_ns().max(start_ns);
            run.trace.record(
                run.event_meta(EventMeta::wait(self.device.id()), node),
                || format!("wait: {reason}"),
                start_ns,
                end,
            );
        }
    }

    /// What to wait for next: the GPU when it owes callbacks ([`Turn::Poll`]), else other
    /// workers or callers ([`Turn::Sleep`]: the doorbell).
    fn idle(&mut self) -> Turn {
        self.flush();
        // Resolve a partial batch only once it has waited a while: workers idle between nearly
        // every task, and resolving each time would undo the batching.
        if self
            .core
            .stamps_since
            .is_some_and(|t| t.elapsed() > STAMP_LATENCY)
        {
            self.resolve_stamps();
        }
        let lost = matches!(self.core.broken, Some(Error::DeviceLost { .. }));
        if !lost && self.inbox.outstanding.load(Ordering::Acquire) > 0 {
            return Turn::Poll;
        }
        Turn::Sleep
    }

    /// A failed map most often means the device was lost: report that when it is so.
    fn gpu_error(&mut self, e: wgpu::BufferAsyncError) -> Error {
        // A loss is reported from wgpu's maintenance pass: give it one.
        let _ = self.device.poll(Duration::ZERO);
        match self.device.check_health() {
            Err(lost @ Error::DeviceLost { .. }) => {
                self.lose(lost.clone_for_report());
                lost
            }
            _ => Error::Map(e),
        }
    }

    fn lose(&mut self, e: Error) {
        self.core.lose(e);
    }

    /// `more_active`: other tasks of the run are active on this device.
    fn finish(&mut self, task: Task, more_active: bool) {
        // A run counts as submitted once its tasks are done, and its client may then touch its
        // buffers (read a variable): hand this run's batched commands to the queue first, unless
        // the next task on this device is the same run's.
        let same_run_next = more_active
            || self.shared.lock().queues[self.index]
                .front()
                .is_some_and(|next| Arc::ptr_eq(&next.run, &task.run));
        if !same_run_next {
            self.flush();
            // A run whose handle waits for its events: its GPU times now, not a batch later.
            if task.run.opts.trace
                && self
                    .core
                    .stamps
                    .iter()
                    .any(|s| Arc::ptr_eq(&s.1, &task.run))
            {
                self.resolve_stamps();
            }
        }
        let run = task.run;
        let last = run.tasks_left.fetch_sub(1, Ordering::AcqRel) == 1;
        if last {
            self.shared.run_finished(&run);
            run.tasks_finished();
        }
        run.progress();
        run.release_if_idle();
        // Idle workers wait for what `drain_completions` wakes them for, new tasks (their
        // admission wakes them) or a failed run: the run's other workers skip its tasks. A run's
        // end admits the next ones, which wakes their workers.
        if run.failed() {
            self.shared.ring_run(&run, self.index);
        }
    }

    fn step(&mut self, task: &mut Task) -> Step {
        let injected = self.shared.injected_panics[self.index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(message) = injected {
            panic!("{message}");
        }
        let run = task.run.clone();
        if run.failed() {
            return Step::Done;
        }
        if let Some(e) = &self.core.broken {
            run.fail(e.clone_for_report());
            return Step::Done;
        }
        if let Err(e) = self.device.check_health() {
            self.lose(e.clone_for_report());
            run.fail(e);
            return Step::Done;
        }
        if run.opts.mode == DispatchMode::Sequential && task.next == 0 {
            // The host prepares this node only once the previous node's outputs are ready.
            if let Some(prev) = task.node.checked_sub(1)
                && !run.node_ready(prev)
            {
                let name = &run.exec.program().nodes()[prev].name;
                return Step::Blocked(format!("the outputs of {name}"));
            }
        }
        while let Some(&role) = task.roles.get(task.next) {
            match self.role(&run, task.node, role) {
                Ok(None) => task.next += 1,
                Ok(Some(reason)) => return Step::Blocked(reason),
                Err(e) => {
                    if matches!(e, Error::DeviceLost { .. }) {
                        self.lose(e.clone_for_report());
                    }
                    run.fail(e);
                    return Step::Done;
                }
            }
        }
        Step::Done
    }

    /// Runs one role; `Some(reason)` when it must wait.
    fn role(&mut self, run: &Arc<RunState>, node: usize, role: Role) -> Result<Option<String>> {
        if matches!(
            role,
            Role::Upload { .. } | Role::Recv { .. } | Role::Gather { .. }
        ) {
            self.flush();
        }
        let prog = run.exec.program();
        let n = &prog.nodes()[node];
        let shard = role.shard();
        let res = &run.exec.slots[run.slot].nodes[node][shard];
        let device = self.device.clone();
        let trace = &run.trace;
        let missing = || Error::Program {
            program: prog.name().to_string(),
            reason: format!("{}: no output buffer", n.name),
        };
        match role {
            Role::Upload { shard } => {
                let Op::Arg { index } = n.op else {
                    return Ok(None);
                };
                let len = n.output().map(|v| prog.value(v).shard_bytes()).unwrap_or(0) as usize;
                let data = run
                    .args
                    .get(index)
                    .and_then(|a| a.bytes().get(shard * len..(shard + 1) * len))
                    .ok_or_else(|| Error::InvalidArgument {
                        what: "run",
                        reason: format!("argument {index} is too short"),
                    })?;
                let start = trace.span();
                device.write_buffer(res.outputs.first().ok_or_else(missing)?, 0, data);
                let meta = run.event_meta(EventMeta::transfer(device.id()), node);
                let meta = moved(meta, role, &n.op, data.len());
                trace.finish(start, meta, || format!("upload arg{index}"));
                run.role_done(node);
            }
            Role::Recv { shard } => {
                // A split transfer's data is in its send node's mailbox.
                let mail_node = if n.op == Op::Recv {
                    prog.value(n.inputs[0]).producer
                } else {
                    node
                };
                let Some(bytes) = run.mail[mail_node][shard].get() else {
                    let from = prog.value(n.inputs[0]).gang[shard];
                    return Ok(Some(format!(
                        "data from {}",
                        run.exec.devices()[from].label()
                    )));
                };
                let start = trace.span();
                device.write_buffer(res.outputs.first().ok_or_else(missing)?, 0, bytes);
                let meta = run.event_meta(EventMeta::transfer(device.id()), node);
                let mut meta = moved(meta, role, &n.op, bytes.len());
                if let Some(id) = run.flow_id(mail_node, shard) {
                    meta = meta.flow(id, FlowRole::In);
                }
                trace.finish(start, meta, || format!("recv {}", n.name));
                run.role_done(node);
            }
            Role::Gather { shard } => {
                let (Op::AllToAll(group, _) | Op::AllReduce(group)) = &n.op else {
                    return Err(missing());
                };
                let mail = &run.mail[node];
                // Only this shard's group takes part: shards that differ along the collective's axis.
                let members: Vec<usize> = group.members(shard).collect();
                if let Some(&from) = members.iter().find(|&&m| mail[m].get().is_none()) {
                    return Ok(Some(format!(
                        "{} data from {}",
                        n.op.kind(),
                        run.exec.devices()[n.gang[from]].label()
                    )));
                }
                let len_bytes =
                    n.output().map(|v| prog.value(v).shard_bytes()).unwrap_or(0) as usize;
                let start = trace.span();
                let out = res.outputs.first().ok_or_else(missing)?;
                let shards = members
                    .iter()
                    .map(|&m| mail[m].get().map_or(&[][..], Vec::as_slice));
                let mut written = len_bytes;
                if let Op::AllToAll(_, regroup) = &n.op
                    && regroup.ragged.is_some()
                {
                    // Only the live rows, where the consumer wants them, a write per run.
                    let shards: Vec<&[u8]> = shards.collect();
                    let placed = regroup
                        .place(group.position(shard), &shards, len_bytes)
                        .map_err(|e| Error::Program {
                            program: prog.name().to_string(),
                            reason: format!("{}: {e}", n.name),
                        })?;
                    written = 0;
                    for w in &placed {
                        device.write_buffer(out, w.at as u64, &shards[w.member][w.from.clone()]);
                        written += w.from.len();
                    }
                } else if let Op::AllToAll(_, regroup) = &n.op {
                    // Each member's chunk, its rows where the consumer wants them (expert-major
                    // slots, say), placed by the host in place of a permute kernel.
                    let shards: Vec<&[u8]> = shards.collect();
                    let place = group.position(shard);
                    device.write_buffer(out, 0, &regroup.gather(place, &shards, len_bytes));
                } else {
                    // The group's first member to get here adds the shards; the rest reuse it.
                    let dtype = n
                        .output()
                        .map_or(crate::DType::F32, |v| prog.value(v).dtype());
                    let sum = run.reduced[node][members[0]]
                        .get_or_init(|| reduce::sum_in_order(dtype, &shards.collect::<Vec<_>>()));
                    device.write_buffer(out, 0, sum);
                }
                let meta = run.event_meta(EventMeta::transfer(device.id()), node);
                trace.finish(start, moved(meta, role, &n.op, written), || {
                    format!("gather {}", n.name)
                });
                run.role_done(node);
            }
            Role::StageLive { shard } => {
                let Some(live) = super::ragged::live(run, node, shard)? else {
                    return Ok(Some(format!("the kept counts of {}", n.name)));
                };
                if live.iter().any(|&rows| rows > 0) {
                    let recorded = record_live(run, node, role, (self.device, self.inbox), &live)?;
                    self.submit_recorded(run, node, role, recorded)?;
                } else {
                    // No live row: the counts alone go on, and the device copies nothing.
                    let start = trace.span();
                    self.post(
                        run,
                        node,
                        shard,
                        crate::program::Regroup::packed(&live, &[]),
                    );
                    let meta = run.event_meta(EventMeta::transfer(device.id()), node);
                    trace.finish(start, moved(meta, role, &n.op, 0), || {
                        format!("read back {}", n.name)
                    });
                    run.role_done(node);
                }
            }
            Role::Kernel { .. }
            | Role::Send { .. }
            | Role::Stage { .. }
            | Role::Download { .. } => {
                self.submit(run, node, role)?;
            }
        }
        Ok(None)
    }

    /// Submits the role's commands, recording them now when they were not recorded up front.
    fn submit(&mut self, run: &Arc<RunState>, node: usize, role: Role) -> Result<()> {
        let recorded = match run.take_prepared(node, role) {
            Some(r) => Some(r),
            None => record(run, node, role, self.device, self.inbox)?,
        };
        self.submit_recorded(run, node, role, recorded)
    }

    /// Submits the role's `recorded` commands (none: the role is done).
    fn submit_recorded(
        &mut self,
        run: &Arc<RunState>,
        node: usize,
        role: Role,
        recorded: Option<Recorded>,
    ) -> Result<()> {
        let Some(Recorded {
            commands,
            callbacks,
            stamp,
        }) = recorded
        else {
            run.role_done(node);
            return Ok(());
        };
        run.submitted_ns[node][role.shard()].store(run.trace.now_ns(), Ordering::Release);
        self.inbox
            .outstanding
            .fetch_add(callbacks, Ordering::AcqRel);
        run.callbacks.fetch_add(callbacks, Ordering::AcqRel);
        // None: the commands went in an earlier role's buffer of the run (`record_together`).
        self.core.unsubmitted.extend(commands);
        // Copies that other devices (or the client) wait for go out at once.
        if self.core.unsubmitted.len() >= SUBMIT_BATCH || !matches!(role, Role::Kernel { .. }) {
            self.flush();
        }
        if let Some(pair) = stamp {
            run.stamps_pending.fetch_add(1, Ordering::AcqRel);
            self.core.stamps_since.get_or_insert_with(Instant::now);
            self.core.stamps.push((pair, run.clone(), node));
            if self.core.stamps.len() >= BATCH {
                self.resolve_stamps();
            }
        }
        Ok(())
    }

    /// Puts what shard `shard` of `node` read back in its mailbox, for this rank's devices and
    /// on its way to other ranks' that read it.
    fn post(&self, run: &Arc<RunState>, node: usize, shard: usize, bytes: Vec<u8>) {
        if let (Some(remote), Some(key)) = (&self.shared.remote, run.key) {
            remote.send_mail(run, key, node, shard, &bytes);
        }
        let _ = run.mail[node][shard].set(bytes);
    }

    /// Hands the command buffers not yet submitted to the queue, in one submission.
    fn flush(&mut self) {
        if !self.core.unsubmitted.is_empty() {
            self.device
                .submit_all(std::mem::take(&mut self.core.unsubmitted));
        }
    }
}

/// `meta` saying what a transfer of `role` on a node of `op` moved: `bytes` of the kind and
/// direction [`Role::transfer`] gives (nothing for a kernel).
pub(super) fn moved(meta: EventMeta, role: Role, op: &Op, bytes: usize) -> EventMeta {
    match role.transfer(op) {
        Some((kind, direction)) => meta.moved(kind, direction, bytes as u64),
        None => meta,
    }
}
