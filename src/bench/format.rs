//! Numbers and durations for people, to three significant figures: the one format the bench's
//! tables, its comparisons and the viewer share.

/// A duration for people: µs, ms or s with three significant figures.
pub fn seconds(s: f64) -> String {
    if s < 1e-3 {
        format!("{} µs", number(s * 1e6))
    } else if s < 1.0 {
        format!("{} ms", number(s * 1e3))
    } else {
        format!("{} s", number(s))
    }
}

/// Three significant figures, without exponent for everyday magnitudes.
pub fn number(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 || !v.is_finite() {
        format!("{v}")
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else if a >= 1e-3 {
        format!("{v:.4}")
    } else {
        format!("{v:.2e}")
    }
}
