//! The textbook pipeline figure, for slides and for the viewer: one row per schedule, one lane per
//! stage (per device, its stages' blocks shaded apart, when stages fold onto fewer devices), F/B/W blocks labelled with their microbatch (in a smaller font on a narrow block), hatched bubbles, makespan and bubble beside
//! each row, peak activation memory per stage, a shared time axis and a legend.
//!
//! The figure is computed once as a renderer-independent [`Layout`] (rectangles, text and lines
//! in pixels), which [`svg`] serializes and the viewer paints with egui, so both look the same.
//! Nothing here knows about egui or wgpu.
//!
//! Conventions every painter follows:
//! - shapes are painted in order, later ones on top, over a full-size rectangle of
//!   [`Layout::background`];
//! - a [`Shape::Rect`]'s stroke is centred on its edge; its hatch is the segments that
//!   [`hatch_lines`] returns for it, [`Layout::hatch_width`] wide, painted after the fill and
//!   before the stroke;
//! - a [`Shape::Text`]'s `y` is the vertical middle of its capitals and digits (SVG puts the
//!   baseline at `y + 0.35 · size`), its `x` the start, middle or end per its [`Anchor`].
//!
//! Where each part lives: `style.rs` (themes, the palette), `layout.rs` (shapes, text metrics),
//! `build.rs` (laying a figure out), `svg.rs` (SVG output); this file holds the figure's model
//! (rows, blocks, gaps, units).
//!
//! Microbatches are labelled from 1, as in the GPipe, Megatron and Zero Bubble figures (the
//! schedule and the traces count from 0).

use crate::trace::PipelineOp;

use super::fold::Fold;
use super::schedule::Schedule;
use super::schedule_kind::{OpKind, ScheduleKind};
use super::simulate::{Costs, Simulation, simulate_folded};
use crate::error::ScheduleError;

mod build;
mod layout;
mod style;
mod svg;

pub use layout::{Anchor, Layout, PlacedBlock, Shape, hatch_lines};
pub use style::{BACKWARD, FORWARD, Rgba, Theme, WEIGHT_GRAD, block_color};
pub use svg::svg;

use build::Builder;

/// One compute op of a row as drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// The lane: the stage, or its device when the row is folded ([`FigureRow::lanes`]).
    pub stage: usize,
    /// `Forward`, `Backward` or `WeightGrad`.
    pub kind: OpKind,
    /// Counting from 0, as in the schedule; drawn as `microbatch + 1`.
    pub microbatch: Option<usize>,
    /// The model chunk among the lane's [`FigureRow::chunks_per_lane`].
    pub chunk: usize,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// A stretch of a lane with no compute, within `0..makespan`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    /// The lane, as [`Block::stage`].
    pub stage: usize,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// One schedule of a figure: its lanes, blocks and numbers.
#[derive(Debug, Clone)]
pub struct FigureRow {
    /// Shown above the lanes, e.g. "1F1B".
    pub title: String,
    pub schedule: Schedule,
    /// Where the stages ran: one lane per stage, or per device when folded.
    pub fold: Fold,
    pub sim: Simulation,
    /// Per lane, in chunk activations, as [`super::validate`] reports them per stage (a chunk
    /// op holds `1/passes` of a stage's activations for one microbatch; the figure, the lab and
    /// the CLI show [`FigureRow::peak_microbatches`]).
    pub peak_activations: Vec<usize>,
}

impl FigureRow {
    /// Simulates (and so validates) `schedule` under `costs` (per chunk op), stage `i` at
    /// `stage_scale[i]` times them (none: even stages), on the devices `fold` gives
    /// ([`simulate_folded`]).
    pub fn new(
        title: impl Into<String>,
        schedule: Schedule,
        costs: &Costs,
        stage_scale: &[f64],
        fold: Fold,
    ) -> Result<FigureRow, ScheduleError> {
        let sim = simulate_folded(&schedule, costs, stage_scale, fold)?;
        Ok(FigureRow {
            title: title.into(),
            schedule,
            fold,
            peak_activations: sim.peak_activations.clone(),
            sim,
        })
    }

    /// Whether some lane holds more than one stage.
    pub fn folded(&self) -> bool {
        self.sim.devices < self.schedule.stages
    }

    /// "stage 3", or "device 1" when folded.
    pub fn lane_name(&self, lane: usize) -> String {
        if self.folded() {
            format!("device {lane}")
        } else {
            format!("stage {lane}")
        }
    }

    /// The model chunks one lane holds at most: the schedule's chunks times its stages per
    /// device.
    pub fn chunks_per_lane(&self) -> usize {
        let lanes = self.lanes().max(1);
        self.schedule.chunks.max(1) * self.schedule.stages.div_ceil(lanes).max(1)
    }

    /// The compute ops, by stage then start time: every compute-lane kernel event of the
    /// simulation whose name starts with `F`, `B` or `W` (chunk from a `.c<chunk>` suffix).
    pub fn blocks(&self) -> Vec<Block> {
        let mut out: Vec<Block> = self
            .sim
            .events
            .iter()
            .filter(|e| e.device < self.lanes())
            .filter_map(|e| {
                // The one rule for which events are pipeline ops (the bubble's too).
                let kind = match PipelineOp::of(e)? {
                    PipelineOp::Forward => OpKind::Forward,
                    PipelineOp::Backward => OpKind::Backward,
                    PipelineOp::WeightGrad => OpKind::WeightGrad,
                };
                let chunk = e
                    .name
                    .split_once(".c")
                    .and_then(|(_, c)| c.parse().ok())
                    .unwrap_or(0);
                Some(Block {
                    stage: e.device,
                    kind,
                    microbatch: e.microbatch.map(|m| m as usize),
                    chunk,
                    start_ns: e.start_ns,
                    end_ns: e.end_ns.max(e.start_ns),
                })
            })
            .collect();
        out.sort_by_key(|b| (b.stage, b.start_ns, b.end_ns));
        out
    }

    /// The idle stretches of every lane within `0..makespan`, by stage then time.
    pub fn gaps(&self) -> Vec<Gap> {
        let blocks = self.blocks();
        let mut out = Vec::new();
        for stage in 0..self.lanes() {
            let mut t = 0;
            for b in blocks.iter().filter(|b| b.stage == stage) {
                if b.start_ns > t {
                    out.push(Gap {
                        stage,
                        start_ns: t,
                        end_ns: b.start_ns,
                    });
                }
                t = t.max(b.end_ns);
            }
            if self.sim.makespan_ns > t {
                out.push(Gap {
                    stage,
                    start_ns: t,
                    end_ns: self.sim.makespan_ns,
                });
            }
        }
        out
    }

    /// Peak activations per stage in the one unit every view shows: microbatches' worth of one
    /// stage's activations (chunk activations over [`Schedule::passes`]; DualPipe's chunks are
    /// whole stages, interleaved's and the V's are fractions).
    pub fn peak_microbatches(&self) -> Vec<f64> {
        let passes = self.schedule.passes().max(1) as f64;
        self.peak_activations
            .iter()
            .map(|&a| a as f64 / passes)
            .collect()
    }

    /// [`FigureRow::peak_microbatches`] as text: "4, 3, 2, 1" or "5.5, 4.5, 3.5, 2.5".
    pub fn peak_text(&self) -> String {
        self.peak_microbatches()
            .into_iter()
            .map(|x| trim_number(x, 2))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Lanes drawn: one per stage, or per device when folded.
    pub fn lanes(&self) -> usize {
        self.sim.devices
    }

    /// Mean idle time per lane.
    pub(super) fn bubble_ns(&self) -> u64 {
        let idle = self.sim.idle_ns();
        if idle.is_empty() {
            return 0;
        }
        idle.iter().sum::<u64>() / idle.len() as u64
    }
}

/// A stack of schedules on one time axis.
#[derive(Debug, Clone)]
pub struct Figure {
    /// A line above everything (the shape and costs); empty for none.
    pub caption: String,
    pub rows: Vec<FigureRow>,
    /// The schedules asked for that cannot take the shape, each with why (not drawn).
    pub left_out: Vec<(ScheduleKind, ScheduleError)>,
}

/// The title of `kind` in a figure: the papers' names.
pub fn schedule_title(kind: ScheduleKind, chunks: usize) -> String {
    if kind.takes_chunks() {
        format!("{}, v = {chunks}", kind.title())
    } else {
        kind.title().into()
    }
}

impl Figure {
    /// One schedule, `costs` per op of each chunk (for interleaved, pass
    /// [`Costs::stage_model`] to split a stage's model share). `chunks` is used by interleaved
    /// only (see [`ScheduleKind::chunks`]); `memory` by `zb-auto` only (its limit, in
    /// activations a stage: [`Schedule::for_costs_within`]).
    #[allow(clippy::too_many_arguments)]
    pub fn single(
        kind: ScheduleKind,
        stages: usize,
        microbatches: usize,
        chunks: usize,
        costs: &Costs,
        memory: Option<usize>,
        stage_scale: &[f64],
        fold: Fold,
    ) -> Result<Figure, ScheduleError> {
        let v = kind.chunks(chunks);
        let schedule = Schedule::for_costs_within(kind, stages, microbatches, v, costs, memory)?;
        Ok(Figure {
            caption: shape_caption(stages, microbatches, stage_scale, fold),
            rows: vec![FigureRow::new(
                schedule_title(kind, v),
                schedule,
                costs,
                stage_scale,
                fold,
            )?],
            left_out: Vec::new(),
        })
    }

    /// `kinds` at the same `p` and `m` and the same model, stacked on one time axis: `share`'s
    /// F, B, W (and all-to-all) are the costs of one microbatch through a stage's whole model
    /// share, its link the transfers'. Each schedule runs its chunk ops at `1/passes` of them
    /// ([`Costs::per_chunk`]: interleaved and looped BFS `1/v`, the V schedules `1/2`); the
    /// split-backward ones run B and W as separate ops, the others fold W into B. A kind that
    /// cannot take the shape is left out ([`Figure::left_out`]); if none can, the first one's
    /// error is returned. `memory` is `zb-auto`'s limit, as in [`Figure::single`].
    #[allow(clippy::too_many_arguments)]
    pub fn compare(
        kinds: &[ScheduleKind],
        stages: usize,
        microbatches: usize,
        chunks: usize,
        share: &Costs,
        memory: Option<usize>,
        stage_scale: &[f64],
        fold: Fold,
    ) -> Result<Figure, ScheduleError> {
        fold.devices_of(stages)?;
        let (mut rows, mut left_out) = (Vec::new(), Vec::new());
        for &kind in kinds {
            let v = kind.chunks(chunks);
            let costs = share.per_chunk(kind.passes(chunks));
            let row = Schedule::for_costs_within(kind, stages, microbatches, v, &costs, memory)
                .and_then(|schedule| {
                    FigureRow::new(schedule_title(kind, v), schedule, &costs, stage_scale, fold)
                });
            match row {
                Ok(row) => rows.push(row),
                Err(e) => left_out.push((kind, e)),
            }
        }
        if rows.is_empty() {
            if let Some((_, e)) = left_out.into_iter().next() {
                return Err(e);
            }
            return Err(ScheduleError::Zero { what: "schedule" });
        }
        let (forward_ns, backward_ns, weight_grad_ns) =
            (share.forward_ns, share.backward_ns, share.weight_grad_ns);
        // The rows' unit (picked from the longest makespan), so the caption reads like them.
        let longest = rows.iter().map(|r| r.sim.makespan_ns).max().unwrap_or(0);
        let unit = Unit::for_span(longest);
        Ok(Figure {
            caption: format!(
                "{} · one microbatch through a stage: F {}, B {}, W {}",
                shape_caption(stages, microbatches, stage_scale, fold),
                unit.format(forward_ns),
                unit.format(backward_ns),
                unit.format(weight_grad_ns),
            ),
            rows,
            left_out,
        })
    }

    /// The figure `width` pixels wide (wider if that is too narrow for its columns), in `theme`.
    /// With `progress_ns`, ops and idle cells that start after it are dimmed and a cursor marks
    /// it, for animating the schedule; `None` shows everything.
    pub fn layout(&self, width: f32, theme: Theme, progress_ns: Option<u64>) -> Layout {
        Builder::new(self, width, theme, progress_ns).build()
    }
}

pub(super) fn shape_caption(
    stages: usize,
    microbatches: usize,
    stage_scale: &[f64],
    fold: Fold,
) -> String {
    let s = |n: usize| if n == 1 { "" } else { "s" };
    let mut caption = format!(
        "p = {stages} stage{} · m = {microbatches} microbatch{}",
        s(stages),
        if microbatches == 1 { "" } else { "es" }
    );
    if fold.shares(stages) {
        let d = fold.device_count(stages);
        caption += &format!(" · on {d} device{} ({})", s(d), fold.placement_name());
    }
    if !stage_scale.is_empty() {
        let factors: Vec<String> = stage_scale.iter().map(|k| format!("{k}×")).collect();
        caption += &format!(" · stage costs {}", factors.join(", "));
    }
    caption
}

/// The time unit of a figure, picked so its numbers stay short.
#[derive(Debug, Clone, Copy)]
pub(super) struct Unit {
    pub(super) ns: u64,
    pub(super) name: &'static str,
}

impl Unit {
    pub(super) fn for_span(span_ns: u64) -> Unit {
        let (ns, name) = match span_ns {
            0..10_000 => (1, "ns"),
            10_000..10_000_000 => (1_000, "µs"),
            10_000_000..10_000_000_000 => (1_000_000, "ms"),
            _ => (1_000_000_000, "s"),
        };
        Unit { ns, name }
    }

    /// `ns` in this unit, without trailing zeros: `3300 µs`, `2.5 ms`.
    pub(super) fn format(self, ns: u64) -> String {
        format!("{} {}", self.number(ns), self.name)
    }

    /// Three or four significant digits at most: `2900`, `33.3`, `2.85`.
    pub(super) fn number(self, ns: u64) -> String {
        let v = ns as f64 / self.ns as f64;
        let decimals = if v >= 100.0 {
            0
        } else if v >= 10.0 {
            1
        } else {
            2
        };
        trim_number(v, decimals)
    }
}

/// `value` with at most `decimals` decimals and no trailing zeros.
pub(super) fn trim_number(value: f64, decimals: usize) -> String {
    let s = format!("{value:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    }
}

#[cfg(test)]
mod tests;
