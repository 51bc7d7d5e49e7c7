//! Counter tracks: a step plot per track and the short form of a counter's value.

use egui::{Align2, Mesh, Pos2, Rect, Shape, Stroke};

use super::layout::Look;
use crate::timeline::data::{BarKind, CounterRow};
use crate::timeline::raster::RowPalette;
use crate::timeline::view::TimeView;

/// A counter track as a filled step plot over `top..top + h`: each pixel column shows the
/// largest value set in it (or the value held from before), scaled to the track's range.
#[allow(clippy::too_many_arguments)] // one row's place and look
pub(super) fn paint_counter(
    painter: &egui::Painter,
    c: &CounterRow,
    view: &TimeView,
    bar_rect: Rect,
    top: f32,
    h: f32,
    look: &Look,
    palette: RowPalette,
) {
    let (lo, hi) = (c.min.min(0.0), c.max);
    let scale = if hi > lo {
        (h - 6.0) / (hi - lo) as f32
    } else {
        0.0
    };
    let y_of = |v: f64| top + h - 3.0 - (v - lo) as f32 * scale;
    let color = palette.bar(BarKind::named(&c.name));
    let width = bar_rect.width().max(1.0) as usize;
    let mut line: Vec<Pos2> = Vec::new();
    let mut fill = Mesh::default();
    for col in 0..width {
        let (t0, t1) = (view.ns_at(col as f32), view.ns_at(col as f32 + 1.0));
        let Some(v) = c.value_over(t0, t1) else {
            if line.len() > 1 {
                painter.add(Shape::line(
                    std::mem::take(&mut line),
                    Stroke::new(1.5, color),
                ));
            }
            line.clear();
            continue;
        };
        let (x0, x1) = (
            bar_rect.left() + col as f32,
            bar_rect.left() + col as f32 + 1.0,
        );
        let y = y_of(v);
        line.push(Pos2::new(x0, y));
        line.push(Pos2::new(x1, y));
        let base = top + h - 3.0;
        fill.add_colored_rect(
            Rect::from_min_max(Pos2::new(x0, y.min(base)), Pos2::new(x1, base)),
            color.gamma_multiply(0.35),
        );
    }
    painter.add(Shape::mesh(fill));
    if line.len() > 1 {
        painter.add(Shape::line(line, Stroke::new(1.5, color)));
    }
    painter.text(
        Pos2::new(bar_rect.right() - 4.0, top + 2.0),
        Align2::RIGHT_TOP,
        format!("max {}", trim_value(c.max)),
        look.axis.clone(),
        palette.grid_text,
    );
}

/// A counter's value, short: `12.5`, `3`, `1.2e9`.
pub(super) fn trim_value(v: f64) -> String {
    if v.abs() >= 1e6 || (v != 0.0 && v.abs() < 1e-3) {
        format!("{v:.3e}")
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    }
}
