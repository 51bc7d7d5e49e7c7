//! The time ↔ pixel transform of a timeline: which nanosecond sits at the left edge and how many
//! nanoseconds one pixel spans. Pure arithmetic, so zooming and panning are unit-tested.

use std::ops::Range;

/// Fewest nanoseconds a pixel may span (zoomed all the way in) and the most (all the way out).
pub const MIN_NS_PER_PX: f64 = 1e-3;
pub const MAX_NS_PER_PX: f64 = 1e13;

/// A horizontal view onto time. `x` is in pixels from the left edge of the bar area.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimeView {
    /// Nanosecond at `x = 0`.
    pub start_ns: f64,
    /// Nanoseconds per pixel, in `[MIN_NS_PER_PX, MAX_NS_PER_PX]`.
    pub ns_per_px: f64,
}

impl TimeView {
    /// A view showing `range` across `width_px` pixels, with 2 % margin on each side.
    pub fn fit(range: Range<u64>, width_px: f32) -> Self {
        let len = range.end.saturating_sub(range.start).max(1) as f64;
        let margin = len * 0.02;
        let mut v = Self {
            start_ns: range.start as f64 - margin,
            ns_per_px: (len + 2.0 * margin) / f64::from(width_px.max(1.0)),
        };
        v.clamp();
        v
    }

    /// Pixel position of time `ns`.
    pub fn x_of(&self, ns: f64) -> f32 {
        ((ns - self.start_ns) / self.ns_per_px) as f32
    }

    /// Time at pixel position `x`.
    pub fn ns_at(&self, x: f32) -> f64 {
        self.start_ns + f64::from(x) * self.ns_per_px
    }

    /// The nanoseconds visible across `width_px`, widened to whole numbers.
    pub fn visible(&self, width_px: f32) -> Range<u64> {
        let start = self.start_ns.max(0.0).floor() as u64;
        let end = self.ns_at(width_px).max(0.0).ceil() as u64;
        start..end.max(start)
    }

    /// Moves the content right by `dx` pixels (a drag to the right shows earlier times).
    pub fn pan_px(&mut self, dx: f32) {
        self.start_ns -= f64::from(dx) * self.ns_per_px;
    }

    /// Zooms by `factor` (> 1 zooms in) keeping the time under pixel `x` where it is.
    pub fn zoom_about(&mut self, factor: f32, x: f32) {
        if !(factor.is_finite() && factor > 0.0) {
            return;
        }
        let anchor = self.ns_at(x);
        self.ns_per_px /= f64::from(factor);
        self.clamp();
        self.start_ns = anchor - f64::from(x) * self.ns_per_px;
    }

    /// Shows exactly `range` (10 % margin) across `width_px`.
    pub fn zoom_to(&mut self, range: Range<u64>, width_px: f32) {
        let len = range.end.saturating_sub(range.start).max(1) as f64;
        let margin = len * 0.1;
        self.ns_per_px = (len + 2.0 * margin) / f64::from(width_px.max(1.0));
        self.clamp();
        let mid = range.start as f64 + len / 2.0;
        self.start_ns = mid - f64::from(width_px.max(1.0)) / 2.0 * self.ns_per_px;
    }

    /// Keeps the right edge at `end_ns` without changing the scale (follow-live).
    pub fn follow(&mut self, end_ns: u64, width_px: f32) {
        self.start_ns = end_ns as f64 - f64::from(width_px) * self.ns_per_px * 0.98;
    }

    fn clamp(&mut self) {
        if !self.ns_per_px.is_finite() {
            self.ns_per_px = 1.0;
        }
        self.ns_per_px = self.ns_per_px.clamp(MIN_NS_PER_PX, MAX_NS_PER_PX);
    }
}

/// A duration or time in ns as text with a fitting unit: `850 ns`, `12.5 µs`, `3.20 ms`, `1.50 s`.
pub fn format_ns(ns: f64) -> String {
    let a = ns.abs();
    if a < 0.5 {
        "0 ns".into()
    } else if a < 1e3 {
        format!("{ns:.0} ns")
    } else if a < 1e6 {
        format!("{:.1} µs", ns / 1e3)
    } else if a < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

/// Tick spacing in ns (1, 2 or 5 × 10^k) so ticks are at least `min_px` apart.
pub fn tick_step_ns(ns_per_px: f64, min_px: f32) -> f64 {
    let raw = ns_per_px * f64::from(min_px);
    let mut step = 10f64.powf(raw.max(1e-3).log10().floor());
    for mult in [1.0, 2.0, 5.0, 10.0] {
        if step * mult >= raw {
            step *= mult;
            break;
        }
    }
    step
}

/// The tick step of a view `width` px wide: at least `min_px` apart, and widened until the
/// widest label (`label_width(t, step)` at either end of the view) fits between two ticks with
/// room to spare. Zoomed in far from zero, labels grow long (`252390500 ns`) and would overlap.
pub fn fitted_tick_step(
    view: &TimeView,
    width: f32,
    min_px: f32,
    label_width: impl Fn(f64, f64) -> f32,
) -> f64 {
    let mut step = tick_step_ns(view.ns_per_px, min_px);
    for _ in 0..6 {
        let step_px = (step / view.ns_per_px) as f32;
        let widest = label_width(view.start_ns, step).max(label_width(view.ns_at(width), step));
        if step_px >= widest + 12.0 {
            break;
        }
        step = tick_step_ns(view.ns_per_px, step_px * 1.01);
    }
    step
}

/// A tick label at `t` for ticks `step` apart: the unit fits the step, with just enough
/// decimals that neighbouring ticks never print the same text (`2940 ms`, `2942 ms`).
pub fn format_tick(t: f64, step: f64) -> String {
    let (unit, name) = if step < 1e3 {
        (1.0, "ns")
    } else if step < 1e6 {
        (1e3, "µs")
    } else if step < 1e9 {
        (1e6, "ms")
    } else {
        (1e9, "s")
    };
    let rel = step / unit;
    let decimals = if rel >= 1.0 {
        0
    } else {
        (-rel.log10()).ceil().clamp(0.0, 6.0) as usize
    };
    let v = t / unit;
    let v = if v.abs() < 0.5 * 10f64.powi(-(decimals as i32)) {
        0.0
    } else {
        v
    };
    format!("{v:.decimals$} {name}")
}

/// A tick label relative to an origin (the newest event): `rel` is the tick's time minus the
/// origin, a whole number of `step`s. `now` at the origin, `−5 s` before it, `+5 s` after.
pub fn format_tick_relative(rel: f64, step: f64) -> String {
    if rel.abs() < step / 2.0 {
        "now".into()
    } else if rel < 0.0 {
        format!("\u{2212}{}", format_tick(-rel, step))
    } else {
        format!("+{}", format_tick(rel, step))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_widen_until_long_labels_fit() {
        // 10 px per character of the label.
        let width = |t: f64, step: f64| 10.0 * format_tick(t, step).chars().count() as f32;
        let near_zero = TimeView {
            start_ns: 0.0,
            ns_per_px: 10.0,
        };
        assert_eq!(fitted_tick_step(&near_zero, 1_000.0, 90.0, width), 1_000.0);
        // 252 ms in, at 1 ns per px: "252390600 ns" is 120 px, more than the 100 px step.
        let far = TimeView {
            start_ns: 252_389_500.0,
            ns_per_px: 1.0,
        };
        assert_eq!(tick_step_ns(1.0, 90.0), 100.0);
        let step = fitted_tick_step(&far, 1_000.0, 90.0, width);
        let label = format_tick(far.ns_at(1_000.0), step);
        assert!(
            step >= 10.0 * label.chars().count() as f64 + 12.0,
            "{step} for {label}"
        );
        assert_eq!(step, 200.0);
    }

    #[test]
    fn relative_ticks_count_back_from_now() {
        assert_eq!(format_tick_relative(0.0, 5e9), "now");
        assert_eq!(format_tick_relative(1.0, 5e9), "now");
        assert_eq!(format_tick_relative(-5e9, 5e9), "\u{2212}5 s");
        assert_eq!(format_tick_relative(-10e9, 5e9), "\u{2212}10 s");
        assert_eq!(format_tick_relative(-0.5e9, 0.5e9), "\u{2212}500 ms");
        assert_eq!(format_tick_relative(2e6, 2e6), "+2 ms");
    }
}
