//! Every device: its adapter, backend, type and virtual split, and its live utilization
//! (busy time over a sliding window) as a plot and a number. The plot's time axis counts back
//! from now, as the Live timeline's does.

use std::collections::{BTreeMap, VecDeque};

use egui::Ui;
use egui_plot::{Legend, Line, Plot, PlotPoints};

use crate::live::{DeviceHub, Discovery};
use crate::live_view::{LiveView, UTILIZATION_LABEL};

pub fn ui(ui: &mut Ui, hub: &DeviceHub, live: &LiveView) {
    let infos = match hub.get() {
        Discovery::Pending => {
            ui.label("looking for adapters...");
            return;
        }
        Discovery::Unavailable(why) => {
            ui.label(format!("no devices: {why}"));
            return;
        }
        Discovery::Found(_) => hub.infos(),
    };
    let per_adapter = |adapter: usize| infos.iter().filter(|i| i.adapter == adapter).count();
    egui::Grid::new("devices")
        .striped(true)
        .num_columns(6)
        .show(ui, |ui| {
            for h in [
                "device",
                "adapter",
                "backend",
                "type",
                "virtual device",
                "utilization",
            ] {
                ui.strong(h);
            }
            ui.end_row();
            for info in &infos {
                ui.label(format!("#{}", info.id));
                ui.label(format!("{} (adapter {})", info.name, info.adapter));
                ui.label(&info.backend);
                ui.label(&info.device_type);
                ui.label(format!(
                    "{} of {}",
                    info.virtual_index + 1,
                    per_adapter(info.adapter)
                ));
                match live.current(info.id) {
                    Some(u) => ui.label(format!("{:.1}%", u * 100.0)),
                    None => ui.weak("-"),
                };
                ui.end_row();
            }
        });
    ui.separator();
    ui.label(UTILIZATION_LABEL);
    if live.runner.is_none() {
        ui.weak("start the workload on the Live timeline tab to measure utilization");
    }
    let lines = before_now(&live.utilization.series)
        .into_iter()
        .map(|(device, points)| {
            let label = infos
                .iter()
                .find(|i| i.id == device)
                .map_or_else(|| format!("device {device}"), |i| i.label());
            (label, points)
        })
        .collect();
    utilization_plot(ui, lines);
}

/// The utilization plot: a line per device of `(seconds before now, busy / window)` points. The
/// wheel scrolls the page, not the plot ([`crate::bench_view::wheel_scrolls_the_page`]), and a
/// double-click brings back the bounds that follow the data.
pub fn utilization_plot(ui: &mut Ui, lines: Vec<(String, Vec<[f64; 2]>)>) {
    let plot = Plot::new("utilization")
        .legend(Legend::default())
        .height(ui.available_height().clamp(120.0, 400.0))
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

/// Each device's `(seconds, utilization)` samples with time counted back from the newest
/// sample of any device (so "now" is 0 and the past negative), as the Live timeline labels it.
pub fn before_now(series: &BTreeMap<usize, VecDeque<[f64; 2]>>) -> Vec<(usize, Vec<[f64; 2]>)> {
    let now = series
        .values()
        .filter_map(|s| s.back().map(|p| p[0]))
        .fold(f64::NEG_INFINITY, f64::max);
    series
        .iter()
        .map(|(d, s)| (*d, s.iter().map(|p| [p[0] - now, p[1]]).collect()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_count_back_from_the_newest() {
        let series: BTreeMap<usize, VecDeque<[f64; 2]>> = [
            (0, VecDeque::from([[750.0, 0.5], [760.0, 0.25]])),
            (1, VecDeque::from([[761.5, 1.0]])),
        ]
        .into();
        assert_eq!(
            before_now(&series),
            [(0, vec![[-11.5, 0.5], [-1.5, 0.25]]), (1, vec![[0.0, 1.0]])]
        );
    }
}
