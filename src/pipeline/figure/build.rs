//! Laying a [`Figure`] out: rows, lanes, blocks, bubbles, labels, memory bars, the time axis
//! and the legend, in pixels.

use super::super::schedule_kind::OpKind;
use super::layout::{Anchor, Layout, PlacedBlock, Shape, text_width};
use super::style::{
    BACKWARD, CURSOR, FORWARD, MEMORY, Rgba, Style, Theme, WEIGHT_GRAD, block_color,
};
use super::{Figure, FigureRow, Unit, trim_number};
use crate::trace::TrackKind;

pub(super) struct Builder<'a> {
    pub(super) fig: &'a Figure,
    pub(super) st: Style,
    pub(super) progress: Option<u64>,
    pub(super) unit: Unit,
    pub(super) span_ns: u64,
    pub(super) width: f32,
    pub(super) time_x0: f32,
    pub(super) time_x1: f32,
    pub(super) mem_x: f32,
    pub(super) mem_bar: f32,
    pub(super) mem_max: f32,
    /// Per row: the subtitle (op costs) and the numbers beside it.
    pub(super) subtitles: Vec<String>,
    pub(super) stats: Vec<String>,
    pub(super) back: Vec<Shape>,
    pub(super) shapes: Vec<Shape>,
    pub(super) blocks: Vec<PlacedBlock>,
    /// Per row laid out, the top and bottom of its lanes.
    pub(super) lanes: Vec<(f32, f32)>,
}

pub(super) const MEMORY_HEADER: &str = "peak activations";

impl<'a> Builder<'a> {
    pub(super) fn new(
        fig: &'a Figure,
        width: f32,
        theme: Theme,
        progress: Option<u64>,
    ) -> Builder<'a> {
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
        let label_w = fig
            .rows
            .iter()
            .map(|r| text_width(&r.lane_name(r.lanes().saturating_sub(1)), st.font, false))
            .fold(0.0, f32::max);
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

    pub(super) fn x(&self, ns: u64) -> f32 {
        self.time_x0 + (ns as f64 / self.span_ns as f64) as f32 * (self.time_x1 - self.time_x0)
    }

    pub(super) fn later(&self, start_ns: u64) -> bool {
        self.progress.is_some_and(|t| start_ns > t)
    }

    pub(super) fn text(
        &mut self,
        x: f32,
        y: f32,
        text: String,
        size: f32,
        color: Rgba,
        anchor: Anchor,
    ) {
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

    pub(super) fn bold(
        &mut self,
        x: f32,
        y: f32,
        text: String,
        size: f32,
        color: Rgba,
        anchor: Anchor,
    ) {
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

    pub(super) fn build(mut self) -> Layout {
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
    pub(super) fn row(&mut self, i: usize, top: f32, first: bool) -> f32 {
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
        let stages = r.lanes();
        let lane_y = |s: usize| lanes_top + s as f32 * (st.lane_h + st.lane_gap);
        for s in 0..stages {
            self.text(
                self.time_x0 - 0.6 * st.font,
                lane_y(s) + 0.5 * st.lane_h,
                r.lane_name(s),
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
        let v = r.chunks_per_lane();
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
            let size = label.as_ref().and_then(|l| label_size(l, w, st));
            let fits = size.is_some();
            if let (Some(l), Some(size)) = (label, size) {
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
                    size,
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
    pub(super) fn axis(&mut self, axis_y: f32) -> f32 {
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
    pub(super) fn legend(&mut self, top: f32) -> f32 {
        let st = self.st;
        let rows = &self.fig.rows;
        let split = rows.iter().any(|r| r.schedule.split_backward);
        let chunks = rows
            .iter()
            .map(FigureRow::chunks_per_lane)
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
        let folded = rows.iter().any(FigureRow::folded);
        if chunks > 1 {
            // A folded lane shades the stages its device holds, counted on the device (its
            // first stage is the lightest); with chunks, the chunks of those stages in order.
            let what = match (folded, rows.iter().all(|r| r.schedule.chunks <= 1)) {
                (false, _) => "chunk",
                (true, true) => "device's stage",
                (true, false) => "device's chunk",
            };
            for c in 0..chunks.min(4) {
                let color = block_color(OpKind::Forward, c, chunks);
                let shade = if c == 0 { "" } else { ", darker" };
                items.push((Swatch::Block(color, None), format!("{what} {c}{shade}")));
            }
        }
        let per = TrackKind::of_pipeline(folded).word();
        items.push((
            Swatch::Memory,
            format!("peak activations per {per} (microbatches)"),
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

/// The font size of a block's microbatch number in a block `w` wide: the style's label size
/// where the number and its padding fit, else as large as fits down to 60% of it (the V and
/// bidirectional schedules' chunk ops are half a stage's F wide in a comparison, too narrow for
/// the full size), else `None`: not drawn.
pub(super) fn label_size(label: &str, w: f32, st: Style) -> Option<f32> {
    // The fit rule: bold text plus a fifth of the size either side, plus the stroke.
    let per_px = text_width(label, 1.0, true) + 0.2;
    let size = ((w - st.stroke) / per_px).min(st.label);
    (size >= LABEL_SHRINK * st.label).then_some(size)
}

/// How small a microbatch number may shrink to fit its block, as a fraction of the label size.
pub(super) const LABEL_SHRINK: f32 = 0.6;

/// "F 100 µs · B+W 200 µs", from the first op of each kind (per chunk when v > 1).
pub(super) fn op_costs(r: &FigureRow, unit: Unit) -> String {
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
pub(super) enum Swatch {
    Block(Rgba, Option<&'static str>),
    Idle,
    Memory,
}

/// The smallest of 1, 2, 2.5, 5 × 10^k at least `raw` (and at least 1).
pub(super) fn nice_step(raw: f64) -> f64 {
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
