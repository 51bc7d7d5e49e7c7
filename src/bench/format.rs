//! Numbers, durations and byte counts for people, to three significant figures: the one format
//! the bench's tables, its comparisons, `gangway trace` and the viewer share.

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

/// A byte count for people: B, KiB, MiB or GiB (powers of 1024) with three significant figures.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{} {}", number(v), UNITS[unit])
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_in_binary_units() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1024), "1.00 KiB");
        assert_eq!(bytes(1536 * 1024), "1.50 MiB");
        assert_eq!(bytes(5 << 40), "5120 GiB");
    }
}
