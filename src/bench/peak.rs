//! Theoretical peaks and the roofline. A built-in table covers common datacenter and desktop GPUs
//! (FP32 without tensor cores, and memory bandwidth, from the vendors' spec sheets); anything else
//! needs `--peak-gflops` / `--peak-gbps`. Software adapters have no entry: their peak is the
//! host CPU's, which depends on its clock and vector units.

use super::report::{Bound, Peak, Roofline};
use super::work::Work;

/// (name pattern, FP32 GFLOP/s, GB/s). Patterns match whole words of the adapter name, most
/// specific first (an H100 PCIe before other H100s).
const KNOWN: &[(&str, f64, f64)] = &[
    ("H200", 67_000.0, 4_800.0),
    ("H100 PCIe", 51_200.0, 2_000.0),
    ("H100", 67_000.0, 3_350.0),
    ("A100-SXM4-80GB", 19_500.0, 2_039.0),
    ("A100", 19_500.0, 1_555.0),
    ("L40S", 91_600.0, 864.0),
    ("L4", 30_300.0, 300.0),
    ("RTX 4090", 82_600.0, 1_008.0),
    ("RTX 3090", 35_600.0, 936.0),
];

/// Whether `pattern` occurs in `name` on word boundaries (so `L4` does not match `L40S`).
fn matches_word(name: &str, pattern: &str) -> bool {
    name.match_indices(pattern).any(|(i, _)| {
        let before = name[..i].chars().next_back();
        let after = name[i + pattern.len()..].chars().next();
        !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric)
    })
}

/// The built-in peak of an adapter, by name.
pub fn known_peak(adapter_name: &str) -> Option<Peak> {
    KNOWN
        .iter()
        .find(|(pattern, _, _)| matches_word(adapter_name, pattern))
        .map(|&(pattern, gflops, gbps)| Peak {
            gflops: Some(gflops),
            gbps: Some(gbps),
            source: format!("built-in table: {pattern} (vendor spec sheet)"),
        })
}

/// The peak to use: the command line's values override the table's, each on its own.
pub fn peak_for(adapter_name: &str, gflops: Option<f64>, gbps: Option<f64>) -> Option<Peak> {
    let known = known_peak(adapter_name);
    if gflops.is_none() && gbps.is_none() {
        return known;
    }
    let (kf, kb) = known.as_ref().map_or((None, None), |k| (k.gflops, k.gbps));
    Some(Peak {
        gflops: gflops.or(kf),
        gbps: gbps.or(kb),
        source: match known {
            Some(k) => format!("command line, else {}", k.source),
            None => "command line".into(),
        },
    })
}

/// The fraction of peak `work` reached in `seconds`, and its roofline when FLOPs, bytes and both
/// peaks are known. The fraction is of peak FLOP/s when the FLOPs are known, else of bandwidth.
pub fn place(work: &Work, seconds: f64, peak: &Peak) -> (Option<f64>, Option<Roofline>) {
    if seconds <= 0.0 || !seconds.is_finite() {
        return (None, None);
    }
    let gflops = work.flops.map(|f| f / seconds / 1e9);
    let gbps = work.bytes.map(|b| b / seconds / 1e9);
    let fraction = match (gflops, peak.gflops, gbps, peak.gbps) {
        (Some(a), Some(p), _, _) => Some(a / p),
        (None, _, Some(a), Some(p)) => Some(a / p),
        _ => None,
    };
    let roofline = match (work.flops, work.bytes, gflops, peak.gflops, peak.gbps) {
        (Some(flops), Some(bytes), Some(achieved), Some(pf), Some(pb)) if bytes > 0.0 => {
            let intensity = flops / bytes;
            let memory_roof = intensity * pb;
            let (attainable, bound) = if memory_roof < pf {
                (memory_roof, Bound::Memory)
            } else {
                (pf, Bound::Compute)
            };
            Some(Roofline {
                intensity,
                bound,
                attainable_gflops: attainable,
                achieved_gflops: achieved,
                fraction: achieved / attainable,
            })
        }
        _ => None,
    };
    // A roofline-placed kernel's fraction is of what bounds it.
    (roofline.as_ref().map(|r| r.fraction).or(fraction), roofline)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::work::WorkUnit;

    #[test]
    fn names_match_whole_words_most_specific_first() {
        let p = |n: &str| known_peak(n).and_then(|p| p.gflops);
        assert_eq!(p("NVIDIA H200"), Some(67_000.0));
        assert_eq!(p("NVIDIA H100 PCIe"), Some(51_200.0));
        assert_eq!(p("NVIDIA L40S"), Some(91_600.0));
        assert_eq!(p("NVIDIA L4"), Some(30_300.0));
        assert_eq!(p("llvmpipe (LLVM 15.0.6, 256 bits)"), None);
        assert_eq!(p("NVIDIA H2000"), None);
    }

    #[test]
    fn command_line_overrides_each_peak_alone() {
        let p = peak_for("NVIDIA H200", Some(1.0), None).unwrap();
        assert_eq!((p.gflops, p.gbps), (Some(1.0), Some(4_800.0)));
        let p = peak_for("llvmpipe", None, Some(20.0)).unwrap();
        assert_eq!((p.gflops, p.gbps), (None, Some(20.0)));
        assert!(peak_for("llvmpipe", None, None).is_none());
    }

    #[test]
    fn roofline_picks_the_binding_roof() {
        let peak = Peak {
            gflops: Some(1000.0),
            gbps: Some(100.0),
            source: String::new(),
        };
        // 2 FLOPs per 8 bytes: 25 GFLOP/s attainable, memory-bound; 2.5 GFLOP/s achieved = 10%.
        let stream = Work::new(8e9, WorkUnit::Byte).with_flops(2e9);
        let (f, r) = place(&stream, 0.8, &peak);
        let r = r.unwrap();
        assert_eq!(r.bound, Bound::Memory);
        assert!((r.attainable_gflops - 25.0).abs() < 1e-9);
        assert!((f.unwrap() - 0.1).abs() < 1e-9);
        // A large matmul is compute-bound: fraction of peak FLOP/s.
        let mm = Work::new(2e12, WorkUnit::Flop).with_bytes(12e6);
        let (f, r) = place(&mm, 4.0, &peak);
        assert_eq!(r.unwrap().bound, Bound::Compute);
        assert!((f.unwrap() - 0.5).abs() < 1e-9);
        // Only FLOPs known: a plain fraction of peak, no roofline.
        let (f, r) = place(
            &Work::new(1.0, WorkUnit::Token).with_flops(1e12),
            2.0,
            &peak,
        );
        assert!(r.is_none());
        assert!((f.unwrap() - 0.5).abs() < 1e-9);
    }
}
