//! The live tab's state: events of the viewer's own runs (the background workload, MoE training,
//! the lab's runs), followed through the live stream the app serves them on
//! ([`crate::live::follow`]), as any other process's job is, into a timeline with follow-live and
//! pause, and per-device utilization sampled over a sliding window.

use std::collections::VecDeque;

use egui::Ui;
use gangway::sched::DispatchMode;
use gangway::trace::{Event, Tracer};

use crate::live::{DeviceHub, Follower, LiveRunner, follow};
use crate::pace::FramePace;
use crate::timeline::{self, TimeAxis, TimelineData, TimelineState, format_ns};
use crate::utilization::Utilization;

pub use crate::utilization::WINDOW_NS;
/// Label of every utilization readout: what the number is, exactly.
pub const UTILIZATION_LABEL: &str = "utilization = busy time / 1 s sliding window";
/// Events kept on the live timeline (older ones are forgotten).
const KEEP_NS: u64 = 60_000_000_000;

/// When the background workload runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Workload {
    /// While a tab that shows it (Live timeline, Devices) is on screen: the default launch.
    #[default]
    WhileShown,
    /// The user pressed Start: on every tab, until Stop.
    Always,
    /// The user pressed Stop (or `--no-live`): off until Start.
    Off,
}

#[derive(Debug)]
pub struct LiveView {
    pub runner: Option<LiveRunner>,
    pub workload: Workload,
    pub data: TimelineData,
    pub timeline: TimelineState,
    /// Frozen display: new events are held back from the timeline until resumed (utilization
    /// keeps being measured from them).
    pub paused: bool,
    /// Events that arrived while paused, for the timeline on resume.
    held: VecDeque<Event>,
    /// Each device's utilization, from the events that arrive.
    pub utilization: Utilization,
    last_sample_ns: u64,
    pub error: Option<String>,
    /// The stream every real run traces into (the app runtime's, served on loopback: the live
    /// workload, MoE training, ...), followed once the runtime exists ([`Self::attach`]), with
    /// the runtime's tracer for the clock.
    stream: Option<(Tracer, Follower)>,
}

impl Default for LiveView {
    fn default() -> Self {
        Self {
            runner: None,
            workload: Workload::default(),
            data: TimelineData::default(),
            // The last minute, counted back from now: absolute times of hours are unreadable.
            timeline: TimelineState {
                axis: TimeAxis::BeforeNewest,
                ..TimelineState::default()
            },
            paused: false,
            held: VecDeque::new(),
            utilization: Utilization::default(),
            last_sample_ns: 0,
            error: None,
            stream: None,
        }
    }
}

impl LiveView {
    /// Follows the hub's runtime's event stream, once the hub has a runtime: every run on it
    /// appears here. Call every frame (cheap once attached).
    pub fn attach(&mut self, hub: &DeviceHub, ctx: Option<egui::Context>) {
        if self.stream.is_some() {
            return;
        }
        let (Some(runtime), Some(served)) = (hub.runtime(), hub.served_at()) else {
            return;
        };
        match served.and_then(|addr| follow(addr, ctx)) {
            Ok(follower) => self.stream = Some((runtime.tracer().clone(), follower)),
            Err(e) => {
                if self.error.is_none() {
                    self.error = Some(e);
                }
            }
        }
    }

    /// Starts the workload on the hub's devices, if it has any, and follows it live. It runs on
    /// every tab until [`Self::stop`].
    pub fn start(&mut self, hub: &DeviceHub, ctx: Option<egui::Context>) {
        self.workload = Workload::Always;
        self.error = None;
        if self.launch(hub, ctx) {
            self.timeline.follow_live = true;
        }
    }

    /// Stops the workload until [`Self::start`]; nothing restarts it meanwhile.
    pub fn stop(&mut self) {
        self.workload = Workload::Off;
        self.runner = None;
    }

    /// Starts or stops the workload as [`Self::workload`] asks, given whether a tab showing it
    /// is on screen. A workload that stopped on an error stays stopped until Start.
    pub fn sync(&mut self, shown: bool, hub: &DeviceHub, ctx: Option<egui::Context>) {
        let wanted = match self.workload {
            Workload::Always => true,
            Workload::WhileShown => shown,
            Workload::Off => false,
        };
        if !wanted {
            self.runner = None;
        } else if self.runner.is_none() && self.error.is_none() && self.launch(hub, ctx) {
            // First launch: show the newest events.
            self.timeline.follow_live |= self.data.is_empty();
        }
    }

    /// Starts the worker if none runs; true when one was started.
    fn launch(&mut self, hub: &DeviceHub, ctx: Option<egui::Context>) -> bool {
        if self.runner.is_some() {
            return false;
        }
        let Some(runtime) = hub.runtime() else {
            return false;
        };
        self.attach(hub, ctx);
        self.runner = Some(LiveRunner::start(runtime, DispatchMode::Parallel));
        true
    }

    /// Moves new events into the timeline and samples utilization. Call once per frame.
    pub fn poll(&mut self) {
        if let Some(e) = self.runner.as_mut().and_then(LiveRunner::error) {
            self.error = Some(e);
        }
        let Some((tracer, follower)) = &self.stream else {
            return;
        };
        // The server has every event; the tracer's own copy would only grow.
        drop(tracer.take_events());
        let now = tracer.now_ns();
        if let Some(r) = &self.runner {
            r.heartbeat(now);
        }
        // Drained even while paused: utilization is measured from every event, and the
        // channel must not grow.
        let (batches, ended) = follower.stream.poll("following the viewer's runs");
        if let Some(why) = ended {
            self.error = Some(format!(
                "the live stream stopped: {}",
                why.unwrap_or_else(|e| e)
            ));
            self.stream = None;
        }
        let arrived: Vec<Event> = batches.into_iter().flatten().collect();
        for e in &arrived {
            self.utilization.push(e);
        }
        if self.paused {
            self.held.extend(arrived);
            // Held events the timeline would forget on resume are not kept either.
            let from = now.saturating_sub(KEEP_NS);
            while self.held.front().is_some_and(|e| e.end_ns < from) {
                self.held.pop_front();
            }
        } else {
            self.data.extend(self.held.drain(..).chain(arrived));
        }
        if now >= self.last_sample_ns + 250_000_000 {
            self.last_sample_ns = now;
            self.sample(now);
            if let Some(span) = self.data.span()
                && span.end > KEEP_NS
            {
                self.data.forget_before(span.end - KEEP_NS);
            }
        }
    }

    fn sample(&mut self, now: u64) {
        let devices = self.data.tracks().iter().map(|t| t.device);
        self.utilization.sample(now, devices);
    }

    /// Latest utilization of `device`, in `[0, 1]`.
    pub fn current(&self, device: usize) -> Option<f64> {
        self.utilization.current(device)
    }

    pub fn ui(&mut self, ui: &mut Ui, hub: &DeviceHub) {
        ui.horizontal_wrapped(|ui| {
            let running = self.runner.is_some();
            if running {
                if ui
                    .button("Stop workload")
                    .on_hover_text("stop the workload; it stays off until Start")
                    .clicked()
                {
                    self.stop();
                }
            } else {
                let can = hub.devices().is_some();
                if ui
                    .add_enabled(can, egui::Button::new("Start workload"))
                    .on_disabled_hover_text("no devices: see the banner")
                    .clicked()
                {
                    self.start(hub, Some(ui.ctx().clone()));
                }
            }
            ui.toggle_value(&mut self.timeline.follow_live, "follow live");
            ui.toggle_value(&mut self.paused, "pause");
            if ui.button("reset view").clicked() {
                self.timeline.reset(&self.data);
            }
            ui.label(format!("{} events", self.data.len()));
            if let Some(span) = self.data.span() {
                ui.label(format!(
                    "span {}",
                    format_ns((span.end - span.start) as f64)
                ));
            }
        });
        ui.weak(
            "workload: the chain program (one tiny kernel per device, up to 4), parallel \
             dispatch, in batches of 8 runs, while this tab or Devices is shown (Start: on every \
             tab until Stop). Drag pans, ctrl+scroll zooms about the mouse, \
             click a bar zooms to it, double-click resets.",
        );
        match hub.served_at() {
            Some(Ok(addr)) => {
                ui.weak(format!(
                    "this viewer's runs are served live at {addr}, the stream shown here: \
                     `gangway watch {addr}` or another viewer's Attach follows them too"
                ));
            }
            Some(Err(e)) => {
                ui.colored_label(ui.visuals().error_fg_color, e);
            }
            None => {}
        }
        if let Some(e) = &self.error {
            ui.colored_label(ui.visuals().error_fg_color, format!("workload error: {e}"));
        }
        ui.weak(FramePace::of(Some(ui.ctx())).describe());
        timeline::legend(ui);
        // No frames of its own: the follower asks for one when events arrive, at most one per
        // the window's pace.
        egui::ScrollArea::vertical().show(ui, |ui| {
            timeline::timeline(ui, "live", &self.data, &mut self.timeline);
        });
    }
}
