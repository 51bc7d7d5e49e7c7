//! Several reports beside the opened one, a column per machine and adapter, as
//! `gangway bench side-by-side` prints them (the library's [`SideBySide`]): a report to add is
//! named in the comparison's path row ([`crate::bench_compare`]) and read off the UI thread by
//! the files tab ([`crate::files`]); the list of those added and the table are here, and the
//! suite's chart ([`crate::bench_view`]) draws a bar per column.

use std::path::PathBuf;
use std::sync::Arc;

use egui::Ui;
use gangway::bench::Report;
use gangway::bench::side_by_side::SideBySide;

/// The reports shown beside the opened one.
#[derive(Debug, Default)]
pub struct BenchSideBySide {
    /// The reports added, in order: their names (file names) and contents.
    others: Vec<(String, Arc<Report>)>,
    /// Why the last report could not be added.
    pub error: Option<String>,
    /// The opened report and those added, laid out once: made again only when a report is
    /// added, removed or opened, not every frame.
    made: Option<Arc<SideBySide>>,
}

/// The name a report's columns go by: its file name.
pub fn report_name(path: &std::path::Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into(),
    )
}

impl BenchSideBySide {
    /// The report at `path` was read (or not): add it as the last columns.
    pub fn added(&mut self, path: PathBuf, report: Result<Box<Report>, String>) {
        match report {
            Ok(r) => {
                self.others.push((report_name(&path), Arc::new(*r)));
                self.error = None;
                self.made = None;
            }
            // The library's error names the file.
            Err(e) => self.error = Some(e),
        }
    }

    /// The reports added, in order: their names and contents.
    pub fn others(&self) -> &[(String, Arc<Report>)] {
        &self.others
    }

    /// Another report was opened: the side-by-side view is made again for it.
    pub fn new_report_opened(&mut self) {
        self.made = None;
    }

    /// The opened report (named `name`) and those added, side by side (made when stale);
    /// `None` before any was added.
    pub fn side_by_side(&mut self, name: &str, report: &Report) -> Option<Arc<SideBySide>> {
        if self.others.is_empty() {
            return None;
        }
        let others = &self.others;
        let made = self.made.get_or_insert_with(|| {
            let mut all: Vec<(String, &Report)> = vec![(name.to_owned(), report)];
            all.extend(others.iter().map(|(n, r)| (n.clone(), r.as_ref())));
            Arc::new(SideBySide::new(&all))
        });
        Some(Arc::clone(made))
    }

    /// The reports added, each removable, and why the last could not be (the path and the
    /// button that adds one are the comparison's row, [`crate::bench_compare`]).
    pub fn ui(&mut self, ui: &mut Ui) {
        if let Some(e) = &self.error {
            ui.colored_label(ui.visuals().error_fg_color, format!("error: {e}"));
        }
        let mut remove = None;
        if !self.others.is_empty() {
            ui.horizontal_wrapped(|ui| {
                ui.label("side by side with:");
                for (k, (name, _)) in self.others.iter().enumerate() {
                    if ui
                        .button(format!("{name} ✕"))
                        .on_hover_text("remove this report's columns")
                        .clicked()
                    {
                        remove = Some(k);
                    }
                }
            });
        }
        if let Some(k) = remove {
            self.others.remove(k);
            self.made = None;
        }
    }
}

/// The side-by-side table of `suite`: the suite's geometric means, then a row per case, a column
/// per machine and adapter (each cell its fastest sample and its time over the first column's).
/// A region of its own at most `max_height` tall.
pub fn show_table(ui: &mut Ui, s: &SideBySide, suite: &str, max_height: f32) {
    for (k, c) in s.columns.iter().enumerate() {
        ui.weak(format!("column {}: {} ({})", k + 1, c.heading(), c.machine));
    }
    egui::ScrollArea::both()
        .id_salt("bench-side-by-side")
        .max_height(max_height)
        .show(ui, |ui| {
            egui::Grid::new("bench-side-by-side-rows")
                .striped(true)
                .show(ui, |ui| {
                    ui.strong("case");
                    for k in 1..=s.columns.len() {
                        ui.strong(format!("column {k}"));
                    }
                    ui.end_row();
                    // The suite's means first: they stay in view above its cases.
                    if let Some(m) = s.suite_means().into_iter().find(|m| m.suite == suite) {
                        ui.strong("geometric mean of ×");
                        for x in m.means {
                            ui.strong(x.map_or_else(
                                || "–".to_string(),
                                |(g, n)| format!("{g:.3}× ({n})"),
                            ));
                        }
                        ui.end_row();
                    }
                    for r in s.rows.iter().filter(|r| r.suite == suite) {
                        ui.label(&r.case);
                        for c in &r.cells {
                            ui.label(c.text());
                        }
                        ui.end_row();
                    }
                });
        });
    ui.weak(
        "each cell: the column's fastest sample, and (×) its time over column 1's, per unit of \
         work where they differ: below 1 is faster",
    );
}
