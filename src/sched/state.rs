//! What the runtime and its workers share: the devices, the job's mesh and the link to its other
//! ranks, the workers' inboxes and doorbells ([`Bell`]), and under one lock the gang scheduler's
//! state (admission's policy and window, the clients, every device's queue of tasks and the gang
//! order it kept).
//! Admission lives here too ([`Shared::admit`]), since both sides call it: a client's submit
//! (the runtime) and a finished run (a worker).

use super::clients::ClientTable;
use super::mailbox::{Bell, Core, Inbox, Task};
use super::options::{Policy, RuntimeOptions};
use super::remote::{Remote, Routed};
use super::run::RunState;
use crate::Device;
use crate::job::transport::RunKey;
use crate::mesh::Mesh;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// One gang as one device saw it: the device ran node `node` of run `run` in this position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct GangRecord {
    pub seq: u64,
    pub run: u64,
    pub program: u64,
    pub node: usize,
    /// The client's slot: a slot is reused once its client is gone.
    pub client: usize,
    /// For a run spanning ranks, its job-wide key: the same run on every rank.
    pub key: Option<RunKey>,
}

#[derive(Debug)]
pub(crate) struct SchedState {
    /// Admission's policy and window: from [`RuntimeOptions`], changed by
    /// [`Runtime::set_admission`].
    pub(super) policy: Policy,
    pub(super) max_in_flight: usize,
    pub(super) next_seq: u64,
    pub(super) arrivals: u64,
    /// Virtual time of proportional shares: the pass of the last admitted client.
    pub(super) vtime: f64,
    pub(super) in_flight: usize,
    pub(super) clients: ClientTable,
    pub queues: Vec<VecDeque<Task>>,
    pub order: Vec<Vec<GangRecord>>,
    pub shutdown: bool,
    pub(super) paused: bool,
}

#[derive(Debug)]
pub(crate) struct Shared {
    pub devices: Vec<Device>,
    /// The job's mesh: every rank's devices, this process's as they are in `devices`.
    pub mesh: Mesh,
    /// The link to the job's other ranks, when there are any.
    pub remote: Option<Remote>,
    pub inboxes: Vec<Arc<Inbox>>,
    /// Per worker: what wakes it when idle. Each worker has its own, so that admitting a run
    /// of one device, or filling one run's mailbox, wakes only the workers that have something
    /// to do: with one shared condition variable every idle worker woke and slept again, about
    /// a dozen futile thread switches per one-device run in a runtime of four devices.
    pub bells: Vec<Bell>,
    /// Per worker: its state, held by its thread during a turn or by a caller driving its own
    /// run (`worker::drive`).
    pub cores: Vec<Mutex<Core>>,
    /// Per worker: a panic to raise when it next serves a task ([`Runtime::inject_panic`]).
    pub injected_panics: Vec<Mutex<Option<String>>>,
    pub(super) state: Mutex<SchedState>,
    pub(super) opts: RuntimeOptions,
    /// Whether traced kernels are timed with GPU timestamps ([`Runtime::set_gpu_timestamps`]).
    pub(super) gpu_timestamps: AtomicBool,
}

impl Shared {
    pub fn ring_all(&self) {
        self.bells.iter().for_each(Bell::ring);
    }

    /// Wakes the workers of `run`'s devices but `except` (the worker that calls): what they
    /// wait for in it may be there now.
    pub fn ring_run(&self, run: &RunState, except: usize) {
        let mut rung = vec![false; self.bells.len()];
        for &w in run.workers.iter().flatten() {
            if w != except && !std::mem::replace(&mut rung[w], true) {
                self.bells[w].ring();
            }
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, SchedState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A run's last device task finished: it leaves the in-flight window and others may enter.
    pub fn run_finished(&self, run: &RunState) {
        let mut state = self.lock();
        state.in_flight = state.in_flight.saturating_sub(1);
        state.clients.finished(run.client, !run.failed());
        self.admit(&mut state);
    }

    pub(super) fn worker_of(&self, device: &Device) -> Option<usize> {
        self.devices.iter().position(|d| d == device)
    }

    /// A message from another rank: fills a run's mailbox, fails a run it failed, or queues
    /// rank 0's admission.
    pub(super) fn receive(&self, from: usize, message: crate::job::transport::Message) {
        let Some(remote) = &self.remote else { return };
        match remote.route(from, message) {
            Routed::Filled => {}
            Routed::Ticket => self.admit(&mut self.lock()),
            Routed::Nothing => return,
        }
        self.ring_all();
    }

    /// Admits runs while the window has room: assigns sequence numbers and queues device tasks.
    /// In a job of several ranks, rank 0 admits runs spanning ranks by its policy and announces
    /// each; the other ranks admit those in its order, at once (rank 0's window bounds them), and
    /// their own runs by their policy.
    pub(super) fn admit(&self, state: &mut SchedState) {
        let follower = self.remote.as_ref().filter(|r| !r.is_root());
        loop {
            if state.paused {
                return;
            }
            let ticketed = follower.and_then(|remote| {
                let key = remote.front_ticket()?;
                state.clients.iter().find_map(|(i, c)| {
                    c.pending
                        .front()
                        .is_some_and(|(_, r)| r.key == Some(key))
                        .then_some((remote, i))
                })
            });
            if let Some((remote, ci)) = ticketed {
                remote.pop_ticket();
                self.admit_client(state, ci);
                continue;
            }
            if state.in_flight >= state.max_in_flight.max(1) {
                return;
            }
            // Runs spanning ranks wait for rank 0's word on the other ranks.
            let eligible = |run: &Arc<RunState>| follower.is_none() || run.key.is_none();
            let pick = match state.policy {
                Policy::Fifo => state
                    .clients
                    .iter()
                    .filter_map(|(i, c)| c.pending.front().map(|(a, r)| (*a, i, r)))
                    .filter(|(_, _, r)| eligible(r))
                    .map(|(a, i, _)| (a, i))
                    .min()
                    .map(|(_, i)| i),
                Policy::Proportional => state
                    .clients
                    .iter()
                    .filter_map(|(i, c)| c.pending.front().map(|(a, r)| (c.pass, *a, i, r)))
                    .filter(|(_, _, _, r)| eligible(r))
                    .min_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)))
                    .map(|(_, _, i, _)| i),
            };
            let Some(ci) = pick else { return };
            self.admit_client(state, ci);
        }
    }

    /// Admits the front run of client `ci`: sequence numbers for its nodes, and its tasks on the
    /// queues of this process's devices.
    pub(super) fn admit_client(&self, state: &mut SchedState, ci: usize) {
        {
            let Some(client) = state.clients.get_mut(ci) else {
                return;
            };
            let Some((_, run)) = client.pending.pop_front() else {
                return;
            };
            client.admitted += 1;
            client.running += 1;
            let pass = client.pass;
            client.pass += 1.0 / f64::from(client.share.max(1));
            state.vtime = pass;
            state.in_flight += 1;
            if let (Some(remote), Some(key)) = (&self.remote, run.key)
                && remote.is_root()
                && let Err(e) = remote.announce(key)
            {
                run.fail(e);
            }
            // Waiting for admission is not a stall: the no-progress clock starts now.
            run.progress();
            run.admitted.store(true, Ordering::Release);
            let mut tasks = Vec::new();
            for (node, per_device) in run.roles.iter().enumerate() {
                if per_device.is_empty() {
                    continue;
                }
                let seq = state.next_seq;
                state.next_seq += 1;
                for (logical, node_roles) in per_device {
                    let Some(worker) = run.workers[*logical] else {
                        continue;
                    };
                    tasks.push((
                        worker,
                        Task {
                            seq,
                            run: run.clone(),
                            node,
                            roles: node_roles.clone(),
                            next: 0,
                            blocked: None,
                            ahead: Default::default(),
                        },
                    ));
                }
            }
            run.tasks_left.store(tasks.len(), Ordering::Release);
            if tasks.is_empty() {
                // Nothing for this process's devices (another rank's run, or an empty program).
                state.in_flight -= 1;
                state.clients.finished(run.client, !run.failed());
                run.signal();
                run.release_if_idle();
            }
            // A caller that drives its own run rings no worker: it takes the worker's turn.
            let ring = !run.caller_drives.load(Ordering::Acquire);
            for (w, task) in tasks {
                state.queues[w].push_back(task);
                if ring {
                    self.bells[w].ring();
                }
            }
        }
    }
}
