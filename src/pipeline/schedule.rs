//! Schedules as data: for every stage, the exact list of ops it runs, transfers included, so one
//! schedule can be validated, simulated and executed on real devices without reinterpretation.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::orders;
use super::schedule_kind::{OpKind, Placement, ScheduleKind};
use super::step::{ComputeOrder, Step};
use crate::error::ScheduleError;

/// The most ops (compute and transfer, all stages) [`Schedule::new`] will build, so a typo in a
/// size is an error instead of gigabytes of ops.
pub const MAX_OPS: u64 = 10_000_000;

/// One step of one stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Op {
    pub kind: OpKind,
    pub microbatch: usize,
    /// Model chunk on this device, `0..v`; its virtual stage is [`Schedule::virtual_stage`]
    /// (`chunk * p + stage` in Megatron's loop). For a transfer it is the local chunk that
    /// produced (send) or will consume (receive) the tensor.
    pub chunk: usize,
    /// The other stage of a transfer; `None` for compute ops.
    pub peer: Option<usize>,
    /// Set on an F that runs overlapped with the next compute op of its stage, a B of another
    /// microbatch (DualPipe's F&B chunk): the pair starts when both inputs are in and costs
    /// `max(F + B, 2 · all-to-all)` together ([`super::Costs::all_to_all_ns`]); the receives of both come before the F and the
    /// sends of both after the B.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub overlapped: bool,
}

impl Op {
    /// A compute op (F, B or W).
    pub fn compute(kind: OpKind, microbatch: usize, chunk: usize) -> Op {
        Op {
            kind,
            microbatch,
            chunk,
            peer: None,
            overlapped: false,
        }
    }

    /// A forward that runs overlapped with the B that follows it (an F&B chunk).
    pub fn overlapped_forward(microbatch: usize, chunk: usize) -> Op {
        Op {
            overlapped: true,
            ..Op::compute(OpKind::Forward, microbatch, chunk)
        }
    }

    /// A transfer op with `peer`.
    pub fn transfer(kind: OpKind, microbatch: usize, chunk: usize, peer: usize) -> Op {
        Op {
            kind,
            microbatch,
            chunk,
            peer: Some(peer),
            overlapped: false,
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (mb, c) = (self.microbatch, self.chunk);
        let peer = || self.peer.map_or_else(|| "?".to_owned(), |p| p.to_string());
        match self.kind {
            OpKind::Forward | OpKind::Backward | OpKind::WeightGrad => {
                let letter = self.kind.letter().unwrap_or('?');
                write!(f, "{letter}(mb {mb}, chunk {c})")
            }
            OpKind::SendActivation => write!(f, "send-act(mb {mb}, chunk {c} -> stage {})", peer()),
            OpKind::RecvActivation => write!(f, "recv-act(mb {mb}, chunk {c} <- stage {})", peer()),
            OpKind::SendGradient => write!(f, "send-grad(mb {mb}, chunk {c} -> stage {})", peer()),
            OpKind::RecvGradient => write!(f, "recv-grad(mb {mb}, chunk {c} <- stage {})", peer()),
        }
    }
}

/// A complete pipeline schedule: `p` stages, `m` microbatches, `v` model chunks per stage.
///
/// The model is cut into [`Schedule::virtual_stages`] slices (virtual stages) that every
/// microbatch runs in order; [`Schedule::placement`] says which stage and chunk holds each. In
/// Megatron's loop, virtual stage `vs = chunk * p + stage`, so for `v > 1` activations leave
/// stage `p - 1` chunk `c` for stage 0 chunk `c + 1`; in a V the turn stays on stage `p - 1`;
/// DualPipe's two directions run the same `p` slices from opposite ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    pub kind: ScheduleKind,
    pub stages: usize,
    pub microbatches: usize,
    /// Model chunks per stage: 1, `v` for interleaved and looped BFS, 2 for the V and
    /// bidirectional schedules.
    pub chunks: usize,
    /// True when W ops exist; otherwise each B also computes the weight gradient.
    pub split_backward: bool,
    /// Per stage, the ops in execution order, transfers included.
    pub ops: Vec<Vec<Op>>,
}

/// The shape a schedule's ops live in: which stage and chunk holds each virtual stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    pub placement: Placement,
    pub stages: usize,
    pub microbatches: usize,
    pub chunks: usize,
}

impl Layout {
    pub fn virtual_stages(&self) -> usize {
        match self.placement {
            Placement::Looped => self.stages * self.chunks,
            Placement::V => 2 * self.stages,
            Placement::Bidirectional => self.stages,
        }
    }

    pub fn virtual_stage(&self, stage: usize, chunk: usize) -> usize {
        let p = self.stages;
        match (self.placement, chunk) {
            (Placement::Looped, c) => c * p + stage,
            (Placement::V, 0) | (Placement::Bidirectional, 0) => stage,
            (Placement::V, _) => 2 * p - 1 - stage,
            (Placement::Bidirectional, _) => p - 1 - stage,
        }
    }

    /// The direction microbatch `mb` travels: 0 (from stage 0) unless it is in the second half
    /// of a bidirectional schedule's microbatches.
    pub fn direction(&self, mb: usize) -> usize {
        usize::from(self.placement == Placement::Bidirectional && mb >= self.microbatches / 2)
    }

    pub fn locate(&self, mb: usize, vs: usize) -> (usize, usize) {
        let p = self.stages;
        match self.placement {
            Placement::Looped => (vs % p, vs / p),
            Placement::V if vs < p => (vs, 0),
            Placement::V => ((2 * p - 1).saturating_sub(vs), 1),
            Placement::Bidirectional if self.direction(mb) == 0 => (vs, 0),
            Placement::Bidirectional => ((p - 1).saturating_sub(vs), 1),
        }
    }
}

impl Schedule {
    /// Builds `kind` for `stages` (p) stages, `microbatches` (m) and `chunks` (v) model chunks
    /// per stage (pass [`ScheduleKind::chunks`] of the requested count). Interleaved needs
    /// `v >= 2` and `m >= p`, looped BFS `v >= 2`, the V and bidirectional kinds `v == 2`,
    /// DualPipe an even `p` and an even `m >= 2p`, DualPipeV `m >= 2p`; the others `v == 1`.
    pub fn new(
        kind: ScheduleKind,
        stages: usize,
        microbatches: usize,
        chunks: usize,
    ) -> Result<Schedule, ScheduleError> {
        check_shape(kind, stages, microbatches, chunks)?;
        let orders = orders::compute_orders(kind, stages, microbatches, chunks);
        Ok(Self::from_orders(
            kind,
            stages,
            microbatches,
            chunks,
            orders,
        ))
    }

    /// `kind`'s schedule with each stage's compute in `orders` (a shape [`check_shape`] took),
    /// transfers added around it.
    pub(crate) fn from_orders(
        kind: ScheduleKind,
        stages: usize,
        microbatches: usize,
        chunks: usize,
        orders: Vec<ComputeOrder>,
    ) -> Schedule {
        let layout = Layout {
            placement: kind.placement(),
            stages,
            microbatches,
            chunks,
        };
        let ops = (orders.iter().enumerate())
            .map(|(stage, order)| with_transfers(&layout, stage, order))
            .collect();
        Schedule {
            kind,
            stages,
            microbatches,
            chunks,
            split_backward: kind.splits_backward(),
            ops,
        }
    }

    pub(crate) fn layout(&self) -> Layout {
        Layout {
            placement: self.kind.placement(),
            stages: self.stages,
            microbatches: self.microbatches,
            chunks: self.chunks,
        }
    }

    /// Number of virtual stages (model slices) a microbatch runs through: `p * v` looped, `2p`
    /// in a V, `p` bidirectional.
    pub fn virtual_stages(&self) -> usize {
        self.layout().virtual_stages()
    }

    /// Compute ops of each kind one microbatch runs on each stage: `v` looped, 2 in a V, 1
    /// bidirectional (each direction uses one of the stage's two chunks). A stage's model share
    /// per microbatch is split into this many chunk ops.
    pub fn passes(&self) -> usize {
        self.virtual_stages() / self.stages.max(1)
    }

    /// The virtual stage (model slice) that `chunk` on `stage` holds.
    pub fn virtual_stage(&self, stage: usize, chunk: usize) -> usize {
        self.layout().virtual_stage(stage, chunk)
    }

    /// `(stage, chunk)` holding virtual stage `vs` for microbatch `mb` (only DualPipe's depends
    /// on the microbatch: its two directions use different copies).
    pub fn placement(&self, mb: usize, vs: usize) -> (usize, usize) {
        self.layout().locate(mb, vs)
    }

    /// Every `(stage, chunk)` holding virtual stage `vs`: one, or two with DualPipe's copies.
    pub fn holders(&self, vs: usize) -> Vec<(usize, usize)> {
        let mut out = vec![self.placement(0, vs)];
        if self.kind.parameter_copies() > 1 {
            out.push(self.placement(self.microbatches - 1, vs));
        }
        out
    }

    /// Total number of ops over all stages.
    pub fn op_count(&self) -> usize {
        self.ops.iter().map(Vec::len).sum()
    }
}

fn check_shape(
    kind: ScheduleKind,
    stages: usize,
    microbatches: usize,
    chunks: usize,
) -> Result<(), ScheduleError> {
    for (n, what) in [
        (stages, "stage"),
        (microbatches, "microbatch"),
        (chunks, "model chunk"),
    ] {
        if n == 0 {
            return Err(ScheduleError::Zero { what });
        }
    }
    let shape = |reason: String| ScheduleError::Shape {
        kind: kind.name(),
        reason,
    };
    match kind.placement() {
        Placement::Looped if kind.takes_chunks() => {
            if chunks < 2 {
                return Err(ScheduleError::TooFewChunks {
                    kind: kind.name(),
                    chunks,
                });
            }
        }
        Placement::Looped => {
            if chunks != 1 {
                return Err(ScheduleError::ChunksNeedInterleaved {
                    kind: kind.name(),
                    chunks,
                });
            }
        }
        Placement::V | Placement::Bidirectional => {
            if chunks != 2 {
                return Err(shape(format!(
                    "it places exactly two model chunks on each stage, got {chunks}"
                )));
            }
        }
    }
    if matches!(
        kind,
        ScheduleKind::Interleaved | ScheduleKind::InterleavedOverlap
    ) && microbatches < stages
    {
        return Err(ScheduleError::MicrobatchesBelowStages {
            microbatches,
            stages,
        });
    }
    if kind == ScheduleKind::DualPipe {
        if !stages.is_multiple_of(2) {
            return Err(shape(format!("it needs an even stage count, got {stages}")));
        }
        if !microbatches.is_multiple_of(2) {
            return Err(shape(format!(
                "it sends half the microbatches each way, so it needs an even count, got \
                 {microbatches}"
            )));
        }
    }
    if matches!(kind, ScheduleKind::DualPipe | ScheduleKind::DualPipeV) && microbatches < 2 * stages
    {
        return Err(shape(format!(
            "it needs at least twice as many microbatches as stages ({}), got {microbatches}",
            stages.saturating_mul(2)
        )));
    }
    // At most F, B, W and four transfers per (microbatch, chunk).
    let ops = [stages, microbatches, chunks]
        .into_iter()
        .fold(7u128, |acc, n| acc.saturating_mul(n as u128));
    if ops > u128::from(MAX_OPS) {
        return Err(ScheduleError::TooLarge {
            stages,
            microbatches,
            chunks,
            ops,
            max: MAX_OPS,
        });
    }
    Ok(())
}

/// Wraps each compute op in the transfers it needs: the receive of its input just before it and
/// the send of its output just after it, unless the neighbouring virtual stage is on the same
/// stage (one stage, or the turn of a V). An F&B pair (an overlapped F and the B after it) is
/// wrapped as one: both receives, F, B (and a W right after it), then both sends.
fn with_transfers(layout: &Layout, stage: usize, order: &[Step]) -> Vec<Op> {
    let last_vs = layout.virtual_stages() - 1;
    let mut ops = Vec::with_capacity(order.len() * 2);
    let mut sends: Vec<Op> = Vec::new();
    let mut in_pair = false;
    for (i, step) in order.iter().enumerate() {
        let (kind, mb, chunk) = (step.kind, step.mb, step.chunk);
        let vs = layout.virtual_stage(stage, chunk);
        let remote = |other: usize| {
            let (at, _) = layout.locate(mb, other);
            (at != stage).then_some(at)
        };
        let (recv, send) = match kind {
            OpKind::Forward => (
                (vs > 0)
                    .then(|| remote(vs - 1))
                    .flatten()
                    .map(|at| Op::transfer(OpKind::RecvActivation, mb, chunk, at)),
                (vs < last_vs)
                    .then(|| remote(vs + 1))
                    .flatten()
                    .map(|at| Op::transfer(OpKind::SendActivation, mb, chunk, at)),
            ),
            OpKind::Backward => (
                (vs < last_vs)
                    .then(|| remote(vs + 1))
                    .flatten()
                    .map(|at| Op::transfer(OpKind::RecvGradient, mb, chunk, at)),
                (vs > 0)
                    .then(|| remote(vs - 1))
                    .flatten()
                    .map(|at| Op::transfer(OpKind::SendGradient, mb, chunk, at)),
            ),
            _ => (None, None),
        };
        let op = Op {
            overlapped: step.overlapped,
            ..Op::compute(kind, mb, chunk)
        };
        if step.overlapped {
            // The B it overlaps receives before the pair starts.
            let partner = order.get(i + 1);
            let partner_recv = partner.and_then(|b| {
                let bvs = layout.virtual_stage(stage, b.chunk);
                (b.kind == OpKind::Backward && bvs < last_vs)
                    .then(|| layout.locate(b.mb, bvs + 1).0)
                    .filter(|&at| at != stage)
                    .map(|at| Op::transfer(OpKind::RecvGradient, b.mb, b.chunk, at))
            });
            ops.extend(recv);
            ops.extend(partner_recv);
            ops.push(op);
            sends.extend(send);
            in_pair = true;
            continue;
        }
        if in_pair && kind == OpKind::Backward {
            ops.push(op);
            sends.extend(send);
            // A full backward's W runs before the sends, as the B that computes it would.
            if order
                .get(i + 1)
                .is_none_or(|n| n.kind != OpKind::WeightGrad || !n.glued)
            {
                ops.append(&mut sends);
                in_pair = false;
            }
            continue;
        }
        if in_pair {
            ops.push(op);
            ops.append(&mut sends);
            in_pair = false;
            continue;
        }
        if step.glued {
            // A W glued to the B before it: before that B's send.
            let at =
                ops.len() - usize::from(ops.last().is_some_and(|o| o.kind == OpKind::SendGradient));
            ops.insert(at, op);
            continue;
        }
        ops.extend(recv);
        ops.push(op);
        ops.extend(send);
    }
    ops.append(&mut sends);
    ops
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Compute ops of one stage as "F0 B0 ..." (with ".c" chunk suffixes when v > 1).
    fn compute(s: &Schedule, stage: usize) -> String {
        let ops = s.ops[stage].iter().filter(|o| o.kind.is_compute());
        ops.map(|o| {
            let l = o.kind.letter().unwrap();
            if s.chunks > 1 {
                format!("{l}{}.{}", o.microbatch, o.chunk)
            } else {
                format!("{l}{}", o.microbatch)
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
    }

    #[test]
    fn names_round_trip() {
        for k in ScheduleKind::ALL {
            assert_eq!(k.name().parse::<ScheduleKind>().unwrap(), k);
            assert_eq!(k.to_string(), k.name());
        }
        assert_eq!("ZB-H1".parse::<ScheduleKind>().unwrap(), ScheduleKind::ZbH1);
        assert_eq!(
            "pipedream".parse::<ScheduleKind>().unwrap_err().to_string(),
            "unknown schedule \"pipedream\": expected one of gpipe, 1f1b, eager-1f1b, \
             interleaved, bfs, zb-h1, zb-auto, zb-v, v-half, v-min, dualpipe, dualpipev, \
             1f1b-overlap, interleaved-overlap"
        );
    }

    #[test]
    fn bad_shapes_are_rejected() {
        let err = |k, p, m, v| Schedule::new(k, p, m, v).unwrap_err().to_string();
        assert_eq!(
            err(ScheduleKind::Interleaved, 4, 3, 2),
            "interleaved 1F1B needs at least as many microbatches (3) as stages (4), as Megatron \
             requires"
        );
        assert!(Schedule::new(ScheduleKind::Interleaved, 4, 6, 2).is_ok());
        assert_eq!(
            err(ScheduleKind::DualPipe, 3, 6, 2),
            "dualpipe cannot take this shape: it needs an even stage count, got 3"
        );
        assert_eq!(
            err(ScheduleKind::DualPipe, 4, 9, 2),
            "dualpipe cannot take this shape: it sends half the microbatches each way, so it \
             needs an even count, got 9"
        );
        assert_eq!(
            err(ScheduleKind::DualPipeV, 4, 6, 2),
            "dualpipev cannot take this shape: it needs at least twice as many microbatches as \
             stages (8), got 6"
        );
        assert_eq!(
            err(ScheduleKind::ZbV, 4, 8, 3),
            "zb-v cannot take this shape: it places exactly two model chunks on each stage, got 3"
        );
        assert_eq!(
            err(ScheduleKind::LoopedBfs, 4, 8, 1),
            "bfs needs at least 2 model chunks per stage, got 1; with one chunk use 1f1b (or gpipe)"
        );
        assert_eq!(
            err(ScheduleKind::OneFOneB, 0, 4, 1),
            "a pipeline needs at least one stage, got 0"
        );
        assert_eq!(
            err(ScheduleKind::GPipe, 2, 0, 1),
            "a pipeline needs at least one microbatch, got 0"
        );
        assert_eq!(
            err(ScheduleKind::Interleaved, 2, 4, 0),
            "a pipeline needs at least one model chunk, got 0"
        );
        assert_eq!(
            err(ScheduleKind::ZbH1, 2, 4, 2),
            "zb-h1 puts one model chunk on each stage, got 2; only interleaved and bfs take a \
             chunk count"
        );
        assert_eq!(
            err(ScheduleKind::Interleaved, 2, 4, 1),
            "interleaved needs at least 2 model chunks per stage, got 1; with one chunk use 1f1b \
             (or gpipe)"
        );
        assert!(matches!(
            Schedule::new(ScheduleKind::GPipe, 1000, 10_000, 1),
            Err(ScheduleError::TooLarge { .. })
        ));
        assert!(matches!(
            Schedule::new(ScheduleKind::GPipe, usize::MAX, usize::MAX, 1),
            Err(ScheduleError::TooLarge { .. })
        ));
    }

    #[test]
    fn orders_match_the_papers() {
        let s = Schedule::new(ScheduleKind::GPipe, 2, 3, 1).unwrap();
        assert_eq!(compute(&s, 1), "F0 F1 F2 B0 B1 B2");
        let s = Schedule::new(ScheduleKind::OneFOneB, 4, 5, 1).unwrap();
        assert_eq!(compute(&s, 0), "F0 F1 F2 F3 B0 F4 B1 B2 B3 B4");
        assert_eq!(compute(&s, 2), "F0 F1 B0 F2 B1 F3 B2 F4 B3 B4");
        assert_eq!(compute(&s, 3), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4");
        // Megatron: warm-up 2(p-s-1) + (v-1)p; groups of p microbatches per chunk.
        let s = Schedule::new(ScheduleKind::Interleaved, 2, 4, 2).unwrap();
        assert_eq!(
            compute(&s, 0),
            "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0"
        );
        // ZB-H1: stage s holds back up to s weight gradients, flushed at the end.
        let s = Schedule::new(ScheduleKind::ZbH1, 3, 4, 1).unwrap();
        assert_eq!(compute(&s, 0), "F0 F1 F2 B0 W0 F3 B1 W1 B2 W2 B3 W3");
        assert_eq!(compute(&s, 2), "F0 B0 F1 B1 F2 B2 W0 F3 B3 W1 W2 W3");
        // Eager 1F1B: warm-up 2(p - s - 1).
        let s = Schedule::new(ScheduleKind::Eager1F1B, 3, 5, 1).unwrap();
        assert_eq!(compute(&s, 0), "F0 F1 F2 F3 F4 B0 B1 B2 B3 B4");
        assert_eq!(compute(&s, 1), "F0 F1 F2 B0 F3 B1 F4 B2 B3 B4");
        // Interleaved with m not a multiple of p: the remainder joins the last group.
        let s = Schedule::new(ScheduleKind::Interleaved, 2, 3, 2).unwrap();
        assert_eq!(
            compute(&s, 1),
            "F0.0 F1.0 F2.0 F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 B0.0 B1.0 B2.0"
        );
        // Looped BFS: chunk by chunk, every microbatch.
        let s = Schedule::new(ScheduleKind::LoopedBfs, 2, 2, 2).unwrap();
        assert_eq!(compute(&s, 0), "F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0");
    }

    /// DualPipe and DualPipeV follow DeepSeek's reference `step()` phase by phase (derived by
    /// hand from `dualpipev.py`). DualPipeV on p = 2, m = 4, rank 0: step 1 F0 ×2; step 2
    /// (F0 F1); step 3 (B1 with zero bubble, W, F1); step 4, m − 2p + 1 = 1 time (F0&B1,
    /// F1&B0); step 5 (B1, F1&B0); step 6 (B1, then B0 with zero bubble); step 7 (W, B0); step
    /// 8 W. A backward without zero bubble is B and its W at once. `&` marks an overlapped F
    /// and the B after it.
    #[test]
    fn dualpipe_orders_follow_the_reference() {
        let ops = |s: &Schedule, stage: usize| {
            let mut out = Vec::new();
            for o in s.ops[stage].iter().filter(|o| o.kind.is_compute()) {
                let l = o.kind.letter().unwrap();
                let amp = if o.overlapped { "&" } else { "" };
                out.push(format!("{l}{}.{}{amp}", o.microbatch, o.chunk));
            }
            out.join(" ")
        };
        let s = Schedule::new(ScheduleKind::DualPipeV, 2, 4, 2).unwrap();
        assert_eq!(
            ops(&s, 0),
            "F0.0 F1.0 F2.0 F0.1 B0.1 W0.1 F1.1 F3.0& B1.1 W1.1 F2.1& B0.0 W0.0 B2.1 W2.1 F3.1& \
             B1.0 W1.0 B3.1 W3.1 B2.0 W2.0 B3.0 W3.0"
        );
        // The last rank (the V's turn): its first main step is not overlapped.
        assert_eq!(
            ops(&s, 1),
            "F0.0 F0.1 F1.0 F1.1 F2.0 B0.1 W0.1 F2.1& B0.0 W0.0 F3.0& B1.1 W1.1 F3.1& B1.0 W1.0 \
             B2.1 W2.1 B2.0 W2.0 B3.1 B3.0 W3.1 W3.0"
        );
        // DualPipe: stage 0 and stage p - 1 mirror each other (directions swapped).
        let s = Schedule::new(ScheduleKind::DualPipe, 4, 8, 2).unwrap();
        let mirror: String = ops(&s, 3)
            .split(' ')
            .map(|op| {
                let (head, rest) = op.split_once('.').unwrap();
                let (l, mb) = head.split_at(1);
                let mb: usize = mb.parse().unwrap();
                let (c, amp) = rest.split_at(1);
                format!(
                    "{l}{}.{}{amp}",
                    (mb + 4) % 8,
                    1 - c.parse::<usize>().unwrap()
                )
            })
            .collect::<Vec<_>>()
            .join(" ");
        assert_eq!(ops(&s, 0), mirror);
        assert_eq!(s.kind.parameter_copies(), 2);
        // Microbatches 0..4 enter at stage 0 (chunk 0), 4..8 at stage 3 (chunk 1).
        assert_eq!(s.placement(0, 0), (0, 0));
        assert_eq!(s.placement(4, 0), (3, 1));
        assert_eq!(s.holders(1), vec![(1, 0), (2, 1)]);
    }

    #[test]
    fn transfers_wrap_compute() {
        let s = Schedule::new(ScheduleKind::OneFOneB, 3, 1, 1).unwrap();
        let text: Vec<String> = s.ops[1].iter().map(Op::to_string).collect();
        assert_eq!(
            text,
            [
                "recv-act(mb 0, chunk 0 <- stage 0)",
                "F(mb 0, chunk 0)",
                "send-act(mb 0, chunk 0 -> stage 2)",
                "recv-grad(mb 0, chunk 0 <- stage 2)",
                "B(mb 0, chunk 0)",
                "send-grad(mb 0, chunk 0 -> stage 0)",
            ]
        );
        // Interleaved: stage p-1's last chunk-0 op sends to stage 0's chunk 1.
        let s = Schedule::new(ScheduleKind::Interleaved, 2, 2, 2).unwrap();
        assert!(s.ops[1].contains(&Op::transfer(OpKind::SendActivation, 0, 0, 0)));
        assert!(s.ops[0].contains(&Op::transfer(OpKind::RecvActivation, 0, 1, 1)));
        // One stage: nothing to move.
        let s = Schedule::new(ScheduleKind::Interleaved, 1, 3, 3).unwrap();
        assert!(s.ops[0].iter().all(|o| o.kind.is_compute()));
        assert_eq!(s.placement(0, s.virtual_stage(0, 2)), (0, 2));
    }
}
