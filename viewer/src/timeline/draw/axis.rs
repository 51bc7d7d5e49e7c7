//! The time axis: tick labels above the bar area, counted from the data's start or back from
//! its newest event ([`TimeAxis`]), spaced so that they never overlap.

use egui::{Color32, Painter, Pos2};

use super::layout::{Frame, ROW_H};
use super::state::{TimeAxis, TimelineState};
use crate::timeline::view::{fitted_tick_step, format_tick, format_tick_relative};

/// Paints the axis's tick labels and returns where the grid lines go, in texels of the rows
/// (`texel_of` a time).
pub(super) fn paint_axis(
    painter: &Painter,
    state: &TimelineState,
    f: &Frame<'_>,
    weak: Color32,
    texel_of: impl Fn(f64) -> f64,
) -> Vec<f64> {
    let Frame {
        look,
        rect,
        bar_rect,
        view,
        span,
        ..
    } = *f;
    let bar_w = bar_rect.width();
    // Axis and grid: times from the origin (the data's start, or its newest event).
    let axis = state.axis;
    let origin = span.map_or(0.0, |s| state.origin(s));
    let label_at = |t: f64, step: f64| match axis {
        TimeAxis::BeforeNewest => format_tick_relative(t - origin, step),
        TimeAxis::FromStart => format_tick(t - origin, step),
    };
    let step = fitted_tick_step(&view, bar_w, 90.0 * look.row_h / ROW_H, |t, step| {
        painter
            .layout_no_wrap(label_at(t, step), look.axis.clone(), weak)
            .size()
            .x
    });
    let mut t = origin + ((view.start_ns - origin) / step).ceil() * step;
    let mut grid_x = Vec::new();
    let mut labels_end = f32::NEG_INFINITY;
    while view.x_of(t) <= bar_w && grid_x.len() < 200 {
        grid_x.push(texel_of(t));
        let x = bar_rect.left() + view.x_of(t);
        // Right of the tick, or left of it where the label would run off the edge, unless it
        // would then cover the label before it.
        let galley = painter.layout_no_wrap(label_at(t, step), look.axis.clone(), weak);
        let left = if x + 2.0 + galley.size().x > rect.right() {
            x - 2.0 - galley.size().x
        } else {
            x + 2.0
        };
        if left > labels_end + 4.0 {
            labels_end = left + galley.size().x;
            painter.galley(Pos2::new(left, rect.top()), galley, weak);
        }
        t += step;
    }
    grid_x
}
