//! The rows of a timeline as texels: one texel row per sub-row, one texel per physical pixel.
//!
//! A software rasterizer (lavapipe) pays for every triangle and every pixel it covers, so the
//! widget draws each sub-row as one textured quad instead of a rectangle per bar and per idle
//! gap: the background, the idle band, runs of sub-pixel events (opacity by busy fraction,
//! blended here) and narrow bars of single events are painted into texels, O(pixels) a frame.
//! Only single events at least [`SHAPE_MIN_PT`] wide are left to shapes (rounded, with their
//! name), over idle as before.

use egui::Color32;

use super::data::{Bar, BarKind};

/// Least opacity of a run of sub-pixel events, so a sliver of work stays visible.
pub const MIN_DENSITY_ALPHA: f32 = 0.12;

/// Single events at least this many points wide are drawn as shapes, not texels.
pub const SHAPE_MIN_PT: f32 = 8.0;

/// The colours of a row's texels, and of its bars.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowPalette {
    /// Outside the data's span.
    pub background: Color32,
    /// Inside the span, between bars.
    pub idle: Color32,
    /// Grid lines (seen outside the span only: idle covers them).
    pub grid: Color32,
    /// Small text over rows (a counter's range).
    pub grid_text: Color32,
    /// Least opacity of a run of sub-pixel events.
    pub min_alpha: f32,
    /// For a light background: bars darkened so they stay saturated on a projector.
    pub light: bool,
}

/// Least opacity of a run of sub-pixel events on a light background: the kind's colour faded
/// towards a pale idle band reads as pastel there, and a projector washes pastels out.
pub const LIGHT_MIN_DENSITY_ALPHA: f32 = 0.4;

impl RowPalette {
    /// The palette over `background` with grid lines in `grid`; `light` for a light theme
    /// (a darker idle band, stronger bars).
    pub fn for_background(background: Color32, grid: Color32, light: bool) -> Self {
        if light {
            Self {
                background,
                idle: Color32::from_gray(200),
                grid,
                grid_text: Color32::from_gray(60),
                min_alpha: LIGHT_MIN_DENSITY_ALPHA,
                light,
            }
        } else {
            Self {
                background,
                idle: Color32::from_gray(48),
                grid,
                grid_text: Color32::from_gray(170),
                min_alpha: MIN_DENSITY_ALPHA,
                light,
            }
        }
    }

    /// A bar kind's colour on this background: as is on dark, 25 % darker on light.
    pub fn bar(&self, kind: BarKind) -> Color32 {
        let c = kind.color();
        if self.light {
            lerp_color(c, Color32::BLACK, 0.25)
        } else {
            c
        }
    }
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

/// The colour a run of sub-pixel events paints: its kind's over idle, by busy fraction (at
/// least the palette's least opacity).
pub fn dense_color(bar: &Bar, ns_per_texel: f64, palette: RowPalette) -> Color32 {
    let alpha = bar.busy_fraction(ns_per_texel).max(palette.min_alpha);
    lerp_color(palette.idle, palette.bar(bar.kind), alpha)
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
            fill(line, x0, x1, dense_color(bar, ns_per_texel, palette));
        } else if bar.x1 - bar.x0 < shape_min {
            fill(line, x0, x1, palette.bar(bar.kind));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PALETTE: RowPalette = RowPalette {
        background: Color32::from_rgb(10, 10, 10),
        idle: Color32::from_rgb(48, 48, 48),
        grid: Color32::from_rgb(30, 30, 30),
        grid_text: Color32::from_rgb(170, 170, 170),
        min_alpha: MIN_DENSITY_ALPHA,
        light: false,
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

    /// The projector theme: a nearly idle run on a light background is still a strong colour,
    /// not a pastel (its distance from idle at least that of the dark theme's).
    #[test]
    fn light_backgrounds_get_stronger_bars() {
        let light = RowPalette::for_background(Color32::WHITE, Color32::LIGHT_GRAY, true);
        let dark = RowPalette::for_background(Color32::BLACK, Color32::DARK_GRAY, false);
        let distance = |a: Color32, b: Color32| {
            (i32::from(a.r()) - i32::from(b.r())).abs()
                + (i32::from(a.g()) - i32::from(b.g())).abs()
                + (i32::from(a.b()) - i32::from(b.b())).abs()
        };
        let sparse = bar(0.0, 1.0, 0, true);
        for kind in BarKind::ALL {
            let run = Bar { kind, ..sparse };
            let on_light = distance(dense_color(&run, 1.0, light), light.idle);
            let on_dark = distance(dense_color(&run, 1.0, dark), dark.idle);
            assert!(on_light >= on_dark, "{kind:?}: {on_light} vs {on_dark}");
            // Solid bars are darker than the screen theme's on a light background.
            assert!(
                distance(light.bar(kind), Color32::WHITE) > distance(kind.color(), Color32::WHITE)
            );
        }
    }
}
