//! MoE training (`gangway train moe`) on the discovered devices, in the background: the
//! cross-entropy curve with validation as markers, the regularizers (aux and z loss, and the
//! total's part beyond the cross-entropy, which on the loss plot hid under it), the fraction of
//! routing choices dropped by expert capacity, tokens per second, validation bits per byte, and
//! a bar chart of the tokens each expert kept against its capacity (a dashed line), at the
//! latest step or (with the step slider) at any earlier one.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use egui::{Button, RichText, Slider, Ui};
use egui_plot::{
    Bar, BarChart, HLine, Legend, Line, LineStyle, MarkerShape, Plot, PlotPoints, Points,
};
use gangway::Device;
use gangway::data::Corpus;
use gangway::live::LiveServer;
use gangway::moe::{MoeLmConfig, MoeLmParams};
use gangway::sched::Runtime;
use gangway::train::StepStats;
use gangway::train::{Progress, TrainOptions, TrainReport, train};

use crate::background::{self, Stream};
use crate::live::{DeviceHub, Discovery};

/// Expert counts offered.
pub const EXPERT_CHOICES: [usize; 5] = [2, 4, 8, 16, 32];

/// Validation windows scored (every `eval_every` steps and at the end).
const EVAL_WINDOWS: usize = 1024;

/// What a run trains: the model is `gangway train moe`'s default one with these router
/// settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoeSettings {
    pub experts: usize,
    pub top_k: usize,
    pub capacity_factor: f32,
    /// The first this many discovered devices; each holds `experts / devices` experts.
    pub devices: usize,
    pub steps: u32,
    /// Tokens per step over all devices.
    pub batch: usize,
    /// Validate every this many steps (0: only at the end).
    pub eval_every: u32,
}

impl Default for MoeSettings {
    fn default() -> Self {
        Self {
            experts: 8,
            top_k: 2,
            capacity_factor: 1.25,
            devices: 1,
            steps: 200,
            batch: 128,
            eval_every: 50,
        }
    }
}

impl MoeSettings {
    /// `gangway train moe`'s default model (context 16, embed 16, model 64, hidden 128, one
    /// block) with these router settings.
    pub fn config(&self) -> MoeLmConfig {
        MoeLmConfig {
            context: 16,
            embed: 16,
            model: 64,
            hidden: 128,
            experts: self.experts,
            top_k: self.top_k,
            capacity_factor: self.capacity_factor,
            blocks: 1,
            aux_alpha: 0.01,
            z_loss: 0.0,
            normalize_gates: true,
            seed: 0,
        }
    }

    pub fn options(&self, stop: Arc<AtomicBool>) -> TrainOptions {
        TrainOptions {
            steps: self.steps,
            batch: self.batch,
            lr: 3e-3,
            eval_units: EVAL_WINDOWS,
            eval_every: self.eval_every,
            data_seed: 1,
            stop: Some(stop),
            ..TrainOptions::default()
        }
    }

    /// The most (token, choice) pairs one expert can keep in a step, summed as
    /// [`StepStats::tokens_per_expert`] sums them: over blocks, and over the routing groups (one
    /// per device, each of `batch / devices` tokens with the router's capacity).
    pub fn expert_capacity(&self) -> usize {
        let config = self.config();
        let devices = self.devices.max(1);
        config.router().capacity(self.batch / devices) * devices * config.blocks
    }

    /// The (token, choice) pairs a step routes: every token of the batch picks `top_k` experts
    /// in each block. The capacity is built on an even share of these.
    pub fn choices(&self) -> usize {
        self.batch * self.top_k * self.config().blocks
    }

    /// E.g. "8 experts, top-2, capacity 1.25, 1 device, 200 steps of 128 tokens".
    pub fn describe(&self) -> String {
        format!(
            "{} experts, top-{}, capacity {:.2}, {} device{}, {} steps of {} tokens",
            self.experts,
            self.top_k,
            self.capacity_factor,
            self.devices,
            if self.devices == 1 { "" } else { "s" },
            self.steps,
            self.batch
        )
    }
}

/// Why these settings cannot start with what discovery found, if they cannot.
pub fn start_blocker(s: &MoeSettings, discovery: &Discovery) -> Option<String> {
    let found = match discovery {
        Discovery::Pending => return Some("looking for adapters...".into()),
        Discovery::Unavailable(why) => return Some(format!("real runs are off: {why}")),
        Discovery::Found(devices) => devices.len(),
    };
    if s.devices == 0 || s.devices > found {
        return Some(format!(
            "needs {} devices, {found} found: start the viewer with --virtual-devices {} (or \
             GANGWAY_VIRTUAL_DEVICES) to split each adapter, or use fewer devices",
            s.devices,
            s.devices.div_ceil(found.max(1))
        ));
    }
    if !s.experts.is_multiple_of(s.devices) {
        return Some(format!(
            "{} experts cannot be split evenly over {} devices: each device holds experts / \
             devices experts, so the expert count must be divisible by the device count",
            s.experts, s.devices
        ));
    }
    if s.batch == 0 || !s.batch.is_multiple_of(s.devices) {
        return Some(format!(
            "a batch of {} tokens cannot be split evenly over {} devices",
            s.batch, s.devices
        ));
    }
    if s.top_k == 0 || s.top_k > s.experts {
        return Some(format!(
            "top-{} routing needs at least {} experts",
            s.top_k, s.top_k
        ));
    }
    if s.steps == 0 {
        return Some("train at least one step".into());
    }
    s.config().validate().err().map(|e| e.to_string())
}

/// Loads the bundled corpus and trains `settings` on `devices` of `runtime`, as one of its
/// clients (blocking: call it off the UI thread), reporting every step through `progress`. Its
/// kernels appear on the live timeline, as every run on the app's runtime does.
pub fn run_training(
    runtime: &Runtime,
    devices: &[Device],
    settings: MoeSettings,
    stop: Arc<AtomicBool>,
    progress: impl FnMut(&Progress),
) -> Result<TrainReport<MoeLmConfig>, String> {
    let corpus = Corpus::bundled_all().map_err(|e| format!("cannot load the corpus: {e}"))?;
    let start = MoeLmParams::init(settings.config()).map_err(|e| e.to_string())?;
    train(
        &runtime.client("viewer: MoE training", 1),
        &gangway::Mesh::line(devices),
        &corpus,
        &start,
        &settings.options(stop),
        progress,
    )
    .map_err(|e| e.to_string())
}

/// A run in progress.
#[derive(Debug)]
struct Running {
    stream: Stream<Progress, Result<TrainReport<MoeLmConfig>, String>>,
    stop: Arc<AtomicBool>,
}

/// The panel's state: the controls, the run in progress, and the history of the last run.
#[derive(Debug, Default)]
pub struct MoePanel {
    pub settings: MoeSettings,
    running: Option<Running>,
    /// The settings of the run shown (in progress or finished).
    pub ran: Option<MoeSettings>,
    /// Every step of that run so far.
    pub history: Vec<StepStats>,
    /// Validation bits per byte at the steps that evaluated.
    pub valid: Vec<(u32, f64)>,
    pub tokens_per_s: f64,
    pub report: Option<TrainReport<MoeLmConfig>>,
    pub error: Option<String>,
    /// The step whose tokens per expert are drawn; `None`: the latest.
    pub shown_step: Option<usize>,
}

impl MoePanel {
    pub fn is_running(&self) -> bool {
        self.running.is_some()
    }

    /// Whether Stop was pressed on the run in progress.
    pub fn is_stopping(&self) -> bool {
        self.running
            .as_ref()
            .is_some_and(|r| r.stop.load(Ordering::Relaxed))
    }

    /// Asks the run in progress to stop after its current step.
    pub fn stop(&self) {
        if let Some(r) = &self.running {
            r.stop.store(true, Ordering::Relaxed);
        }
    }

    /// Starts training the current settings on the first `settings.devices` of `runtime`'s.
    /// Each step's metrics are also published on `served`, the stream of the viewer's runs
    /// (`gangway watch` and other viewers see the loss as they see a CLI job's).
    pub fn start(
        &mut self,
        runtime: Runtime,
        served: Option<Arc<LiveServer>>,
        ctx: Option<egui::Context>,
    ) {
        let devices = runtime.devices();
        if self.running.is_some() {
            return;
        }
        let settings = self.settings;
        self.ran = Some(settings);
        self.history.clear();
        self.valid.clear();
        self.tokens_per_s = 0.0;
        self.report = None;
        self.error = None;
        self.shown_step = None;
        let Some(devices) = devices.get(..settings.devices).map(<[Device]>::to_vec) else {
            self.error = Some(format!(
                "needs {} devices, {} found",
                settings.devices,
                devices.len()
            ));
            return;
        };
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = stop.clone();
        let spawned = background::spawn_stream("gangway-moe-train", ctx, move |sink| {
            let lr = settings.options(thread_stop.clone()).lr;
            run_training(&runtime, &devices, settings, thread_stop, |p| {
                if let Some(server) = &served {
                    for m in p.metrics(lr) {
                        server.publish_metric(m);
                    }
                }
                sink.send(p.clone());
            })
        });
        match spawned {
            Ok(stream) => self.running = Some(Running { stream, stop }),
            Err(e) => self.error = Some(format!("cannot start training: {e}")),
        }
    }

    /// Takes in everything the run sent since the last call; true when something arrived.
    pub fn poll(&mut self) -> bool {
        let Some(running) = &self.running else {
            return false;
        };
        let (progress, finished) = running.stream.poll("training");
        let mut any = !progress.is_empty();
        for p in progress {
            self.tokens_per_s = p.tokens_per_s;
            if let Some(bpb) = p.valid_bpb {
                self.valid.push((p.stats.step, bpb));
            }
            self.history.push(p.stats);
        }
        let finished = finished.map(|r| r.and_then(|r| r));
        if let Some(result) = finished {
            any = true;
            self.running = None;
            match result {
                Ok(report) => {
                    self.tokens_per_s = report.tokens_per_s;
                    self.report = Some(report);
                }
                Err(e) => self.error = Some(e),
            }
        }
        any
    }

    pub fn ui(&mut self, ui: &mut Ui, hub: &DeviceHub) {
        self.poll();
        let discovery = hub.get();
        if let Discovery::Unavailable(why) = &discovery {
            ui.colored_label(
                ui.visuals().warn_fg_color,
                format!("MoE training is off: real runs are off: {why}"),
            );
        }
        self.controls_ui(ui, &discovery, hub);
        self.run_ui(ui);
    }

    fn controls_ui(&mut self, ui: &mut Ui, discovery: &Discovery, hub: &DeviceHub) {
        let runtime = hub.runtime();
        let running = self.is_running();
        let found = match discovery {
            Discovery::Found(d) => d.len(),
            _ => 0,
        };
        ui.add_enabled_ui(!running, |ui| {
            ui.horizontal_wrapped(|ui| {
                ui.label("experts:");
                for e in EXPERT_CHOICES {
                    ui.selectable_value(&mut self.settings.experts, e, format!("{e} experts"));
                }
                ui.separator();
                ui.label("routing:");
                ui.selectable_value(&mut self.settings.top_k, 1, "top-1 (Switch)");
                ui.selectable_value(&mut self.settings.top_k, 2, "top-2 (GShard)");
            });
            ui.horizontal_wrapped(|ui| {
                ui.add(
                    Slider::new(&mut self.settings.capacity_factor, 0.5..=4.0)
                        .step_by(0.05)
                        .text("capacity factor"),
                );
                ui.add(Slider::new(&mut self.settings.devices, 1..=found.max(1)).text("devices"));
                ui.add(
                    Slider::new(&mut self.settings.steps, 1..=2000)
                        .logarithmic(true)
                        .text("steps"),
                );
                ui.add(
                    Slider::new(&mut self.settings.batch, 16..=512)
                        .logarithmic(true)
                        .text("batch (tokens)"),
                );
                ui.add(Slider::new(&mut self.settings.eval_every, 0..=500).text("validate every"));
            });
        });
        let blocker = if running {
            Some("training is in progress".to_string())
        } else {
            start_blocker(&self.settings, discovery)
        };
        ui.horizontal_wrapped(|ui| {
            let start = ui.add_enabled(blocker.is_none(), Button::new("Start training"));
            let start = match &blocker {
                Some(why) => start.on_disabled_hover_text(why),
                None => start.on_hover_text(format!("train {}", self.settings.describe())),
            };
            if start.clicked()
                && blocker.is_none()
                && let Some(runtime) = runtime
            {
                self.start(runtime, hub.server(), Some(ui.ctx().clone()));
            }
            let stop = ui.add_enabled(running && !self.is_stopping(), Button::new("Stop"));
            if stop
                .on_hover_text("stop after the current step (then validate once)")
                .clicked()
            {
                self.stop();
            }
        });
        if !running
            && let Some(why) = &blocker
            && matches!(discovery, Discovery::Found(_))
        {
            ui.colored_label(ui.visuals().error_fg_color, format!("cannot start: {why}"));
        }
    }

    fn run_ui(&mut self, ui: &mut Ui) {
        let Some(ran) = self.ran else {
            ui.weak("start a run to see its loss, routing and expert load");
            return;
        };
        ui.separator();
        // The note shares the run's line: on a line of its own it pushed every plot down.
        ui.horizontal_wrapped(|ui| {
            ui.label(RichText::new(format!("run: {}", ran.describe())).strong());
            if ran != self.settings {
                ui.weak("(the controls have changed since: start again to train them)");
            }
        });
        if self.is_running() {
            ui.horizontal(|ui| {
                ui.spinner();
                let done = self.history.last().map_or(0, |s| s.step);
                if self.is_stopping() {
                    ui.label(format!("stopping after step {done}…"));
                } else {
                    ui.label(format!("training: step {done} of {}", ran.steps));
                }
            });
            ui.ctx()
                .request_repaint_after(std::time::Duration::from_millis(100));
        }
        if let Some(e) = &self.error {
            ui.colored_label(ui.visuals().error_fg_color, format!("training failed: {e}"));
        }
        if let Some(r) = &self.report {
            let stopped = if r.steps < ran.steps {
                format!("stopped after {} of {} steps", r.steps, ran.steps)
            } else {
                format!("finished {} steps", r.steps)
            };
            ui.label(format!(
                "{stopped} in {:.1} s; validation {:.3} bpb (unigram baseline {:.3} bpb); mean \
                 dropped {:.1}%; mean expert spread (cv) {:.2}; {} parameters",
                r.seconds,
                r.valid_bpb,
                r.unigram_bpb,
                r.mean_dropped_fraction * 100.0,
                r.mean_expert_cv,
                r.parameters
            ));
        }
        let Some(last) = self.history.last() else {
            return;
        };
        ui.horizontal_wrapped(|ui| {
            ui.label(RichText::new(format!("loss (ce): {:.3}", last.ce)).strong());
            ui.separator();
            ui.label(format!("total loss: {:.3}", last.loss));
            ui.separator();
            ui.label(format!("aux loss: {:.4}", last.aux));
            ui.separator();
            ui.label(format!("dropped: {:.1}%", last.dropped_fraction * 100.0));
            ui.separator();
            ui.label(format!("expert spread (cv): {:.2}", last.expert_cv()));
            ui.separator();
            ui.label(format!("tokens/s: {:.0}", self.tokens_per_s));
            if let Some((step, bpb)) = self.valid.last() {
                ui.separator();
                ui.label(format!("validation: {bpb:.3} bpb at step {step}"));
            }
        });
        let height = 180.0;
        let series = |f: fn(&StepStats) -> f64| -> Vec<[f64; 2]> {
            self.history
                .iter()
                .map(|s| [f64::from(s.step), f(s)])
                .collect()
        };
        ui.label("loss per step");
        Plot::new("moe-loss")
            .legend(Legend::default())
            .height(height)
            .x_axis_label("step")
            .y_axis_label("nats")
            .show(ui, |plot| {
                plot.line(Line::new(
                    "cross-entropy",
                    PlotPoints::from(series(|s| s.ce)),
                ));
                if !self.valid.is_empty() {
                    // Markers: a validation is a few points, often one; a line of one point
                    // draws nothing.
                    plot.points(
                        Points::new(
                            "validation (nats)",
                            PlotPoints::from(validation_nats(&self.valid)),
                        )
                        .radius(5.0)
                        .shape(MarkerShape::Diamond)
                        .filled(true),
                    );
                }
            });
        ui.columns(2, |cols| {
            // The total is cross-entropy plus these: on the loss plot it drew over the
            // cross-entropy as one line, so its part beyond the cross-entropy is drawn here.
            cols[0].label("regularizers per step: total − cross-entropy = aux + z");
            Plot::new("moe-aux")
                .legend(Legend::default())
                .height(height)
                .x_axis_label("step")
                .include_y(0.0)
                .show(&mut cols[0], |plot| {
                    plot.line(Line::new("aux loss", PlotPoints::from(series(|s| s.aux))));
                    plot.line(Line::new("z loss", PlotPoints::from(series(|s| s.z))));
                    plot.line(
                        Line::new(
                            "total − cross-entropy",
                            PlotPoints::from(series(|s| s.loss - s.ce)),
                        )
                        .style(LineStyle::dashed_loose()),
                    );
                });
            cols[1].label("dropped fraction per step (%)");
            Plot::new("moe-dropped")
                .height(height)
                .x_axis_label("step")
                .include_y(0.0)
                .show(&mut cols[1], |plot| {
                    plot.line(Line::new(
                        "dropped %",
                        PlotPoints::from(series(|s| s.dropped_fraction * 100.0)),
                    ));
                });
        });
        self.experts_ui(ui, ran);
    }

    /// Tokens per expert at the chosen step, with a slider over the history.
    fn experts_ui(&mut self, ui: &mut Ui, ran: MoeSettings) {
        let total = self.history.len();
        if total == 0 {
            return;
        }
        let mut shown = self.shown_step.unwrap_or(total).clamp(1, total);
        ui.horizontal(|ui| {
            let slider = ui.add(Slider::new(&mut shown, 1..=total).text("step shown"));
            if slider.changed() {
                self.shown_step = (shown < total).then_some(shown);
            }
            if ui
                .add_enabled(self.shown_step.is_some(), Button::new("latest"))
                .clicked()
            {
                self.shown_step = None;
                shown = total;
            }
        });
        let Some(stats) = self.history.get(shown - 1) else {
            return;
        };
        let kept: usize = stats.tokens_per_expert.iter().sum();
        let experts = stats.tokens_per_expert.len().max(1);
        // Both lines count (token, choice) pairs over the step, and "even share" is only ever
        // the choices' (what the capacity is built on), never the kept ones': the kept mean is
        // lower by the drops and is named as such.
        let choices = ran.choices();
        ui.label(format!(
            "tokens per expert at step {} (kept {kept} of {choices} choices, {:.1} per expert on \
             average; dropped {:.1}%; spread (cv) {:.2})",
            stats.step,
            kept as f64 / experts as f64,
            stats.dropped_fraction * 100.0,
            stats.expert_cv()
        ));
        let capacity = ran.expert_capacity();
        ui.label(format!(
            "capacity: {capacity} per expert = capacity factor {:.2} × an even share of the \
             choices ({choices} / {experts} = {}), rounded up per routing group (dashed line; a \
             choice past it is dropped)",
            ran.capacity_factor,
            trim(choices as f64 / experts as f64),
        ));
        let per_device = (ran.experts / ran.devices.max(1)).max(1);
        let bars: Vec<Bar> = stats
            .tokens_per_expert
            .iter()
            .enumerate()
            .map(|(e, &n)| {
                Bar::new(e as f64, n as f64)
                    .width(0.8)
                    .name(format!("expert {e} (device {})", e / per_device))
            })
            .collect();
        Plot::new("moe-experts")
            .height(200.0)
            .x_axis_label("expert")
            .y_axis_label("tokens kept")
            .include_y(0.0)
            .include_y(capacity as f64 * 1.05)
            .show(ui, |plot| {
                plot.bar_chart(BarChart::new("tokens per expert", bars));
                plot.hline(
                    HLine::new("capacity", capacity as f64)
                        .style(LineStyle::dashed_loose())
                        .width(2.0),
                );
            });
    }
}

/// `x` with at most one decimal and none when whole: "32", "25.6".
fn trim(x: f64) -> String {
    let s = format!("{x:.1}");
    s.strip_suffix(".0")
        .map_or_else(|| s.clone(), str::to_owned)
}

/// Validation scores as `[step, nats per byte]`, from bits per byte: the loss plot's unit.
pub fn validation_nats(valid: &[(u32, f64)]) -> Vec<[f64; 2]> {
    valid
        .iter()
        .map(|(s, b)| [f64::from(*s), b * std::f64::consts::LN_2])
        .collect()
}
