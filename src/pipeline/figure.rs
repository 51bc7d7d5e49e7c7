//! The textbook pipeline figure, for slides and for the viewer: one row per schedule, one lane per
//! stage, F/B/W blocks labelled with their microbatch, hatched bubbles, makespan and bubble beside
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
//! Microbatches are labelled from 1, as in the GPipe, Megatron and Zero Bubble figures (the
//! schedule and the traces count from 0).

use std::fmt::Write as _;

use crate::trace::PipelineOp;

use super::error::ScheduleError;
use super::schedule::{OpKind, Schedule, ScheduleKind};
use super::simulate::{Costs, Simulation, simulate};
use super::validate::validate;

/// Which look: the viewer's dark one, or a light one for slides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Theme {
    /// Dark background, as egui's dark theme; compact type.
    Screen,
    /// Light background, type of at least 18 px, thick blocks: for a projector.
    #[default]
    Projector,
}

/// A colour, sRGB with straight (not premultiplied) alpha.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rgba(pub [u8; 4]);

impl Rgba {
    /// An opaque colour.
    pub const fn rgb(r: u8, g: u8, b: u8) -> Rgba {
        Rgba([r, g, b, 255])
    }

    /// `self` moved a fraction `t` (0..=1) of the way to `other`, alpha included.
    pub fn mix(self, other: Rgba, t: f32) -> Rgba {
        let t = t.clamp(0.0, 1.0);
        let mut out = [0u8; 4];
        for (o, (a, b)) in out.iter_mut().zip(self.0.iter().zip(other.0)) {
            *o = (f32::from(*a) + (f32::from(b) - f32::from(*a)) * t).round() as u8;
        }
        Rgba(out)
    }

    /// `#rrggbb`, without alpha.
    pub fn hex(self) -> String {
        let [r, g, b, _] = self.0;
        format!("#{r:02x}{g:02x}{b:02x}")
    }

    /// Alpha as 0..=1.
    pub fn opacity(self) -> f32 {
        f32::from(self.0[3]) / 255.0
    }

    /// Relative brightness 0..=255 (Rec. 709 weights on the sRGB values).
    fn luma(self) -> f32 {
        let [r, g, b, _] = self.0;
        0.2126 * f32::from(r) + 0.7152 * f32::from(g) + 0.0722 * f32::from(b)
    }
}

/// Forward blocks (the viewer's timeline bars take F, B and W from here too).
pub const FORWARD: Rgba = Rgba::rgb(66, 133, 244);
/// Backward (input-gradient) blocks.
pub const BACKWARD: Rgba = Rgba::rgb(52, 168, 83);
/// Weight-gradient blocks.
pub const WEIGHT_GRAD: Rgba = Rgba::rgb(251, 140, 0);
/// The peak-activation bars.
const MEMORY: Rgba = Rgba::rgb(142, 99, 206);
/// The progress cursor.
const CURSOR: Rgba = Rgba::rgb(229, 57, 53);

/// The colour of a compute block of `kind` on `chunk` of `chunks`: chunk 0 in the kind's
/// colour, later chunks darker (up to 45 % towards black for the last).
pub fn block_color(kind: OpKind, chunk: usize, chunks: usize) -> Rgba {
    let base = match kind {
        OpKind::Backward => BACKWARD,
        OpKind::WeightGrad => WEIGHT_GRAD,
        _ => FORWARD,
    };
    if chunks <= 1 {
        return base;
    }
    let t = 0.45 * chunk.min(chunks - 1) as f32 / (chunks - 1) as f32;
    base.mix(Rgba::rgb(0, 0, 0), t)
}

/// How a text's `x` relates to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Anchor {
    Start,
    Middle,
    End,
}

/// One thing to paint, in pixels from the top left.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    Rect {
        x: f32,
        y: f32,
        w: f32,
        h: f32,
        fill: Rgba,
        /// Width and colour, centred on the edge.
        stroke: Option<(f32, Rgba)>,
        /// Diagonal hatching in this colour: the segments of [`hatch_lines`] (bubble cells).
        hatch: Option<Rgba>,
    },
    Text {
        x: f32,
        /// The vertical middle of the text's capitals and digits.
        y: f32,
        text: String,
        /// Font size in pixels.
        size: f32,
        color: Rgba,
        anchor: Anchor,
        bold: bool,
    },
    Line {
        x0: f32,
        y0: f32,
        x1: f32,
        y1: f32,
        width: f32,
        color: Rgba,
    },
}

/// Where one compute op was drawn, for hover tooltips and tests.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlacedBlock {
    /// Index into [`Figure::rows`].
    pub row: usize,
    pub block: Block,
    pub x: f32,
    pub y: f32,
    pub w: f32,
    pub h: f32,
    /// Whether the microbatch number fit inside and was drawn.
    pub labelled: bool,
}

/// A figure laid out in pixels; see the module notes for how to paint it.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    pub width: f32,
    pub height: f32,
    pub background: Rgba,
    /// Distance between hatch lines, measured along the axes.
    pub hatch_spacing: f32,
    /// Line width of hatch lines.
    pub hatch_width: f32,
    pub shapes: Vec<Shape>,
    /// Every compute block drawn, in the order of [`FigureRow::blocks`] row after row.
    pub blocks: Vec<PlacedBlock>,
}

/// The hatch segments `[x0, y0, x1, y1]` of a `w × h` rectangle at `(x, y)`: lines at 45° from
/// lower left to upper right, on the grid `x + y = k · spacing` (so adjacent cells' hatching
/// lines up), clipped to the rectangle.
pub fn hatch_lines(x: f32, y: f32, w: f32, h: f32, spacing: f32) -> Vec<[f32; 4]> {
    let mut out = Vec::new();
    if w <= 0.0 || h <= 0.0 || spacing <= 0.0 || !spacing.is_finite() {
        return out;
    }
    let (x1, y1) = (x + w, y + h);
    let mut k = ((x + y) / spacing).floor() + 1.0;
    loop {
        let c = k * spacing;
        if c >= x1 + y1 {
            break;
        }
        // On x + y = c: from the lower-left end to the upper-right end inside the rectangle.
        let ax = x.max(c - y1);
        let bx = x1.min(c - y);
        if bx > ax {
            out.push([ax, c - ax, bx, c - bx]);
        }
        k += 1.0;
    }
    out
}

/// One compute op of a row as drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    pub stage: usize,
    /// `Forward`, `Backward` or `WeightGrad`.
    pub kind: OpKind,
    /// Counting from 0, as in the schedule; drawn as `microbatch + 1`.
    pub microbatch: Option<usize>,
    pub chunk: usize,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// A stretch of a stage's lane with no compute, within `0..makespan`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
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
    pub sim: Simulation,
    /// Per stage, in chunk activations, as [`super::validate`] reports them (a chunk op holds
    /// `1/passes` of a stage's activations for one microbatch; the figure, the lab and the CLI
    /// show [`FigureRow::peak_microbatches`]).
    pub peak_activations: Vec<usize>,
}

impl FigureRow {
    /// Validates and simulates `schedule` under `costs` (per chunk op).
    pub fn new(
        title: impl Into<String>,
        schedule: Schedule,
        costs: &Costs,
    ) -> Result<FigureRow, ScheduleError> {
        let peak_activations = validate(&schedule)?.peak_activations;
        let sim = simulate(&schedule, costs)?;
        Ok(FigureRow {
            title: title.into(),
            schedule,
            sim,
            peak_activations,
        })
    }

    /// The compute ops, by stage then start time: every compute-lane kernel event of the
    /// simulation whose name starts with `F`, `B` or `W` (chunk from a `.c<chunk>` suffix).
    pub fn blocks(&self) -> Vec<Block> {
        let mut out: Vec<Block> = self
            .sim
            .events
            .iter()
            .filter(|e| e.device < self.stages())
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
        for stage in 0..self.stages() {
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

    fn stages(&self) -> usize {
        self.schedule.stages.max(self.sim.stages)
    }

    /// Mean idle time per stage.
    fn bubble_ns(&self) -> u64 {
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
    /// only (see [`ScheduleKind::chunks`]).
    pub fn single(
        kind: ScheduleKind,
        stages: usize,
        microbatches: usize,
        chunks: usize,
        costs: &Costs,
    ) -> Result<Figure, ScheduleError> {
        let v = kind.chunks(chunks);
        let schedule = Schedule::new(kind, stages, microbatches, v)?;
        Ok(Figure {
            caption: shape_caption(stages, microbatches),
            rows: vec![FigureRow::new(schedule_title(kind, v), schedule, costs)?],
            left_out: Vec::new(),
        })
    }

    /// `kinds` at the same `p` and `m` and the same model, stacked on one time axis: `share`'s
    /// F, B, W (and all-to-all) are the costs of one microbatch through a stage's whole model
    /// share, its link the transfers'. Each schedule runs its chunk ops at `1/passes` of them
    /// ([`Costs::per_chunk`]: interleaved and looped BFS `1/v`, the V schedules `1/2`); the
    /// split-backward ones run B and W as separate ops, the others fold W into B. A kind that
    /// cannot take the shape is left out ([`Figure::left_out`]); if none can, the first one's
    /// error is returned.
    pub fn compare(
        kinds: &[ScheduleKind],
        stages: usize,
        microbatches: usize,
        chunks: usize,
        share: &Costs,
    ) -> Result<Figure, ScheduleError> {
        let (mut rows, mut left_out) = (Vec::new(), Vec::new());
        for &kind in kinds {
            let v = kind.chunks(chunks);
            let row = Schedule::new(kind, stages, microbatches, v).and_then(|schedule| {
                let costs = share.per_chunk(kind.passes(chunks));
                FigureRow::new(schedule_title(kind, v), schedule, &costs)
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
                shape_caption(stages, microbatches),
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

fn shape_caption(stages: usize, microbatches: usize) -> String {
    let s = |n: usize| if n == 1 { "" } else { "s" };
    format!(
        "p = {stages} stage{} · m = {microbatches} microbatch{}",
        s(stages),
        if microbatches == 1 { "" } else { "es" }
    )
}

/// The time unit of a figure, picked so its numbers stay short.
#[derive(Debug, Clone, Copy)]
struct Unit {
    ns: u64,
    name: &'static str,
}

impl Unit {
    fn for_span(span_ns: u64) -> Unit {
        let (ns, name) = match span_ns {
            0..10_000 => (1, "ns"),
            10_000..10_000_000 => (1_000, "µs"),
            10_000_000..10_000_000_000 => (1_000_000, "ms"),
            _ => (1_000_000_000, "s"),
        };
        Unit { ns, name }
    }

    /// `ns` in this unit, without trailing zeros: `3300 µs`, `2.5 ms`.
    fn format(self, ns: u64) -> String {
        format!("{} {}", self.number(ns), self.name)
    }

    /// Three or four significant digits at most: `2900`, `33.3`, `2.85`.
    fn number(self, ns: u64) -> String {
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
fn trim_number(value: f64, decimals: usize) -> String {
    let s = format!("{value:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    }
}

/// An estimate of the width of `text` at `size` px in the SVG's first fonts (Arial's metrics),
/// a little generous so that what is measured to fit does fit in the fonts after them too.
fn text_width(text: &str, size: f32, bold: bool) -> f32 {
    let ems: f32 = text
        .chars()
        .map(|c| match c {
            ' ' | '.' | ',' | ':' | ';' | '\'' | '|' | '!' | 'i' | 'j' | 'l' | '·' => 0.28,
            'f' | 't' | 'r' | 'I' | '(' | ')' | '[' | ']' | '-' => 0.34,
            '0'..='9' => 0.556,
            'm' | '%' => 0.86,
            'w' => 0.73,
            'M' | 'W' => 0.85,
            'a'..='z' | 'µ' | '=' | '+' | '×' | '–' => 0.556,
            'A'..='Z' => 0.68,
            _ => 0.6,
        })
        .sum();
    let weight = if bold { 1.1 } else { 1.04 };
    ems * weight * size
}

/// Sizes and colours of a theme.
#[derive(Debug, Clone, Copy)]
struct Style {
    bg: Rgba,
    text: Rgba,
    muted: Rgba,
    grid: Rgba,
    idle: Rgba,
    hatch: Rgba,
    font: f32,
    small: f32,
    title: f32,
    label: f32,
    lane_h: f32,
    lane_gap: f32,
    row_gap: f32,
    pad: f32,
    stroke: f32,
    hatch_spacing: f32,
    hatch_width: f32,
}

impl Style {
    fn of(theme: Theme) -> Style {
        match theme {
            Theme::Projector => Style {
                bg: Rgba::rgb(255, 255, 255),
                text: Rgba::rgb(25, 25, 25),
                muted: Rgba::rgb(85, 85, 85),
                grid: Rgba::rgb(222, 222, 222),
                idle: Rgba::rgb(238, 238, 238),
                hatch: Rgba::rgb(150, 150, 150),
                font: 20.0,
                small: 18.0,
                title: 24.0,
                label: 18.0,
                lane_h: 40.0,
                lane_gap: 5.0,
                row_gap: 30.0,
                pad: 24.0,
                stroke: 2.0,
                hatch_spacing: 9.0,
                hatch_width: 1.5,
            },
            Theme::Screen => Style {
                bg: Rgba::rgb(27, 27, 27),
                text: Rgba::rgb(225, 225, 225),
                muted: Rgba::rgb(150, 150, 150),
                grid: Rgba::rgb(52, 52, 52),
                idle: Rgba::rgb(42, 42, 42),
                hatch: Rgba::rgb(100, 100, 100),
                font: 13.0,
                small: 12.0,
                title: 15.0,
                label: 12.0,
                lane_h: 22.0,
                lane_gap: 3.0,
                row_gap: 16.0,
                pad: 12.0,
                stroke: 1.0,
                hatch_spacing: 6.0,
                hatch_width: 1.0,
            },
        }
    }

    /// `c` faded into the background, for what has not happened yet.
    fn dim(&self, c: Rgba) -> Rgba {
        c.mix(self.bg, 0.75)
    }

    /// Black or white text on `fill`, whichever reads better.
    fn on(&self, fill: Rgba) -> Rgba {
        if fill.luma() > 150.0 {
            Rgba::rgb(20, 20, 20)
        } else {
            Rgba::rgb(255, 255, 255)
        }
    }
}

struct Builder<'a> {
    fig: &'a Figure,
    st: Style,
    progress: Option<u64>,
    unit: Unit,
    span_ns: u64,
    width: f32,
    time_x0: f32,
    time_x1: f32,
    mem_x: f32,
    mem_bar: f32,
    mem_max: f32,
    /// Per row: the subtitle (op costs) and the numbers beside it.
    subtitles: Vec<String>,
    stats: Vec<String>,
    back: Vec<Shape>,
    shapes: Vec<Shape>,
    blocks: Vec<PlacedBlock>,
    /// Per row laid out, the top and bottom of its lanes.
    lanes: Vec<(f32, f32)>,
}

const MEMORY_HEADER: &str = "peak activations";

impl<'a> Builder<'a> {
    fn new(fig: &'a Figure, width: f32, theme: Theme, progress: Option<u64>) -> Builder<'a> {
        let st = Style::of(theme);
        let span_ns = fig
            .rows
            .iter()
            .map(|r| r.sim.makespan_ns)
            .max()
            .unwrap_or(0)
            .max(1);
        let unit = Unit::for_span(span_ns);
        let stats: Vec<String> = fig
            .rows
            .iter()
            .map(|r| {
                format!(
                    "makespan {}, bubble {} ({}%)",
                    unit.format(r.sim.makespan_ns),
                    unit.format(r.bubble_ns()),
                    trim_number(r.sim.bubble_fraction * 100.0, 1)
                )
            })
            .collect();
        let subtitles: Vec<String> = fig.rows.iter().map(|r| op_costs(r, unit)).collect();
        let max_stages = fig.rows.iter().map(FigureRow::stages).max().unwrap_or(1);
        let label_w = text_width(
            &format!("stage {}", max_stages.saturating_sub(1)),
            st.font,
            false,
        );
        let gap = st.font;
        let time_x0 = st.pad + label_w + 0.6 * st.font;
        // The title line of each row: title, op costs, then the numbers, ending by the time
        // area's right edge at the latest.
        let title_line = fig
            .rows
            .iter()
            .zip(subtitles.iter().zip(&stats))
            .map(|(r, (sub, stat))| {
                text_width(&r.title, st.title, true)
                    + text_width(sub, st.small, false)
                    + text_width(stat, st.small, true)
                    + 2.0 * st.font
            })
            .fold(0.0, f32::max);
        let mem_max = fig
            .rows
            .iter()
            .flat_map(|r| r.peak_microbatches())
            .fold(0.0, f64::max) as f32;
        // Widest number beside a bar ("4.5" at most one decimal, as drawn).
        let mem_label = trim_number(f64::from(mem_max), 1) + ".5";
        let mem_bar = 4.0 * st.font;
        let mem_w = text_width(MEMORY_HEADER, st.small, false)
            .max(mem_bar + 0.6 * st.small + text_width(&mem_label, st.small, false));
        let right = 1.5 * gap + mem_w;
        let min_time = (12.0 * st.font).max(title_line - (time_x0 - st.pad));
        let width = width.max(time_x0 + min_time + right + st.pad).ceil();
        let time_x1 = width - st.pad - right;
        let mem_x = time_x1 + 1.5 * gap;
        Builder {
            fig,
            st,
            progress,
            unit,
            span_ns,
            width,
            time_x0,
            time_x1,
            mem_x,
            mem_bar,
            mem_max,
            subtitles,
            stats,
            back: Vec::new(),
            shapes: Vec::new(),
            blocks: Vec::new(),
            lanes: Vec::new(),
        }
    }

    fn x(&self, ns: u64) -> f32 {
        self.time_x0 + (ns as f64 / self.span_ns as f64) as f32 * (self.time_x1 - self.time_x0)
    }

    fn later(&self, start_ns: u64) -> bool {
        self.progress.is_some_and(|t| start_ns > t)
    }

    fn text(&mut self, x: f32, y: f32, text: String, size: f32, color: Rgba, anchor: Anchor) {
        self.shapes.push(Shape::Text {
            x,
            y,
            text,
            size,
            color,
            anchor,
            bold: false,
        });
    }

    fn bold(&mut self, x: f32, y: f32, text: String, size: f32, color: Rgba, anchor: Anchor) {
        self.shapes.push(Shape::Text {
            x,
            y,
            text,
            size,
            color,
            anchor,
            bold: true,
        });
    }

    fn build(mut self) -> Layout {
        let st = self.st;
        let mut y = st.pad;
        if !self.fig.caption.is_empty() {
            let caption = self.fig.caption.clone();
            self.text(
                st.pad,
                y + 0.5 * st.title,
                caption,
                st.font,
                st.muted,
                Anchor::Start,
            );
            y += 1.6 * st.title;
        }
        for row in 0..self.fig.rows.len() {
            y = self.row(row, y, row == 0);
            y += st.row_gap;
        }
        let axis_y = y - st.row_gap + 0.6 * st.font;
        y = self.axis(axis_y);
        y = self.legend(y + 0.8 * st.font);
        let mut shapes = std::mem::take(&mut self.back);
        shapes.append(&mut self.shapes);
        Layout {
            width: self.width,
            height: (y + st.pad).ceil(),
            background: st.bg,
            hatch_spacing: st.hatch_spacing,
            hatch_width: st.hatch_width,
            shapes,
            blocks: self.blocks,
        }
    }

    /// Lays out row `i` from `top`; returns its bottom.
    fn row(&mut self, i: usize, top: f32, first: bool) -> f32 {
        let st = self.st;
        let fig = self.fig;
        let r = &fig.rows[i];
        let title_y = top + 0.5 * st.title;
        self.bold(
            st.pad,
            title_y,
            r.title.clone(),
            st.title,
            st.text,
            Anchor::Start,
        );
        let sub_x = st.pad + text_width(&r.title, st.title, true) + 0.8 * st.font;
        let subtitle = self.subtitles[i].clone();
        let sub_end = sub_x + text_width(&subtitle, st.small, false);
        self.text(sub_x, title_y, subtitle, st.small, st.muted, Anchor::Start);
        // The numbers end where the row ends on the shared axis, unless that is too far left.
        let stat = self.stats[i].clone();
        let end = self.x(r.sim.makespan_ns);
        let stat_end = end
            .max(sub_end + st.font + text_width(&stat, st.small, true))
            .min(self.time_x1);
        self.bold(stat_end, title_y, stat, st.small, st.text, Anchor::End);
        if first {
            self.text(
                self.mem_x,
                title_y,
                MEMORY_HEADER.into(),
                st.small,
                st.muted,
                Anchor::Start,
            );
        }
        let lanes_top = top + 1.5 * st.title;
        let stages = r.stages();
        let lane_y = |s: usize| lanes_top + s as f32 * (st.lane_h + st.lane_gap);
        for s in 0..stages {
            self.text(
                self.time_x0 - 0.6 * st.font,
                lane_y(s) + 0.5 * st.lane_h,
                format!("stage {s}"),
                st.font,
                st.text,
                Anchor::End,
            );
        }
        // Bubbles first, blocks over them.
        for g in r.gaps() {
            let (x0, x1) = (self.x(g.start_ns), self.x(g.end_ns));
            let later = self.later(g.start_ns);
            let (fill, hatch) = if later {
                (st.dim(st.idle), st.dim(st.hatch))
            } else {
                (st.idle, st.hatch)
            };
            self.shapes.push(Shape::Rect {
                x: x0,
                y: lane_y(g.stage),
                w: x1 - x0,
                h: st.lane_h,
                fill,
                stroke: None,
                hatch: Some(hatch),
            });
        }
        let v = r.schedule.chunks.max(1);
        for b in r.blocks() {
            let (x0, x1) = (self.x(b.start_ns), self.x(b.end_ns));
            let (w, yb) = (x1 - x0, lane_y(b.stage));
            let later = self.later(b.start_ns);
            let base = block_color(b.kind, b.chunk, v);
            let fill = if later { st.dim(base) } else { base };
            self.shapes.push(Shape::Rect {
                x: x0,
                y: yb,
                w,
                h: st.lane_h,
                fill,
                // Thin blocks keep their colour: the separating stroke shrinks with them.
                stroke: Some(st.stroke.min(0.15 * w))
                    .filter(|s| *s >= 0.25)
                    .map(|s| (s, st.bg)),
                hatch: None,
            });
            let label = b.microbatch.map(|m| (m + 1).to_string());
            let fits = label
                .as_ref()
                .is_some_and(|l| text_width(l, st.label, true) + 0.2 * st.label + st.stroke <= w);
            if let Some(l) = label.filter(|_| fits) {
                let ink = st.on(base);
                let color = if later {
                    st.dim(ink).mix(fill, 0.3)
                } else {
                    ink
                };
                self.bold(
                    x0 + 0.5 * w,
                    yb + 0.5 * st.lane_h,
                    l,
                    st.label,
                    color,
                    Anchor::Middle,
                );
            }
            self.blocks.push(PlacedBlock {
                row: i,
                block: b,
                x: x0,
                y: yb,
                w,
                h: st.lane_h,
                labelled: fits,
            });
        }
        let lanes_bottom = lane_y(stages) - st.lane_gap;
        if let Some(t) = self.progress {
            let x = self.x(t.min(self.span_ns));
            self.shapes.push(Shape::Line {
                x0: x,
                y0: lanes_top - 0.3 * st.lane_gap - 4.0,
                x1: x,
                y1: lanes_bottom + 4.0,
                width: 1.5 * st.stroke,
                color: CURSOR,
            });
        }
        // Peak activations, one bar per lane.
        for (s, value) in r.peak_microbatches().into_iter().enumerate().take(stages) {
            let (peak, value) = (r.peak_activations[s], value as f32);
            let w = if self.mem_max > 0.0 {
                (value / self.mem_max * self.mem_bar).max(if peak > 0 { 2.0 } else { 0.0 })
            } else {
                0.0
            };
            let h = 0.55 * st.lane_h;
            let yb = lane_y(s) + 0.5 * (st.lane_h - h);
            self.shapes.push(Shape::Rect {
                x: self.mem_x,
                y: yb,
                w,
                h,
                fill: MEMORY,
                stroke: None,
                hatch: None,
            });
            self.text(
                self.mem_x + w + 0.4 * st.small,
                lane_y(s) + 0.5 * st.lane_h,
                trim_number(f64::from(value), 1),
                st.small,
                st.text,
                Anchor::Start,
            );
        }
        self.lanes.push((lanes_top, lanes_bottom));
        lanes_bottom
    }

    /// The time axis at `axis_y`, with grid lines through every row's lanes (not their titles)
    /// down to the axis; returns its bottom.
    fn axis(&mut self, axis_y: f32) -> f32 {
        let st = self.st;
        let label_w = text_width(&self.unit.number(self.span_ns), st.small, false);
        let room = (self.time_x1 - self.time_x0) / (label_w + 2.5 * st.small);
        let target = room.floor().clamp(2.0, 12.0);
        let step = nice_step(self.span_ns as f64 / f64::from(target));
        let tick = 0.4 * st.font;
        self.shapes.push(Shape::Line {
            x0: self.time_x0,
            y0: axis_y,
            x1: self.time_x1,
            y1: axis_y,
            width: st.stroke,
            color: st.text,
        });
        let mut k = 0u64;
        loop {
            let t = (k as f64 * step).round() as u64;
            if t > self.span_ns {
                break;
            }
            let x = self.x(t);
            for (i, &(top, bottom)) in self.lanes.iter().enumerate() {
                let last = i + 1 == self.lanes.len();
                self.back.push(Shape::Line {
                    x0: x,
                    y0: top - 0.3 * st.lane_h,
                    x1: x,
                    y1: if last {
                        axis_y
                    } else {
                        bottom + 0.3 * st.lane_h
                    },
                    width: 1.0,
                    color: st.grid,
                });
            }
            self.shapes.push(Shape::Line {
                x0: x,
                y0: axis_y,
                x1: x,
                y1: axis_y + tick,
                width: st.stroke,
                color: st.text,
            });
            let label = self.unit.number(t);
            self.text(
                x,
                axis_y + tick + 0.8 * st.small,
                label,
                st.small,
                st.text,
                Anchor::Middle,
            );
            k += 1;
        }
        let unit = format!("time ({})", self.unit.name);
        self.text(
            self.time_x1 + st.font,
            axis_y + tick + 0.8 * st.small,
            unit,
            st.small,
            st.muted,
            Anchor::Start,
        );
        axis_y + tick + 1.6 * st.small
    }

    /// The legend from `top`, wrapping at the right margin; returns its bottom.
    fn legend(&mut self, top: f32) -> f32 {
        let st = self.st;
        let rows = &self.fig.rows;
        let split = rows.iter().any(|r| r.schedule.split_backward);
        let chunks = rows
            .iter()
            .map(|r| r.schedule.chunks)
            .max()
            .unwrap_or(1)
            .max(1);
        let mut items: Vec<(Swatch, String)> = vec![
            (
                Swatch::Block(FORWARD, Some("3")),
                "forward F (microbatch 3)".into(),
            ),
            (
                Swatch::Block(BACKWARD, None),
                if split {
                    "backward B (input grad; B+W where no W)".into()
                } else {
                    "backward B (with weight grad)".into()
                },
            ),
        ];
        if split {
            items.push((Swatch::Block(WEIGHT_GRAD, None), "weight grad W".into()));
        }
        items.push((Swatch::Idle, "idle: bubble".into()));
        if chunks > 1 {
            for c in 0..chunks.min(4) {
                let color = block_color(OpKind::Forward, c, chunks);
                let shade = if c == 0 { "" } else { ", darker" };
                items.push((Swatch::Block(color, None), format!("chunk {c}{shade}")));
            }
        }
        items.push((
            Swatch::Memory,
            "peak activations per stage (microbatches)".into(),
        ));
        let sw = 1.6 * st.font;
        let sh = 1.1 * st.font;
        let line = 1.6 * st.font;
        let (x_start, x_end) = (st.pad, self.width - st.pad);
        let (mut x, mut y) = (x_start, top);
        for (swatch, label) in items {
            let w = sw + 0.4 * st.font + text_width(&label, st.small, false);
            if x > x_start && x + w > x_end {
                x = x_start;
                y += line;
            }
            let cy = y + 0.5 * line;
            let sy = cy - 0.5 * sh;
            match swatch {
                Swatch::Block(fill, text) => {
                    self.shapes.push(Shape::Rect {
                        x,
                        y: sy,
                        w: sw,
                        h: sh,
                        fill,
                        stroke: None,
                        hatch: None,
                    });
                    if let Some(t) = text {
                        let ink = st.on(fill);
                        self.bold(x + 0.5 * sw, cy, t.into(), st.label, ink, Anchor::Middle);
                    }
                }
                Swatch::Idle => self.shapes.push(Shape::Rect {
                    x,
                    y: sy,
                    w: sw,
                    h: sh,
                    fill: st.idle,
                    stroke: None,
                    hatch: Some(st.hatch),
                }),
                Swatch::Memory => self.shapes.push(Shape::Rect {
                    x,
                    y: cy - 0.3 * sh,
                    w: sw,
                    h: 0.6 * sh,
                    fill: MEMORY,
                    stroke: None,
                    hatch: None,
                }),
            }
            self.text(
                x + sw + 0.4 * st.font,
                cy,
                label,
                st.small,
                st.text,
                Anchor::Start,
            );
            x += w + 1.4 * st.font;
        }
        y + line
    }
}

/// "F 100 µs · B+W 200 µs", from the first op of each kind (per chunk when v > 1).
fn op_costs(r: &FigureRow, unit: Unit) -> String {
    let blocks = r.blocks();
    let first = |k: OpKind| {
        blocks
            .iter()
            .find(|b| b.kind == k)
            .map(|b| unit.format(b.end_ns - b.start_ns))
    };
    let mut parts = Vec::new();
    if let Some(f) = first(OpKind::Forward) {
        parts.push(format!("F {f}"));
    }
    if let Some(b) = first(OpKind::Backward) {
        let name = if r.schedule.split_backward {
            "B"
        } else {
            "B+W"
        };
        parts.push(format!("{name} {b}"));
    }
    if let Some(w) = first(OpKind::WeightGrad) {
        parts.push(format!("W {w}"));
    }
    let each = if r.schedule.chunks > 1 {
        "each chunk op: "
    } else {
        ""
    };
    format!("{each}{}", parts.join(" · "))
}

#[derive(Debug, Clone, Copy)]
enum Swatch {
    Block(Rgba, Option<&'static str>),
    Idle,
    Memory,
}

/// The smallest of 1, 2, 2.5, 5 × 10^k at least `raw` (and at least 1).
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 1.0) {
        return 1.0;
    }
    let exp = 10f64.powf(raw.log10().floor());
    let f = raw / exp;
    let nice = [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .find(|&n| f <= n + 1e-9)
        .unwrap_or(10.0);
    nice * exp
}

const FONT_FAMILY: &str = "Liberation Sans, Arial, Helvetica, DejaVu Sans, sans-serif";

/// `layout` as a standalone SVG document (UTF-8, no XML declaration): every shape in order,
/// hatching as explicit clipped lines (the segments of [`hatch_lines`]), text escaped.
pub fn svg(layout: &Layout) -> String {
    let mut s = String::with_capacity(256 + 160 * layout.shapes.len());
    let (w, h) = (num(layout.width), num(layout.height));
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="{FONT_FAMILY}">"#
    );
    let _ = writeln!(
        s,
        r#"<rect x="0" y="0" width="{w}" height="{h}"{}/>"#,
        paint("fill", layout.background)
    );
    for shape in &layout.shapes {
        match shape {
            Shape::Rect {
                x,
                y,
                w,
                h,
                fill,
                stroke,
                hatch,
            } => {
                let _ = write!(
                    s,
                    r#"<rect x="{}" y="{}" width="{}" height="{}"{}"#,
                    num(*x),
                    num(*y),
                    num(w.max(0.0)),
                    num(h.max(0.0)),
                    paint("fill", *fill)
                );
                s.push_str("/>\n");
                if let Some(color) = hatch {
                    let lines = hatch_lines(*x, *y, *w, *h, layout.hatch_spacing);
                    if !lines.is_empty() {
                        let _ = write!(
                            s,
                            r#"<path fill="none" stroke-width="{}" stroke-linecap="butt"{} d=""#,
                            num(layout.hatch_width),
                            paint("stroke", *color)
                        );
                        for (i, [x0, y0, x1, y1]) in lines.iter().enumerate() {
                            if i > 0 {
                                s.push(' ');
                            }
                            let _ =
                                write!(s, "M{} {}L{} {}", num(*x0), num(*y0), num(*x1), num(*y1));
                        }
                        s.push_str("\"/>\n");
                    }
                }
                if let Some((width, color)) = stroke {
                    let _ = writeln!(
                        s,
                        r#"<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke-width="{}"{}/>"#,
                        num(*x),
                        num(*y),
                        num(w.max(0.0)),
                        num(h.max(0.0)),
                        num(*width),
                        paint("stroke", *color)
                    );
                }
            }
            Shape::Text {
                x,
                y,
                text,
                size,
                color,
                anchor,
                bold,
            } => {
                let anchor = match anchor {
                    Anchor::Start => "start",
                    Anchor::Middle => "middle",
                    Anchor::End => "end",
                };
                let weight = if *bold { r#" font-weight="bold""# } else { "" };
                let _ = writeln!(
                    s,
                    r#"<text x="{}" y="{}" font-size="{}" text-anchor="{anchor}"{weight}{}>{}</text>"#,
                    num(*x),
                    num(y + 0.35 * size),
                    num(*size),
                    paint("fill", *color),
                    escape(text)
                );
            }
            Shape::Line {
                x0,
                y0,
                x1,
                y1,
                width,
                color,
            } => {
                let _ = writeln!(
                    s,
                    r#"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke-width="{}"{}/>"#,
                    num(*x0),
                    num(*y0),
                    num(*x1),
                    num(*y1),
                    num(*width),
                    paint("stroke", *color)
                );
            }
        }
    }
    s.push_str("</svg>\n");
    s
}

/// ` fill="#rrggbb"` plus ` fill-opacity=".."` when not opaque (likewise for `stroke`).
fn paint(what: &str, c: Rgba) -> String {
    let mut out = format!(r#" {what}="{}""#, c.hex());
    if c.0[3] < 255 {
        let _ = write!(
            out,
            r#" {what}-opacity="{}""#,
            trim_number(f64::from(c.opacity()), 3)
        );
    }
    out
}

/// A coordinate with at most two decimals; non-finite values become 0.
fn num(v: f32) -> String {
    if v.is_finite() {
        trim_number(f64::from(v), 2)
    } else {
        "0".into()
    }
}

/// `text` safe inside an element or a quoted attribute; control characters XML forbids are
/// dropped.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if c.is_control() && !matches!(c, '\t' | '\n' | '\r') => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::collections::HashMap;

    use super::*;
    use crate::trace::Lane;

    /// The four schedules these tests were written for.
    const FOUR: [ScheduleKind; 4] = [
        ScheduleKind::GPipe,
        ScheduleKind::OneFOneB,
        ScheduleKind::Interleaved,
        ScheduleKind::ZbH1,
    ];

    fn compare() -> Figure {
        Figure::compare(&FOUR, 4, 8, 2, &Costs::compute_only(100, 100, 100)).unwrap()
    }

    fn makespans(f: &Figure) -> Vec<u64> {
        f.rows.iter().map(|r| r.sim.makespan_ns).collect()
    }

    fn rects(l: &Layout) -> impl Iterator<Item = (f32, f32, f32, f32, Rgba, Option<Rgba>)> + '_ {
        l.shapes.iter().filter_map(|s| match s {
            Shape::Rect {
                x,
                y,
                w,
                h,
                fill,
                hatch,
                ..
            } => Some((*x, *y, *w, *h, *fill, *hatch)),
            _ => None,
        })
    }

    fn texts(l: &Layout) -> impl Iterator<Item = (f32, f32, &str, f32)> + '_ {
        l.shapes.iter().filter_map(|s| match s {
            Shape::Text {
                x, y, text, size, ..
            } => Some((*x, *y, text.as_str(), *size)),
            _ => None,
        })
    }

    /// At the same model cost per stage, interleaving (chunk ops of F/v) and splitting the
    /// backward (ZB-H1) both finish before 1F1B; GPipe ties with 1F1B. Same work everywhere.
    #[test]
    fn compare_orders_the_makespans_at_equal_model_cost() {
        for scale in [1, 1000] {
            let f = Figure::compare(
                &FOUR,
                4,
                8,
                2,
                &Costs::compute_only(100 * scale, 100 * scale, 100 * scale),
            )
            .unwrap();
            let kinds: Vec<_> = f.rows.iter().map(|r| r.schedule.kind).collect();
            assert_eq!(kinds, FOUR);
            let [gpipe, one, inter, zb] = makespans(&f)[..] else {
                panic!("four rows")
            };
            assert!(inter < one, "interleaved {inter} vs 1F1B {one}");
            assert!(zb < one, "ZB-H1 {zb} vs 1F1B {one}");
            assert_eq!(gpipe, one);
            assert_eq!(
                makespans(&f),
                [3300, 3300, 2850, 2700].map(|t| t * scale),
                "(m + p − 1)·3F; 2·8·1.5F + 3·1.5F; 8·3F + 3F"
            );
            for r in &f.rows {
                assert_eq!(r.sim.busy_ns, vec![2400 * scale; 4], "{}", r.title);
            }
        }
        // Uneven splits round each chunk op up: never cheaper than the whole.
        let f = Figure::compare(&FOUR, 2, 4, 3, &Costs::compute_only(10, 10, 10)).unwrap();
        assert_eq!(f.rows[2].sim.busy_ns, vec![4 * 3 * (4 + 8); 2]);
    }

    /// Every compute op of every schedule is one block, in the layout as a rect of its kind's
    /// colour, labelled with its microbatch (from 1) whenever the label fits.
    #[test]
    fn every_op_is_one_block_with_its_microbatch_label() {
        let mut figures = vec![compare()];
        for kind in ScheduleKind::ALL {
            let c = Costs::stage_model(30, 50, 20, kind.passes(3));
            let (p, m) = if kind == ScheduleKind::DualPipe {
                (4, 8)
            } else {
                (3, 6)
            };
            figures.push(Figure::single(kind, p, m, 3, &c).unwrap());
        }
        for fig in &figures {
            for (width, theme) in [(1600.0, Theme::Projector), (500.0, Theme::Screen)] {
                let l = fig.layout(width, theme, None);
                let mut want: HashMap<(usize, usize, OpKind, usize, usize), usize> = HashMap::new();
                for (row, r) in fig.rows.iter().enumerate() {
                    for (stage, ops) in r.schedule.ops.iter().enumerate() {
                        for op in ops.iter().filter(|o| o.kind.is_compute()) {
                            *want
                                .entry((row, stage, op.kind, op.microbatch, op.chunk))
                                .or_default() += 1;
                        }
                    }
                }
                let mut got = HashMap::new();
                for p in &l.blocks {
                    let b = p.block;
                    *got.entry((p.row, b.stage, b.kind, b.microbatch.unwrap(), b.chunk))
                        .or_insert(0) += 1;
                }
                assert_eq!(got, want);
                let all_rects: Vec<_> = rects(&l).collect();
                let all_texts: Vec<_> = texts(&l).collect();
                let mut labelled = 0;
                for p in &l.blocks {
                    let v = fig.rows[p.row].schedule.chunks;
                    let color = block_color(p.block.kind, p.block.chunk, v);
                    let drawn = all_rects
                        .iter()
                        .filter(|r| (r.0, r.1, r.2, r.3, r.4) == (p.x, p.y, p.w, p.h, color))
                        .count();
                    assert_eq!(drawn, 1, "{p:?} {:?}", fig.rows[p.row].schedule.kind);
                    let label = (p.block.microbatch.unwrap() + 1).to_string();
                    let inside: Vec<_> = all_texts
                        .iter()
                        .filter(|t| t.0 > p.x && t.0 < p.x + p.w && t.1 > p.y && t.1 < p.y + p.h)
                        .collect();
                    if p.labelled {
                        labelled += 1;
                        assert_eq!(inside.len(), 1, "{p:?}");
                        assert_eq!(inside[0].2, label);
                        assert!(text_width(&label, inside[0].3, true) < p.w);
                    } else {
                        assert!(inside.is_empty(), "{p:?}: {inside:?}");
                        // The layout's rule: the label and its padding would not fit.
                        let st = Style::of(theme);
                        let need = text_width(&label, st.label, true) + 0.2 * st.label + st.stroke;
                        assert!(need > p.w, "{p:?}");
                    }
                }
                let four = fig.rows.iter().all(|r| FOUR.contains(&r.schedule.kind));
                if theme == Theme::Projector && four {
                    // Wide and large enough for every number at these shapes (not yet for the
                    // V and bidirectional schedules' half-size chunk ops).
                    assert_eq!(labelled, l.blocks.len());
                    let small = all_texts.iter().map(|t| t.3).fold(f32::MAX, f32::min);
                    assert!(small >= 18.0, "{small} px text on a projector");
                }
            }
        }
        // Too narrow for any number: blocks still drawn, none labelled.
        let l = compare().layout(10.0, Theme::Screen, None);
        let inter: Vec<_> = l.blocks.iter().filter(|p| p.row == 2).collect();
        assert_eq!(inter.len(), 2 * 8 * 4 * 2);
        assert!(inter.iter().any(|p| !p.labelled));
    }

    /// Idle stretches, found independently by sweeping time unit by unit, are exactly the
    /// hatched cells (plus the legend's one), and they add up to the simulation's idle time.
    #[test]
    fn every_idle_gap_is_hatched_once() {
        for fig in [
            Figure::compare(&FOUR, 4, 8, 2, &Costs::compute_only(1, 1, 1)).unwrap(),
            Figure::compare(&FOUR, 3, 3, 3, &Costs::compute_only(2, 3, 1)).unwrap(),
        ] {
            let mut gaps = 0;
            let mut idle = 0;
            for r in &fig.rows {
                let t_end = r.sim.makespan_ns;
                for stage in 0..r.schedule.stages {
                    let busy = |t: u64| {
                        r.sim.events.iter().any(|e| {
                            e.device == stage
                                && e.lane == Lane::Compute
                                && e.start_ns <= t
                                && t < e.end_ns
                        })
                    };
                    let mut was_busy = true;
                    for t in 0..t_end {
                        let b = busy(t);
                        if !b && was_busy {
                            gaps += 1;
                        }
                        idle += u64::from(!b);
                        was_busy = b;
                    }
                }
                assert_eq!(
                    r.gaps().iter().map(|g| g.end_ns - g.start_ns).sum::<u64>(),
                    r.sim.idle_ns().iter().sum::<u64>()
                );
            }
            assert_eq!(fig.rows.iter().map(|r| r.gaps().len()).sum::<usize>(), gaps);
            let l = fig.layout(1200.0, Theme::Projector, None);
            let hatched: Vec<_> = rects(&l).filter(|r| r.5.is_some()).collect();
            assert_eq!(hatched.len(), gaps + 1, "one per gap and the legend's");
            let px_per_ns =
                l.blocks[0].w / (l.blocks[0].block.end_ns - l.blocks[0].block.start_ns) as f32;
            let lane_h = l.blocks[0].h;
            let width: f32 = hatched.iter().filter(|r| r.3 == lane_h).map(|r| r.2).sum();
            assert!(
                (width / px_per_ns - idle as f32).abs() < 0.01 * idle as f32,
                "{width} px hatched for {idle} ns idle"
            );
        }
    }

    #[test]
    fn progress_dims_what_has_not_started() {
        let fig = compare();
        let t = fig.rows[1].sim.makespan_ns / 2;
        let l = fig.layout(1600.0, Theme::Projector, Some(t));
        let all: Vec<_> = rects(&l).collect();
        let (mut dim, mut lit) = (0, 0);
        for p in &l.blocks {
            let color = block_color(p.block.kind, p.block.chunk, fig.rows[p.row].schedule.chunks);
            let fill = all
                .iter()
                .find(|r| (r.0, r.1, r.2, r.3) == (p.x, p.y, p.w, p.h))
                .unwrap()
                .4;
            if p.block.start_ns > t {
                assert_ne!(fill, color);
                dim += 1;
            } else {
                assert_eq!(fill, color);
                lit += 1;
            }
        }
        assert!(dim > 0 && lit > 0);
        let cursors = l
            .shapes
            .iter()
            .filter(|s| matches!(s, Shape::Line { color, .. } if *color == CURSOR))
            .count();
        assert_eq!(cursors, fig.rows.len());
        assert_eq!(
            fig.layout(1600.0, Theme::Projector, None),
            fig.layout(1600.0, Theme::Projector, None)
        );
    }

    #[test]
    fn themes_differ_as_promised() {
        let fig = compare();
        let proj = fig.layout(1600.0, Theme::Projector, None);
        let screen = fig.layout(1600.0, Theme::Screen, None);
        assert!(proj.background.luma() > 200.0);
        assert!(screen.background.luma() < 60.0);
        assert!(proj.blocks[0].h > 1.5 * screen.blocks[0].h);
        assert!(texts(&proj).all(|t| t.3 >= 18.0));
        assert!(proj.width >= 1600.0 && proj.height > 0.0);
        // Shorter schedules are visibly shorter on the shared axis.
        let end = |row: usize| {
            proj.blocks
                .iter()
                .filter(|p| p.row == row)
                .map(|p| p.x + p.w)
                .fold(0.0, f32::max)
        };
        assert!(end(3) < end(2) && end(2) < end(1) - 50.0);
        let stats: Vec<_> = texts(&proj)
            .filter(|t| t.2.starts_with("makespan"))
            .collect();
        assert_eq!(stats.len(), 4);
        assert_eq!(stats[1].2, "makespan 3300 ns, bubble 900 ns (27.3%)");
        assert_eq!(stats[2].2, "makespan 2850 ns, bubble 450 ns (15.8%)");
    }

    #[test]
    fn hatch_lines_stay_inside_and_line_up_across_cells() {
        let (s, eps) = (7.0, 1e-3);
        let a = hatch_lines(10.0, 20.0, 33.0, 12.0, s);
        let b = hatch_lines(43.0, 20.0, 20.0, 12.0, s);
        assert!(!a.is_empty() && !b.is_empty());
        for (seg, (x, y, w, h)) in a
            .iter()
            .map(|l| (l, (10.0, 20.0, 33.0, 12.0)))
            .chain(b.iter().map(|l| (l, (43.0, 20.0, 20.0, 12.0))))
        {
            let [x0, y0, x1, y1] = *seg;
            for (px, py) in [(x0, y0), (x1, y1)] {
                assert!(px >= x - eps && px <= x + w + eps && py >= y - eps && py <= y + h + eps);
            }
            assert!(((x1 - x0) + (y1 - y0)).abs() < eps, "45°: {seg:?}");
            let k = (x0 + y0) / s;
            assert!((k - k.round()).abs() < eps, "on the grid: {seg:?}");
        }
        // Lines leaving a's right edge enter b's left edge at the same point.
        // (A line through the top right corner touches b in one point only.)
        let right: Vec<f32> = a
            .iter()
            .filter(|l| (l[2] - 43.0).abs() < eps && l[3] > 20.0 + eps)
            .map(|l| l[3])
            .collect();
        assert!(!right.is_empty());
        let left: Vec<f32> = b
            .iter()
            .filter(|l| (l[0] - 43.0).abs() < eps)
            .map(|l| l[1])
            .collect();
        for y in &right {
            assert!(left.iter().any(|l| (l - y).abs() < eps), "{y} in {left:?}");
        }
        assert!(hatch_lines(0.0, 0.0, 0.0, 5.0, s).is_empty());
        assert!(hatch_lines(0.0, 0.0, 5.0, 5.0, 0.0).is_empty());
    }

    /// A minimal XML well-formedness check: balanced tags, one root, quoted attributes, and
    /// `&` only in the five entities or character references.
    fn check_xml(doc: &str) -> Result<(), String> {
        fn entities(text: &str) -> Result<(), String> {
            let mut rest = text;
            while let Some(i) = rest.find('&') {
                rest = &rest[i + 1..];
                let end = rest.find(';').ok_or(format!("bare & in {text:?}"))?;
                let name = &rest[..end];
                let ok = ["amp", "lt", "gt", "quot", "apos"].contains(&name)
                    || name
                        .strip_prefix('#')
                        .is_some_and(|n| n.parse::<u32>().is_ok());
                if !ok {
                    return Err(format!("bad entity &{name}; in {text:?}"));
                }
            }
            if text.contains('<') {
                return Err(format!("raw < in {text:?}"));
            }
            Ok(())
        }
        let mut stack: Vec<&str> = Vec::new();
        let mut roots = 0;
        let mut rest = doc;
        while let Some(i) = rest.find('<') {
            let text = &rest[..i];
            if stack.is_empty() && !text.trim().is_empty() {
                return Err(format!("text outside the root: {text:?}"));
            }
            entities(text)?;
            rest = &rest[i + 1..];
            let end = rest.find('>').ok_or("unclosed tag")?;
            let tag = &rest[..end];
            rest = &rest[end + 1..];
            if let Some(name) = tag.strip_prefix('/') {
                match stack.pop() {
                    Some(open) if open == name => continue,
                    other => return Err(format!("</{name}> closes {other:?}")),
                }
            }
            let closed = tag.ends_with('/');
            let body = tag.trim_end_matches('/');
            let (name, mut attrs) = body.split_once(' ').unwrap_or((body, ""));
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric()) {
                return Err(format!("bad tag name {name:?}"));
            }
            loop {
                attrs = attrs.trim_start();
                if attrs.is_empty() {
                    break;
                }
                let (key, after) = attrs
                    .split_once("=\"")
                    .ok_or(format!("bad attribute in {tag:?}"))?;
                if key.is_empty() || key.contains(char::is_whitespace) {
                    return Err(format!("bad attribute name {key:?}"));
                }
                let (value, after) = after.split_once('"').ok_or("unterminated value")?;
                entities(value)?;
                attrs = after;
            }
            if stack.is_empty() {
                roots += 1;
            }
            if !closed {
                stack.push(name);
            }
        }
        if !rest.trim().is_empty() || !stack.is_empty() || roots != 1 {
            return Err(format!(
                "unbalanced: open {stack:?}, {roots} roots, tail {rest:?}"
            ));
        }
        Ok(())
    }

    #[test]
    fn svg_is_well_formed_and_escapes_text() {
        let mut fig = compare();
        fig.caption = r#"a < b & "c" 'd' > e"#.into();
        fig.rows[0].title = "GPipe & <friends>".into();
        for theme in [Theme::Projector, Theme::Screen] {
            let l = fig.layout(1400.0, theme, Some(1000));
            let doc = svg(&l);
            check_xml(&doc).unwrap();
            assert!(doc.starts_with(r#"<svg xmlns="http://www.w3.org/2000/svg" width="1400""#));
            assert!(doc.contains(&format!(r#"viewBox="0 0 1400 {}""#, num(l.height))));
            assert!(doc.contains("a &lt; b &amp; &quot;c&quot; &apos;d&apos; &gt; e"));
            assert!(doc.contains("GPipe &amp; &lt;friends&gt;"));
            assert_eq!(doc.matches("<text ").count(), texts(&l).count());
            let hatched = rects(&l).filter(|r| r.5.is_some()).count();
            assert_eq!(doc.matches("<path ").count(), hatched);
            assert!(!doc.contains("NaN") && !doc.contains("inf"));
        }
        // The checker itself catches what it should.
        for bad in [
            "<svg><text>a & b</text></svg>",
            "<svg><text>a</svg>",
            "<svg></svg><svg></svg>",
            "<svg x=1/>",
            "<svg><text>&bogus;</text></svg>",
        ] {
            assert!(check_xml(bad).is_err(), "{bad}");
        }
        check_xml(r#"<svg a="1"><g/><text>x &amp; y &#955;</text></svg>"#).unwrap();
        assert_eq!(escape("\u{1}ok\t"), "ok\t");
        assert_eq!(num(f32::NAN), "0");
        assert_eq!(num(12.3456), "12.35");
        assert_eq!(num(3.0), "3");
    }

    #[test]
    fn units_ticks_and_numbers_read_well() {
        assert_eq!(Unit::for_span(3_300_000).format(900_000), "900 µs");
        assert_eq!(Unit::for_span(9_999).format(250), "250 ns");
        assert_eq!(Unit::for_span(33_000_000).format(2_500_000), "2.5 ms");
        assert_eq!(Unit::for_span(3_000_000).format(2_900_060), "2900 µs");
        assert_eq!(Unit::for_span(3_000_000).format(33_334), "33.3 µs");
        assert_eq!(Unit::for_span(3_000_000).format(2_346), "2.35 µs");
        assert_eq!(nice_step(330.0), 500.0);
        assert_eq!(nice_step(230.0), 250.0);
        assert_eq!(nice_step(0.2), 1.0);
        assert_eq!(nice_step(f64::NAN), 1.0);
        let l = compare().layout(1600.0, Theme::Projector, None);
        let ticks: Vec<&str> = texts(&l)
            .map(|t| t.2)
            .filter(|t| t.parse::<u64>().is_ok_and(|n| n % 500 == 0 && n > 9))
            .collect();
        assert_eq!(ticks, ["500", "1000", "1500", "2000", "2500", "3000"]);
    }
}
