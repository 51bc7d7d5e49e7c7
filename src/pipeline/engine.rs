//! Runs a schedule op by op, the way devices would: each stage in its own order, a receive
//! blocking until the matching send has happened. Validation runs it with zero costs, simulation
//! with real ones, so both accept exactly the same schedules.
//!
//! Work is O(total ops) with one device per stage: a stage runs until it blocks on a receive, and
//! is woken only by the send it waits for; every readiness check is an array or hash lookup.
//!
//! With more stages than devices ([`super::Fold`]) a device runs one op at a time for all its
//! stages, so the run goes in time order instead: each step runs the op, of any stage, that can
//! start first (ties: transfers before compute, then the earlier microbatch, then the later
//! stage, whose work is older), O(p) per op. Every op starts no earlier than the one before, so an
//! op never waits on one run after it, and a device takes its stages' ops as a greedy list
//! scheduler would. Sharing a device only delays ops, so a schedule passes or fails validation
//! the same whatever the fold.

use std::collections::{HashMap, VecDeque};

use crate::trace::{Clock, Event, EventKind, Flow, FlowRole, Lane};

use super::fold::op_name;
use super::schedule::{Layout, Op, Schedule};
use super::schedule_kind::OpKind;
use crate::error::ScheduleError;

/// Durations of each op kind in nanoseconds.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Timing {
    pub forward: u64,
    /// The B op's cost, which includes the weight gradient when the backward is not split.
    pub backward: u64,
    pub weight_grad: u64,
    /// One activation or gradient transfer, latency included.
    pub transfer: u64,
    /// A chunk op's own communication (an MoE layer's all-to-all): added to an F or B that runs
    /// alone, hidden under the partner's compute in an F&B pair (see [`Timing::pair`]).
    pub all_to_all: u64,
    /// Whether a send blocks its stage until the data has arrived (communication the stage
    /// waits for) rather than running beside compute.
    pub blocking_sends: bool,
}

impl Timing {
    /// An overlapped F&B pair: one stream computes both, the other moves both chunks' data, so
    /// the pair costs `max(F + B, 2 · all-to-all)`.
    pub fn pair(&self) -> u64 {
        self.forward
            .saturating_add(self.backward)
            .max(self.all_to_all.saturating_mul(2))
    }
}

/// One op placed in time; `at_ns` is when it starts (a receive: when its data is in hand).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct OpAt {
    pub stage: usize,
    /// Index into `Schedule::ops[stage]`.
    pub index: usize,
    pub at_ns: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Run {
    /// Per stage.
    pub peak_activations: Vec<usize>,
    /// Per device: what its stages hold at once.
    pub device_peak_activations: Vec<usize>,
    /// Per device.
    pub busy: Vec<u64>,
    pub makespan: u64,
    /// Compute and transfer events; empty unless recording.
    pub events: Vec<Event>,
    /// Every op by start time, ties in causal order; empty unless recording.
    pub order: Vec<OpAt>,
}

// Per (microbatch, virtual stage) progress bits.
const F_DONE: u8 = 1;
const B_DONE: u8 = 2;
const W_DONE: u8 = 4;
const ACT_SENT: u8 = 8;
const ACT_RECV: u8 = 16;
const GRAD_SENT: u8 = 32;
const GRAD_RECV: u8 = 64;

/// Which ready op the time-ordered driver runs first: the earliest start, transfers before
/// compute, the earlier microbatch, the later stage.
type Priority = (u64, bool, usize, std::cmp::Reverse<usize>);

#[derive(Debug, Clone, Copy)]
struct Message {
    arrival: u64,
    /// `None` for a hand-off between two stages of one device, which moves nothing.
    flow: Option<u64>,
}

struct Engine<'a> {
    s: &'a Schedule,
    layout: Layout,
    t: Timing,
    /// Each stage's compute cost over the timing's (empty: all 1).
    stage_scale: &'a [f64],
    record: bool,
    vstages: usize,
    state: Vec<u8>,
    /// Sent messages not yet consumed by their compute op, by `msg_key`.
    in_flight: HashMap<u64, Message>,
    /// When each ordered device pair's link is next free.
    link_free: HashMap<(usize, usize), u64>,
    /// Each stage's device.
    device: Vec<usize>,
    /// Per stage: when its previous op ended.
    clock: Vec<u64>,
    /// Per device: when its previous compute op ended.
    device_free: Vec<u64>,
    /// Per device: its stages' activations held now.
    device_live: Vec<usize>,
    next: Vec<usize>,
    waiting: Vec<Option<u64>>,
    live: Vec<usize>,
    /// What is left of an F&B pair's cost for its B, per stage.
    pair_rest: Vec<Option<u64>>,
    run: Run,
    next_flow: u64,
    woken: VecDeque<usize>,
}

/// Executes `s`, stage `i`'s ops taking `stage_scale[i]` times the timing's (all 1 when
/// `stage_scale` is empty) on device `devices[i]` (one device per stage when `devices` is
/// empty); records events (on each stage's device) and the global order when `record` is set.
pub(crate) fn execute(
    s: &Schedule,
    t: Timing,
    stage_scale: &[f64],
    devices: &[usize],
    record: bool,
) -> Result<Run, ScheduleError> {
    if s.ops.len() != s.stages {
        return Err(ScheduleError::StageCount {
            stages: s.stages,
            got: s.ops.len(),
        });
    }
    let p = s.stages;
    let device: Vec<usize> = if devices.is_empty() {
        (0..p).collect()
    } else if devices.len() == p {
        devices.to_vec()
    } else {
        return Err(ScheduleError::InvalidFold {
            reason: format!("{} stage devices for {p} stages", devices.len()),
        });
    };
    let d = device.iter().map(|&x| x + 1).max().unwrap_or(0);
    let mut stages_of = vec![Vec::new(); d];
    for (stage, &dev) in device.iter().enumerate() {
        stages_of[dev].push(stage);
    }
    if let Some(dev) = stages_of.iter().position(Vec::is_empty) {
        return Err(ScheduleError::InvalidFold {
            reason: format!("device {dev} of {d} holds no stage"),
        });
    }
    // An explicit map runs in time order even at one stage per device (the tests compare the
    // two drivers there); callers pass none unless stages share devices.
    let shared = !devices.is_empty();
    let vstages = s.virtual_stages();
    let mut e = Engine {
        s,
        layout: s.layout(),
        t,
        stage_scale,
        record,
        vstages,
        state: vec![0; s.microbatches.saturating_mul(vstages)],
        in_flight: HashMap::new(),
        link_free: HashMap::new(),
        device,
        clock: vec![0; p],
        device_free: vec![0; d],
        device_live: vec![0; d],
        next: vec![0; p],
        waiting: vec![None; p],
        live: vec![0; p],
        pair_rest: vec![None; p],
        run: Run {
            peak_activations: vec![0; p],
            device_peak_activations: vec![0; d],
            busy: vec![0; d],
            ..Run::default()
        },
        next_flow: 1,
        woken: (0..p).collect(),
    };
    if record {
        e.run.events.reserve(s.op_count());
        e.run.order.reserve(s.op_count());
    }
    if shared {
        e.run_in_time_order()?;
    } else {
        while let Some(stage) = e.woken.pop_front() {
            e.advance(stage)?;
        }
    }
    e.check_stuck()?;
    e.check_complete()?;
    e.run.makespan = e.clock.iter().copied().max().unwrap_or(0);
    // Stable: equal start times keep the causal order in which they were executed.
    e.run.order.sort_by_key(|o| o.at_ns);
    Ok(e.run)
}

fn msg_key(key: usize, gradient: bool) -> u64 {
    key as u64 * 2 + u64::from(gradient)
}

fn bad(stage: usize, index: usize, op: &Op, reason: impl Into<String>) -> ScheduleError {
    ScheduleError::BadOp {
        stage,
        index,
        op: op.to_string(),
        reason: reason.into(),
    }
}

fn out_of_order(stage: usize, index: usize, op: &Op, needs: String) -> ScheduleError {
    ScheduleError::OutOfOrder {
        stage,
        index,
        op: op.to_string(),
        needs,
    }
}

impl Engine<'_> {
    fn key(&self, mb: usize, vs: usize) -> usize {
        mb * self.vstages + vs
    }

    /// Runs, until every stage is done or blocked, the op that can start first (see the module
    /// docs): for stages that share devices.
    fn run_in_time_order(&mut self) -> Result<(), ScheduleError> {
        loop {
            let mut best: Option<(Priority, usize)> = None;
            for stage in 0..self.s.stages {
                let Some(at) = self.ready_at(stage) else {
                    continue;
                };
                let op = self.s.ops[stage][self.next[stage]];
                let key = (
                    at,
                    op.kind.is_compute(),
                    op.microbatch,
                    std::cmp::Reverse(stage),
                );
                if best.as_ref().is_none_or(|(k, _)| key < *k) {
                    best = Some((key, stage));
                }
            }
            let Some((_, stage)) = best else {
                return Ok(());
            };
            let index = self.next[stage];
            let op = self.s.ops[stage][index];
            if self.step(stage, index, op)? {
                self.next[stage] += 1;
            }
        }
    }

    /// When `stage`'s next op could start, or `None` if it is done or waits for a send that has
    /// not happened. An op that breaks a rule is ready at once, so that `step` reports it.
    fn ready_at(&self, stage: usize) -> Option<u64> {
        let op = self.s.ops[stage].get(self.next[stage])?;
        let clock = self.clock[stage];
        if op.kind.is_compute() {
            return Some(clock.max(self.device_free[self.device[stage]]));
        }
        let receiving = matches!(op.kind, OpKind::RecvActivation | OpKind::RecvGradient);
        if !receiving || op.microbatch >= self.s.microbatches || op.chunk >= self.s.chunks {
            return Some(clock);
        }
        let vs = self.layout.virtual_stage(stage, op.chunk);
        let gradient = op.kind == OpKind::RecvGradient;
        let msg = self
            .in_flight
            .get(&msg_key(self.key(op.microbatch, vs), gradient))?;
        Some(clock.max(msg.arrival))
    }

    /// Runs `stage` until it finishes or blocks on a receive whose send has not happened.
    fn advance(&mut self, stage: usize) -> Result<(), ScheduleError> {
        let ops = &self.s.ops[stage];
        while let Some(&op) = ops.get(self.next[stage]) {
            let index = self.next[stage];
            if !self.step(stage, index, op)? {
                return Ok(());
            }
            self.next[stage] += 1;
        }
        Ok(())
    }

    /// Executes one op; `Ok(false)` when it must wait for a send.
    fn step(&mut self, stage: usize, index: usize, op: Op) -> Result<bool, ScheduleError> {
        let (m, v) = (self.s.microbatches, self.s.chunks);
        if op.microbatch >= m {
            return Err(bad(
                stage,
                index,
                &op,
                format!("there are only {m} microbatches"),
            ));
        }
        if op.chunk >= v {
            return Err(bad(stage, index, &op, format!("there are only {v} chunks")));
        }
        let vs = self.layout.virtual_stage(stage, op.chunk);
        let home = self.layout.locate(op.microbatch, vs);
        if home != (stage, op.chunk) {
            return Err(bad(
                stage,
                index,
                &op,
                format!(
                    "microbatch {} travels the other way: its virtual stage {vs} is chunk {} of \
                     stage {}",
                    op.microbatch, home.1, home.0
                ),
            ));
        }
        let key = self.key(op.microbatch, vs);
        if op.kind.is_compute() {
            if op.peer.is_some() {
                return Err(bad(stage, index, &op, "compute ops have no peer"));
            }
            self.compute(stage, index, op, vs, key)?;
            return Ok(true);
        }
        let gradient = matches!(op.kind, OpKind::SendGradient | OpKind::RecvGradient);
        let sending = matches!(op.kind, OpKind::SendActivation | OpKind::SendGradient);
        // The virtual stage on the other end of this transfer.
        let other = match (gradient, sending) {
            (false, true) | (true, false) => vs + 1,
            (false, false) | (true, true) => vs.wrapping_sub(1),
        };
        if other >= self.vstages {
            let end = if vs == 0 { "first" } else { "last" };
            return Err(bad(
                stage,
                index,
                &op,
                format!("the {end} virtual stage has no peer"),
            ));
        }
        let expected = self.layout.locate(op.microbatch, other).0;
        if expected == stage {
            return Err(bad(
                stage,
                index,
                &op,
                "both ends are on this stage; nothing to move",
            ));
        }
        if op.peer != Some(expected) {
            return Err(bad(
                stage,
                index,
                &op,
                format!("that tensor lives on stage {expected}"),
            ));
        }
        if sending {
            self.send(stage, index, op, key, other, expected, gradient)?;
            Ok(true)
        } else {
            self.receive(stage, index, op, key, gradient)
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn send(
        &mut self,
        stage: usize,
        index: usize,
        op: Op,
        key: usize,
        dest_vs: usize,
        dest: usize,
        gradient: bool,
    ) -> Result<(), ScheduleError> {
        let (made, made_name, sent) = if gradient {
            (B_DONE, 'B', GRAD_SENT)
        } else {
            (F_DONE, 'F', ACT_SENT)
        };
        if self.state[key] & made == 0 {
            let needs = format!(
                "{made_name}(mb {}, chunk {}) produces it",
                op.microbatch, op.chunk
            );
            return Err(out_of_order(stage, index, &op, needs));
        }
        let dest_key = self.key(op.microbatch, dest_vs);
        if self.state[dest_key] & sent != 0 {
            return Err(ScheduleError::Duplicate {
                stage,
                index,
                op: op.to_string(),
            });
        }
        self.state[dest_key] |= sent;
        let (from, to) = (self.device[stage], self.device[dest]);
        let mk = msg_key(dest_key, gradient);
        if from == to {
            // Two stages of one device: the tensor is already where it is needed.
            let arrival = self.clock[stage];
            self.in_flight.insert(
                mk,
                Message {
                    arrival,
                    flow: None,
                },
            );
            if self.record {
                self.run.order.push(OpAt {
                    stage,
                    index,
                    at_ns: arrival,
                });
            }
            return Ok(());
        }
        let link = self.link_free.entry((from, to)).or_insert(0);
        let start = self.clock[stage].max(*link);
        let arrival = start.saturating_add(self.t.transfer);
        *link = arrival;
        if self.t.blocking_sends {
            // The device waits with its stage: a synchronous send holds its stream.
            self.clock[stage] = arrival;
            let free = &mut self.device_free[from];
            *free = (*free).max(arrival);
        }
        let flow = self.next_flow;
        self.next_flow += 1;
        self.in_flight.insert(
            mk,
            Message {
                arrival,
                flow: Some(flow),
            },
        );
        if self.waiting[dest] == Some(mk) {
            self.waiting[dest] = None;
            self.woken.push_back(dest);
        }
        if self.record {
            let what = if gradient { "grad" } else { "act" };
            self.run.events.push(Event {
                device: from,
                lane: Lane::Transfer,
                kind: EventKind::Transfer,
                name: self.name(what, stage, op.chunk),
                program: None,
                node: None,
                microbatch: u32::try_from(op.microbatch).ok(),
                start_ns: start,
                end_ns: arrival,
                clock: Clock::Simulated,
                flow: Some(Flow {
                    id: flow,
                    role: FlowRole::Out,
                }),
                op: None,
                moved: None,
            });
            self.run.order.push(OpAt {
                stage,
                index,
                at_ns: self.clock[stage],
            });
        }
        Ok(())
    }

    fn receive(
        &mut self,
        stage: usize,
        index: usize,
        op: Op,
        key: usize,
        gradient: bool,
    ) -> Result<bool, ScheduleError> {
        let recv = if gradient { GRAD_RECV } else { ACT_RECV };
        if self.state[key] & recv != 0 {
            return Err(ScheduleError::Duplicate {
                stage,
                index,
                op: op.to_string(),
            });
        }
        let mk = msg_key(key, gradient);
        let Some(msg) = self.in_flight.get(&mk) else {
            self.waiting[stage] = Some(mk);
            return Ok(false);
        };
        self.state[key] |= recv;
        self.clock[stage] = self.clock[stage].max(msg.arrival);
        if self.record {
            self.run.order.push(OpAt {
                stage,
                index,
                at_ns: self.clock[stage],
            });
        }
        Ok(true)
    }

    fn compute(
        &mut self,
        stage: usize,
        index: usize,
        op: Op,
        vs: usize,
        key: usize,
    ) -> Result<(), ScheduleError> {
        let (mb, c) = (op.microbatch, op.chunk);
        let alone = |x: u64| x.saturating_add(self.t.all_to_all);
        let (done, mut duration) = match op.kind {
            OpKind::Forward => (F_DONE, alone(self.t.forward)),
            OpKind::Backward => (B_DONE, alone(self.t.backward)),
            _ => (W_DONE, self.t.weight_grad),
        };
        if op.overlapped {
            duration = self.start_pair(stage, index, &op)?;
        } else if op.kind == OpKind::Backward
            && let Some(rest) = self.pair_rest[stage].take()
        {
            duration = rest;
        } else if self.pair_rest[stage].is_some() {
            return Err(bad(
                stage,
                index,
                &op,
                "an overlapped F must be followed by the B it overlaps",
            ));
        }
        if self.state[key] & done != 0 {
            return Err(ScheduleError::Duplicate {
                stage,
                index,
                op: op.to_string(),
            });
        }
        // Same-device inputs must already be done; cross-device ones received.
        let mut flow = None;
        match op.kind {
            OpKind::Forward if vs > 0 => {
                flow = self.input(stage, index, op, vs - 1, key, false)?;
            }
            OpKind::Backward => {
                if self.state[key] & F_DONE == 0 {
                    let needs = format!("its own F(mb {mb}, chunk {c})");
                    return Err(out_of_order(stage, index, &op, needs));
                }
                if vs + 1 < self.vstages {
                    flow = self.input(stage, index, op, vs + 1, key, true)?;
                }
            }
            OpKind::WeightGrad => {
                if !self.s.split_backward {
                    let reason = format!(
                        "{} folds the weight gradient into B, so it has no W ops",
                        self.s.kind
                    );
                    return Err(bad(stage, index, &op, reason));
                }
                if self.state[key] & B_DONE == 0 {
                    let needs = format!("its B(mb {mb}, chunk {c})");
                    return Err(out_of_order(stage, index, &op, needs));
                }
            }
            _ => {}
        }
        self.state[key] |= done;
        // Activations are held from F until the last backward op that reads them.
        let frees = match op.kind {
            OpKind::Backward => !self.s.split_backward,
            OpKind::WeightGrad => true,
            _ => false,
        };
        let dev = self.device[stage];
        if op.kind == OpKind::Forward {
            self.live[stage] += 1;
            let peak = &mut self.run.peak_activations[stage];
            *peak = (*peak).max(self.live[stage]);
            self.device_live[dev] += 1;
            let peak = &mut self.run.device_peak_activations[dev];
            *peak = (*peak).max(self.device_live[dev]);
        } else if frees {
            self.live[stage] = self.live[stage].saturating_sub(1);
            self.device_live[dev] = self.device_live[dev].saturating_sub(1);
        }
        if let Some(&k) = self.stage_scale.get(stage) {
            duration = (duration as f64 * k).round() as u64;
        }
        let start = self.clock[stage].max(self.device_free[dev]);
        let end = start.saturating_add(duration);
        self.clock[stage] = end;
        self.device_free[dev] = end;
        self.run.busy[dev] = self.run.busy[dev].saturating_add(duration);
        if self.record {
            let letter = op.kind.letter().unwrap_or('?');
            self.run.events.push(Event {
                device: dev,
                lane: Lane::Compute,
                kind: EventKind::Kernel,
                name: self.name(letter.encode_utf8(&mut [0; 4]), stage, c),
                program: None,
                node: None,
                microbatch: u32::try_from(mb).ok(),
                start_ns: start,
                end_ns: end,
                clock: Clock::Simulated,
                flow: flow.map(|id| Flow {
                    id,
                    role: FlowRole::In,
                }),
                op: op.kind.pipeline_op(),
                moved: None,
            });
            self.run.order.push(OpAt {
                stage,
                index,
                at_ns: start,
            });
        }
        Ok(())
    }

    /// An overlapped F: checks that its partner B comes next and splits the pair's cost between
    /// them in proportion to F and B; returns the F's share.
    fn start_pair(&mut self, stage: usize, index: usize, op: &Op) -> Result<u64, ScheduleError> {
        let partner = self.s.ops[stage][index + 1..]
            .iter()
            .find(|o| o.kind.is_compute());
        if op.kind != OpKind::Forward || partner.is_none_or(|o| o.kind != OpKind::Backward) {
            return Err(bad(
                stage,
                index,
                op,
                "only an F followed by a B can run overlapped",
            ));
        }
        let pair = self.t.pair();
        let (f, b) = (self.t.forward, self.t.backward);
        let share = if f + b == 0 {
            pair / 2
        } else {
            (u128::from(pair) * u128::from(f) / (u128::from(f) + u128::from(b))) as u64
        };
        self.pair_rest[stage] = Some(pair - share);
        Ok(share)
    }

    /// Checks that the input from virtual stage `from` is here; returns its flow id if it came
    /// from another stage.
    fn input(
        &mut self,
        stage: usize,
        index: usize,
        op: Op,
        from: usize,
        key: usize,
        gradient: bool,
    ) -> Result<Option<u64>, ScheduleError> {
        let mb = op.microbatch;
        let (src, src_chunk) = self.layout.locate(mb, from);
        if src == stage {
            let (bit, letter) = if gradient {
                (B_DONE, 'B')
            } else {
                (F_DONE, 'F')
            };
            if self.state[self.key(mb, from)] & bit == 0 {
                let needs = format!("{letter}(mb {mb}, chunk {src_chunk}), which feeds it");
                return Err(out_of_order(stage, index, &op, needs));
            }
            return Ok(None);
        }
        let (bit, what) = if gradient {
            (GRAD_RECV, "gradient")
        } else {
            (ACT_RECV, "activation")
        };
        if self.state[key] & bit == 0 {
            let needs = format!("receiving its {what} from stage {src}");
            return Err(out_of_order(stage, index, &op, needs));
        }
        let flow = self
            .in_flight
            .remove(&msg_key(key, gradient))
            .and_then(|m| m.flow);
        Ok(flow)
    }

    /// An op's event name ([`op_name`]).
    fn name(&self, base: &str, stage: usize, chunk: usize) -> String {
        op_name(base, &self.device, self.s.chunks, stage, chunk)
    }

    /// Every stage is blocked or done; any blocked one means deadlock.
    fn check_stuck(&self) -> Result<(), ScheduleError> {
        let mut stuck = Vec::new();
        for (stage, ops) in self.s.ops.iter().enumerate() {
            let index = self.next[stage];
            let Some(op) = ops.get(index) else { continue };
            let mut line = format!("stage {stage} waits at op #{index} {op}");
            if let Some(peer) = op.peer {
                let sent_at = self.s.ops.get(peer).and_then(|peer_ops| {
                    peer_ops
                        .iter()
                        .position(|o| matching_send(self.s, peer, o, stage, op))
                });
                match sent_at {
                    Some(at) => line += &format!(", which stage {peer} sends only at its op #{at}"),
                    None => line += &format!(", which stage {peer} never sends"),
                }
            }
            stuck.push(line);
        }
        if stuck.is_empty() {
            Ok(())
        } else {
            Err(ScheduleError::Deadlock { stuck })
        }
    }

    /// Every F, B (and W) ran once; every sent tensor was received.
    fn check_complete(&self) -> Result<(), ScheduleError> {
        for (key, &bits) in self.state.iter().enumerate() {
            let (mb, vs) = (key / self.vstages, key % self.vstages);
            let (stage, chunk) = self.layout.locate(mb, vs);
            for (sent, recv, what, from) in [
                (ACT_SENT, ACT_RECV, "activation", vs.wrapping_sub(1)),
                (GRAD_SENT, GRAD_RECV, "gradient", vs + 1),
            ] {
                if bits & sent != 0 && bits & recv == 0 {
                    return Err(ScheduleError::Unreceived {
                        stage: self.layout.locate(mb, from).0,
                        peer: stage,
                        what: format!("the {what} of mb {mb} for chunk {chunk}"),
                    });
                }
            }
            for (bit, kind, needed) in [
                (F_DONE, OpKind::Forward, true),
                (B_DONE, OpKind::Backward, true),
                (W_DONE, OpKind::WeightGrad, self.s.split_backward),
            ] {
                if needed && bits & bit == 0 {
                    return Err(ScheduleError::Missing {
                        stage,
                        op: Op::compute(kind, mb, chunk).to_string(),
                    });
                }
            }
        }
        Ok(())
    }
}

/// Whether `o` on stage `sender` is the send that `recv` on stage `receiver` waits for.
fn matching_send(s: &Schedule, sender: usize, o: &Op, receiver: usize, recv: &Op) -> bool {
    let want = match recv.kind {
        OpKind::RecvActivation => OpKind::SendActivation,
        OpKind::RecvGradient => OpKind::SendGradient,
        _ => return false,
    };
    if o.kind != want || o.microbatch != recv.microbatch || o.peer != Some(receiver) {
        return false;
    }
    let sent_from = s.virtual_stage(sender, o.chunk);
    let to = s.virtual_stage(receiver, recv.chunk);
    match want {
        OpKind::SendActivation => sent_from + 1 == to,
        _ => to + 1 == sent_from,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::pipeline::ScheduleKind;

    /// The time-ordered driver (for shared devices) gives, at one stage per device, exactly what
    /// the run-until-blocked one gives: the same ops at the same times.
    #[test]
    fn both_drivers_agree_at_one_stage_per_device() {
        let t = Timing {
            forward: 5,
            backward: 7,
            weight_grad: 3,
            transfer: 2,
            all_to_all: 1,
            blocking_sends: false,
        };
        let mut checked = 0;
        for kind in ScheduleKind::ALL {
            for blocking_sends in [false, true] {
                let Ok(s) = Schedule::new(kind, 4, 8, kind.chunks(2)) else {
                    continue;
                };
                let t = Timing {
                    blocking_sends,
                    ..t
                };
                let identity: Vec<usize> = (0..4).collect();
                let a = execute(&s, t, &[], &[], true).unwrap();
                let b = execute(&s, t, &[1.0, 2.0, 1.0, 1.5], &identity, true).unwrap();
                let c = execute(&s, t, &[1.0, 2.0, 1.0, 1.5], &[], true).unwrap();
                let b0 = execute(&s, t, &[], &identity, true).unwrap();
                for (x, y) in [(&a, &b0), (&c, &b)] {
                    assert_eq!(x.makespan, y.makespan, "{kind}");
                    assert_eq!(x.busy, y.busy, "{kind}");
                    assert_eq!(x.peak_activations, y.peak_activations, "{kind}");
                    let key = |e: &Event| (e.device, e.start_ns, e.end_ns, e.name.clone());
                    let mut xe: Vec<_> = x.events.iter().map(key).collect();
                    let mut ye: Vec<_> = y.events.iter().map(key).collect();
                    xe.sort();
                    ye.sort();
                    assert_eq!(xe, ye, "{kind}");
                }
                checked += 1;
            }
        }
        assert!(checked >= 16, "only {checked} shapes ran");
    }
}
