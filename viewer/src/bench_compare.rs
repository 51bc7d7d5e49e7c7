//! Comparing the opened benchmark report with another: one machine's two versions, or two
//! machines' GPUs, as `gangway bench compare` does (the library's [`Sides`]: which adapter each
//! side takes, and how cases pair). The other report is read off the UI thread by the files tab
//! ([`crate::files`]); the choices and the result are here. The result is recomputed on the UI
//! thread when a choice or a report changes: pairing and judging a few hundred cases takes well
//! under a millisecond.

use std::path::PathBuf;
use std::sync::Arc;

use egui::Ui;
use gangway::bench::Report;
use gangway::bench::compare::{Comparison, Pairing, Sides, Verdict};
use gangway::bench::noise::Rule;

/// A comparison and how its cases paired, or why it could not be made.
type Outcome = Result<(Comparison, Pairing), String>;

/// What the comparison's controls ask of the files tab.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked {
    Nothing,
    /// Read the report at this path, off the UI thread, and hand it to [`BenchCompare::loaded`].
    Load(PathBuf),
    /// Read the report at this path, off the UI thread, and add it side by side
    /// ([`crate::bench_side_by_side::BenchSideBySide::added`]).
    Add(PathBuf),
    /// Choose the path in a file dialog.
    Browse,
}

/// The comparison of the opened report (new) with another (old).
#[derive(Debug)]
pub struct BenchCompare {
    /// The other report's path: the old one to compare with, or one to add side by side.
    pub path: String,
    /// The old report once read, or why it could not be.
    pub old: Option<Result<Arc<Report>, String>>,
    /// Which adapter each side takes, and whether cases pair across adapters.
    pub sides: Sides,
    /// Show only cases beyond the noise.
    pub only_changed: bool,
    /// The comparison under [`Self::sides`], and the sides it was made for: stale when they
    /// differ, or `None` once a report changed.
    result: Option<(Sides, Outcome)>,
}

impl Default for BenchCompare {
    fn default() -> Self {
        Self {
            path: "old.json".into(),
            old: None,
            sides: Sides::default(),
            only_changed: false,
            result: None,
        }
    }
}

impl BenchCompare {
    /// The old report was read (or not): compare with it from now on, with the old side's
    /// adapter choice cleared (it named the previous report's adapters).
    pub fn loaded(&mut self, old: Result<Box<Report>, String>) {
        self.old = Some(old.map(|r| Arc::new(*r)));
        self.sides.old_adapter = None;
        self.result = None;
    }

    /// Another report was opened: its comparison is made again, its adapter choice cleared.
    pub fn new_report_opened(&mut self) {
        self.sides.new_adapter = None;
        self.result = None;
    }

    /// The comparison with `new` under the current choices (made now if stale); `None` before
    /// an old report was read.
    pub fn comparison(&mut self, new: &Report) -> Option<&Result<(Comparison, Pairing), String>> {
        let old = match self.old.as_ref()? {
            Ok(old) => Arc::clone(old),
            Err(e) => {
                let e = e.clone();
                self.result = Some((self.sides.clone(), Err(e)));
                return self.result.as_ref().map(|(_, r)| r);
            }
        };
        if self.result.as_ref().is_none_or(|(s, _)| *s != self.sides) {
            let made = self.sides.compare(&old, new, Rule::default());
            self.result = Some((self.sides.clone(), made));
        }
        self.result.as_ref().map(|(_, r)| r)
    }

    /// The controls and the comparison. `idle`: no file work under way; `dialog_free`: no file
    /// dialog open.
    pub fn ui(&mut self, ui: &mut Ui, new: &Report, idle: bool, dialog_free: bool) -> Asked {
        // One path for another report, two uses: compare with it (as the old side), or add it
        // side by side ([`crate::bench_side_by_side`]).
        let mut asked = Asked::Nothing;
        ui.horizontal(|ui| {
            ui.label("another report:");
            ui.add(egui::TextEdit::singleline(&mut self.path).desired_width(300.0))
                .labelled_by(ui.label("report path").id);
            if ui
                .add_enabled(idle, egui::Button::new("Compare"))
                .on_hover_text("compare the opened report (new) with this one (old)")
                .clicked()
            {
                asked = Asked::Load(PathBuf::from(self.path.trim()));
            }
            if ui
                .add_enabled(idle, egui::Button::new("Add side by side"))
                .on_hover_text("show this report's columns beside the opened one's")
                .clicked()
            {
                asked = Asked::Add(PathBuf::from(self.path.trim()));
            }
            if ui
                .add_enabled(idle && dialog_free, egui::Button::new("Browse…"))
                .clicked()
            {
                asked = Asked::Browse;
            }
        });
        let old = match &self.old {
            Some(Ok(old)) => Some(Arc::clone(old)),
            _ => None,
        };
        if let Some(old) = &old {
            ui.horizontal(|ui| {
                adapter_choice(ui, "old adapter", old, &mut self.sides.old_adapter);
                adapter_choice(ui, "new adapter", new, &mut self.sides.new_adapter);
                ui.checkbox(&mut self.sides.any_adapter, "pair across adapters")
                    .on_hover_text(
                        "pair cases by suite and case alone, whatever the adapter (two \
                         machines); each side must then hold each case once: choose one adapter \
                         a side",
                    );
                if let Some((_, Ok((_, pairing)))) = &self.result {
                    ui.weak(pairing.describe());
                }
            });
        }
        let only_changed = &mut self.only_changed;
        let mut show_only = *only_changed;
        let outcome = match self.comparison_for_ui(new) {
            None => None,
            Some(Err(e)) => {
                ui.colored_label(ui.visuals().error_fg_color, format!("error: {e}"));
                None
            }
            Some(Ok((c, pairing))) => Some((c, pairing)),
        };
        if let Some((c, _)) = outcome {
            ui.horizontal(|ui| {
                ui.label(format!(
                    "compared: {} cases, {} faster, {} slower beyond the noise",
                    c.cases.len(),
                    c.count(Verdict::Faster),
                    c.count(Verdict::Slower)
                ));
                ui.checkbox(&mut show_only, "only beyond the noise");
            });
            if c.cases.is_empty() {
                ui.colored_label(
                    ui.visuals().warn_fg_color,
                    "no case is in both reports: choose an adapter on each side, or pair across \
                     adapters",
                );
            } else {
                ui.label(format!(
                    "geometric mean of new/old per suite: {}",
                    c.suite_means_line()
                ));
            }
            // A quarter of the window: the suite's chart below stays in view.
            let height = (ui.ctx().content_rect().height() * 0.25).clamp(120.0, 360.0);
            crate::bench_view::show_comparison(ui, &c, show_only, height);
            ui.separator();
        }
        self.only_changed = show_only;
        asked
    }

    /// The comparison as last made (by [`Self::comparison`] or a frame), without making it.
    pub fn shown(&self) -> Option<&Result<(Comparison, Pairing), String>> {
        self.result.as_ref().map(|(_, r)| r)
    }

    /// [`Self::comparison`], cloned out so the UI can draw it while `self` changes.
    fn comparison_for_ui(&mut self, new: &Report) -> Option<Result<(Comparison, Pairing), String>> {
        self.comparison(new).cloned()
    }
}

/// A side's adapter: every adapter of its report, or one of them (its index, as
/// [`Report::only_adapter`] takes it).
fn adapter_choice(ui: &mut Ui, what: &str, report: &Report, choice: &mut Option<String>) {
    let label = |index: &str| {
        report
            .adapters
            .iter()
            .find(|a| a.index.to_string() == index)
            .map_or_else(
                || index.to_string(),
                |a| format!("{} {}", a.index, a.label()),
            )
    };
    let shown = choice.as_deref().map_or("every adapter".to_string(), label);
    let named = ui.label(format!("{what}:")).id;
    egui::ComboBox::from_id_salt(what)
        .selected_text(shown)
        .show_ui(ui, |ui| {
            ui.selectable_value(choice, None, "every adapter");
            for a in &report.adapters {
                ui.selectable_value(
                    choice,
                    Some(a.index.to_string()),
                    format!("{} {}", a.index, a.label()),
                );
            }
        })
        .response
        .labelled_by(named);
}
