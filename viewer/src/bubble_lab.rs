//! The pipeline bubble lab: pick a schedule and its shape, and see the simulated timeline, the
//! bubble against the textbook formula, peak activations, and a step-by-step walk through the
//! schedule saying what each stage waits for.

use egui::{Button, RichText, Slider, Ui};
use gangway::pipeline::{
    Costs, OpKind, Schedule, ScheduleKind, Simulation, bubble_formula, simulate, validate,
};
use gangway::trace::Lane;

use crate::timeline::{self, TimelineData, TimelineState, format_ns};

/// One cost unit of the sliders, in simulated nanoseconds.
const UNIT_NS: u64 = 1_000;

/// The lab's inputs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LabParams {
    pub kind: ScheduleKind,
    pub stages: usize,
    pub microbatches: usize,
    pub chunks: usize,
    /// Relative costs of F, B and W (units of 1 µs simulated).
    pub forward: u64,
    pub backward: u64,
    pub weight_grad: u64,
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
        }
    }
}

impl LabParams {
    /// Chunks the schedule is built with: `v` for interleaved, 1 for the rest.
    pub fn effective_chunks(&self) -> usize {
        if self.kind == ScheduleKind::Interleaved {
            self.chunks.max(2)
        } else {
            1
        }
    }
}

/// The result of one simulation, kept until the inputs change.
#[derive(Debug, Clone)]
pub struct LabResult {
    pub schedule: Schedule,
    pub sim: Simulation,
    pub peak_activations: Vec<usize>,
    pub textbook: f64,
    pub data: TimelineData,
}

/// The lab's state.
#[derive(Debug)]
pub struct BubbleLab {
    pub params: LabParams,
    computed_for: Option<LabParams>,
    pub result: Result<LabResult, String>,
    pub timeline: TimelineState,
    /// How many ops of `Simulation::order` have started (0 = before the first).
    pub step: usize,
}

impl Default for BubbleLab {
    fn default() -> Self {
        let mut lab = Self {
            params: LabParams::default(),
            computed_for: None,
            result: Err(String::new()),
            timeline: TimelineState::default(),
            step: 0,
        };
        lab.recompute();
        lab
    }
}

/// Human name of a schedule, as on the buttons.
pub fn label(kind: ScheduleKind) -> &'static str {
    match kind {
        ScheduleKind::GPipe => "GPipe",
        ScheduleKind::OneFOneB => "1F1B",
        ScheduleKind::Interleaved => "Interleaved 1F1B",
        ScheduleKind::ZbH1 => "ZB-H1",
    }
}

/// The textbook formula with this shape's numbers in it.
pub fn formula_text(kind: ScheduleKind, p: usize, m: usize, v: usize) -> String {
    let q = p.saturating_sub(1);
    match kind {
        ScheduleKind::GPipe | ScheduleKind::OneFOneB => {
            format!(
                "bubble = (p - 1) / (m + p - 1) = {q} / ({m} + {q}) = {q}/{}",
                m + q
            )
        }
        ScheduleKind::Interleaved => format!(
            "bubble = (p - 1) / (v*m + p - 1) = {q} / ({v}*{m} + {q}) = {q}/{}",
            v * m + q
        ),
        ScheduleKind::ZbH1 => format!(
            "bubble = (p - 1) / (3m + p - 1) if F = B = W = {q} / (3*{m} + {q}) = {q}/{}",
            3 * m + q
        ),
    }
}

/// Runs the schedule and simulation for `p`.
pub fn compute(p: &LabParams) -> Result<LabResult, String> {
    let v = p.effective_chunks();
    let schedule = Schedule::new(p.kind, p.stages, p.microbatches, v).map_err(|e| e.to_string())?;
    let validation = validate(&schedule).map_err(|e| e.to_string())?;
    let costs = Costs::compute_only(
        p.forward * UNIT_NS,
        p.backward * UNIT_NS,
        p.weight_grad * UNIT_NS,
    );
    let sim = simulate(&schedule, &costs).map_err(|e| e.to_string())?;
    // Transfers are free here (zero-length): show compute lanes only.
    let mut data = TimelineData::from_events(
        sim.events
            .iter()
            .filter(|e| e.lane == Lane::Compute)
            .cloned(),
    );
    data.device_prefix = Some("stage".into());
    Ok(LabResult {
        textbook: bubble_formula(p.kind, p.stages, p.microbatches, v),
        peak_activations: validation.peak_activations,
        schedule,
        sim,
        data,
    })
}

impl BubbleLab {
    fn recompute(&mut self) {
        if self.computed_for == Some(self.params) {
            return;
        }
        self.result = compute(&self.params);
        self.computed_for = Some(self.params);
        self.timeline.view = None;
        self.step = 0;
    }

    /// What each stage is doing at `t_ns`: running an op, waiting for data, or done.
    pub fn stage_status(r: &LabResult, t_ns: u64) -> Vec<String> {
        (0..r.schedule.stages)
            .map(|stage| {
                let running = r.sim.events.iter().find(|e| {
                    e.device == stage
                        && e.lane == Lane::Compute
                        && e.start_ns <= t_ns
                        && t_ns < e.end_ns
                });
                if let Some(e) = running {
                    let mb = e.microbatch.map_or_else(String::new, |m| format!(" mb {m}"));
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
                                op.microbatch
                            ),
                            OpKind::RecvGradient => format!(
                                "stage {stage}: waits for the gradient of mb {} from stage {peer}",
                                op.microbatch
                            ),
                            _ => format!("stage {stage}: idle, next {op}"),
                        }
                    }
                }
            })
            .collect()
    }

    pub fn ui(&mut self, ui: &mut Ui) {
        ui.horizontal_wrapped(|ui| {
            ui.label("schedule:");
            for kind in ScheduleKind::ALL {
                ui.selectable_value(&mut self.params.kind, kind, label(kind));
            }
            ui.separator();
            ui.add_enabled(false, Button::new("Run on devices"))
                .on_disabled_hover_text(
                    "Coming when pipelined execution on devices lands: the lab runs on the \
                     cost-model simulator for now",
                );
        });
        ui.horizontal_wrapped(|ui| {
            ui.add(Slider::new(&mut self.params.stages, 1..=16).text("stages p"));
            ui.add(Slider::new(&mut self.params.microbatches, 1..=64).text("microbatches m"));
            ui.add_enabled(
                self.params.kind == ScheduleKind::Interleaved,
                Slider::new(&mut self.params.chunks, 2..=8).text("chunks v"),
            );
        });
        ui.horizontal_wrapped(|ui| {
            ui.label("relative costs (1 = 1 µs):");
            ui.add(Slider::new(&mut self.params.forward, 1..=10).text("F"));
            ui.add(Slider::new(&mut self.params.backward, 1..=10).text("B"));
            ui.add(Slider::new(&mut self.params.weight_grad, 0..=10).text("W"));
        });
        self.recompute();

        let r = match &self.result {
            Ok(r) => r,
            Err(e) => {
                ui.colored_label(ui.visuals().error_fg_color, format!("error: {e}"));
                return;
            }
        };
        let p = &self.params;
        ui.separator();
        ui.horizontal_wrapped(|ui| {
            ui.label(
                RichText::new(formula_text(
                    p.kind,
                    p.stages,
                    p.microbatches,
                    r.schedule.chunks,
                ))
                .monospace(),
            );
        });
        ui.horizontal_wrapped(|ui| {
            ui.label(
                RichText::new(format!(
                    "bubble (simulated): {:.1}%",
                    r.sim.bubble_fraction * 100.0
                ))
                .strong(),
            );
            ui.separator();
            ui.label(format!("textbook: {:.1}%", r.textbook * 100.0));
            ui.separator();
            ui.label(format!("makespan {}", format_ns(r.sim.makespan_ns as f64)));
            if p.kind == ScheduleKind::ZbH1
                && !(p.forward == p.backward && p.backward == p.weight_grad)
            {
                ui.weak("(textbook assumes F = B = W)");
            }
            if !r.schedule.split_backward && p.weight_grad > 0 {
                ui.weak("(W folded into B)");
            }
        });
        ui.label(format!(
            "peak activations per stage: {}",
            r.peak_activations
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ));

        // Step walk-through.
        let total = r.sim.order.len();
        let mut step = self.step.min(total);
        ui.horizontal(|ui| {
            if ui.button("< step").clicked() {
                step = step.saturating_sub(1);
            }
            if ui.button("step >").clicked() {
                step = (step + 1).min(total);
            }
            ui.add(Slider::new(&mut step, 0..=total).text("ops started"));
        });
        self.step = step;
        let t_ns = match step {
            0 => None,
            k => r.sim.order.get(k - 1).map(|o| o.at_ns),
        };
        self.timeline.cursor_ns = t_ns;
        if let Some(t) = t_ns
            && let Some(o) = r.sim.order.get(step - 1)
            && let Some(op) = r.schedule.ops[o.stage].get(o.index)
        {
            ui.label(format!(
                "op {step}/{total} at {}: stage {} starts {op}",
                format_ns(t as f64),
                o.stage
            ));
            for line in Self::stage_status(r, t) {
                ui.monospace(line);
            }
        } else {
            ui.weak("step through the schedule op by op (Simulation::order)");
        }
        ui.separator();
        timeline::legend(ui);
        timeline::timeline(ui, "bubble-lab", &r.data, &mut self.timeline);
    }
}
