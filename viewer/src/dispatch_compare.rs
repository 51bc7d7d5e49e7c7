//! The chain program with sequential and with parallel dispatch, traced, side by side: with
//! sequential dispatch the host encodes node i+1 only after node i is done, so the devices sit
//! idle between kernels; parallel dispatch encodes everything up front.

use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use egui::Ui;
use gangway::Device;
use gangway::sched::{DispatchMode, Runtime, RuntimeOptions};
use gangway::trace::{EventKind, Tracer};

use crate::background;
use crate::live::{DeviceHub, chain, chain_client, run_chain};
use crate::timeline::{self, TimelineData, TimelineState, format_ns};

/// Runs of the chain per mode.
pub const RUNS: usize = 6;

/// One mode's traced run.
#[derive(Debug)]
pub struct ModeRun {
    pub mode: DispatchMode,
    pub data: TimelineData,
    pub wall_ns: u64,
    pub state: TimelineState,
}

#[derive(Debug, Default)]
pub struct DispatchCompare {
    pending: Option<Receiver<Result<Vec<ModeRun>, String>>>,
    pub runs: Vec<ModeRun>,
    pub error: Option<String>,
    /// Whether both views were put on one time scale since the last results.
    scaled: bool,
}

fn run_mode(devices: &[Device], mode: DispatchMode) -> Result<ModeRun, String> {
    let tracer = Tracer::new();
    let exec = chain(devices, 4).map_err(|e| e.to_string())?;
    let runtime = Runtime::new(
        devices.to_vec(),
        RuntimeOptions {
            tracer: tracer.clone(),
            ..RuntimeOptions::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let kernels_per_run = devices.len().clamp(1, 4);
    let client = chain_client(&runtime, mode);
    // One untraced-in-effect warm-up, then the measured runs.
    run_chain(&client, &exec, mode, 1).map_err(|e| e.to_string())?;
    wait_for_kernels(&tracer, kernels_per_run);
    drop(tracer.take_events());
    let t0 = Instant::now();
    run_chain(&client, &exec, mode, RUNS).map_err(|e| e.to_string())?;
    let wall_ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
    wait_for_kernels(&tracer, RUNS * kernels_per_run);
    let mut data = TimelineData::from_events(tracer.take_events());
    data.device_names = devices
        .iter()
        .map(|d| (d.id(), d.info().name.clone()))
        .collect();
    Ok(ModeRun {
        mode,
        data,
        wall_ns,
        state: TimelineState::default(),
    })
}

/// Waits (at most 5 s) until `tracer` holds `kernels` kernel events: GPU-timestamped kernels
/// reach the tracer in batches, up to ~100 ms after their run finished.
fn wait_for_kernels(tracer: &Tracer, kernels: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while tracer
        .events()
        .iter()
        .filter(|e| e.kind == EventKind::Kernel)
        .count()
        < kernels
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The comparison in one line, from each mode's wall time for the same [`RUNS`] runs:
/// "parallel 2.0× faster than sequential".
pub fn verdict(sequential_ns: u64, parallel_ns: u64) -> String {
    let (seq, par) = (sequential_ns.max(1) as f64, parallel_ns.max(1) as f64);
    let ratio = seq / par;
    let what = if (ratio - 1.0).abs() < 0.005 {
        "as fast as".to_string()
    } else if ratio > 1.0 {
        format!("{ratio:.1}× faster than")
    } else {
        format!("{:.1}× slower than", 1.0 / ratio)
    };
    format!("parallel {what} sequential ({RUNS} runs each, wall time)")
}

/// Both modes, one after the other, on `devices`.
pub fn compare(devices: &[Device]) -> Result<Vec<ModeRun>, String> {
    [DispatchMode::Sequential, DispatchMode::Parallel]
        .into_iter()
        .map(|m| run_mode(devices, m))
        .collect()
}

impl DispatchCompare {
    pub fn is_running(&self) -> bool {
        self.pending.is_some()
    }

    /// Starts both runs on a background thread.
    pub fn start(&mut self, devices: Vec<Device>, ctx: Option<egui::Context>) {
        match background::spawn("gangway-compare", ctx, move || compare(&devices)) {
            Ok(rx) => {
                self.pending = Some(rx);
                self.error = None;
            }
            Err(e) => self.error = Some(e),
        }
    }

    /// Picks up finished results.
    pub fn poll(&mut self) -> bool {
        let Some(rx) = &self.pending else {
            return false;
        };
        match rx.try_recv() {
            Ok(Ok(runs)) => {
                self.runs = runs;
                self.scaled = false;
            }
            Ok(Err(e)) => self.error = Some(e),
            Err(std::sync::mpsc::TryRecvError::Empty) => return false,
            Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                self.error = Some("the comparison thread stopped without a result".into());
            }
        }
        self.pending = None;
        true
    }

    pub fn ui(&mut self, ui: &mut Ui, hub: &DeviceHub) {
        self.poll();
        ui.horizontal(|ui| {
            let devices = hub.devices();
            let enabled = devices.is_some() && !self.is_running();
            if ui
                .add_enabled(enabled, egui::Button::new("Run comparison"))
                .on_disabled_hover_text("needs devices, and no comparison running")
                .clicked()
                && let Some(devices) = devices
            {
                self.start(devices, Some(ui.ctx().clone()));
            }
            if self.is_running() {
                ui.spinner();
                ui.ctx()
                    .request_repaint_after(std::time::Duration::from_millis(100));
            }
            ui.weak(format!(
                "the chain program (one tiny kernel per device, up to 4), {RUNS} runs per mode"
            ));
        });
        if let Some(e) = &self.error {
            ui.colored_label(ui.visuals().error_fg_color, format!("error: {e}"));
        }
        if self.runs.is_empty() {
            return;
        }
        // One time scale for both, so their lengths compare at a glance.
        if !self.scaled && self.runs.iter().all(|r| r.state.view.is_some()) {
            let widest = self
                .runs
                .iter()
                .filter_map(|r| r.state.view.map(|v| v.ns_per_px))
                .fold(0.0, f64::max);
            for r in &mut self.runs {
                if let (Some(v), Some(span)) = (&mut r.state.view, r.data.span()) {
                    v.ns_per_px = widest;
                    v.start_ns = span.start as f64;
                }
            }
            self.scaled = true;
        }
        let wall = |m: DispatchMode| self.runs.iter().find(|r| r.mode == m).map(|r| r.wall_ns);
        if let (Some(seq), Some(par)) =
            (wall(DispatchMode::Sequential), wall(DispatchMode::Parallel))
        {
            ui.label(egui::RichText::new(verdict(seq, par)).strong());
        }
        ui.weak(
            "both on one time scale, each axis from its own run's first event; double-click a \
             timeline to fit it alone",
        );
        timeline::legend(ui);
        ui.columns(self.runs.len(), |cols| {
            for (col, run) in cols.iter_mut().zip(&mut self.runs) {
                col.heading(run.mode.name());
                col.label(format!(
                    "{RUNS} runs in {} ({:.0} runs/s)",
                    format_ns(run.wall_ns as f64),
                    RUNS as f64 / (run.wall_ns.max(1) as f64 / 1e9)
                ));
                timeline::timeline(col, run.mode.name(), &run.data, &mut run.state);
            }
        });
    }
}
