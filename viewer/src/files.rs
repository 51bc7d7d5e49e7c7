//! Opening and saving files: Chrome trace JSON (gangway's own, and others leniently) and
//! `gangway bench --json` results (matmul or dispatch), plotted. A bad file is an error shown in
//! the UI, never a panic.

use std::collections::BTreeMap;
use std::path::Path;

use egui::Ui;
use egui_plot::{Legend, Line, Plot, PlotPoints, Points};
use gangway::trace::Event;
use serde_json::Value;

use crate::timeline::{self, TimelineData, TimelineState};

/// One row of `gangway bench matmul --json`.
#[derive(Debug, Clone, PartialEq)]
pub struct MatmulRow {
    pub adapter: String,
    pub backend: String,
    pub case: String,
    pub m: f64,
    pub variant: String,
    pub gflops: f64,
}

/// One row of `gangway bench dispatch --json`.
#[derive(Debug, Clone, PartialEq)]
pub struct DispatchRow {
    pub suite: String,
    pub case: String,
    pub mode: String,
    pub stages: f64,
    pub computations_per_s: f64,
    pub note: String,
}

/// What a file turned out to be.
#[derive(Debug, Clone)]
pub enum Loaded {
    Trace(TimelineData),
    Matmul(Vec<MatmulRow>),
    Dispatch(Vec<DispatchRow>),
}

impl Loaded {
    pub fn summary(&self) -> String {
        match self {
            Loaded::Trace(d) => format!("Chrome trace: {} events", d.len()),
            Loaded::Matmul(r) => format!("matmul benchmark: {} results", r.len()),
            Loaded::Dispatch(r) => format!("dispatch benchmark: {} results", r.len()),
        }
    }
}

fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_string)
}

fn num(v: &Value, key: &str) -> Option<f64> {
    v.get(key).and_then(Value::as_f64)
}

/// Recognises and parses a JSON document.
pub fn interpret(v: &Value) -> Result<Loaded, String> {
    let rows = v.as_array();
    let first = rows.and_then(|r| r.first());
    let is_trace = v.get("traceEvents").is_some() || first.is_some_and(|f| f.get("ph").is_some());
    if is_trace {
        let (events, names) = gangway::trace::chrome::parse(v)?;
        let mut data = TimelineData::from_events(events);
        data.device_names = names.into_iter().collect();
        return Ok(Loaded::Trace(data));
    }
    let Some(rows) = rows else {
        return Err(
            "not a Chrome trace (no \"traceEvents\") nor a gangway bench result array".into(),
        );
    };
    if first.is_some_and(|f| f.get("gflops").is_some()) {
        return rows
            .iter()
            .enumerate()
            .map(|(i, r)| {
                (|| {
                    Some(MatmulRow {
                        adapter: text(r, "adapter")?,
                        backend: text(r, "backend").unwrap_or_default(),
                        case: text(r, "case").unwrap_or_default(),
                        m: num(r, "m")?,
                        variant: r.get("variant").map(variant_name)?,
                        gflops: num(r, "gflops")?,
                    })
                })()
                .ok_or_else(|| format!("matmul result [{i}] lacks adapter, m, variant or gflops"))
            })
            .collect::<Result<_, _>>()
            .map(Loaded::Matmul);
    }
    if first.is_some_and(|f| f.get("computations_per_s").is_some()) {
        return rows
            .iter()
            .enumerate()
            .map(|(i, r)| {
                (|| {
                    Some(DispatchRow {
                        suite: text(r, "suite")?,
                        case: text(r, "case").unwrap_or_default(),
                        mode: text(r, "mode").unwrap_or_default(),
                        stages: num(r, "stages")?,
                        computations_per_s: num(r, "computations_per_s")?,
                        note: text(r, "note").unwrap_or_default(),
                    })
                })()
                .ok_or_else(|| {
                    format!("dispatch result [{i}] lacks suite, stages or computations_per_s")
                })
            })
            .collect::<Result<_, _>>()
            .map(Loaded::Dispatch);
    }
    Err("not a Chrome trace nor a gangway bench result (matmul or dispatch) array".into())
}

/// A serde enum is a string, or an object for data-carrying variants: its name either way.
fn variant_name(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Object(o) => o.keys().next().cloned().unwrap_or_default(),
        other => other.to_string(),
    }
}

/// Reads and interprets the file at `path`.
pub fn open(path: &Path) -> Result<Loaded, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let v: Value = serde_json::from_slice(&bytes)
        .map_err(|e| format!("{} is not JSON: {e}", path.display()))?;
    interpret(&v).map_err(|e| format!("{}: {e}", path.display()))
}

/// Writes `events` as Chrome trace JSON.
pub fn save_trace(path: &Path, events: &[Event], names: &[(usize, String)]) -> Result<(), String> {
    std::fs::write(path, gangway::trace::chrome::to_string(events, names))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Which timeline "Save" writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaveWhat {
    Live,
    BubbleLab,
    Opened,
}

/// The files tab.
#[derive(Debug)]
pub struct FilesTab {
    pub path: String,
    pub loaded: Option<Loaded>,
    pub message: Option<Result<String, String>>,
    pub timeline: TimelineState,
    pub save_what: SaveWhat,
}

impl Default for FilesTab {
    fn default() -> Self {
        Self {
            path: "trace.json".into(),
            loaded: None,
            message: None,
            timeline: TimelineState::default(),
            save_what: SaveWhat::Live,
        }
    }
}

impl FilesTab {
    pub fn open_path(&mut self) {
        match open(Path::new(self.path.trim())) {
            Ok(l) => {
                self.message = Some(Ok(format!("opened {}", l.summary())));
                self.loaded = Some(l);
                self.timeline = TimelineState::default();
            }
            Err(e) => self.message = Some(Err(e)),
        }
    }

    /// `sources`: the live and bubble-lab timelines, to save.
    pub fn ui(&mut self, ui: &mut Ui, live: &TimelineData, lab: Option<&TimelineData>) {
        ui.horizontal(|ui| {
            ui.label("path:");
            ui.add(egui::TextEdit::singleline(&mut self.path).desired_width(360.0))
                .labelled_by(ui.label("file path").id);
            if ui.button("Open").clicked() {
                self.open_path();
            }
        });
        ui.horizontal(|ui| {
            ui.label("save as Chrome trace:");
            ui.selectable_value(&mut self.save_what, SaveWhat::Live, "live timeline");
            ui.selectable_value(
                &mut self.save_what,
                SaveWhat::BubbleLab,
                "bubble-lab timeline",
            );
            ui.selectable_value(&mut self.save_what, SaveWhat::Opened, "opened trace");
            if ui.button("Save").clicked() {
                let source = match self.save_what {
                    SaveWhat::Live => Some(live),
                    SaveWhat::BubbleLab => lab,
                    SaveWhat::Opened => match &self.loaded {
                        Some(Loaded::Trace(d)) => Some(d),
                        _ => None,
                    },
                };
                self.message = Some(match source {
                    None => Err("nothing to save: that timeline is empty".into()),
                    Some(d) => {
                        let events: Vec<Event> = d.all_events().cloned().collect();
                        let names: Vec<(usize, String)> = d
                            .device_names
                            .iter()
                            .map(|(k, v)| (*k, v.clone()))
                            .collect();
                        save_trace(Path::new(self.path.trim()), &events, &names)
                            .map(|()| format!("saved {} events to {}", events.len(), self.path))
                    }
                });
            }
        });
        match &self.message {
            Some(Ok(m)) => {
                ui.label(m);
            }
            Some(Err(e)) => {
                ui.colored_label(ui.visuals().error_fg_color, format!("error: {e}"));
            }
            None => {
                ui.weak("opens Chrome trace JSON (gangway --trace) and gangway bench --json files");
            }
        }
        ui.separator();
        match &self.loaded {
            None => {}
            Some(Loaded::Trace(data)) => {
                timeline::legend(ui);
                egui::ScrollArea::vertical().show(ui, |ui| {
                    timeline::timeline(ui, "file", data, &mut self.timeline);
                });
            }
            Some(Loaded::Matmul(rows)) => matmul_plot(ui, rows),
            Some(Loaded::Dispatch(rows)) => dispatch_plot(ui, rows),
        }
    }
}

/// GFLOP/s against matrix size (`m`), one line per adapter and variant.
fn matmul_plot(ui: &mut Ui, rows: &[MatmulRow]) {
    let mut series: BTreeMap<String, Vec<[f64; 2]>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.case.starts_with("square")) {
        series
            .entry(format!("{} [{}] {}", r.adapter, r.backend, r.variant))
            .or_default()
            .push([r.m, r.gflops]);
    }
    ui.label("GFLOP/s against size (square cases), per adapter and variant");
    Plot::new("matmul")
        .legend(Legend::default())
        .x_axis_label("size n (n×n×n)")
        .y_axis_label("GFLOP/s")
        .include_y(0.0)
        .show(ui, |plot| {
            for (name, mut pts) in series {
                pts.sort_by(|a, b| a[0].total_cmp(&b[0]));
                plot.line(Line::new(name.clone(), PlotPoints::from(pts.clone())));
                plot.points(Points::new(name, PlotPoints::from(pts)).radius(3.0));
            }
        });
}

/// Computations/s against stages, one line per dispatch mode (the chain suite); other suites
/// as a table.
fn dispatch_plot(ui: &mut Ui, rows: &[DispatchRow]) {
    let mut series: BTreeMap<String, Vec<[f64; 2]>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.suite == "chain") {
        series
            .entry(r.mode.clone())
            .or_default()
            .push([r.stages, r.computations_per_s]);
    }
    ui.label("chain: computations/s against stages, per dispatch mode");
    Plot::new("dispatch")
        .legend(Legend::default())
        .height(260.0)
        .x_axis_label("stages")
        .y_axis_label("computations/s")
        .include_y(0.0)
        .show(ui, |plot| {
            for (name, mut pts) in series {
                pts.sort_by(|a, b| a[0].total_cmp(&b[0]));
                plot.line(Line::new(name.clone(), PlotPoints::from(pts.clone())));
                plot.points(Points::new(name, PlotPoints::from(pts)).radius(3.0));
            }
        });
    egui::Grid::new("dispatch-rows")
        .striped(true)
        .show(ui, |ui| {
            for h in ["suite", "case", "mode", "stages", "computations/s", "note"] {
                ui.strong(h);
            }
            ui.end_row();
            for r in rows.iter().filter(|r| r.suite != "chain") {
                ui.label(&r.suite);
                ui.label(&r.case);
                ui.label(&r.mode);
                ui.label(format!("{}", r.stages));
                ui.label(format!("{:.0}", r.computations_per_s));
                ui.label(&r.note);
                ui.end_row();
            }
        });
}
