//! The Attached tab: type a job's address (HOST:PORT, what `--live` printed) and, for a
//! non-loopback server, its token, press Attach, and the job's stream shows here while it runs
//! ([`crate::attach`] reads it). Several jobs can be attached at once; one is shown at a time:
//! its command line and state, its devices by rank and host with their utilization, a timeline
//! of its last minute, plots of its training metrics and the events the server dropped for this
//! viewer. "Save trace" writes what arrived as a gangway trace.
//!
//! Recent addresses are remembered between launches (with the app's settings); tokens are not,
//! as they are secrets.

use egui::{RichText, Ui};
use egui_plot::{Legend, Line, MarkerShape, Plot, PlotPoints, Points};

use crate::attach::{Attachment, State};
use crate::live_view::UTILIZATION_LABEL;
use crate::timeline;

/// Recent addresses kept.
const RECENT: usize = 10;
/// The Attached tab's plots' height.
const PLOT_H: f32 = 160.0;

/// The Attached tab's state: the fields, the recent addresses and every attachment.
#[derive(Debug, Default)]
pub struct AttachTab {
    /// The address field: HOST:PORT.
    pub addr: String,
    /// The token field (empty: none).
    pub token: String,
    pub jobs: Vec<Attachment>,
    /// The attachment shown (its [`Attachment::id`]).
    pub selected: Option<u64>,
    /// Addresses attached to lately, newest first.
    pub recent: Vec<String>,
    /// Why the last Attach did nothing.
    pub message: Option<String>,
    next_id: u64,
}

impl AttachTab {
    /// Starts following the job at `addr` and shows it; an address typed wrong (no port) is
    /// refused here with a message, before any thread starts.
    pub fn attach(&mut self, addr: &str, token: Option<String>, ctx: Option<egui::Context>) {
        let addr = addr.trim();
        if addr
            .rsplit_once(':')
            .is_none_or(|(h, p)| h.is_empty() || p.parse::<u16>().is_err())
        {
            self.message = Some(format!(
                "{addr:?} is not an address: give HOST:PORT, as `--live` printed it \
                 (\"live: serving this job at 127.0.0.1:41455\")"
            ));
            return;
        }
        self.message = None;
        self.remember(addr);
        let id = self.next_id;
        self.next_id += 1;
        self.jobs.push(Attachment::start(id, addr, token, ctx));
        self.selected = Some(id);
    }

    /// Replaces the recent addresses (e.g. with those saved by the last launch).
    pub fn set_recent(&mut self, recent: Vec<String>) {
        self.recent.clear();
        for a in recent.into_iter().rev() {
            self.remember(&a);
        }
    }

    fn remember(&mut self, addr: &str) {
        self.recent.retain(|a| a != addr);
        self.recent.insert(0, addr.to_string());
        self.recent.truncate(RECENT);
    }

    /// Takes what every attachment's reader sent. Call every frame, whatever tab is shown, so
    /// the channels do not grow.
    pub fn poll(&mut self, ctx: Option<&egui::Context>) {
        for job in &mut self.jobs {
            job.poll(ctx);
        }
    }

    /// The attachment shown.
    pub fn shown(&self) -> Option<&Attachment> {
        let id = self.selected?;
        self.jobs.iter().find(|j| j.id == id)
    }

    pub fn ui(&mut self, ui: &mut Ui) {
        self.fields_ui(ui);
        if self.jobs.is_empty() {
            ui.weak(
                "start a job with --live ADDR (gangway --live 127.0.0.1:0 train moe ...): its \
                 first line on stderr names the address to attach to",
            );
            return;
        }
        ui.separator();
        let mut remove = None;
        ui.horizontal_wrapped(|ui| {
            ui.label("attached:");
            for job in &self.jobs {
                let text = format!("{} ({})", job.addr, job.state.short());
                ui.selectable_value(&mut self.selected, Some(job.id), text);
            }
        });
        let selected = self.selected;
        let Some(job) = self.jobs.iter_mut().find(|j| Some(j.id) == selected) else {
            return;
        };
        ui.horizontal(|ui| {
            if job.is_reading() {
                if ui
                    .button("Detach")
                    .on_hover_text("stop reading this job; what arrived stays until Close")
                    .clicked()
                {
                    job.detach();
                }
            } else if ui
                .button("Reconnect")
                .on_hover_text("attach to the same address again")
                .clicked()
            {
                job.connect();
            }
            if ui.button("Close").clicked() {
                remove = Some(job.id);
            }
        });
        egui::ScrollArea::vertical()
            .id_salt(("attached-job", job.id))
            .show(ui, |ui| job_ui(ui, job));
        if let Some(id) = remove {
            self.jobs.retain(|j| j.id != id);
            self.selected = self.jobs.last().map(|j| j.id);
        }
    }

    /// The address and token fields, Attach, and the recent addresses.
    fn fields_ui(&mut self, ui: &mut Ui) {
        let mut go = false;
        ui.horizontal(|ui| {
            let label = ui.label("address:");
            let field = ui
                .add(
                    egui::TextEdit::singleline(&mut self.addr)
                        .hint_text("HOST:PORT")
                        .desired_width(220.0),
                )
                .labelled_by(label.id);
            go |= field.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
            let label = ui.label("token:");
            ui.add(
                egui::TextEdit::singleline(&mut self.token)
                    .password(true)
                    .hint_text("none")
                    .desired_width(160.0),
            )
            .labelled_by(label.id)
            .on_hover_text("the job's --live-token; needed for a server that is not on loopback");
            go |= ui.button("Attach").clicked();
        });
        if go {
            let (addr, token) = (self.addr.clone(), self.token.clone());
            self.attach(&addr, Some(token), Some(ui.ctx().clone()));
        }
        if !self.recent.is_empty() {
            let mut again = None;
            let mut clear = false;
            ui.horizontal_wrapped(|ui| {
                ui.label("recent:");
                for a in &self.recent {
                    if ui
                        .small_button(a)
                        .on_hover_text("attach to it again (the token field's token)")
                        .clicked()
                    {
                        again = Some(a.clone());
                    }
                }
                clear = ui.small_button("clear recent").clicked();
            });
            if clear {
                self.recent.clear();
            }
            if let Some(a) = again {
                self.addr = a.clone();
                let token = self.token.clone();
                self.attach(&a, Some(token), Some(ui.ctx().clone()));
            }
        }
        if let Some(m) = &self.message {
            ui.colored_label(ui.visuals().error_fg_color, m);
        }
    }
}

/// One attachment: what runs, its state, its devices, save, its timeline and its metrics.
fn job_ui(ui: &mut Ui, job: &mut Attachment) {
    if let Some(hello) = job.hello() {
        ui.label(RichText::new(hello.command.join(" ")).monospace())
            .on_hover_text("the job's command line");
        ui.weak(format!(
            "{} {}{}, pid {}, {} rank{}",
            hello.producer,
            hello.version,
            hello.commit.as_deref().map_or_else(String::new, |c| {
                format!(" ({})", c.chars().take(12).collect::<String>())
            }),
            hello.pid,
            hello.ranks,
            if hello.ranks == 1 { "" } else { "s" }
        ));
    }
    let state = format!("state: {}", job.state.describe());
    match &job.state {
        State::Running => ui.label(state),
        State::Finished(end) if end.status == gangway::live::EndStatus::Ok => ui.label(state),
        State::Connecting => ui.weak(state),
        _ => ui.colored_label(ui.visuals().warn_fg_color, state),
    };
    let (dropped_events, dropped_metrics) = job.dropped();
    let received = job.recording.as_ref().map_or(0, |r| r.events.len());
    ui.label(format!(
        "{} events on the timeline (last 60 s), {received} kept to save; dropped events: \
         {dropped_events}{}",
        job.data.len(),
        if dropped_metrics > 0 {
            format!(", dropped metrics: {dropped_metrics}")
        } else {
            String::new()
        }
    ))
    .on_hover_text(
        "dropped: what the job could not send this viewer (its queue for it was full); the job \
         itself never waits",
    );
    devices_ui(ui, job);
    save_ui(ui, job);
    ui.separator();
    ui.horizontal(|ui| {
        ui.toggle_value(&mut job.timeline.follow_live, "follow live");
        if ui.button("reset view").clicked() {
            job.timeline.reset(&job.data);
        }
    });
    timeline::legend(ui);
    let rows = job.data.tracks().len() + job.data.groups.len();
    let height = (60.0 + rows as f32 * 26.0).clamp(120.0, 420.0);
    ui.allocate_ui(egui::vec2(ui.available_width(), height), |ui| {
        timeline::timeline(
            ui,
            &format!("attached-{}", job.id),
            &job.data,
            &mut job.timeline,
        );
    });
    ui.separator();
    metrics_ui(ui, job);
    ui.separator();
    utilization_ui(ui, job);
}

/// The hello's devices: id, rank, host, adapter, backend, lane label and utilization now.
fn devices_ui(ui: &mut Ui, job: &Attachment) {
    let Some(hello) = job.hello() else {
        return;
    };
    if hello.devices.is_empty() {
        ui.weak("no devices yet (the job names them once it has found them)");
        return;
    }
    egui::Grid::new(("attached-devices", job.id))
        .striped(true)
        .num_columns(7)
        .show(ui, |ui| {
            for h in [
                "device",
                "rank",
                "host",
                "adapter",
                "backend",
                "lane",
                "utilization",
            ] {
                ui.strong(h);
            }
            ui.end_row();
            for d in &hello.devices {
                ui.label(format!("#{}", d.id));
                ui.label(d.rank.to_string());
                ui.label(if d.host.is_empty() { "-" } else { &d.host });
                ui.label(&d.adapter);
                ui.label(&d.backend);
                ui.label(&d.track.label);
                // Utilization now: nothing once the job no longer runs.
                match job
                    .current(d.track.id)
                    .filter(|_| job.state == State::Running)
                {
                    Some(u) => ui.label(format!("{:.1}%", u * 100.0)),
                    None => ui.weak("-"),
                }
                .on_hover_text(UTILIZATION_LABEL);
                ui.end_row();
            }
        });
}

/// The save path, "Save trace", the overwrite question and the outcome.
fn save_ui(ui: &mut Ui, job: &mut Attachment) {
    let idle = !job.is_saving();
    ui.horizontal(|ui| {
        let label = ui.label("save to:");
        ui.add(egui::TextEdit::singleline(&mut job.save.path).desired_width(320.0))
            .labelled_by(label.id);
        if ui
            .add_enabled(idle, egui::Button::new("Save trace"))
            .on_hover_text(
                "what arrived (its newest events), as a gangway trace: the viewer, gangway \
                 trace and Perfetto open it",
            )
            .clicked()
        {
            job.save(false);
        }
        if !idle {
            ui.spinner();
        }
    });
    if let Some(target) = job.save.confirm_overwrite.clone() {
        ui.horizontal(|ui| {
            ui.colored_label(
                ui.visuals().warn_fg_color,
                format!("{} exists. Replace it?", target.display()),
            );
            if ui.button("Overwrite").clicked() {
                job.save.path = target.display().to_string();
                job.save(true);
            }
            if ui.button("Cancel").clicked() {
                job.save.confirm_overwrite = None;
                job.save.message = Some(Ok(format!("not saved: {} kept", target.display())));
            }
        });
    }
    match &job.save.message {
        Some(Ok(m)) => {
            ui.label(m);
        }
        Some(Err(e)) => {
            ui.colored_label(ui.visuals().error_fg_color, format!("error: {e}"));
        }
        None => {}
    }
}

/// A line plot titled `title` (a label above it, which tests and screen readers find), its y
/// axis from 0 to at least `top` (a flat line at 0 otherwise gets a range around 0).
fn line_plot(
    ui: &mut Ui,
    id: (&str, u64),
    (title, y, top): (&str, &str, f64),
    lines: Vec<(String, Vec<[f64; 2]>)>,
) {
    ui.label(title);
    let plot = Plot::new(id)
        .legend(Legend::default())
        .height(PLOT_H)
        .include_y(0.0)
        .include_y(top)
        .x_axis_label("step")
        .y_axis_label(y);
    crate::bench_view::wheel_scrolls_the_page(plot).show(ui, |plot| {
        for (name, points) in lines {
            plot.line(Line::new(name, PlotPoints::from(points)));
        }
    });
}

/// The training metrics' plots (those the job sent), and every other metric's newest value.
fn metrics_ui(ui: &mut Ui, job: &Attachment) {
    let one = |name: &str| -> Vec<[f64; 2]> {
        job.series
            .get(name)
            .and_then(|s| s.get(""))
            .map(|s| s.points.clone())
            .unwrap_or_default()
    };
    let (loss, valid) = (one("train/loss"), one("train/valid_bpb"));
    let (tokens, dropped) = (one("train/tokens_per_s"), one("train/dropped_fraction"));
    let mut experts: Vec<(String, Vec<[f64; 2]>)> = job
        .series
        .get("train/expert_load")
        .map(|by| {
            by.iter()
                .map(|(l, s)| (l.clone(), s.points.clone()))
                .collect()
        })
        .unwrap_or_default();
    // "expert 10" after "expert 9".
    experts.sort_by_key(|(l, _)| (l.len(), l.clone()));
    if loss.is_empty() && tokens.is_empty() && experts.is_empty() && dropped.is_empty() {
        ui.weak("no training metrics (train/loss, train/tokens_per_s, ...) from this job yet");
    } else {
        let mut summary = Vec::new();
        if let Some([step, v]) = loss.last() {
            summary.push(format!("step {step:.0}"));
            summary.push(format!("loss {v:.4}"));
        }
        if let Some([_, v]) = tokens.last() {
            summary.push(format!("{v:.0} tokens/s"));
        }
        if let Some([_, v]) = dropped.last() {
            summary.push(format!("dropped {:.1}%", v * 100.0));
        }
        if let Some([step, v]) = valid.last() {
            summary.push(format!("validation {v:.3} bpb at step {step:.0}"));
        }
        ui.label(summary.join("  ·  "));
        ui.label("loss per step");
        let plot = Plot::new(("attached-loss", job.id))
            .legend(Legend::default())
            .height(PLOT_H)
            .x_axis_label("step")
            .y_axis_label("nats");
        crate::bench_view::wheel_scrolls_the_page(plot).show(ui, |plot| {
            plot.line(Line::new("loss", PlotPoints::from(loss)));
            if !valid.is_empty() {
                // Nats per byte, the loss's unit, as the MoE tab plots it; markers, since a
                // validation is a few points and a line of one draws nothing.
                let nats: Vec<[f64; 2]> = valid
                    .iter()
                    .map(|[s, b]| [*s, b * std::f64::consts::LN_2])
                    .collect();
                plot.points(
                    Points::new("validation (nats)", PlotPoints::from(nats))
                        .radius(5.0)
                        .shape(MarkerShape::Diamond)
                        .filled(true),
                );
            }
        });
        ui.columns(2, |cols| {
            line_plot(
                &mut cols[0],
                ("attached-tokens", job.id),
                ("tokens/s per step", "tokens/s", 1.0),
                vec![("tokens/s".into(), tokens)],
            );
            let percent = dropped.iter().map(|[s, v]| [*s, v * 100.0]).collect();
            line_plot(
                &mut cols[1],
                ("attached-dropped", job.id),
                ("dropped fraction per step (%)", "%", 1.0),
                vec![("dropped %".into(), percent)],
            );
        });
        if !experts.is_empty() {
            line_plot(
                ui,
                ("attached-experts", job.id),
                ("tokens per expert per step", "tokens", 1.0),
                experts,
            );
        }
    }
    // Anything else the job sends (a pipeline's bubble, a benchmark's medians): newest values.
    const PLOTTED: [&str; 5] = [
        "train/loss",
        "train/valid_bpb",
        "train/tokens_per_s",
        "train/dropped_fraction",
        "train/expert_load",
    ];
    let others: Vec<String> = job
        .series
        .iter()
        .filter(|(name, _)| !PLOTTED.contains(&name.as_str()))
        .flat_map(|(name, by)| {
            by.iter().filter_map(move |(labels, s)| {
                let [_, v] = s.last()?;
                Some(if labels.is_empty() {
                    format!("{name} = {v:.4}")
                } else {
                    format!("{name} [{labels}] = {v:.4}")
                })
            })
        })
        .collect();
    if !others.is_empty() {
        egui::CollapsingHeader::new(format!("other metrics ({})", others.len()))
            .id_salt(("attached-others", job.id))
            .show(ui, |ui| {
                for o in others {
                    ui.label(RichText::new(o).monospace());
                }
            });
    }
}

/// Each device's utilization over time, counted back from the newest sample.
fn utilization_ui(ui: &mut Ui, job: &Attachment) {
    ui.label(UTILIZATION_LABEL);
    let labels = |d: usize| {
        job.data
            .lanes
            .get(&d)
            .map_or_else(|| format!("device {d}"), |t| t.label.clone())
    };
    let lines = crate::devices_panel::before_now(&job.utilization.series)
        .into_iter()
        .map(|(d, points)| (labels(d), points))
        .collect::<Vec<_>>();
    let plot = Plot::new(("attached-utilization", job.id))
        .legend(Legend::default())
        .height(PLOT_H)
        .include_y(0.0)
        .include_y(1.0)
        .x_axis_label("seconds before now")
        .y_axis_label("busy / window");
    crate::bench_view::wheel_scrolls_the_page(plot).show(ui, |plot| {
        for (label, points) in lines {
            plot.line(Line::new(label, PlotPoints::from(points)));
        }
    });
}
