//! The pipeline bubble lab: pick a schedule and its shape, and see the textbook figure of its
//! simulation (or any set of the fourteen schedules stacked on one time axis at the same total
//! cost; those that cannot take the shape are named and left out), the bubble against the
//! textbook formula, the gap to the shortest schedule of its family (one chunk a stage, or two)
//! under the same memory where the setting is small enough, peak activations, and an animation
//! that plays or steps from one op start time to the next saying what each stage waits for; a
//! slow stage makes the stages uneven, and transfers cost tenths of a µs up; ZB-V and "ZB auto"
//! are re-planned for the sliders' costs, ZB auto under its memory slider. Large settings are
//! studied off the UI thread, the figure before staying up meanwhile. A figure wider than the
//! window is drawn smaller; "figure only" shows it with the player alone, fitted to the window.
//! The figure exports as SVG and as a PNG drawn off screen, whole, for slides. With fewer
//! devices than stages, the stages fold onto them (blocks or round robin) and the figure has a
//! lane per device. "Run on devices" trains one MLP step with the same schedule (as planned for
//! the sliders) on the first `p` devices (the fold's `d`), in the background, and shows the
//! measured timeline under the simulated one, with the measured bubble beside the simulator's
//! (fed the run's own op times) and the textbook's.
//!
//! Here: the inputs and the UI. The simulation and the formulas are in `simulate.rs`, where it
//! runs (here or off the UI thread) in `studying.rs`, the run on devices in `device_run.rs`, the
//! animation in `player.rs`, painting in `paint.rs` and SVG and PNG export in `export.rs`.

mod device_run;
mod export;
mod paint;
mod player;
mod simulate;
mod studying;

use std::path::PathBuf;

use egui::{Button, Key, RichText, Slider, Ui};
use gangway::pipeline::figure::{Figure, FigureRow, Layout, Theme};
use gangway::pipeline::{Costs, Fold, OpKind, ScheduleKind, percent};
use gangway::sched::Runtime;
use gangway::trace::{Lane, TrackKind};

pub use device_run::{DeviceRun, RunShape, run_blocker, run_on_devices};
pub use export::{Exporter, Format, PNG_SCALE, png_of_svg};
pub use player::Player;
pub use simulate::{LabResult, compute, formula_line, formula_text, label};
use studying::Studying;

use crate::background::{self, Job};
use crate::live::DeviceHub;
use crate::timeline::{self, format_ns};

/// One cost unit of the sliders, in simulated nanoseconds.
const UNIT_NS: u64 = 1_000;

/// The lab's inputs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LabParams {
    pub kind: ScheduleKind,
    pub stages: usize,
    pub microbatches: usize,
    pub chunks: usize,
    /// Relative costs of F, B and W of one microbatch through a stage's whole model share
    /// (units of 1 µs simulated). Interleaved splits the share into v chunks: each chunk op
    /// costs 1/v of it, as in Megatron.
    pub forward: u64,
    pub backward: u64,
    pub weight_grad: u64,
    /// Each transfer's cost between stages, in the same units (0: free, as the textbook), in
    /// tenths at the finest: a transfer can cost less than one forward.
    pub latency: f64,
    /// Whether the stages wait for their sends (synchronous) instead of overlapping them.
    pub wait_for_sends: bool,
    /// The schedules the comparison stacks: bit `i` for `ScheduleKind::ALL[i]`.
    pub compared: u16,
    /// Uneven stages: stage `slow_stage`'s ops take `slow_factor` times the others' (1: even), as
    /// a stage with more layers or a slower device would.
    pub slow_stage: usize,
    pub slow_factor: u64,
    /// More stages than devices: the stages run on this many devices (`None`: one per stage),
    /// in blocks of consecutive stages or round robin.
    pub devices: Option<usize>,
    pub round_robin: bool,
    /// The activations a stage may hold under zb-auto (`None`: `p`, ZB-H1's and 1F1B's).
    pub memory: Option<usize>,
}

/// The comparison's default set: GPipe, 1F1B, interleaved and ZB-H1.
pub const CLASSIC_FOUR: u16 = 1 | 1 << 1 | 1 << 3 | 1 << 5;

impl LabParams {
    /// The schedules the comparison stacks, in `ScheduleKind::ALL`'s order.
    pub fn compared_kinds(&self) -> Vec<ScheduleKind> {
        ScheduleKind::ALL
            .into_iter()
            .enumerate()
            .filter(|(i, _)| self.compared & (1 << i) != 0)
            .map(|(_, k)| k)
            .collect()
    }

    /// Each stage's cost factor for the simulator (`simulate_uneven`); empty when even.
    pub fn stage_scale(&self) -> Vec<f64> {
        if self.slow_factor <= 1 {
            return Vec::new();
        }
        let slow = self.slow_stage.min(self.stages.saturating_sub(1));
        (0..self.stages)
            .map(|i| {
                if i == slow {
                    self.slow_factor as f64
                } else {
                    1.0
                }
            })
            .collect()
    }

    /// Where the stages run ([`Fold`]): one device per stage unless `devices` is fewer.
    pub fn fold(&self) -> Fold {
        match self.devices {
            Some(devices) if devices < self.stages && self.round_robin => {
                Fold::RoundRobin { devices }
            }
            Some(devices) if devices < self.stages => Fold::Blocks { devices },
            _ => Fold::OnePerStage,
        }
    }

    /// The cost model of one microbatch through a stage's whole share, link included.
    pub fn share_costs(&self) -> Costs {
        Costs {
            latency_ns: (self.latency.max(0.0) * UNIT_NS as f64).round() as u64,
            blocking_sends: self.wait_for_sends,
            ..Costs::compute_only(
                self.forward * UNIT_NS,
                self.backward * UNIT_NS,
                self.weight_grad * UNIT_NS,
            )
        }
    }
}

impl Default for LabParams {
    fn default() -> Self {
        Self {
            kind: ScheduleKind::OneFOneB,
            stages: 4,
            microbatches: 8,
            chunks: 2,
            forward: 1,
            backward: 1,
            weight_grad: 1,
            latency: 0.0,
            wait_for_sends: false,
            compared: CLASSIC_FOUR,
            slow_stage: 1,
            slow_factor: 1,
            devices: None,
            round_robin: false,
            memory: None,
        }
    }
}

impl LabParams {
    /// Chunks the schedule is built with: `v` for interleaved and looped BFS, 2 for the V and
    /// bidirectional schedules, 1 for the rest.
    pub fn effective_chunks(&self) -> usize {
        self.kind.chunks(self.chunks.max(2))
    }
}

/// What the lab's figure shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LabView {
    /// The chosen schedule.
    #[default]
    One,
    /// GPipe, 1F1B, interleaved and ZB-H1 stacked on one time axis.
    Compare,
}

/// The lab's state.
#[derive(Debug)]
pub struct BubbleLab {
    pub params: LabParams,
    /// Where the result comes from: computed here, or off the UI thread for large settings.
    study: Studying,
    pub result: Result<LabResult, String>,
    pub view: LabView,
    /// The animation over the figure's compute ops.
    pub player: Player,
    /// The figure as laid out last frame, and where it was painted (for export and tests).
    pub layout: Option<(Layout, egui::Rect)>,
    pub exporter: Exporter,
    /// Where "Export SVG"/"Export PNG" write (the extension is replaced).
    pub export_path: String,
    /// Only the figure and the player, for a lecture hall (Esc or the button returns).
    pub figure_only: bool,
    /// In figure only: scale the whole figure down into the window, its height too (it is laid
    /// out for the window's width already), so none of it scrolls.
    pub fit: bool,
    /// The scale the figure was painted at last frame: below 1 where its layout is wider than
    /// the window (a projector's type at 1280 px), or what `fit` chose.
    pub figure_scale: f32,
    /// The run on devices in progress, and what it is for.
    pending: Option<(RunShape, Job<Result<DeviceRun, String>>)>,
    /// The last run on devices, with the shape it ran (not necessarily the controls' now).
    pub measured: Option<(RunShape, Result<DeviceRun, String>)>,
}

impl Default for BubbleLab {
    fn default() -> Self {
        let mut lab = Self {
            params: LabParams::default(),
            study: Studying::default(),
            result: Err(String::new()),
            view: LabView::default(),
            player: Player::new([]),
            layout: None,
            exporter: Exporter::default(),
            export_path: "pipeline-figure.svg".into(),
            figure_only: false,
            fit: true,
            figure_scale: 1.0,
            pending: None,
            measured: None,
        };
        lab.recompute(None);
        lab
    }
}

impl BubbleLab {
    /// Brings the result up to the controls ([`Studying`]); `ctx` wakes the window when a study
    /// run off the UI thread ends.
    fn recompute(&mut self, ctx: Option<&egui::Context>) {
        if self.study.update(self.params, &mut self.result, ctx) {
            self.reset_player();
        }
    }

    /// The settings whose study runs off the UI thread now, while one does (the figure shown is
    /// the one before).
    pub fn computing(&self) -> Option<LabParams> {
        self.study.computing()
    }

    /// A new player over what the figure shows now.
    fn reset_player(&mut self) {
        self.player = match (&self.result, self.view) {
            (Ok(r), LabView::One) => Player::new([(&r.row().schedule, &r.row().sim)]),
            (Ok(r), LabView::Compare) => match &r.comparison {
                Ok(f) => Player::new(f.rows.iter().map(|row| (&row.schedule, &row.sim))),
                Err(_) => Player::new([]),
            },
            (Err(_), _) => Player::new([]),
        };
    }

    /// The figure the lab shows now.
    pub fn figure(&self) -> Option<&Figure> {
        let r = self.result.as_ref().ok()?;
        match self.view {
            LabView::One => Some(&r.figure),
            LabView::Compare => r.comparison.as_ref().ok(),
        }
    }

    /// What each stage is doing at `t_ns`: running an op, waiting for data, or done.
    pub fn stage_status(r: &FigureRow, t_ns: u64) -> Vec<String> {
        (0..r.schedule.stages)
            .map(|stage| {
                let running = r.sim.events.iter().find(|e| {
                    e.device == stage
                        && e.lane == Lane::Compute
                        && e.start_ns <= t_ns
                        && t_ns < e.end_ns
                });
                if let Some(e) = running {
                    // Microbatches count from 1, as on the blocks.
                    let mb = e.microbatch.map_or_else(String::new, |m| format!(" mb {}", m + 1));
                    return format!("stage {stage}: running {}{mb}", e.name);
                }
                let next = r
                    .sim
                    .order
                    .iter()
                    .filter(|o| o.stage == stage && o.at_ns > t_ns)
                    .min_by_key(|o| o.at_ns)
                    .and_then(|o| r.schedule.ops[stage].get(o.index));
                match next {
                    None => format!("stage {stage}: done"),
                    Some(op) => {
                        let peer = op.peer.map_or_else(|| "?".into(), |p| p.to_string());
                        match op.kind {
                            OpKind::RecvActivation => format!(
                                "stage {stage}: waits for the activation of mb {} from stage {peer}",
                                op.microbatch + 1
                            ),
                            OpKind::RecvGradient => format!(
                                "stage {stage}: waits for the gradient of mb {} from stage {peer}",
                                op.microbatch + 1
                            ),
                            _ => format!("stage {stage}: idle, next {op}"),
                        }
                    }
                }
            })
            .collect()
    }

    pub fn is_running(&self) -> bool {
        self.pending.is_some()
    }

    /// Starts a run of the current shape on `runtime`'s devices on a background thread.
    pub fn start_run(&mut self, runtime: Runtime, ctx: Option<egui::Context>) {
        let shape = RunShape::of(&self.params);
        match background::spawn("gangway-pipeline", ctx, move || {
            run_on_devices(&runtime, shape)
        }) {
            Ok(rx) => self.pending = Some((shape, rx)),
            Err(e) => self.measured = Some((shape, Err(e))),
        }
    }

    /// Picks up a finished run; true when one arrived.
    pub fn poll(&mut self) -> bool {
        let Some((shape, job)) = &self.pending else {
            return false;
        };
        let Some(result) = job.poll("the run") else {
            return false;
        };
        self.measured = Some((*shape, result.and_then(|r| r)));
        self.pending = None;
        true
    }

    /// `theme`: the figure's look (the app's projector setting).
    pub fn ui(&mut self, ui: &mut Ui, hub: &DeviceHub, theme: Theme) {
        self.poll();
        if self.figure_only {
            let esc = ui.input(|i| i.key_pressed(Key::Escape));
            ui.horizontal(|ui| {
                if ui.button("show the controls (Esc)").clicked() || esc {
                    self.figure_only = false;
                }
                ui.toggle_value(&mut self.fit, "fit")
                    .on_hover_text("scale the whole figure into the window: nothing to scroll");
            });
            self.recompute(Some(ui.ctx()));
            self.player_ui(ui);
            self.figure_ui(ui, theme);
            return;
        }
        ui.horizontal_wrapped(|ui| {
            ui.label("schedule:");
            for kind in ScheduleKind::ALL {
                ui.selectable_value(&mut self.params.kind, kind, label(kind));
            }
            ui.separator();
            let discovery = hub.get();
            let blocker = if self.is_running() {
                Some("a run is in progress".to_string())
            } else if let Err(e) = &self.result {
                Some(format!("this shape does not make a schedule: {e}"))
            } else {
                run_blocker(&RunShape::of(&self.params), &discovery)
            };
            let button = ui.add_enabled(blocker.is_none(), Button::new("Run on devices"));
            let button = match &blocker {
                Some(why) => button.on_disabled_hover_text(why),
                None => button.on_hover_text(
                    "train one MLP step with this schedule on the first p devices (or the fold's \
                     d) and measure it",
                ),
            };
            if button.clicked()
                && blocker.is_none()
                && let Some(runtime) = hub.runtime()
            {
                self.start_run(runtime, Some(ui.ctx().clone()));
            }
        });
        ui.horizontal_wrapped(|ui| {
            ui.add(Slider::new(&mut self.params.stages, 1..=16).text("stages p"));
            ui.add(Slider::new(&mut self.params.microbatches, 1..=64).text("microbatches m"));
            ui.add_enabled(
                self.params.kind.takes_chunks() || self.view == LabView::Compare,
                Slider::new(&mut self.params.chunks, 2..=8).text("chunks v"),
            );
        });
        ui.horizontal_wrapped(|ui| {
            ui.add(
                Slider::new(&mut self.params.latency, 0.0..=10.0)
                    .step_by(0.1)
                    .fixed_decimals(1)
                    .text("transfer cost"),
            )
            .on_hover_text(
                "each activation or gradient transfer between stages (1 = 1 µs, in steps of 0.1)",
            );
            ui.checkbox(
                &mut self.params.wait_for_sends,
                "stages wait for their sends",
            )
            .on_hover_text(
                "off: transfers overlap compute and only a late receive waits; on: a send \
                     holds its stage until the data has arrived",
            );
        });
        ui.horizontal_wrapped(|ui| {
            ui.label("one microbatch through a stage's model (1 = 1 µs):");
            ui.add(Slider::new(&mut self.params.forward, 1..=10).text("F"));
            ui.add(Slider::new(&mut self.params.backward, 1..=10).text("B"));
            ui.add(Slider::new(&mut self.params.weight_grad, 0..=10).text("W"));
        });
        ui.horizontal_wrapped(|ui| {
            // Moving F, B or W above re-plans zb-auto (and ZB-V) at once; this is its memory.
            let p = &mut self.params;
            let auto = p.kind == ScheduleKind::ZbAuto
                || (self.view == LabView::Compare
                    && p.compared_kinds().contains(&ScheduleKind::ZbAuto));
            let mut k = p.memory.unwrap_or(p.stages);
            let most = p.microbatches.max(p.stages).max(1);
            let slider = ui.add_enabled(
                auto,
                Slider::new(&mut k, 1..=most).text("zb-auto memory (activations a stage)"),
            );
            if slider.changed() {
                p.memory = Some(k);
            }
            slider.on_hover_text(
                "the most microbatches a stage holds between their F and W: zb-auto plans the \
                 shortest schedule it finds under it (p: ZB-H1's memory, and 1F1B's)",
            );
            if ui
                .add_enabled(auto && p.memory.is_some(), Button::new("= p"))
                .on_hover_text("back to p, ZB-H1's memory")
                .clicked()
            {
                p.memory = None;
            }
        });
        ui.horizontal_wrapped(|ui| {
            let last = self.params.stages.saturating_sub(1);
            self.params.slow_stage = self.params.slow_stage.min(last);
            ui.add(Slider::new(&mut self.params.slow_stage, 0..=last).text("slow stage"))
                .on_hover_text("uneven stages: the stage whose ops cost more");
            ui.add(Slider::new(&mut self.params.slow_factor, 1..=4).text("its cost ×"))
                .on_hover_text(
                    "1: even stages; 2: that stage's F, B and W take twice as long (more \
                     layers, or a slower device), and it sets the pace",
                );
        });
        ui.horizontal_wrapped(|ui| {
            let p = &mut self.params;
            let mut fewer = p.devices.is_some();
            ui.checkbox(&mut fewer, "fewer devices than stages")
                .on_hover_text(
                    "several stages to a device: a device runs one op at a time, whichever of \
                     its stages' next ops can start first; a hand-off between two of its stages \
                     is free",
                );
            if !fewer {
                p.devices = None;
                return;
            }
            let most = p.stages.saturating_sub(1).max(1);
            let mut d = p.devices.unwrap_or(p.stages / 2).clamp(1, most);
            ui.add(Slider::new(&mut d, 1..=most).text("devices"));
            p.devices = Some(d);
            ui.selectable_value(&mut p.round_robin, false, "blocks")
                .on_hover_text("consecutive stages share a device: 0, 1 | 2, 3");
            ui.selectable_value(&mut p.round_robin, true, "round robin")
                .on_hover_text("stage s on device s mod d: 0, 2 | 1, 3, as Megatron places chunks");
        });
        self.recompute(Some(ui.ctx()));
        self.simulated_ui(ui, theme);
        self.measured_ui(ui);
    }

    /// The simulation of the controls' shape: bubble, formula, the figure with its animation
    /// and export.
    fn simulated_ui(&mut self, ui: &mut Ui, theme: Theme) {
        if let Some(p) = self.study.computing() {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label(format!(
                    "studying {} at p = {}, m = {} off the UI thread; the figure below is the \
                     one before",
                    label(p.kind),
                    p.stages,
                    p.microbatches
                ));
            });
        }
        let r = match &self.result {
            Ok(r) => r,
            Err(e) => {
                ui.colored_label(ui.visuals().error_fg_color, format!("error: {e}"));
                return;
            }
        };
        let row = r.row();
        let p = &self.params;
        ui.separator();
        ui.horizontal_wrapped(|ui| {
            ui.label(RichText::new(formula_line(p, row)).monospace());
        });
        ui.horizontal_wrapped(|ui| {
            ui.label(
                RichText::new(format!(
                    "bubble (simulated): {:.1}%",
                    row.sim.bubble_fraction * 100.0
                ))
                .strong(),
            );
            ui.label(format!(
                "= {:.1}% over the ideal time",
                row.sim.bubble_over_ideal() * 100.0
            ))
            .on_hover_text(
                "the Ultra-Scale Playbook's convention: (makespan − ideal) / ideal, (p − 1)/m for \
                 1F1B; the first is idle time over devices × makespan",
            );
            ui.separator();
            ui.label(format!("textbook: {}", percent(r.textbook)));
            ui.separator();
            ui.label(format!(
                "makespan {}",
                format_ns(row.sim.makespan_ns as f64)
            ));
            if p.kind == ScheduleKind::ZbH1
                && !(p.forward == p.backward && p.backward == p.weight_grad)
            {
                ui.weak("(textbook assumes F = B = W)");
            }
            if !row.schedule.split_backward && p.weight_grad > 0 {
                ui.weak("(W folded into B)");
            }
            if row.folded() {
                ui.weak("(textbook: a device per stage)");
            }
        });
        if let Some(o) = r.optimum {
            ui.horizontal_wrapped(|ui| {
                ui.label(o.text()).on_hover_text(
                    "the shortest schedule of this one's family (one chunk a stage with B and W \
                     split; two chunks in a V with B and W split; two looped chunks with whole \
                     backwards) under the same costs, holding no more activations a stage than \
                     this one: a branch and bound, for p ≤ 4 and m ≤ 6 with one chunk, m ≤ 4 \
                     with two",
                );
            });
        }
        ui.horizontal_wrapped(|ui| {
            let per = TrackKind::of_pipeline(row.folded()).word();
            ui.label(format!("peak activations per {per}: {}", row.peak_text()))
                .on_hover_text(
                    "microbatches' worth of a stage's activations, as the bars show (a chunk of \
                     v holds 1/v of one)",
                );
            ui.separator();
            ui.label(format!(
                "parameter copies: {}",
                row.schedule.kind.parameter_copies()
            ));
        });
        ui.separator();
        let view = self.view;
        ui.horizontal_wrapped(|ui| {
            ui.label("figure:");
            ui.selectable_value(&mut self.view, LabView::One, "this schedule");
            ui.selectable_value(&mut self.view, LabView::Compare, "compare")
                .on_hover_text(
                    "the schedules ticked below at the same p, m and total cost, on one time \
                     axis (interleaved and BFS: v chunks of F/v each; V schedules: 2 of F/2)",
                );
            ui.separator();
            ui.toggle_value(&mut self.figure_only, "figure only")
                .on_hover_text("hide the controls: the figure and the player alone (Esc returns)");
        });
        if self.view == LabView::Compare {
            ui.horizontal_wrapped(|ui| {
                ui.label("compare:");
                for (i, kind) in ScheduleKind::ALL.into_iter().enumerate() {
                    let mut on = self.params.compared & (1 << i) != 0;
                    if ui.checkbox(&mut on, kind.title()).changed() {
                        self.params.compared ^= 1 << i;
                    }
                }
            });
            if let Ok(LabResult {
                comparison: Ok(f), ..
            }) = &self.result
            {
                for (kind, why) in &f.left_out {
                    ui.weak(format!("left out {}: {why}", kind.title()));
                }
            }
        }
        if self.view != view {
            self.reset_player();
        }
        self.player_ui(ui);
        self.export_ui(ui);
        self.figure_ui(ui, theme);
    }

    /// The figure at the width there is, its hover text, and each stage's status while the
    /// player is at an op.
    fn figure_ui(&mut self, ui: &mut Ui, theme: Theme) {
        let Some(figure) = self.figure() else {
            if let Ok(LabResult {
                comparison: Err(e), ..
            }) = &self.result
            {
                ui.colored_label(
                    ui.visuals().error_fg_color,
                    format!("no ticked schedule can take this shape: {e}"),
                );
            }
            return;
        };
        // Laid out for the width there is now: a resize or a zoom refits it.
        let width = ui.available_width();
        let mut layout = figure.layout(width, theme, self.player.at_ns());
        // A layout wider than the window (its columns and a projector's type need more than
        // 1280 px for some shapes) is drawn smaller rather than cut off at the right. Fit goes
        // further: the whole figure in what is left of the window, above the stages' lines.
        let mut scale = (width / layout.width).min(1.0);
        if self.figure_only && self.fit {
            let status = match (self.view, self.player.at_ns()) {
                (LabView::One, Some(_)) => figure
                    .rows
                    .first()
                    .map_or(0.0, |r| r.schedule.stages as f32),
                _ => 0.0,
            };
            let line =
                ui.text_style_height(&egui::TextStyle::Monospace) + ui.spacing().item_spacing.y;
            let height = ui.clip_rect().bottom() - ui.cursor().top() - status * line;
            scale = (width / layout.width).min(height / layout.height);
            if scale > 0.0 && scale < width / layout.width {
                // Too tall: lay it out wider by as much as it shrinks, so it still spans the
                // window (its time axis longer, its height about the same).
                layout = figure.layout(width / scale, theme, self.player.at_ns());
                scale = (width / layout.width).min(height / layout.height);
            }
        }
        let scale = if scale.is_finite() && scale > 0.0 {
            scale
        } else {
            1.0
        };
        let (response, rect) = paint::figure(ui, &layout, scale);
        if let Some(pos) = response.hover_pos()
            && let Some(b) = paint::block_at(&layout, rect.min, scale, pos)
        {
            let row = figure.rows.get(b.row).map_or("", |r| r.title.as_str());
            let kind = match b.block.kind {
                OpKind::Forward => "forward F",
                OpKind::Backward => "backward B",
                _ => "weight-grad W",
            };
            let mb = b
                .block
                .microbatch
                .map_or_else(String::new, |m| format!(" of microbatch {}", m + 1));
            // The lane: a stage, or a device when folded (its chunk then counts the device's).
            let lane = figure
                .rows
                .get(b.row)
                .map_or_else(String::new, |r| r.lane_name(b.block.stage));
            timeline::tooltip_at_pointer(&response, |ui| {
                ui.label(format!(
                    "{row}: {kind}{mb}, chunk {}, on {lane}, {} to {}",
                    b.block.chunk,
                    format_ns(b.block.start_ns as f64),
                    format_ns(b.block.end_ns as f64)
                ));
            });
        }
        self.layout = Some((layout, rect));
        self.figure_scale = scale;
        if self.view == LabView::One
            && let Some(t) = self.player.at_ns()
            && let Ok(r) = &self.result
        {
            for line in Self::stage_status(r.row(), t) {
                ui.monospace(line);
            }
        }
    }

    /// Play/pause, speed and stepping (also ← / → and space while no text field has focus).
    fn player_ui(&mut self, ui: &mut Ui) {
        if !ui.ctx().egui_wants_keyboard_input() {
            let (left, right, space) = ui.input(|i| {
                (
                    i.key_pressed(Key::ArrowLeft),
                    i.key_pressed(Key::ArrowRight),
                    i.key_pressed(Key::Space),
                )
            });
            if left || right {
                self.player.step_by(right);
            }
            if space {
                self.player.toggle_play();
            }
        }
        let total = self.player.total();
        ui.horizontal_wrapped(|ui| {
            let play = if self.player.playing { "Pause" } else { "Play" };
            if ui.button(play).on_hover_text("space").clicked() {
                self.player.toggle_play();
            }
            if ui.button("< step").on_hover_text("←").clicked() {
                self.player.step_by(false);
            }
            if ui.button("step >").on_hover_text("→").clicked() {
                self.player.step_by(true);
            }
            let mut step = self.player.step();
            if ui
                .add(Slider::new(&mut step, 0..=total).text("step"))
                .on_hover_text(
                    "one step per time at which ops start (ops starting together are one)",
                )
                .changed()
            {
                self.player.playing = false;
                self.player.set_step(step);
            }
            let mut units = self.player.speed_ns_per_s / UNIT_NS as f64;
            if ui
                .add(
                    Slider::new(&mut units, 0.5..=50.0)
                        .logarithmic(true)
                        .text("speed (units/s)"),
                )
                .changed()
            {
                self.player.speed_ns_per_s = units * UNIT_NS as f64;
            }
        });
        if self.player.playing {
            let dt = ui.input(|i| f64::from(i.unstable_dt).min(0.1));
            if self.player.advance(dt) {
                ui.ctx().request_repaint();
            }
        }
        match (self.player.step(), self.player.at_ns()) {
            (0, _) | (_, None) => {
                ui.weak(
                    "play, or step from one op start to the next (← / →): ops not yet started \
                     are dimmed",
                );
            }
            (k, Some(t)) => {
                ui.label(format!(
                    "{}/{} ops started by {} (step {k}/{total})",
                    self.player.started(),
                    self.player.ops(),
                    format_ns(t as f64)
                ));
            }
        }
    }

    /// Export the figure as SVG or PNG.
    fn export_ui(&mut self, ui: &mut Ui) {
        self.exporter.poll();
        ui.horizontal_wrapped(|ui| {
            ui.label("export to:");
            ui.add(egui::TextEdit::singleline(&mut self.export_path).desired_width(260.0))
                .labelled_by(ui.label("(path)").id);
            let busy = self.exporter.is_busy();
            let path = PathBuf::from(self.export_path.trim());
            for (format, hover) in [
                (
                    Format::Svg,
                    "the figure as shown, as SVG (same as gangway pipeline --svg)",
                ),
                (
                    Format::Png,
                    "the whole figure as an image, drawn off screen at 2× its size",
                ),
            ] {
                let name = format!("Export {}", format.extension().to_uppercase());
                if ui
                    .add_enabled(!busy, Button::new(name))
                    .on_hover_text(hover)
                    .clicked()
                    && let Some((layout, _)) = &self.layout
                {
                    let target = path.with_extension(format.extension());
                    self.exporter
                        .export(layout, format, target, false, ui.ctx());
                }
            }
            if busy {
                ui.spinner();
            }
            if let Some((format, target)) = self.exporter.confirm.clone() {
                ui.colored_label(
                    ui.visuals().warn_fg_color,
                    format!("{} exists. Replace it?", target.display()),
                );
                if ui.button("Overwrite").clicked()
                    && let Some((layout, _)) = &self.layout
                {
                    self.exporter.export(layout, format, target, true, ui.ctx());
                } else if ui.button("Cancel").clicked() {
                    // Nothing written, nothing to report: the file is as it was.
                    self.exporter.confirm = None;
                    self.exporter.last = None;
                }
                return;
            }
            match &self.exporter.last {
                Some(Ok(p)) => {
                    ui.label(format!("wrote {}", p.display()));
                }
                Some(Err(e)) => {
                    ui.colored_label(ui.visuals().error_fg_color, format!("export failed: {e}"));
                }
                None => {}
            }
        });
    }

    /// The last run on devices, labelled with the shape it ran.
    fn measured_ui(&mut self, ui: &mut Ui) {
        if self.pending.is_none() && self.measured.is_none() {
            return;
        }
        ui.separator();
        ui.heading("Measured on devices");
        if let Some((shape, _)) = &self.pending {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label(format!("running {} on devices…", shape.describe()));
            });
            ui.ctx()
                .request_repaint_after(std::time::Duration::from_millis(100));
        }
        let current = RunShape::of(&self.params);
        let Some((shape, result)) = &mut self.measured else {
            return;
        };
        ui.horizontal_wrapped(|ui| {
            ui.label(RichText::new(format!("run: {}", shape.describe())).strong());
            if *shape != current {
                ui.colored_label(
                    ui.visuals().warn_fg_color,
                    "(the controls have changed since: this is not the schedule above; run \
                     again to measure it)",
                );
            }
        });
        let run = match result {
            Ok(run) => run,
            Err(e) => {
                ui.colored_label(ui.visuals().error_fg_color, format!("run failed: {e}"));
                return;
            }
        };
        let r = &run.result;
        ui.horizontal_wrapped(|ui| {
            ui.label(
                RichText::new(format!(
                    "bubble (measured): {:.1}%",
                    r.bubble_measured * 100.0
                ))
                .strong(),
            );
            ui.separator();
            ui.label(format!(
                "bubble (simulated from measured op times): {:.1}%",
                r.bubble_simulated * 100.0
            ));
            ui.separator();
            ui.label(format!("textbook formula: {}", percent(r.bubble_textbook)));
        });
        ui.horizontal_wrapped(|ui| {
            ui.label(format!("step time {}", format_ns(r.step_ms * 1e6)));
            ui.separator();
            ui.label(format!("{:.0} samples/s", r.samples_per_s));
            ui.separator();
            ui.label(format!(
                "max weight error vs single-device step: {:.2e}",
                r.max_weight_error
            ));
        });
        let c = &run.measured;
        ui.weak(format!(
            "measured per op: F {}, B {}, W {}, transfer {}",
            format_ns(c.forward_ns as f64),
            format_ns(c.backward_ns as f64),
            format_ns(c.weight_grad_ns as f64),
            format_ns(c.latency_ns as f64)
        ));
        // The lab's page scrolls: the measured run shows all its lanes, the pipeline's whole
        // shape at once (at 1280 × 820 the room left under the figure held about 3).
        run.timeline.every_row = true;
        timeline::timeline(ui, "bubble-lab-measured", &run.data, &mut run.timeline);
    }
}
