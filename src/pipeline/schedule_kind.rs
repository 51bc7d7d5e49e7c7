//! The names of things in a schedule: which published schedule to build ([`ScheduleKind`]),
//! where its virtual stages sit ([`Placement`]) and what one op does ([`OpKind`]). Below both the
//! schedules as data ([`super::schedule`]) and the per-stage orders ([`super::orders`]) that
//! build them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::ScheduleError;

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
    /// Eager 1F1B (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory", Fig. 18):
    /// 1F1B with a warm-up of `2(p - s - 1)` forwards, so each activation is sent a whole F/B
    /// pair before it is needed and its transfer overlaps compute; stage `s` holds up to
    /// `2(p - s) - 1` activations. The overlapped variant of 1F1B.
    #[serde(rename = "eager-1f1b")]
    Eager1F1B,
    /// 1F1B with overlap (PP-Schedule-Visualization's `1f1b_overlap`, the steady state MoE
    /// models use to hide their all-to-alls): a warm-up of `2(p - s - 1) + 1` forwards, then
    /// each forward overlapped with the backward of an earlier microbatch (an F&B pair, costed
    /// as DualPipe's: see [`super::Costs::all_to_all_ns`]), then the remaining backwards. Stage
    /// `s` holds up to `2(p - s)` activations.
    #[serde(rename = "1f1b-overlap")]
    OneFOneBOverlap,
    /// Interleaved 1F1B (Megatron-LM, Narayanan et al. 2021): `v` model chunks per device, which
    /// divides the bubble by `v` at the price of `v` times more transfers.
    #[serde(rename = "interleaved")]
    Interleaved,
    /// Interleaved 1F1B with overlap (PP-Schedule-Visualization's `1f1b_interleave_overlap`):
    /// interleaved 1F1B's order with one more warm-up forward, its steady F/B pairs run
    /// overlapped (F&B).
    #[serde(rename = "interleaved-overlap")]
    InterleavedOverlap,
    /// Looped BFS (Lamy-Poirier 2023, "Breadth-First Pipeline Parallelism"): the interleaved
    /// placement, but every microbatch through chunk 0 before any enters chunk 1 (GPipe per
    /// chunk), backwards in the reverse chunk order. Holds every microbatch's activations.
    #[serde(rename = "bfs")]
    LoopedBfs,
    /// ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism"): the backward split into B
    /// (input gradient, on the critical path) and W (weight gradient, deferred into the bubbles),
    /// with the same peak activation memory as 1F1B.
    #[serde(rename = "zb-h1")]
    ZbH1,
    /// The automatic zero-bubble scheduler on one chunk a stage (Qi et al. 2023, §3): built from
    /// the costs of F, B, W and a hand-off, under a memory limit of `K` activations a stage
    /// (default `p`, ZB-H1's and 1F1B's), by the list scheduler ZB-V is built with, among its
    /// choices and 1F1B's order, whichever the simulation finds shortest
    /// ([`super::Schedule::for_costs_within`]). At F = B = W with free hand-offs and `K = p` it is
    /// ZB-H1; at larger `K`, ZB-2p-like.
    #[serde(rename = "zb-auto")]
    ZbAuto,
    /// ZB-V (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory"): two model chunks
    /// per stage in a V (stage `s` holds virtual stages `s` and `2p - 1 - s`), B and W split,
    /// ordered greedily at `F = B = W` under 1F1B's activation memory.
    #[serde(rename = "zb-v")]
    ZbV,
    /// V-Half (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory"): the V placement
    /// from a repeating building block of a stage's F, F, B, B offsets that holds about half of
    /// 1F1B's activations (6 half-stage chunks a stage at p = 4, where 1F1B holds 8), each W in
    /// the first free slot after its B, warm-up and cool-down squeezed (`v_block.rs`). Planned
    /// for costs ([`Schedule::for_costs`](super::Schedule::for_costs)), the shortest of that
    /// pattern and the authors' building-block search within its peak (`v_search.rs`).
    #[serde(rename = "v-half")]
    VHalf,
    /// V-Min (the same paper): the building block that holds about a third of 1F1B's
    /// activations (4 half-stage chunks a stage at p = 4), for a larger bubble; planned for
    /// costs, searched as V-Half is.
    #[serde(rename = "v-min")]
    VMin,
    /// DualPipe (DeepSeek-V3, 2024): bidirectional. Every stage holds two copies of the model's
    /// slices (stage `s` holds slice `s` for microbatches entering at stage 0 and slice
    /// `p - 1 - s` for those entering at stage `p - 1`), and runs a forward of one direction
    /// overlapped with a backward of the other (F&B). Needs an even `p` and an even `m >= 2p`.
    #[serde(rename = "dualpipe")]
    DualPipe,
    /// DualPipeV (DeepSeek, after Sea AI Lab's "cut-in-half"): DualPipe's order on a V
    /// placement with one parameter copy; needs `m >= 2p`.
    #[serde(rename = "dualpipev")]
    DualPipeV,
}

/// Where a schedule puts the model's virtual stages (slices) on the pipeline's stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Placement {
    /// Megatron's loop: virtual stage `c · p + s` is chunk `c` of stage `s` (`v` chunks).
    Looped,
    /// A V: chunk 0 of stage `s` is virtual stage `s`, chunk 1 is `2p - 1 - s`, so the turn at
    /// stage `p - 1` needs no transfer.
    V,
    /// Two directions over `p` virtual stages: the first half of the microbatches enters at
    /// stage 0 and uses chunk 0 (virtual stage `s` on stage `s`), the second half enters at stage
    /// `p - 1` and uses chunk 1 (virtual stage `p - 1 - s` on stage `s`), a second copy of the
    /// parameters.
    Bidirectional,
}

impl ScheduleKind {
    /// Every kind, in the order a CLI lists them.
    pub const ALL: [ScheduleKind; 14] = [
        ScheduleKind::GPipe,
        ScheduleKind::OneFOneB,
        ScheduleKind::Eager1F1B,
        ScheduleKind::Interleaved,
        ScheduleKind::LoopedBfs,
        ScheduleKind::ZbH1,
        ScheduleKind::ZbAuto,
        ScheduleKind::ZbV,
        ScheduleKind::VHalf,
        ScheduleKind::VMin,
        ScheduleKind::DualPipe,
        ScheduleKind::DualPipeV,
        // Last, so that the lab's saved comparison sets (bits in this order) keep their meaning.
        ScheduleKind::OneFOneBOverlap,
        ScheduleKind::InterleavedOverlap,
    ];

    /// The model chunks per device this kind is built with: `requested` for interleaved and
    /// looped BFS, 2 for the V and bidirectional schedules, else 1.
    pub fn chunks(self, requested: usize) -> usize {
        match self.placement() {
            Placement::Looped if self.takes_chunks() => requested,
            Placement::Looped => 1,
            Placement::V | Placement::Bidirectional => 2,
        }
    }

    /// Chunk ops of each kind one microbatch runs on each stage when built with `chunks`
    /// ([`super::Schedule::passes`]): what [`super::Costs::stage_model`] splits a stage's share into.
    pub fn passes(self, chunks: usize) -> usize {
        match self.placement() {
            Placement::Looped => self.chunks(chunks),
            Placement::V => 2,
            Placement::Bidirectional => 1,
        }
    }

    /// Whether the user chooses the chunk count (`--chunks`): interleaved (with overlap or not)
    /// and looped BFS.
    pub fn takes_chunks(self) -> bool {
        matches!(
            self,
            ScheduleKind::Interleaved | ScheduleKind::InterleavedOverlap | ScheduleKind::LoopedBfs
        )
    }

    /// Whether the steady state runs each forward overlapped with a backward (F&B pairs).
    pub fn overlaps_pairs(self) -> bool {
        matches!(
            self,
            ScheduleKind::OneFOneBOverlap
                | ScheduleKind::InterleavedOverlap
                | ScheduleKind::DualPipe
                | ScheduleKind::DualPipeV
        )
    }

    /// Where this kind puts the model's slices.
    pub fn placement(self) -> Placement {
        match self {
            ScheduleKind::ZbV
            | ScheduleKind::VHalf
            | ScheduleKind::VMin
            | ScheduleKind::DualPipeV => Placement::V,
            ScheduleKind::DualPipe => Placement::Bidirectional,
            _ => Placement::Looped,
        }
    }

    /// Whether the backward is split into B (input gradient) and W (weight gradient) ops.
    pub fn splits_backward(self) -> bool {
        matches!(
            self,
            ScheduleKind::ZbH1
                | ScheduleKind::ZbAuto
                | ScheduleKind::ZbV
                | ScheduleKind::VHalf
                | ScheduleKind::VMin
                | ScheduleKind::DualPipe
                | ScheduleKind::DualPipeV
        )
    }

    /// Copies of the parameters the pipeline holds: 2 for DualPipe, else 1.
    pub fn parameter_copies(self) -> usize {
        if self == ScheduleKind::DualPipe { 2 } else { 1 }
    }

    /// The CLI name: `gpipe`, `1f1b`, `eager-1f1b`, `1f1b-overlap`, `interleaved`,
    /// `interleaved-overlap`, `bfs`, `zb-h1`, `zb-auto`, `zb-v`, `v-half`, `v-min`, `dualpipe` or
    /// `dualpipev`.
    pub fn name(self) -> &'static str {
        match self {
            ScheduleKind::GPipe => "gpipe",
            ScheduleKind::OneFOneB => "1f1b",
            ScheduleKind::Eager1F1B => "eager-1f1b",
            ScheduleKind::OneFOneBOverlap => "1f1b-overlap",
            ScheduleKind::Interleaved => "interleaved",
            ScheduleKind::InterleavedOverlap => "interleaved-overlap",
            ScheduleKind::LoopedBfs => "bfs",
            ScheduleKind::ZbH1 => "zb-h1",
            ScheduleKind::ZbAuto => "zb-auto",
            ScheduleKind::ZbV => "zb-v",
            ScheduleKind::VHalf => "v-half",
            ScheduleKind::VMin => "v-min",
            ScheduleKind::DualPipe => "dualpipe",
            ScheduleKind::DualPipeV => "dualpipev",
        }
    }

    /// Every kind's name, comma separated, for messages.
    pub fn names() -> String {
        ScheduleKind::ALL.map(ScheduleKind::name).join(", ")
    }

    /// The papers' name, for titles: "GPipe", "1F1B", "Eager 1F1B", "1F1B overlap",
    /// "Interleaved 1F1B", "Interleaved overlap", "Looped BFS", "ZB-H1", "ZB auto", "ZB-V", "V-Half", "V-Min", "DualPipe", "DualPipeV".
    pub fn title(self) -> &'static str {
        match self {
            ScheduleKind::GPipe => "GPipe",
            ScheduleKind::OneFOneB => "1F1B",
            ScheduleKind::Eager1F1B => "Eager 1F1B",
            ScheduleKind::OneFOneBOverlap => "1F1B overlap",
            ScheduleKind::Interleaved => "Interleaved 1F1B",
            ScheduleKind::InterleavedOverlap => "Interleaved overlap",
            ScheduleKind::LoopedBfs => "Looped BFS",
            ScheduleKind::ZbH1 => "ZB-H1",
            ScheduleKind::ZbAuto => "ZB auto",
            ScheduleKind::ZbV => "ZB-V",
            ScheduleKind::VHalf => "V-Half",
            ScheduleKind::VMin => "V-Min",
            ScheduleKind::DualPipe => "DualPipe",
            ScheduleKind::DualPipeV => "DualPipeV",
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
            .ok_or_else(|| ScheduleError::UnknownKind {
                name: s.to_owned(),
                expected: ScheduleKind::names(),
            })
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
    /// ([`super::Schedule::split_backward`]), it also computes the weight gradient.
    Backward,
    /// Weight-gradient pass, only in split-backward schedules (ZB-H1, ZB-V, DualPipe(V)).
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

    /// The trace's [`crate::trace::PipelineOp`] of a compute op; `None` for transfers.
    pub fn pipeline_op(self) -> Option<crate::trace::PipelineOp> {
        use crate::trace::PipelineOp;
        match self {
            OpKind::Forward => Some(PipelineOp::Forward),
            OpKind::Backward => Some(PipelineOp::Backward),
            OpKind::WeightGrad => Some(PipelineOp::WeightGrad),
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
