//! A `gangway bench --json` report: what ran where, a bar chart of each suite's derived figure
//! per case and adapter (every case named under it, turned upright, a long name shortened in
//! its middle; a bar's hover names its case, adapter and value in a tooltip that stays on
//! screen; a log axis where the values span more than 10×; the wheel scrolls the page, a
//! double-click resets the view, a new report starts afresh), and the suite's table with each
//! case's note and metrics as the CLI prints them; optionally beside a second report, compared:
//! each case's ratio, verdict and note (as `gangway bench compare` prints it), and the cases
//! found in one report only; or with several reports side by side, a table with a column per
//! machine and adapter, and a bar per column in the chart.

use egui::{Align, Color32, Layout, Rect, Sense, TextStyle, Ui, UiBuilder, Vec2};
use egui_plot::{Bar, BarChart, GridInput, GridMark, Legend, Plot};
use gangway::bench::Report;
use gangway::bench::compare::{Comparison, Verdict, host_change, noise_text, spreads};
use gangway::bench::format::{number, seconds};
use gangway::bench::host::HostCost;
use gangway::bench::report::{Status, TABLE_COLUMNS, note_text};
use gangway::bench::side_by_side::SideBySide;

/// The suites of a report, in run order.
pub fn suites(report: &Report) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in &report.results {
        if !out.contains(&r.suite) {
            out.push(r.suite.clone());
        }
    }
    out
}

/// Header, suite picker, chart and table. `suite` is the picked suite (kept by the caller);
/// `beside`: the report with others side by side, whose table is shown and whose columns the
/// chart draws instead of the report's adapters.
pub fn show(ui: &mut Ui, report: &Report, suite: &mut String, beside: Option<&SideBySide>) {
    let m = &report.machine;
    ui.label(format!(
        "gangway {} ({}) · {} · {} {} · {} ({} cores)",
        report.gangway.version,
        report.gangway.git,
        report.timestamp,
        m.os,
        m.os_version,
        m.cpu,
        m.cores
    ));
    for a in &report.adapters {
        let peak = a.peak.as_ref().map_or("peak unknown".to_string(), |p| {
            format!(
                "peak {} GFLOP/s, {} GB/s ({})",
                p.gflops.map_or("?".into(), number),
                p.gbps.map_or("?".into(), number),
                p.source
            )
        });
        ui.weak(format!(
            "adapter {}: {} · {} · {} virtual device(s) · {peak}",
            a.index,
            a.label(),
            a.device_type,
            a.virtual_devices
        ));
    }
    let all = suites(report);
    if !all.contains(suite) {
        *suite = all.first().cloned().unwrap_or_default();
    }
    ui.horizontal(|ui| {
        ui.label("suite:");
        for s in &all {
            ui.selectable_value(suite, s.clone(), s);
        }
    });
    let rows: Vec<_> = report
        .results
        .iter()
        .filter(|r| &r.suite == suite)
        .collect();
    // The chart's bars: a series per adapter of the report, or per column of the reports side
    // by side; each bar (case index, value).
    let (cases, unit, series): (Vec<&str>, String, Vec<Series>) = match beside {
        Some(s) => {
            ui.separator();
            ui.strong(format!(
                "{suite} side by side: {} columns, one per machine and adapter",
                s.columns.len()
            ));
            let height = (ui.ctx().content_rect().height() * 0.3).clamp(120.0, 360.0);
            crate::bench_side_by_side::show_table(ui, s, suite, height);
            let rows: Vec<_> = s.rows.iter().filter(|r| &r.suite == suite).collect();
            let series = s
                .columns
                .iter()
                .enumerate()
                .map(|(k, c)| {
                    let bars = rows
                        .iter()
                        .enumerate()
                        .filter_map(|(x, r)| Some((x, r.cells[k].figure()?.value)))
                        .collect();
                    (c.heading(), bars)
                })
                .collect();
            (
                rows.iter().map(|r| r.case.as_str()).collect(),
                s.unit(suite).unwrap_or_default().to_owned(),
                series,
            )
        }
        None => {
            let mut cases: Vec<&str> = Vec::new();
            for r in &rows {
                if !cases.contains(&r.case.as_str()) {
                    cases.push(&r.case);
                }
            }
            let unit = rows
                .iter()
                .find_map(|r| r.figure.as_ref().map(|f| f.unit.clone()))
                .unwrap_or_default();
            let series = report
                .adapters
                .iter()
                .map(|a| {
                    let bars = rows
                        .iter()
                        .filter(|r| r.adapter == a.index)
                        .filter_map(|r| {
                            let x = cases.iter().position(|c| *c == r.case)?;
                            Some((x, r.figure.as_ref()?.value))
                        })
                        .collect();
                    (a.label(), bars)
                })
                .collect();
            (cases, unit, series)
        }
    };
    let width = 0.8 / series.len().max(1) as f64;
    let values: Vec<f64> = series
        .iter()
        .flat_map(|(_, bars)| bars.iter().map(|(_, v)| *v))
        .collect();
    let scale = Scale::for_values(&values);
    // Every bar, for the hover: (case index, series slot, value).
    let mut placed: Vec<(usize, usize, f64)> = Vec::new();
    let charts: Vec<BarChart> = series
        .iter()
        .enumerate()
        .map(|(k, (label, bars))| {
            let bars = bars
                .iter()
                .map(|&(x, value)| {
                    placed.push((x, k, value));
                    let (base, height) = scale.bar(value);
                    Bar::new(x as f64 - 0.4 + width * (k as f64 + 0.5), height)
                        .base_offset(base)
                        .width(width)
                        .name(cases[x])
                })
                .collect();
            // Hovers are drawn by `bar_hover` as tooltips, which stay on screen: egui_plot's
            // own label is clipped at the plot's edges.
            BarChart::new(label.clone(), bars).allow_hover(false)
        })
        .collect();
    let scale_word = match scale {
        Scale::Linear => "",
        Scale::Log { .. } => ", log scale: the values span more than 10×",
    };
    ui.label(format!(
        "{suite}: {unit} per case (higher is better){scale_word}"
    ));
    let columns = if beside.is_some() {
        "columns"
    } else {
        "adapters"
    };
    let plot = Plot::new((
        "bench",
        suite.as_str(),
        columns,
        report_generation(ui, report),
    ))
    .legend(Legend::default())
    .height(240.0)
    .y_axis_label(unit.clone())
    // A grid line on every case; their names are drawn below the plot, turned upright,
    // since egui_plot drops every horizontal label wider than a case's slot.
    .x_grid_spacer(case_marks)
    .x_axis_formatter(|_, _| String::new());
    let plot = match scale {
        Scale::Linear => plot.include_y(0.0),
        Scale::Log { floor } => plot
            .include_y(floor)
            .y_grid_spacer(egui_plot::log_grid_spacer(10))
            .y_axis_formatter(|mark, _| number(10f64.powf(mark.value))),
    };
    let shown = wheel_scrolls_the_page(plot).show(ui, |plot| {
        for c in charts {
            plot.bar_chart(c);
        }
    });
    bar_hover(&shown, &placed, width, |x, k, value| {
        let label = series.get(k).map(|(l, _)| l.as_str()).unwrap_or_default();
        format!("{}\n{label}\n{} {unit}", cases[x], number(value))
    });
    case_names(ui, &shown.transform, &cases);
    // A region of its own: a suite with many cases scrolls here, not the page.
    let height = (ui.ctx().content_rect().height() * 0.4).clamp(160.0, 480.0);
    egui::ScrollArea::both()
        .id_salt("bench-table")
        .max_height(height)
        .min_scrolled_height(height)
        .show(ui, |ui| {
            egui::Grid::new("bench-rows").striped(true).show(ui, |ui| {
                // The report's own columns, less the suite (one suite is shown).
                for h in &TABLE_COLUMNS[1..] {
                    ui.strong(*h);
                }
                ui.end_row();
                for r in rows {
                    ui.label(&r.case);
                    ui.label(report.adapter_label(r.adapter));
                    match (&r.stats, r.status) {
                        (Some(s), Status::Ok) => {
                            ui.label(s.timing.name());
                            ui.label(seconds(s.median_s));
                            ui.label(seconds(s.min_s));
                            ui.label(seconds(s.max_s));
                            ui.label(r.figure.as_ref().map_or(String::new(), |f| {
                                format!("{} {}", number(f.value), f.unit)
                            }));
                            ui.label(
                                r.peak_fraction
                                    .map_or("–".into(), |f| format!("{:.1}%", f * 100.0)),
                            );
                            ui.label(
                                r.baseline.as_ref().map_or("–".into(), |b| {
                                    format!("{:.2}× {}", b.speedup, b.case)
                                }),
                            );
                            ui.label(r.host.as_ref().map_or("–".into(), HostCost::summary));
                            ui.label(note_text(r));
                        }
                        _ => {
                            let status = if r.status == Status::Skipped {
                                "skipped"
                            } else {
                                "FAILED"
                            };
                            ui.colored_label(ui.visuals().warn_fg_color, status);
                            // A dash under each column between the timing and the note, so
                            // the reason lands in the note column.
                            for _ in 0..SKIPPED_DASHES {
                                ui.label("–");
                            }
                            ui.label(r.reason.clone().unwrap_or_default());
                        }
                    }
                    ui.end_row();
                }
            });
        });
}

/// Columns of the suite's table between a skipped case's status (under "timing") and its reason
/// (under "note"): the report's columns less the suite, case, adapter, timing and note.
const SKIPPED_DASHES: usize = TABLE_COLUMNS.len() - 5;

/// A plot that leaves the mouse wheel to the page around it: without this, the wheel over a
/// chart panned its axes off the data (while the page scrolled too), and so did ctrl+wheel's
/// zoom. Dragging still pans, a box drag still zooms, and a double-click brings the automatic
/// bounds back.
pub fn wheel_scrolls_the_page(plot: Plot<'_>) -> Plot<'_> {
    plot.allow_scroll(false)
        .allow_zoom(false)
        .allow_double_click_reset(true)
}

/// How many different reports the chart has shown: a new report (a new allocation, even of the
/// same file) salts the plot's id, so it starts with fresh bounds instead of the last report's
/// pan and zoom.
fn report_generation(ui: &Ui, report: &Report) -> u64 {
    let key = std::ptr::from_ref(report) as usize;
    let id = ui.make_persistent_id("bench-chart-report");
    ui.data_mut(|d| {
        let (last, generation) = d.get_temp::<(usize, u64)>(id).unwrap_or((key, 0));
        let generation = if last == key {
            generation
        } else {
            generation + 1
        };
        d.insert_temp(id, (key, generation));
        generation
    })
}

/// A bar series of the chart: its legend, and its bars as (case index, value).
type Series = (String, Vec<(usize, f64)>);

/// How a suite's chart draws its values.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Scale {
    Linear,
    /// Bars of `log10(value)` from `floor` (a power of ten at or below the smallest value):
    /// where the values span more than 10×, a linear axis flattens the small ones to nothing.
    Log {
        floor: f64,
    },
}

impl Scale {
    fn for_values(values: &[f64]) -> Scale {
        let positive = values.iter().copied().filter(|v| *v > 0.0 && v.is_finite());
        let (lo, hi) = positive.fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
        if hi > 10.0 * lo {
            Scale::Log {
                floor: lo.log10().floor(),
            }
        } else {
            Scale::Linear
        }
    }

    /// A bar's base and height, in the plot's units.
    fn bar(self, value: f64) -> (f64, f64) {
        match self {
            Scale::Linear => (0.0, value),
            Scale::Log { floor } if value > 0.0 => (floor, value.log10() - floor),
            Scale::Log { floor } => (floor, 0.0),
        }
    }
}

/// The hovered bar's text (`text(case, adapter slot, value)`) as a tooltip at the pointer,
/// which egui keeps on screen. A bar is found by the case slot and the adapter's share of it
/// under the pointer: `placed` holds each bar's case index, adapter slot and value.
fn bar_hover(
    shown: &egui_plot::PlotResponse<()>,
    placed: &[(usize, usize, f64)],
    width: f64,
    text: impl Fn(usize, usize, f64) -> String,
) {
    let Some(pointer) = shown.response.hover_pos() else {
        return;
    };
    let at = shown.transform.value_from_position(pointer);
    let case = at.x.round();
    if case < 0.0 {
        return;
    }
    let slot = ((at.x - case + 0.4) / width).floor();
    let Some(&(x, k, value)) = placed
        .iter()
        .find(|(x, k, _)| *x as f64 == case && *k as f64 == slot)
    else {
        return;
    };
    shown.response.clone().on_hover_ui_at_pointer(|ui| {
        ui.label(text(x, k, value));
    });
}

/// Longest case name drawn under the chart, in characters (the hover has the whole name).
const CASE_NAME_CHARS: usize = 32;

/// `name` within `max` characters: whole, or its start and its end about an ellipsis, so that
/// neighbours that differ at the end ("… tiled", "… naive") still read apart.
pub fn middle_ellipsis(name: &str, max: usize) -> String {
    let chars: Vec<char> = name.chars().collect();
    if chars.len() <= max || max < 3 {
        return name.to_owned();
    }
    let tail = (max - 1) / 2;
    let head = max - 1 - tail;
    let start: String = chars[..head].iter().collect();
    let end: String = chars[chars.len() - tail..].iter().collect();
    format!("{}…{}", start.trim_end(), end.trim_start())
}

/// The case names under the chart, each turned upright under its case (reading upwards, ending
/// at the axis), every k-th one where the cases are closer than a line of text.
fn case_names(ui: &mut Ui, transform: &egui_plot::PlotTransform, cases: &[&str]) {
    let font = TextStyle::Body.resolve(ui.style());
    let color = ui.visuals().text_color();
    let galleys: Vec<_> = cases
        .iter()
        .map(|c| {
            ui.painter()
                .layout_no_wrap(middle_ellipsis(c, CASE_NAME_CHARS), font.clone(), color)
        })
        .collect();
    let tall = galleys.iter().map(|g| g.size().x).fold(0.0, f32::max);
    let line = galleys.iter().map(|g| g.size().y).fold(0.0, f32::max);
    let frame = *transform.frame();
    let (rect, _) =
        ui.allocate_exact_size(Vec2::new(ui.available_width(), tall + 4.0), Sense::hover());
    let spacing = transform.dpos_dvalue_x().abs() as f32;
    let every = if spacing > 0.0 {
        ((1.1 * line / spacing).ceil() as usize).max(1)
    } else {
        1
    };
    let painter = ui.painter_at(rect.with_min_x(frame.left()).with_max_x(frame.right()));
    for (i, galley) in galleys.into_iter().enumerate().step_by(every) {
        let x = transform.position_from_point_x(i as f64);
        if x < frame.left() || x > frame.right() {
            continue;
        }
        // Turned a quarter left about its top left corner: the text then runs up from
        // `pos`, its lines stacked rightwards, so this centres it on the case and ends it at
        // the top.
        let pos = egui::pos2(
            x - 0.5 * galley.size().y,
            rect.top() + 2.0 + galley.size().x,
        );
        painter.add(
            egui::epaint::TextShape::new(pos, galley, color)
                .with_angle(-std::f32::consts::FRAC_PI_2),
        );
    }
}

/// Grid marks on every whole number in view (one per case of a bar chart), at most 200.
fn case_marks(input: GridInput) -> Vec<GridMark> {
    let (lo, hi) = input.bounds;
    let (lo, hi) = (lo.ceil().max(0.0), hi.floor());
    if hi < lo || hi - lo > 200.0 {
        return Vec::new();
    }
    (lo as usize..=hi as usize)
        .map(|i| GridMark {
            value: i as f64,
            step_size: 1.0,
        })
        .collect()
}

/// Columns of the comparison table (the CLI's, `gangway::bench::compare::COMPARE_COLUMNS`);
/// `true`: a number, right-aligned.
const COMPARE_COLUMNS: [(&str, bool); 11] = [
    ("suite", false),
    ("case", false),
    ("adapter", false),
    ("old fastest", true),
    ("new fastest", true),
    ("new/old", true),
    ("noise", true),
    ("spread old / new", true),
    ("verdict", false),
    ("host per run, old -> new", false),
    ("note", false),
];
/// The verdict's column, coloured.
const VERDICT_COLUMN: usize = 8;

/// Two reports' cases side by side: the ratio, whether it is beyond the noise, and the note
/// (say, "compared per unit of work" when the two did different amounts). A table of its own at
/// most `max_height` tall whose header stays put while its rows scroll; only the rows in view
/// are laid out. `only_changed`: just the cases beyond the noise. Below it, the cases found in
/// one report only, each list collapsed under its count.
pub fn show_comparison(ui: &mut Ui, c: &Comparison, only_changed: bool, max_height: f32) {
    let rows: Vec<([String; COMPARE_COLUMNS.len()], Verdict)> = c
        .cases
        .iter()
        .filter(|k| !only_changed || matches!(k.verdict, Verdict::Faster | Verdict::Slower))
        .map(|k| {
            (
                [
                    k.suite.clone(),
                    k.case.clone(),
                    k.adapter.clone(),
                    k.old_fastest_s.map_or("–".into(), seconds),
                    k.new_fastest_s.map_or("–".into(), seconds),
                    k.time_ratio.map_or("–".into(), |r| format!("{r:.3}×")),
                    k.noise.map_or("–".into(), noise_text),
                    spreads(k.old_spread, k.new_spread),
                    k.verdict.name().to_string(),
                    host_change(k.old_host.as_ref(), k.new_host.as_ref()),
                    k.note.clone(),
                ],
                k.verdict,
            )
        })
        .collect();
    // Column widths from every row, not just those in view, so nothing shifts while scrolling.
    let font = TextStyle::Body.resolve(ui.style());
    let pad = ui.spacing().item_spacing.x * 2.0;
    let mut widths = [0.0f32; COMPARE_COLUMNS.len()];
    ui.ctx().fonts_mut(|f| {
        let mut fit = |i: usize, text: &str| {
            let w = f
                .layout_no_wrap(text.to_owned(), font.clone(), Color32::PLACEHOLDER)
                .size()
                .x;
            widths[i] = widths[i].max(w + pad);
        };
        for (i, (h, _)) in COMPARE_COLUMNS.iter().enumerate() {
            fit(i, h);
        }
        for (cells, _) in &rows {
            for (i, text) in cells.iter().enumerate() {
                fit(i, text);
            }
        }
    });
    let row_h = ui
        .text_style_height(&TextStyle::Body)
        .max(ui.spacing().interact_size.y);
    let faster = Color32::from_rgb(52, 168, 83);
    egui::ScrollArea::horizontal()
        .id_salt("bench-compare-h")
        .show(ui, |ui| {
            ui.vertical(|ui| {
                table_row(ui, &widths, row_h, false, |i, ui| {
                    ui.strong(COMPARE_COLUMNS[i].0);
                });
                egui::ScrollArea::vertical()
                    .id_salt("bench-compare")
                    .max_height(max_height)
                    .min_scrolled_height(max_height.min(row_h * 4.0))
                    .show_rows(ui, row_h, rows.len(), |ui, range| {
                        for r in range {
                            let (cells, verdict) = &rows[r];
                            table_row(ui, &widths, row_h, r % 2 == 1, |i, ui| {
                                let text = cells[i].as_str();
                                match (i, verdict) {
                                    (VERDICT_COLUMN, Verdict::Faster) => {
                                        ui.colored_label(faster, text)
                                    }
                                    (VERDICT_COLUMN, Verdict::Slower) => {
                                        ui.colored_label(ui.visuals().error_fg_color, text)
                                    }
                                    _ => ui.label(text),
                                };
                            });
                        }
                    });
                if rows.is_empty() {
                    ui.weak("no case beyond the noise");
                }
            });
        });
    // Collapsed: two machines' reports can differ by a hundred cases, which would fill the
    // screen as a paragraph.
    for (which, keys) in [("old", &c.only_old), ("new", &c.only_new)] {
        if !keys.is_empty() {
            egui::CollapsingHeader::new(format!("only in {which} ({})", keys.len()))
                .id_salt(("only in", which))
                .default_open(false)
                .show(ui, |ui| {
                    for key in keys.iter() {
                        ui.label(key);
                    }
                });
        }
    }
}

/// One row of a table of fixed column `widths`: `cell(column, ui)` fills each cell.
fn table_row(
    ui: &mut Ui,
    widths: &[f32; COMPARE_COLUMNS.len()],
    height: f32,
    stripe: bool,
    mut cell: impl FnMut(usize, &mut Ui),
) {
    let (rect, _) = ui.allocate_exact_size(Vec2::new(widths.iter().sum(), height), Sense::hover());
    if stripe {
        ui.painter()
            .rect_filled(rect, 0.0, ui.visuals().faint_bg_color);
    }
    let half_pad = ui.spacing().item_spacing.x;
    let mut x = rect.left();
    for (i, w) in widths.iter().enumerate() {
        let cell_rect = Rect::from_min_size(egui::pos2(x, rect.top()), Vec2::new(*w, height))
            .shrink2(Vec2::new(half_pad, 0.0));
        let layout = if COMPARE_COLUMNS[i].1 {
            Layout::right_to_left(Align::Center)
        } else {
            Layout::left_to_right(Align::Center)
        };
        let mut child = ui.new_child(UiBuilder::new().max_rect(cell_rect).layout(layout));
        cell(i, &mut child);
        x += w;
    }
}
