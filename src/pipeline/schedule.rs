//! Schedules as data: for every stage, the exact list of ops it runs, transfers included, so one
//! schedule can be validated, simulated and executed on real devices without reinterpretation.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::error::ScheduleError;
use super::orders;

/// The most ops (compute and transfer, all stages) [`Schedule::new`] will build, so a typo in a
/// size is an error instead of gigabytes of ops.
pub const MAX_OPS: u64 = 10_000_000;

/// Which published pipeline schedule to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ScheduleKind {
    /// GPipe (Huang et al. 2019): every forward, then every backward.
    #[serde(rename = "gpipe")]
    GPipe,
    /// 1F1B / PipeDream-Flush (Narayanan et al. 2021): a short warm-up of forwards, then one
    /// forward and one backward in turn, so a stage holds at most `p - s` activations.
    #[serde(rename = "1f1b")]
    OneFOneB,
    /// Interleaved 1F1B (Megatron-LM, Narayanan et al. 2021): `v` model chunks per device, which
    /// divides the bubble by `v` at the price of `v` times more transfers.
    #[serde(rename = "interleaved")]
    Interleaved,
    /// ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism"): the backward split into B
    /// (input gradient, on the critical path) and W (weight gradient, deferred into the bubbles),
    /// with the same peak activation memory as 1F1B.
    #[serde(rename = "zb-h1")]
    ZbH1,
}

impl ScheduleKind {
    /// Every kind, in the order a CLI should list them.
    pub const ALL: [ScheduleKind; 4] = [
        ScheduleKind::GPipe,
        ScheduleKind::OneFOneB,
        ScheduleKind::Interleaved,
        ScheduleKind::ZbH1,
    ];

    /// The model chunks per device this kind is built with: `requested` for interleaved, else 1.
    pub fn chunks(self, requested: usize) -> usize {
        if self == ScheduleKind::Interleaved {
            requested
        } else {
            1
        }
    }

    /// The CLI name: `gpipe`, `1f1b`, `interleaved` or `zb-h1`.
    pub fn name(self) -> &'static str {
        match self {
            ScheduleKind::GPipe => "gpipe",
            ScheduleKind::OneFOneB => "1f1b",
            ScheduleKind::Interleaved => "interleaved",
            ScheduleKind::ZbH1 => "zb-h1",
        }
    }
}

impl fmt::Display for ScheduleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ScheduleKind {
    type Err = ScheduleError;

    /// Parses a [`ScheduleKind::name`], ignoring case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ScheduleKind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| ScheduleError::UnknownKind { name: s.to_owned() })
    }
}

/// What one op does. Transfers are ops too, so an executor needs no rules of its own.
///
/// Transfer semantics: a send is issued right after the op producing its tensor and never blocks
/// the stage (the copy runs beside compute); a receive is placed right before the op consuming
/// its tensor and blocks the stage until the data has arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OpKind {
    /// Forward pass of one microbatch through one model chunk.
    Forward,
    /// Backward pass producing the input gradient. Unless the schedule splits the backward
    /// ([`Schedule::split_backward`]), it also computes the weight gradient.
    Backward,
    /// Weight-gradient pass, only in split-backward schedules (ZB-H1).
    WeightGrad,
    /// Send this chunk's output activation to the stage holding the next virtual stage.
    SendActivation,
    /// Receive this chunk's input activation from the stage holding the previous virtual stage.
    RecvActivation,
    /// Send this chunk's input gradient to the stage holding the previous virtual stage.
    SendGradient,
    /// Receive this chunk's output gradient from the stage holding the next virtual stage.
    RecvGradient,
}

impl OpKind {
    /// `F`, `B` or `W` for compute ops (the letters of the timelines); `None` for transfers.
    pub fn letter(self) -> Option<char> {
        match self {
            OpKind::Forward => Some('F'),
            OpKind::Backward => Some('B'),
            OpKind::WeightGrad => Some('W'),
            _ => None,
        }
    }

    /// Whether this op runs on the compute queue (F, B or W) rather than moving data.
    pub fn is_compute(self) -> bool {
        self.letter().is_some()
    }

    /// Whether this op moves data to or from `Op::peer`.
    pub fn is_transfer(self) -> bool {
        !self.is_compute()
    }
}

/// One step of one stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Op {
    pub kind: OpKind,
    pub microbatch: usize,
    /// Model chunk on this device, `0..v`; its virtual stage is `chunk * p + stage`. For a
    /// transfer it is the local chunk that produced (send) or will consume (receive) the tensor.
    pub chunk: usize,
    /// The other stage of a transfer; `None` for compute ops.
    pub peer: Option<usize>,
}

impl Op {
    /// A compute op (F, B or W).
    pub fn compute(kind: OpKind, microbatch: usize, chunk: usize) -> Op {
        Op {
            kind,
            microbatch,
            chunk,
            peer: None,
        }
    }

    /// A transfer op with `peer`.
    pub fn transfer(kind: OpKind, microbatch: usize, chunk: usize, peer: usize) -> Op {
        Op {
            kind,
            microbatch,
            chunk,
            peer: Some(peer),
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
/// The model is cut into `p * v` virtual stages run in order `0..p*v`; virtual stage
/// `vs = chunk * p + stage` (Megatron's interleaving), so for `v > 1` activations leave stage
/// `p - 1` chunk `c` for stage 0 chunk `c + 1`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    pub kind: ScheduleKind,
    pub stages: usize,
    pub microbatches: usize,
    /// Model chunks per stage: 1 unless interleaved.
    pub chunks: usize,
    /// True when W ops exist (ZB-H1); otherwise each B also computes the weight gradient.
    pub split_backward: bool,
    /// Per stage, the ops in execution order, transfers included.
    pub ops: Vec<Vec<Op>>,
}

impl Schedule {
    /// Builds `kind` for `stages` (p) stages, `microbatches` (m) and `chunks` (v) model chunks
    /// per stage. Interleaved needs `v >= 2` and `m` a multiple of `p`; the others need `v == 1`.
    pub fn new(
        kind: ScheduleKind,
        stages: usize,
        microbatches: usize,
        chunks: usize,
    ) -> Result<Schedule, ScheduleError> {
        check_shape(kind, stages, microbatches, chunks)?;
        let split_backward = kind == ScheduleKind::ZbH1;
        let ops = (0..stages)
            .map(|stage| {
                let order = orders::compute_order(kind, stages, microbatches, chunks, stage);
                with_transfers(stages, chunks, stage, &order)
            })
            .collect();
        Ok(Schedule {
            kind,
            stages,
            microbatches,
            chunks,
            split_backward,
            ops,
        })
    }

    /// Number of virtual stages, `p * v`.
    pub fn virtual_stages(&self) -> usize {
        self.stages * self.chunks
    }

    /// The virtual stage (model slice) that `chunk` on `stage` holds.
    pub fn virtual_stage(&self, stage: usize, chunk: usize) -> usize {
        chunk * self.stages + stage
    }

    /// `(stage, chunk)` holding virtual stage `vs`.
    pub fn placement(&self, vs: usize) -> (usize, usize) {
        (vs % self.stages, vs / self.stages)
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
    if kind == ScheduleKind::Interleaved {
        if chunks < 2 {
            return Err(ScheduleError::TooFewChunks { chunks });
        }
        if !microbatches.is_multiple_of(stages) {
            return Err(ScheduleError::MicrobatchesNotMultiple {
                microbatches,
                stages,
            });
        }
    } else if chunks != 1 {
        return Err(ScheduleError::ChunksNeedInterleaved {
            kind: kind.name(),
            chunks,
        });
    }
    // At most F, B, W and four transfers per (microbatch, virtual stage).
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
/// the send of its output just after it. Nothing crosses devices when `p == 1`.
fn with_transfers(
    stages: usize,
    chunks: usize,
    stage: usize,
    order: &[(OpKind, usize, usize)],
) -> Vec<Op> {
    let last_vs = stages * chunks - 1;
    let remote = stages > 1;
    let mut ops = Vec::with_capacity(order.len() * 2);
    for &(kind, mb, chunk) in order {
        let vs = chunk * stages + stage;
        let prev = (stage + stages - 1) % stages;
        let next = (stage + 1) % stages;
        let op = Op::compute(kind, mb, chunk);
        match kind {
            OpKind::Forward => {
                if remote && vs > 0 {
                    ops.push(Op::transfer(OpKind::RecvActivation, mb, chunk, prev));
                }
                ops.push(op);
                if remote && vs < last_vs {
                    ops.push(Op::transfer(OpKind::SendActivation, mb, chunk, next));
                }
            }
            OpKind::Backward => {
                if remote && vs < last_vs {
                    ops.push(Op::transfer(OpKind::RecvGradient, mb, chunk, next));
                }
                ops.push(op);
                if remote && vs > 0 {
                    ops.push(Op::transfer(OpKind::SendGradient, mb, chunk, prev));
                }
            }
            _ => ops.push(op),
        }
    }
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
            "unknown schedule \"pipedream\": expected one of gpipe, 1f1b, interleaved, zb-h1"
        );
    }

    #[test]
    fn bad_shapes_are_rejected() {
        let err = |k, p, m, v| Schedule::new(k, p, m, v).unwrap_err().to_string();
        assert_eq!(
            err(ScheduleKind::Interleaved, 4, 6, 2),
            "interleaved 1F1B needs the microbatch count (6) to be a multiple of the stage count \
             (4), as Megatron requires"
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
            "zb-h1 puts one model chunk on each stage, got 2; only interleaved uses more"
        );
        assert_eq!(
            err(ScheduleKind::Interleaved, 2, 4, 1),
            "interleaved 1F1B needs at least 2 model chunks per stage, got 1; with one chunk use \
             1f1b"
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
        assert_eq!(s.placement(s.virtual_stage(0, 2)), (0, 2));
    }
}
