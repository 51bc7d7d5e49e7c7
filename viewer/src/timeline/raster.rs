//! The rows of a timeline as texels: one texel row per sub-row, one texel per physical pixel.
//!
//! A software rasterizer (lavapipe) pays for every triangle and every pixel it covers, so the
//! widget draws each sub-row as one textured quad instead of a rectangle per bar and per idle
//! gap: the background, the idle band, runs of sub-pixel events (opacity by busy fraction,
//! blended here) and narrow bars of single events are painted into texels, O(pixels) a frame.
//! Only single events at least [`SHAPE_MIN_PT`] wide are left to shapes (rounded, with their
//! name), over idle as before.

use egui::Color32;

use super::data::Bar;

/// Least opacity of a run of sub-pixel events, so a sliver of work stays visible.
pub const MIN_DENSITY_ALPHA: f32 = 0.12;

/// Single events at least this many points wide are drawn as shapes, not texels.
pub const SHAPE_MIN_PT: f32 = 8.0;

/// The colours of a row's texels besides its bars.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowPalette {
    /// Outside the data's span.
    pub background: Color32,
    /// Inside the span, between bars.
    pub idle: Color32,
    /// Grid lines (seen outside the span only: idle covers them).
    pub grid: Color32,
}

/// `a` blended towards `b` by `t` in `[0, 1]` (what `b` at opacity `t` over `a` looks like).
pub fn lerp_color(a: Color32, b: Color32, t: f32) -> Color32 {
    let t = t.clamp(0.0, 1.0);
    let mix = |x: u8, y: u8| (f32::from(x) + (f32::from(y) - f32::from(x)) * t).round() as u8;
    Color32::from_rgb(mix(a.r(), b.r()), mix(a.g(), b.g()), mix(a.b(), b.b()))
}

/// Paints `color` over `line` across `x0..x1` (in texels), blending the partly covered texels
/// at either end by how much of them is covered (the anti-aliasing of an edge).
pub fn fill(line: &mut [Color32], x0: f64, x1: f64, color: Color32) {
    let len = line.len() as f64;
    let (x0, x1) = (x0.max(0.0), x1.min(len));
    if x1 <= x0 {
        return;
    }
    let first = x0.floor() as usize;
    let last = (x1.ceil() as usize).min(line.len());
    for (p, texel) in line.iter_mut().enumerate().take(last).skip(first) {
        let p = p as f64;
        let cover = (x1.min(p + 1.0) - x0.max(p)).clamp(0.0, 1.0) as f32;
        *texel = if cover >= 1.0 {
            color
        } else {
            lerp_color(*texel, color, cover)
        };
    }
}

/// The colour a run of sub-pixel events paints: its kind's over idle, by busy fraction.
pub fn dense_color(bar: &Bar, ns_per_texel: f64, idle: Color32) -> Color32 {
    let alpha = bar.busy_fraction(ns_per_texel).max(MIN_DENSITY_ALPHA);
    lerp_color(idle, bar.kind.color(), alpha)
}

/// Paints one sub-row into `line`: background, grid lines at `grid_x`, the idle band `band`
/// (the data's span), then `bars` (all in texels): dense runs by busy fraction, single events
/// narrower than `shape_min` texels solid. Wider single events are left to the caller.
pub fn paint_row(
    line: &mut [Color32],
    bars: &[Bar],
    band: Option<(f64, f64)>,
    grid_x: &[f64],
    palette: RowPalette,
    ns_per_texel: f64,
    shape_min: f32,
) {
    line.fill(palette.background);
    for &x in grid_x {
        fill(line, x - 0.5, x + 0.5, palette.grid);
    }
    if let Some((x0, x1)) = band {
        fill(line, x0, x1, palette.idle);
    }
    for bar in bars {
        let (x0, x1) = (f64::from(bar.x0), f64::from(bar.x1.max(bar.x0 + 1.0)));
        if bar.dense {
            fill(line, x0, x1, dense_color(bar, ns_per_texel, palette.idle));
        } else if bar.x1 - bar.x0 < shape_min {
            fill(line, x0, x1, bar.kind.color());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::data::BarKind;

    const PALETTE: RowPalette = RowPalette {
        background: Color32::from_rgb(10, 10, 10),
        idle: Color32::from_rgb(48, 48, 48),
        grid: Color32::from_rgb(30, 30, 30),
    };

    fn bar(x0: f32, x1: f32, busy_ns: u64, dense: bool) -> Bar {
        Bar {
            x0,
            x1,
            kind: BarKind::Forward,
            merged: 1,
            first: 0,
            busy_ns,
            dense,
        }
    }

    #[test]
    fn fill_blends_partly_covered_texels() {
        let mut line = vec![Color32::BLACK; 6];
        fill(&mut line, 1.25, 3.5, Color32::from_rgb(200, 200, 200));
        let reds: Vec<u8> = line.iter().map(|c| c.r()).collect();
        assert_eq!(reds, [0, 150, 200, 100, 0, 0]);
        // Out of range and empty spans are ignored.
        fill(&mut line, -5.0, -1.0, Color32::WHITE);
        fill(&mut line, 4.0, 4.0, Color32::WHITE);
        fill(&mut line, 5.5, 99.0, Color32::WHITE);
        let reds: Vec<u8> = line.iter().map(|c| c.r()).collect();
        assert_eq!(reds, [0, 150, 200, 100, 0, 128]);
    }

    #[test]
    fn rows_paint_idle_density_and_narrow_bars_and_leave_wide_ones() {
        let mut line = vec![Color32::TRANSPARENT; 40];
        // 1 ns a texel: a 20 %-busy run over texels 5..10, a 2-texel event at 12, a 20-texel
        // event at 15 (left to a shape), idle from 2 to 38, grid lines at 1 and 39.5.
        let bars = [
            bar(5.0, 10.0, 1, true),
            bar(12.0, 14.0, 2, false),
            bar(15.0, 35.0, 20, false),
        ];
        paint_row(
            &mut line,
            &bars,
            Some((2.0, 38.0)),
            &[1.0, 39.5],
            PALETTE,
            1.0,
            8.0,
        );
        let f = BarKind::Forward.color();
        // A grid line between texels 0 and 1 shades both by half; one on texel 39 fills it.
        let half_grid = lerp_color(PALETTE.background, PALETTE.grid, 0.5);
        assert_eq!((line[0], line[1]), (half_grid, half_grid));
        assert_eq!(line[39], PALETTE.grid);
        assert_eq!(line[2], PALETTE.idle);
        assert_eq!(line[7], lerp_color(PALETTE.idle, f, 0.2));
        assert_eq!(line[10], PALETTE.idle);
        assert_eq!(line[12], f);
        assert_eq!(line[20], PALETTE.idle, "a wide bar is a shape, over idle");
        // A nearly idle run still shows.
        let mut line = vec![Color32::TRANSPARENT; 4];
        paint_row(
            &mut line,
            &[bar(1.0, 2.0, 0, true)],
            Some((0.0, 4.0)),
            &[],
            PALETTE,
            1.0,
            8.0,
        );
        assert_eq!(line[1], lerp_color(PALETTE.idle, f, MIN_DENSITY_ALPHA));
    }
}
