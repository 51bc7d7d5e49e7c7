//! A `gangway bench --json` report: what ran where, a bar chart of each suite's derived figure
//! per case and adapter, and the suite's table; optionally beside a second report, compared.

use egui::Ui;
use egui_plot::{Bar, BarChart, Legend, Plot};
use gangway::bench::Report;
use gangway::bench::compare::Comparison;
use gangway::bench::report::{Status, TABLE_COLUMNS, number, seconds};

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

/// Header, suite picker, chart and table. `suite` is the picked suite (kept by the caller).
pub fn show(ui: &mut Ui, report: &Report, suite: &mut String) {
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
    let width = 0.8 / report.adapters.len().max(1) as f64;
    let charts: Vec<BarChart> = report
        .adapters
        .iter()
        .enumerate()
        .map(|(k, a)| {
            let bars = rows
                .iter()
                .filter(|r| r.adapter == a.index)
                .filter_map(|r| {
                    let x = cases.iter().position(|c| *c == r.case)? as f64;
                    let value = r.figure.as_ref()?.value;
                    Some(
                        Bar::new(x - 0.4 + width * (k as f64 + 0.5), value)
                            .width(width)
                            .name(&r.case),
                    )
                })
                .collect();
            BarChart::new(a.label(), bars)
        })
        .collect();
    ui.label(format!("{suite}: {unit} per case (higher is better)"));
    let labels: Vec<String> = cases.iter().map(|c| c.to_string()).collect();
    Plot::new(format!("bench-{suite}"))
        .legend(Legend::default())
        .height(240.0)
        .y_axis_label(unit)
        .include_y(0.0)
        .x_axis_formatter(move |mark, _| {
            let i = mark.value.round();
            if (mark.value - i).abs() < 1e-6 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .show(ui, |plot| {
            for c in charts {
                plot.bar_chart(c);
            }
        });
    egui::ScrollArea::both()
        .id_salt("bench-table")
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
                            ui.label(&r.note);
                        }
                        _ => {
                            let status = if r.status == Status::Skipped {
                                "skipped"
                            } else {
                                "FAILED"
                            };
                            ui.colored_label(ui.visuals().warn_fg_color, status);
                            for _ in 0..7 {
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

/// Two reports' cases side by side: the ratio and whether it is beyond the noise.
pub fn show_comparison(ui: &mut Ui, c: &Comparison) {
    egui::Grid::new("bench-compare")
        .striped(true)
        .show(ui, |ui| {
            for h in [
                "suite", "case", "adapter", "old", "new", "new/old", "verdict",
            ] {
                ui.strong(h);
            }
            ui.end_row();
            for k in &c.cases {
                ui.label(&k.suite);
                ui.label(&k.case);
                ui.label(&k.adapter);
                ui.label(k.old_median_s.map_or("–".into(), seconds));
                ui.label(k.new_median_s.map_or("–".into(), seconds));
                ui.label(k.time_ratio.map_or("–".into(), |r| format!("{r:.3}×")));
                ui.label(k.verdict.name());
                ui.end_row();
            }
        });
}
