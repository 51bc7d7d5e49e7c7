//! Runs that span ranks: their job-wide keys, the mail other ranks send them, and the one gang
//! order across ranks.
//!
//! - **Mail.** A shard's host bytes (a transfer's send, a collective member's stage, a result's
//!   read-back) go from the rank whose device made them to every rank whose devices read them,
//!   the moment they are in the mailbox here; what arrives fills the run's mailbox there, as a
//!   local device would. Data for a run not submitted here yet waits for it.
//! - **Gang order.** Rank 0 admits runs spanning ranks by its policy and tells every other rank
//!   each one's key as it does ([`Message::Admit`]); the others admit those runs in exactly that
//!   order, and their own runs (within the rank) freely in between. So every device of the job
//!   runs the gangs spanning ranks in one order, and no round trip to rank 0 is needed for gangs
//!   within a rank.
//! - **Failures.** A run spanning ranks that fails on one rank tells the others
//!   ([`Message::Failed`], sent by [`RunState::fail`]), and they fail it with that rank's error
//!   (also when it comes before the run is submitted there). Without it, a rank whose part was
//!   waiting for the failed rank's data waited out the device timeout.

use super::run::RunState;
use crate::job::transport::{Message, RunKey, Transport};
use crate::program::{Executable, Op};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

/// Data that came before its run: `(program fingerprint, node, shard, bytes)`.
type Early = (u64, u32, u32, Vec<u8>);

#[derive(Debug, Default)]
struct State {
    /// Runs spanning ranks submitted here and maybe still running, by key.
    runs: HashMap<RunKey, Weak<RunState>>,
    /// Data for runs not submitted here yet.
    early: HashMap<RunKey, Vec<Early>>,
    /// Other ranks' errors for runs not submitted here yet: `(rank, error)`.
    failed_early: HashMap<RunKey, (usize, String)>,
    /// Per client name: runs spanning ranks submitted so far.
    submitted: HashMap<u64, u64>,
    /// Rank 0's admissions not yet made here, in its order (on the other ranks).
    tickets: VecDeque<RunKey>,
    /// Registrations since the table of runs was last swept of finished ones.
    since_sweep: usize,
}

/// A runtime's part in a job of several ranks.
#[derive(Debug)]
pub(crate) struct Remote {
    pub transport: Arc<dyn Transport>,
    state: Mutex<State>,
}

/// What a rank must do with a message, once it is routed.
pub(crate) enum Routed {
    /// Data filled a run's mailbox, or another rank failed it: its devices may go on.
    Filled,
    /// Rank 0 admitted a run spanning ranks: admit it here when it is submitted.
    Ticket,
    Nothing,
}

impl Remote {
    pub fn new(transport: Arc<dyn Transport>) -> Self {
        Self {
            transport,
            state: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn rank(&self) -> usize {
        self.transport.rank()
    }

    pub fn is_root(&self) -> bool {
        self.rank() == 0
    }

    /// The next key of a run spanning ranks submitted by a client named `client`.
    pub fn next_key(&self, client: &str) -> RunKey {
        let client = name_hash(client);
        let mut state = self.lock();
        let seq = state.submitted.entry(client).or_default();
        let key = RunKey { client, seq: *seq };
        *seq += 1;
        key
    }

    /// Makes `run` (spanning ranks, keyed) reachable by other ranks' data, and fills it with
    /// what came before it.
    pub fn register(&self, key: RunKey, run: &Arc<RunState>) {
        let early = {
            let mut state = self.lock();
            if let Some((rank, reason)) = state.failed_early.remove(&key) {
                run.failed_elsewhere(failed_on(rank, &reason));
            }
            state.since_sweep += 1;
            if state.since_sweep > 256 {
                state.runs.retain(|_, r| r.strong_count() > 0);
                // An error for a run submitted here before came after the run was swept.
                let State {
                    failed_early,
                    submitted,
                    ..
                } = &mut *state;
                failed_early.retain(|k, _| submitted.get(&k.client).is_none_or(|&n| k.seq >= n));
                state.since_sweep = 0;
            }
            state.runs.insert(key, Arc::downgrade(run));
            state.early.remove(&key).unwrap_or_default()
        };
        for (program, node, shard, bytes) in early {
            fill(run, program, node, shard, bytes);
        }
    }

    /// Routes one message from rank `from`.
    pub fn route(&self, from: usize, message: Message) -> Routed {
        match message {
            Message::Data {
                run,
                program,
                node,
                shard,
                bytes,
            } => {
                let target = {
                    let mut state = self.lock();
                    match state.runs.get(&run).and_then(Weak::upgrade) {
                        Some(r) => Some(r),
                        None => {
                            state.early.entry(run).or_default().push((
                                program,
                                node,
                                shard,
                                bytes.clone(),
                            ));
                            None
                        }
                    }
                };
                match target {
                    Some(r) => {
                        fill(&r, program, node, shard, bytes);
                        Routed::Filled
                    }
                    None => Routed::Nothing,
                }
            }
            Message::Admit { run } if from == 0 && !self.is_root() => {
                self.lock().tickets.push_back(run);
                Routed::Ticket
            }
            Message::Failed { run, reason } => {
                let target = {
                    let mut state = self.lock();
                    match state.runs.get(&run) {
                        // Registered: failed now, or already finished here.
                        Some(r) => r.upgrade(),
                        None => {
                            state.failed_early.insert(run, (from, reason.clone()));
                            None
                        }
                    }
                };
                match target {
                    Some(r) => {
                        r.failed_elsewhere(failed_on(from, &reason));
                        Routed::Filled
                    }
                    None => Routed::Nothing,
                }
            }
            Message::Admit { .. } | Message::Heartbeat | Message::Live(_) => Routed::Nothing,
        }
    }

    /// Rank 0's next admission of a run spanning ranks, not yet made here.
    pub fn front_ticket(&self) -> Option<RunKey> {
        self.lock().tickets.front().copied()
    }

    pub fn pop_ticket(&self) {
        self.lock().tickets.pop_front();
    }

    /// Rank 0: tells every other rank that the run `key` is admitted now.
    pub fn announce(&self, key: RunKey) -> crate::Result<()> {
        for to in (0..self.transport.size()).filter(|&r| r != self.rank()) {
            self.transport.send(to, Message::Admit { run: key })?;
        }
        Ok(())
    }

    /// Sends shard `shard` of `node`'s mail of `run` to every other rank that reads it.
    pub fn send_mail(&self, run: &RunState, key: RunKey, node: usize, shard: usize, bytes: &[u8]) {
        let size = self.transport.size();
        for to in readers(&run.exec, node, shard, self.rank(), size) {
            let message = Message::Data {
                run: key,
                program: run.exec.fingerprint(),
                node: node as u32,
                shard: shard as u32,
                bytes: bytes.to_vec(),
            };
            if let Err(e) = self.transport.send(to, message) {
                run.fail(e);
            }
        }
    }
}

/// A stable hash of a client's name (FNV-1a): the same on every rank.
fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A run's error as the rank whose part failed told it.
fn failed_on(rank: usize, reason: &str) -> crate::Error {
    crate::Error::Job {
        rank,
        reason: format!("this run failed there: {reason}"),
    }
}

/// Puts bytes another rank sent into `run`'s mailbox, or fails the run when they come from
/// another program (the ranks disagree on what runs).
fn fill(run: &RunState, program: u64, node: u32, shard: u32, bytes: Vec<u8>) {
    let slot = run
        .mail
        .get(node as usize)
        .and_then(|m| m.get(shard as usize))
        .filter(|_| program == run.exec.fingerprint());
    let Some(slot) = slot else {
        run.fail(crate::Error::Program {
            program: run.exec.program().name().to_string(),
            reason: format!(
                "another rank sent data of node {node} shard {shard} of a different program for \
                 this run: the ranks run different programs (every rank must build the same \
                 programs and submit the same runs spanning ranks, in the same order)"
            ),
        });
        return;
    };
    let _ = slot.set(bytes);
    run.progress();
    if run.results_ready() {
        run.signal();
    }
}

/// The ranks other than `me` (of `size`) whose devices read shard `shard` of `node`'s mail.
pub(crate) fn readers(
    exec: &Executable,
    node: usize,
    shard: usize,
    me: usize,
    size: usize,
) -> Vec<usize> {
    let prog = exec.program();
    let n = &prog.nodes()[node];
    let rank_of = |d: usize| exec.devices()[d].remote_rank();
    let mut ranks: Vec<usize> = match &n.op {
        Op::Transfer => n
            .gang
            .get(shard)
            .and_then(|&d| rank_of(d))
            .into_iter()
            .collect(),
        Op::Send => prog
            .nodes()
            .iter()
            .filter(|r| r.op == Op::Recv && r.inputs.first() == n.outputs.first())
            .filter_map(|r| r.gang.get(shard).and_then(|&d| rank_of(d)))
            .collect(),
        Op::AllToAll(group, _) | Op::AllReduce(group) => group
            .members(shard)
            .filter_map(|m| n.gang.get(m).and_then(|&d| rank_of(d)))
            .collect(),
        // Every rank gets every result.
        Op::Result { .. } => (0..size).collect(),
        _ => Vec::new(),
    };
    ranks.retain(|&r| r != me);
    ranks.sort_unstable();
    ranks.dedup();
    ranks
}
