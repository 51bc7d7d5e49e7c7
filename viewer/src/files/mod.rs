//! Opening and saving files: Chrome trace JSON, gzipped or not (gangway's own, and what
//! PyTorch's, JAX's and Perfetto's tools write: see `gangway::trace::chrome::ChromeTrace`), and
//! `gangway bench --json` reports, shown ([`crate::bench_view`]), compared
//! ([`crate::bench_compare`]) and shown beside others ([`crate::bench_side_by_side`]). What a file holds is told by the library's
//! [`gangway::trace::chrome::sniff`] before it is read whole (`files/loaded.rs`). A bad file is an
//! error shown in the UI, never a panic.
//!
//! Saving never destroys a file: "Save" writes to its own path field, which opening a trace
//! fills with a new name beside it (`trace-copy.json`, and "opened trace" chosen), and a path
//! that exists is written
//! only after the user confirms the overwrite. Saving the opened trace writes the bytes that
//! were read, as they were (gzipped or not), so nothing of it (names, categories, args,
//! counters, instants, flows, metadata) is lost; the live and bubble-lab timelines are written
//! in gangway's layout ([`gangway::trace::chrome::to_string`]).
//!
//! No file I/O runs on the UI thread: reading, parsing and interpreting a file, serializing and
//! writing a trace, and loading the reports to compare with or show beside all run on a worker thread
//! (`files/work.rs`) that hands its result back through a channel and asks for a repaint; every
//! frame polls ([`FilesTab::poll`]) and, meanwhile, shows what is under way with a spinner. This
//! file is the tab's UI. Saving goes
//! through [`gangway::fsutil::write_new`] (or, confirmed, [`gangway::fsutil::write_atomic`]),
//! so a kill mid-save never leaves a torn file.
//!
//! Files come from the path field, a native dialog (`rfd`; where none can open, the field stays
//! and the UI says why), a drop onto the window ([`FilesTab::handle_dropped`]) or the recent
//! list ([`FilesTab::recent`], which the app persists).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use egui::Ui;
use gangway::trace::Track;
use gangway::trace::chrome::Dialect;

use crate::background::{Job, spawn};
use crate::bench_compare::{Asked, BenchCompare};
use crate::bench_side_by_side::{BenchSideBySide, report_name};
pub use gangway::trace::PipelineBubble;

use crate::timeline::{self, TimelineData, TimelineState};

mod loaded;
mod work;
pub use loaded::{Loaded, OpenedTrace, interpret, open, open_bytes, pipeline_bubble};
use work::{Done, Work};
pub use work::{SaveWhat, copy_name, save_trace, write_file};

/// How many recently opened files [`FilesTab::recent`] keeps.
pub const RECENT_MAX: usize = 8;

/// What a file dialog was opened for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    Open,
    Compare,
    SaveAs,
}

/// A native file dialog open on a worker thread.
#[derive(Debug)]
struct Dialog {
    purpose: Purpose,
    started: Instant,
    job: Job<Option<PathBuf>>,
}

/// A dialog that returns nothing sooner than this most likely never opened: nobody picks
/// "Cancel" that fast.
const DIALOG_FAILED_WITHIN: Duration = Duration::from_millis(400);

/// The files tab.
#[derive(Debug)]
pub struct FilesTab {
    pub path: String,
    pub loaded: Option<Loaded>,
    /// Where [`FilesTab::loaded`] came from.
    pub loaded_from: Option<PathBuf>,
    pub message: Option<Result<String, String>>,
    pub timeline: TimelineState,
    pub save_what: SaveWhat,
    /// The suite shown of an opened report.
    pub suite: String,
    /// The opened report's comparison with another.
    pub compare: BenchCompare,
    /// Other reports shown beside the opened one.
    pub beside: BenchSideBySide,
    /// Files opened lately, newest first, at most [`RECENT_MAX`]; the app persists them (set
    /// with [`FilesTab::set_recent`]).
    pub recent: Vec<PathBuf>,
    work: Option<Work>,
    dialog: Option<Dialog>,
    /// Where "Save" writes: a new name beside an opened file, or what the user typed or chose.
    pub save_path: String,
    /// A save to this path waits for the user to confirm overwriting what is there.
    pub confirm_overwrite: Option<PathBuf>,
    /// A "Save as…" dialog chose a path: save there on the next frame that has the timelines.
    save_pending: bool,
    /// To ask for a repaint when a worker finishes (known from the first frame on).
    ctx: Option<egui::Context>,
    /// The pass whose dropped files were taken.
    dropped_pass: Option<u64>,
}

impl Default for FilesTab {
    fn default() -> Self {
        Self {
            path: "trace.json".into(),
            loaded: None,
            loaded_from: None,
            message: None,
            timeline: TimelineState::default(),
            save_what: SaveWhat::Live,
            suite: String::new(),
            compare: BenchCompare::default(),
            beside: BenchSideBySide::default(),
            recent: Vec::new(),
            work: None,
            dialog: None,
            save_path: "gangway-trace.json".into(),
            confirm_overwrite: None,
            save_pending: false,
            ctx: None,
            dropped_pass: None,
        }
    }
}

/// Why no native file dialog can open here, if that is known before trying. On Linux the dialog
/// is the xdg-desktop-portal's, over the D-Bus session bus, else zenity's.
fn dialog_unavailable() -> Option<String> {
    if !cfg!(any(
        target_os = "linux",
        target_os = "freebsd",
        target_os = "dragonfly",
        target_os = "netbsd",
        target_os = "openbsd"
    )) {
        return None;
    }
    let bus = std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some_and(|a| !a.is_empty())
        || std::env::var_os("XDG_RUNTIME_DIR").is_some_and(|d| Path::new(&d).join("bus").exists());
    let zenity = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("zenity").is_file()));
    if bus || zenity {
        None
    } else {
        Some(
            "no file dialog on this system (it needs an xdg-desktop-portal on the D-Bus session \
             bus, or zenity): type the path in the field instead"
                .into(),
        )
    }
}

/// The file name of `path`, for a button.
fn short_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into(),
    )
}

impl FilesTab {
    /// Whether a file is being opened, saved or compared.
    pub fn is_busy(&self) -> bool {
        self.work.is_some()
    }

    /// Whether a native file dialog is open.
    pub fn dialog_open(&self) -> bool {
        self.dialog.is_some()
    }

    /// What is under way, as the spinner says it ("opening trace.json").
    pub fn busy_with(&self) -> Option<&str> {
        self.work.as_ref().map(|w| w.what.as_str())
    }

    /// Replaces the recent list (e.g. with the one saved by the last launch): duplicates go, the
    /// newest [`RECENT_MAX`] stay.
    pub fn set_recent(&mut self, recent: Vec<PathBuf>) {
        self.recent.clear();
        for p in recent {
            if !self.recent.contains(&p) {
                self.recent.push(p);
            }
        }
        self.recent.truncate(RECENT_MAX);
    }

    /// Puts `path` first in the recent list.
    pub fn remember(&mut self, path: PathBuf) {
        self.recent.retain(|p| *p != path);
        self.recent.insert(0, path);
        self.recent.truncate(RECENT_MAX);
    }

    /// Opens the file in the path field, in the background.
    pub fn open_path(&mut self) {
        let path = PathBuf::from(self.path.trim());
        self.open(path);
    }

    /// Opens files dropped onto the window: call every frame (it also polls finished work, so
    /// results arrive whichever tab is shown). While a file hovers over the window it says what
    /// a drop does. Returns whether a file was dropped (show the Files tab then).
    pub fn handle_dropped(&mut self, ctx: &egui::Context) -> bool {
        self.ctx = Some(ctx.clone());
        self.poll();
        let (hovering, dropped) =
            ctx.input(|i| (!i.raw.hovered_files.is_empty(), i.raw.dropped_files.clone()));
        if hovering {
            let painter = ctx.layer_painter(egui::LayerId::new(
                egui::Order::Foreground,
                egui::Id::unique("gangway-files-drop"),
            ));
            let rect = ctx.content_rect();
            painter.rect_filled(rect, 0.0, egui::Color32::from_black_alpha(160));
            painter.text(
                rect.center(),
                egui::Align2::CENTER_CENTER,
                "drop a Chrome trace or a gangway bench --json report to open it",
                egui::TextStyle::Heading.resolve(&ctx.global_style()),
                egui::Color32::WHITE,
            );
        }
        let Some(file) = dropped.first().cloned() else {
            return false;
        };
        // Called twice in one frame (by the app and a test, say), the drop opens once.
        let pass = ctx.cumulative_pass_nr();
        if self.dropped_pass.replace(pass) == Some(pass) {
            return true;
        }
        let path = file.path().to_path_buf();
        let shown = if path.as_os_str().is_empty() {
            "the dropped file".to_string()
        } else {
            path.display().to_string()
        };
        if !path.as_os_str().is_empty() {
            self.path = shown.clone();
        }
        let what = if dropped.len() > 1 {
            format!(
                "opening {shown} (the first of {} dropped files)",
                dropped.len()
            )
        } else {
            format!("opening {shown}")
        };
        self.start(what, true, move || {
            let result = file
                .bytes()
                .map_err(|e| format!("cannot read {shown}: {e}"))
                .and_then(|bytes| open_bytes(&bytes, &shown));
            let path = (!path.as_os_str().is_empty())
                .then(|| std::fs::canonicalize(&path).unwrap_or(path));
            Done::Opened { path, result }
        });
        true
    }

    /// Takes the results of finished background work. [`FilesTab::ui`] and
    /// [`FilesTab::handle_dropped`] call it every frame.
    pub fn poll(&mut self) {
        if let Some(work) = &self.work
            && let Some(done) = work.job.poll(&format!("{}: the worker", work.what))
        {
            self.work = None;
            match done {
                Ok(done) => self.finish(done),
                Err(e) => self.message = Some(Err(e)),
            }
        }
        if let Some(dialog) = &self.dialog
            && let Some(picked) = dialog.job.poll("the file dialog")
        {
            let (purpose, took) = (dialog.purpose, dialog.started.elapsed());
            self.dialog = None;
            match picked {
                Ok(picked) => self.picked(purpose, picked, took),
                Err(_) => {
                    self.message = Some(Err(
                        "the file dialog failed: type the path in the field instead".into(),
                    ));
                }
            }
        }
    }

    /// Opens a native file dialog for `purpose` on a worker thread.
    fn browse(&mut self, purpose: Purpose) {
        if let Some(why) = dialog_unavailable() {
            self.message = Some(Err(why));
            return;
        }
        let current = match purpose {
            Purpose::Compare => &self.compare.path,
            Purpose::Open => &self.path,
            Purpose::SaveAs => &self.save_path,
        };
        let current = PathBuf::from(current.trim());
        let dir = current
            .parent()
            .filter(|d| d.is_dir())
            .map(Path::to_path_buf)
            .or_else(|| std::env::current_dir().ok());
        let mut dialog = rfd::AsyncFileDialog::new()
            .add_filter("JSON (Chrome trace, gangway bench report)", &["json", "gz"])
            .add_filter("all files", &["*"]);
        if let Some(dir) = dir {
            dialog = dialog.set_directory(dir);
        }
        // The future is made here (macOS wants dialogs made on the main thread) and awaited on
        // the worker: the UI never blocks on the dialog, which may stay open for minutes.
        let rx = match purpose {
            Purpose::Open | Purpose::Compare => {
                let title = if purpose == Purpose::Open {
                    "Open a Chrome trace or a gangway bench report"
                } else {
                    "Another report: to compare with, or to show side by side"
                };
                let picked = dialog.set_title(title).pick_file();
                spawn("gangway-viewer-files", self.ctx.clone(), move || {
                    pollster::block_on(picked).map(|h| h.path().to_path_buf())
                })
            }
            Purpose::SaveAs => {
                let name = current
                    .file_name()
                    .map_or_else(|| "trace.json".into(), |n| n.to_string_lossy().into_owned());
                let picked = dialog
                    .set_title("Save as Chrome trace")
                    .set_file_name(name)
                    .save_file();
                spawn("gangway-viewer-files", self.ctx.clone(), move || {
                    pollster::block_on(picked).map(|h| h.path().to_path_buf())
                })
            }
        };
        match rx {
            Ok(job) => {
                self.dialog = Some(Dialog {
                    purpose,
                    started: Instant::now(),
                    job,
                });
            }
            Err(e) => self.message = Some(Err(e)),
        }
    }

    /// A dialog returned `picked` after `took`.
    fn picked(&mut self, purpose: Purpose, picked: Option<PathBuf>, took: Duration) {
        let Some(path) = picked else {
            self.message = Some(if took < DIALOG_FAILED_WITHIN {
                Err(
                    "the file dialog did not open (no xdg-desktop-portal or zenity here?): type \
                     the path in the field instead"
                        .into(),
                )
            } else {
                Ok("no file chosen".into())
            });
            return;
        };
        match purpose {
            Purpose::Open => self.open(path),
            Purpose::Compare => self.compare.path = path.display().to_string(),
            Purpose::SaveAs => {
                self.save_path = path.display().to_string();
                self.save_pending = true;
            }
        }
    }

    /// `sources`: the live and bubble-lab timelines, to save.
    pub fn ui(&mut self, ui: &mut Ui, live: &TimelineData, lab: Option<&TimelineData>) {
        self.ctx = Some(ui.ctx().clone());
        self.poll();
        if std::mem::take(&mut self.save_pending) {
            self.save(live, lab, false);
        }
        let idle = self.work.is_none();
        let no_dialog = self.dialog.is_none();
        ui.horizontal(|ui| {
            ui.label("path:");
            let field = ui
                .add(egui::TextEdit::singleline(&mut self.path).desired_width(360.0))
                .labelled_by(ui.label("file path").id);
            // Enter in the field opens, as the button does.
            let entered = field.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
            if ui.add_enabled(idle, egui::Button::new("Open")).clicked() || (entered && idle) {
                self.open_path();
            }
            if ui
                .add_enabled(idle && no_dialog, egui::Button::new("Browse…"))
                .on_hover_text("choose a file to open in the system's file dialog")
                .clicked()
            {
                self.browse(Purpose::Open);
            }
        });
        self.recent_ui(ui, idle);
        ui.horizontal(|ui| {
            ui.label("save as Chrome trace:");
            ui.selectable_value(&mut self.save_what, SaveWhat::Live, "live timeline");
            ui.selectable_value(
                &mut self.save_what,
                SaveWhat::BubbleLab,
                "bubble-lab timeline",
            );
            ui.selectable_value(&mut self.save_what, SaveWhat::Opened, "opened trace")
                .on_hover_text("the opened file's bytes, as they were read");
        });
        ui.horizontal(|ui| {
            ui.label("save to:");
            ui.add(egui::TextEdit::singleline(&mut self.save_path).desired_width(360.0))
                .labelled_by(ui.label("save path").id);
            if ui.add_enabled(idle, egui::Button::new("Save")).clicked() {
                self.save(live, lab, false);
            }
            if ui
                .add_enabled(idle && no_dialog, egui::Button::new("Save as…"))
                .on_hover_text("choose where to save in the system's file dialog")
                .clicked()
            {
                self.browse(Purpose::SaveAs);
            }
        });
        if let Some(target) = self.confirm_overwrite.clone() {
            ui.horizontal(|ui| {
                ui.colored_label(
                    ui.visuals().warn_fg_color,
                    format!("{} exists. Replace it?", target.display()),
                );
                if ui.button("Overwrite").clicked() {
                    self.save_path = target.display().to_string();
                    self.save(live, lab, true);
                }
                if ui.button("Cancel").clicked() {
                    self.confirm_overwrite = None;
                    self.message = Some(Ok(format!("not saved: {} kept", target.display())));
                }
            });
        }
        self.status_ui(ui);
        ui.separator();
        self.content_ui(ui);
    }

    fn recent_ui(&mut self, ui: &mut Ui, idle: bool) {
        if self.recent.is_empty() {
            return;
        }
        let mut open = None;
        let mut clear = false;
        ui.horizontal_wrapped(|ui| {
            ui.label("recent:");
            for p in &self.recent {
                let b = ui
                    .add_enabled(idle, egui::Button::new(short_name(p)).small())
                    .on_hover_text(p.display().to_string());
                if b.clicked() {
                    open = Some(p.clone());
                }
            }
            if ui.small_button("clear recent").clicked() {
                clear = true;
            }
        });
        if clear {
            self.recent.clear();
        }
        if let Some(p) = open {
            self.open(p);
        }
    }

    /// What is under way, and the last outcome.
    fn status_ui(&mut self, ui: &mut Ui) {
        let mut cancel = false;
        let mut stop_dialog = false;
        if let Some(w) = &self.work {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label(format!(
                    "{}… {:.1} s",
                    w.what,
                    w.started.elapsed().as_secs_f32()
                ));
                if w.cancellable && ui.small_button("cancel").clicked() {
                    cancel = true;
                }
            });
        }
        if self.dialog.is_some() {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label("waiting for the file dialog…");
                if ui.small_button("stop waiting").clicked() {
                    stop_dialog = true;
                }
            });
        }
        if cancel {
            // The worker finishes on its own; its result is dropped with the receiver.
            if let Some(w) = self.work.take() {
                self.message = Some(Ok(format!("cancelled {}", w.what)));
            }
        }
        if stop_dialog {
            self.dialog = None;
            self.message = Some(Ok(
                "stopped waiting for the file dialog: type the path in the field instead".into(),
            ));
        }
        match &self.message {
            Some(Ok(m)) => {
                ui.label(m);
            }
            Some(Err(e)) => {
                ui.colored_label(ui.visuals().error_fg_color, format!("error: {e}"));
            }
            None => {
                ui.weak(
                    "opens Chrome trace JSON (gangway --trace, PyTorch's and JAX's profilers, \
                     Perfetto, chrome://tracing; .json.gz too) and gangway bench --json files; \
                     drop one onto the window to open it",
                );
            }
        }
    }

    fn content_ui(&mut self, ui: &mut Ui) {
        let idle = self.work.is_none();
        let no_dialog = self.dialog.is_none();
        let mut asked = Asked::Nothing;
        let Self {
            loaded,
            loaded_from,
            compare,
            beside,
            suite,
            timeline: timeline_state,
            ..
        } = self;
        match loaded {
            None => {}
            Some(Loaded::Trace(t)) => {
                if let Some(from) = loaded_from {
                    ui.weak(format!("file: {}", from.display()));
                }
                ui.weak(t.phase_line());
                if let Some(b) = &t.bubble {
                    // Counted per lane: a stage, or folded, a device or a gang.
                    let lane = t.data.device_prefix.as_deref().unwrap_or("stage");
                    ui.label(format!(
                        "pipeline bubble: {:.1}% ({} {lane}s, makespan {})",
                        b.fraction * 100.0,
                        b.stages,
                        timeline::format_ns(b.makespan_ns as f64)
                    ))
                    .on_hover_text(format!(
                        "idle compute time / ({lane}s × makespan): the F, B and W ops on each \
                         {lane}'s compute lane, from the first op's start to the last one's end"
                    ));
                }
                if t.dialect == Dialect::Gangway {
                    timeline::legend(ui);
                }
                if !t.data.flows.is_empty() {
                    ui.checkbox(
                        &mut timeline_state.show_flows,
                        format!("flow arrows ({})", t.data.flows.len()),
                    )
                    .on_hover_text(
                        "arrows from the end of each flow's sending slice to the start of the \
                         slice that receives it, as Perfetto draws them",
                    );
                }
                // The timeline scrolls its own rows under a fixed time axis.
                timeline::timeline(ui, "file", &t.data, timeline_state);
            }
            Some(Loaded::Bench(report)) => {
                // The whole report scrolls; the comparison table and the suite's table are each
                // a bounded region of their own, so the chart is never pushed off the screen.
                egui::ScrollArea::vertical()
                    .id_salt("files-bench")
                    .show(ui, |ui| {
                        if let Some(from) = loaded_from {
                            ui.weak(format!("file: {}", from.display()));
                        }
                        asked = compare.ui(ui, report, idle, no_dialog);
                        beside.ui(ui);
                        let name = loaded_from
                            .as_deref()
                            .map_or_else(|| "opened".to_string(), report_name);
                        let s = beside.side_by_side(&name, report);
                        crate::bench_view::show(ui, report, suite, s.as_deref());
                    });
            }
        }
        match asked {
            Asked::Nothing => {}
            Asked::Load(old) => self.compare(old),
            Asked::Add(path) => self.add_report(path),
            Asked::Browse => self.browse(Purpose::Compare),
        }
    }
}

/// What the lanes of `data` are, as the exporter takes them.
fn tracks_of(data: &TimelineData) -> Vec<Track> {
    data.lanes.values().cloned().collect()
}
