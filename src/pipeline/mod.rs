//! Pipeline parallelism: schedules as data, a validator, a cost-model simulator, the published
//! figures, an ASCII timeline and the textbook figure ([`figure`], as SVG or for any painter),
//! and training a schedule on devices. Where each concept lives:
//!
//! | file | what |
//! | --- | --- |
//! | `schedule_kind.rs` | [`ScheduleKind`], [`Placement`] and [`OpKind`]: the names of things in a schedule |
//! | `step.rs` | one compute op of a stage's order, and a stage's order: what the generators produce |
//! | `schedule.rs` | [`Op`], [`Schedule`] and its shape rules |
//! | `orders.rs` | each kind's compute order (the generators), the zero-bubble list scheduler among them |
//! | `v_block.rs` | V-Half and V-Min: the paper's building blocks, their Ws, and its squeeze |
//! | `v_rounds.rs` | ZB-V: the authors' round-based V fill, one of its plan's candidates |
//! | `v_search.rs` | V-Half and V-Min: the authors' building-block search, its schedules candidates beside the pattern |
//! | `cost_aware.rs` | [`Schedule::for_costs_within`]: ZB-V, zb-auto, V-Half and V-Min planned for the costs they will meet, zb-auto under a memory limit |
//! | `validate.rs`, `engine.rs` | the symbolic run: dependencies, transfers, deadlock, memory |
//! | `simulate.rs` | [`Costs`] (compute, link, all-to-all, overlapped or waited-for sends), [`simulate`], [`simulate_uneven`] (stages of different costs) and [`simulate_folded`] (more stages than devices) |
//! | `fold.rs` | [`Fold`]: several stages to a device, in blocks or round robin |
//! | `link.rs` | [`Link`]: presets for the link's latency and bandwidth |
//! | `textbook.rs` | the papers' bubble, activation and parameter figures, in integers |
//! | `study.rs` | [`study`]: one schedule planned, simulated, its lanes, its textbook bubble, its optimum and gap, which the CLI and the lab only present |
//! | `optimal.rs` | [`optimal`]: the shortest schedule of a [`Family`] (one chunk; two in a V; two looped) under a memory limit, by branch and bound, and how far its search reached |
//! | `ascii.rs`, `figure/` | the plain-text timeline; the textbook figure (`style`, `layout`, `build`, `svg`) |
//! | `stage_model.rs` | what a stage computes as nodes (`StageModel`): the one interface the lowering drives; the `Microbatch` every stage model trains on |
//! | `mlp.rs` | the MLP a pipeline trains, its split into virtual stages, its reference step, its stages as nodes |
//! | `moe_stack.rs` | [`MoeStack`]: residual MoE layers with each stage a gang of devices (experts and rows split over it), whose F&B pairs can hide their all-to-alls |
//! | `workload.rs` | the benchmark model and batch, one checked step on devices ([`workload::run_case`]) |
//! | `lower.rs`, `execute.rs`, `measure.rs` | a schedule as one program, run, and measured into a [`RunReport`] (and the costs a run's events measure, [`measured_share`]) |
//!
//! The schedule side (`schedule_kind`, `step`, `schedule`, `orders`, `v_block`, `v_rounds`,
//! `v_search`, `cost_aware`,
//! `validate`, `engine`, `simulate`, `textbook`, `optimal`) knows nothing of wgpu.
//!
//! A model is cut into `p` stages (one per device, or several to a device with a [`Fold`]), optionally each into `v` chunks; a batch is
//! cut into `m` microbatches. A [`Schedule`] lists, for each stage, the order in which it runs
//! forwards (F), backwards (B), weight-gradient passes (W, only when the backward is split) and
//! the sends and receives between them. While the first microbatch travels down the pipeline and
//! the last one's gradient travels back up, some stages have nothing to do: the *bubble*.
//!
//! The textbook bubbles, with per-op (per-chunk) times `F`, `B`, `W`, free transfers, and
//! "ideal" meaning `m · v · (F + B + W)` of work per stage. [`simulate`] reproduces each one
//! exactly (the tests compare integers):
//!
//! | schedule | idle time per stage | bubble / ideal | as a fraction of total |
//! | --- | --- | --- | --- |
//! | GPipe, 1F1B | `(p − 1)(F + B + W)` | `(p − 1) / m` | `(p − 1) / (m + p − 1)` |
//! | interleaved | `(p − 1)(F + B + W)` | `(p − 1) / (v · m)` | `(p − 1) / (v · m + p − 1)` |
//! | ZB-H1 (m ≥ p) | `(p − 1) · max(F, B, F + B − W)` | `(p − 1) / (3m)` if F = B = W | `(p − 1) / (3m + p − 1)` if F = B = W |
//!
//! ZB-H1's is the paper's `(p − 1)(F + B − W)` whenever `W ≤ min(F, B)`; with `F = B = W` it is
//! a third of 1F1B's. A bubble/ideal ratio `x` is `x / (1 + x)` of total time.

mod ascii;
mod cost_aware;
mod engine;
mod execute;
pub mod figure;
mod fold;
mod link;
mod lower;
mod measure;
mod mlp;
mod moe_stack;
mod optimal;
mod orders;
mod schedule;
mod schedule_kind;
mod simulate;
mod stage_model;
mod step;
mod study;
mod textbook;
mod v_block;
mod v_rounds;
mod v_search;
mod validate;
pub mod workload;

pub use crate::error::ScheduleError;
pub use ascii::{timeline, timeline_named};
pub use engine::OpAt;
pub use execute::execute;
pub use figure::{Figure, FigureRow, Theme};
pub use fold::Fold;
pub use link::Link;
pub use measure::{RunReport, measured_chunk_costs, measured_share};
pub use mlp::{Mlp, MlpConfig, StepResult};
pub use moe_stack::{MoeStack, MoeStackConfig};
pub use optimal::{Family, Optimum, beyond_the_search, optimal, optimal_within};
pub use schedule::{MAX_OPS, Op, Schedule};
pub use schedule_kind::{OpKind, Placement, ScheduleKind};
pub use simulate::{Costs, Simulation, simulate, simulate_folded, simulate_uneven};
pub use stage_model::Microbatch;
pub use study::{Found, Search, Spec, Study, Unbounded, beyond_search, gap, lanes, study};
pub use textbook::{Textbook, bubble_formula, percent, textbook};
pub use validate::{Validation, validate};
