//! Opening and saving files: Chrome trace JSON (gangway's own, and others leniently) and
//! `gangway bench --json` reports, shown and compared. A bad file is an error shown in the UI,
//! never a panic.

use std::path::Path;

use egui::Ui;
use gangway::bench::Report;
use gangway::bench::compare::{Comparison, Pairing, compare};
use gangway::trace::Event;
use serde_json::Value;

use crate::timeline::{self, TimelineData, TimelineState};

/// What a file turned out to be.
#[derive(Debug, Clone)]
pub enum Loaded {
    Trace(TimelineData),
    Bench(Box<Report>),
}

impl Loaded {
    pub fn summary(&self) -> String {
        match self {
            Loaded::Trace(d) => format!("Chrome trace: {} events", d.len()),
            Loaded::Bench(r) => format!(
                "benchmark report: {} results on {} adapter(s)",
                r.results.len(),
                r.adapters.len()
            ),
        }
    }
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
    if v.get("schema").is_some() {
        return Report::from_value(v.clone()).map(|r| Loaded::Bench(Box::new(r)));
    }
    if rows.is_some() {
        return Err(
            "a gangway bench result array from before schema version 1: rerun \
                    gangway bench --json"
                .into(),
        );
    }
    Err("not a Chrome trace (no \"traceEvents\") nor a gangway bench report".into())
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
    /// The suite shown of an opened report.
    pub suite: String,
    /// A second report to compare the opened one with.
    pub compare_path: String,
    pub comparison: Option<Result<Comparison, String>>,
}

impl Default for FilesTab {
    fn default() -> Self {
        Self {
            path: "trace.json".into(),
            loaded: None,
            message: None,
            timeline: TimelineState::default(),
            save_what: SaveWhat::Live,
            suite: String::new(),
            compare_path: "old.json".into(),
            comparison: None,
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
                self.comparison = None;
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
        let Self {
            loaded,
            compare_path,
            comparison,
            suite,
            timeline: timeline_state,
            ..
        } = self;
        match loaded {
            None => {}
            Some(Loaded::Trace(data)) => {
                timeline::legend(ui);
                egui::ScrollArea::vertical().show(ui, |ui| {
                    timeline::timeline(ui, "file", data, timeline_state);
                });
            }
            Some(Loaded::Bench(report)) => {
                ui.horizontal(|ui| {
                    ui.label("compare with (old):");
                    ui.add(egui::TextEdit::singleline(compare_path).desired_width(300.0))
                        .labelled_by(ui.label("old report path").id);
                    if ui.button("Compare").clicked() {
                        *comparison = Some(compare_file(compare_path, report));
                    }
                });
                match comparison {
                    Some(Ok(c)) => {
                        ui.label(format!(
                            "compared: {} cases, {} faster, {} slower beyond the noise",
                            c.cases.len(),
                            c.count(gangway::bench::compare::Verdict::Faster),
                            c.count(gangway::bench::compare::Verdict::Slower)
                        ));
                        crate::bench_view::show_comparison(ui, c);
                        ui.separator();
                    }
                    Some(Err(e)) => {
                        ui.colored_label(ui.visuals().error_fg_color, format!("error: {e}"));
                    }
                    None => {}
                }
                crate::bench_view::show(ui, report, suite);
            }
        }
    }
}

/// Compares the report at `old` with `new`.
fn compare_file(old: &str, new: &Report) -> Result<Comparison, String> {
    let old = Report::load(Path::new(old.trim())).map_err(|e| e.to_string())?;
    compare(&old, new, Pairing::SameAdapter)
}
