//! The published figures of each schedule: idle time per stage (the bubble), peak activations
//! and parameter copies, as the papers state them, in integer arithmetic so the simulator can be
//! checked against them exactly. `Costs` here are per chunk op, as [`super::simulate`] takes
//! them ([`super::Costs::stage_model`] splits a stage's share); "B" is the input-gradient
//! backward and "W" the weight gradient, so the papers' full backward is `B + W`.
//!
//! | schedule | idle per stage | source |
//! | --- | --- | --- |
//! | GPipe, 1F1B, eager 1F1B | `(p − 1)(F + B + W)` | GPipe; DeepSeek-V3's `(PP − 1)(F + B)` |
//! | interleaved (m ≥ p), looped BFS (m ≥ p) | `(p − 1)(F + B + W)`, chunk ops of `1/v` | Megatron: bubble `(p − 1)/(v·m)` of ideal |
//! | ZB-H1 | `(p − 1)(F + B − W)` | Qi et al.; DeepSeek-V3's ZB1P `(PP − 1)(F + B − 2W)` |
//! | DualPipe | `(p/2 − 1)(F&B + B_full − 3W)` | DeepSeek-V3, with `PP = p` |
//! | DualPipeV | `(p − 1)(F&B + B_full − 3W)` | DeepSeek's DualPipe README, with `PP = 2p` stages |
//!
//! DualPipe(V)'s is exact when `F = B` (the simulator checks it), an upper bound otherwise.
//! For DualPipe(V), `F&B` is an overlapped F and full backward of two microbatches:
//! `max(F + B, 2·A) + W` with `A` the chunk's all-to-all ([`super::Costs::all_to_all_ns`]); an F
//! alone costs `F + A`, a full backward alone `B + A + W`. ZB-V and the automatic scheduler
//! (`zb-auto`) have no closed form (the papers build them by search and report a near-zero
//! bubble at `F = B = W`): `None`.
//!
//! Peak activations are per stage, in chunk activations (one microbatch through one chunk):
//! 1F1B and ZB-H1 hold `p` at stage 0 (DeepSeek's `PP`), DualPipe `p + 1`, DualPipeV `2p + 1`
//! chunks of half a stage (`PP + 1` with `PP = 2p`).

use super::schedule_kind::ScheduleKind;
use super::simulate::Costs;

/// A schedule's textbook figures at one shape and cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Textbook {
    /// Idle time of each stage, or of the worst stage where the source states one number.
    pub idle_per_stage_ns: Option<u64>,
    /// The most chunk activations a stage holds, where the source states it.
    pub peak_activations: Option<usize>,
    /// Copies of the parameters: 2 for DualPipe, else 1.
    pub parameter_copies: usize,
}

/// The published figures of `kind` at `p` stages, `m` microbatches, `v` chunks (as built:
/// [`ScheduleKind::chunks`]) and per-chunk-op costs `c` (transfers free). `None` where no
/// closed form holds at this shape (looped BFS with `m < p`, ZB-V).
pub fn textbook(kind: ScheduleKind, p: usize, m: usize, v: usize, c: &Costs) -> Textbook {
    let (f, b, w, a) = (
        c.forward_ns,
        c.backward_ns,
        c.weight_grad_ns,
        c.all_to_all_ns,
    );
    let p64 = p as u64;
    let hops = p64.saturating_sub(1);
    let full = b + w;
    let f_and_b = (f + b).max(2 * a) + w;
    // DeepSeek's F&B + B − 3W, with B the full backward alone (its all-to-all included).
    let dual = (f_and_b + full + a).checked_sub(3 * w);
    let idle = match kind {
        ScheduleKind::GPipe | ScheduleKind::OneFOneB | ScheduleKind::Eager1F1B => {
            Some(hops * (f + full + 2 * a))
        }
        ScheduleKind::Interleaved | ScheduleKind::LoopedBfs => {
            (m >= p).then_some(hops * (f + full + 2 * a))
        }
        // With nothing to hide (no all-to-all) an F&B pair costs F + B and the overlapped orders
        // take 1F1B's and interleaved's time (PP-Schedule-Visualization's figures); what a pair
        // hides of a real all-to-all has no closed form.
        ScheduleKind::OneFOneBOverlap => (a == 0).then_some(hops * (f + full)),
        ScheduleKind::InterleavedOverlap => (a == 0 && m >= p).then_some(hops * (f + full)),
        // The paper's form holds once the pipeline is full and W fits in the gaps it fills.
        ScheduleKind::ZbH1 => (f + b + 2 * a)
            .checked_sub(w)
            .filter(|&x| m >= p && x >= (f + a).max(b + a))
            .map(|x| hops * x),
        ScheduleKind::ZbV | ScheduleKind::ZbAuto | ScheduleKind::VHalf | ScheduleKind::VMin => None,
        ScheduleKind::DualPipe => dual.map(|x| (p64 / 2).saturating_sub(1) * x),
        ScheduleKind::DualPipeV => dual.map(|x| hops * x),
    };
    // Interleaved's largest group of microbatches (see its order), which sets its warm-up.
    let group = if m < 2 * p { m } else { p + m % p };
    let peak = match kind {
        ScheduleKind::OneFOneB | ScheduleKind::ZbH1 => Some(p.min(m)),
        ScheduleKind::Eager1F1B => Some((2 * p - 1).min(m)),
        // The warm-up and the first pair's F.
        ScheduleKind::OneFOneBOverlap => Some((2 * p).min(m)),
        ScheduleKind::InterleavedOverlap => Some((2 * (p - 1) + (v - 1) * group + 2).min(m * v)),
        ScheduleKind::GPipe => Some(m),
        ScheduleKind::LoopedBfs => Some(m * v),
        ScheduleKind::Interleaved => Some((2 * (p - 1) + (v - 1) * group + 1).min(m * v)),
        ScheduleKind::ZbV | ScheduleKind::ZbAuto | ScheduleKind::VHalf | ScheduleKind::VMin => None,
        ScheduleKind::DualPipe => Some(p + 1),
        ScheduleKind::DualPipeV => Some(2 * p + 1),
    };
    Textbook {
        idle_per_stage_ns: idle,
        peak_activations: peak,
        parameter_copies: kind.parameter_copies(),
    }
}

/// The textbook bubble of `kind` as a fraction of total time at `F = B = W` (chunk ops of
/// `1/passes` of a stage's share) and free transfers: idle over idle plus ideal work. `None`
/// where the source gives no closed form at this shape, and for empty shapes.
pub fn bubble_formula(
    kind: ScheduleKind,
    stages: usize,
    microbatches: usize,
    chunks: usize,
) -> Option<f64> {
    if stages == 0 || microbatches == 0 || chunks == 0 {
        return None;
    }
    let idle = textbook(
        kind,
        stages,
        microbatches,
        chunks,
        &Costs::compute_only(1, 1, 1),
    )
    .idle_per_stage_ns? as f64;
    let ideal = (microbatches * kind.passes(chunks) * 3) as f64;
    Some(idle / (idle + ideal))
}

/// A fraction as `12.3%`, or `—` where there is none (a bubble with no closed form).
pub fn percent(x: Option<f64>) -> String {
    x.map_or_else(|| "—".to_owned(), |x| format!("{:.1}%", x * 100.0))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::pipeline::{Schedule, simulate, validate};

    /// The shapes each kind is checked at: every p up to 8 and m up to 4p it accepts.
    fn shapes(kind: ScheduleKind) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for p in 1..=8 {
            for m in 1..=4 * p {
                if Schedule::new(kind, p, m, kind.chunks(2)).is_ok() {
                    out.push((p, m));
                }
            }
        }
        out
    }

    /// The simulation against the textbook: every stage's idle time equal to it, or with
    /// `worst` the worst stage's (DeepSeek's formula with an all-to-all is the middle stages').
    fn check_stages(kind: ScheduleKind, p: usize, m: usize, c: &Costs, worst: bool) {
        let s = Schedule::new(kind, p, m, kind.chunks(2)).unwrap();
        let sim = simulate(&s, c).unwrap();
        let peak = validate(&s).unwrap().peak_activations;
        let t = textbook(kind, p, m, kind.chunks(2), c);
        let what = format!("{kind} p={p} m={m} {c:?}");
        let dual = matches!(kind, ScheduleKind::DualPipe | ScheduleKind::DualPipeV);
        if let Some(idle) = t.idle_per_stage_ns {
            if dual && c.forward_ns != c.backward_ns {
                // DeepSeek's form assumes F ≈ B; otherwise it bounds the bubble from above.
                assert!(sim.idle_ns().iter().all(|&x| x <= idle), "{what}");
            } else if worst {
                assert_eq!(sim.idle_ns().into_iter().max(), Some(idle), "{what}");
            } else {
                assert_eq!(sim.idle_ns(), vec![idle; p], "{what}");
            }
        }
        if let Some(want) = t.peak_activations {
            assert_eq!(peak.iter().max().copied(), Some(want), "{what}");
        }
    }

    fn check(kind: ScheduleKind, p: usize, m: usize, c: &Costs) {
        check_stages(kind, p, m, c, false);
    }

    /// Every closed form holds exactly (integers) at every shape up to p = 8, m = 4p.
    #[test]
    fn the_published_figures_hold_exactly() {
        for kind in ScheduleKind::ALL {
            let shapes = shapes(kind);
            assert!(!shapes.is_empty(), "{kind}");
            for (p, m) in shapes {
                for (f, b, w) in [(1, 1, 1), (10, 10, 10), (3, 5, 2), (4, 4, 1)] {
                    check(kind, p, m, &Costs::compute_only(f, b, w));
                }
            }
        }
    }

    /// DeepSeek-V3's table at PP = 8 with F = B = W = 1 (B full = 2): 1F1B idles
    /// (PP − 1)(F + B) = 21, ZB1P (PP − 1)(F + B − 2W) = 7, DualPipe (PP/2 − 1)(F&B + B − 3W)
    /// = 3 · (3 + 2 − 3) = 6; activations PP, PP and PP + 1; parameters 1×, 1×, 2×.
    #[test]
    fn deepseek_v3_table() {
        let c = Costs::compute_only(1, 1, 1);
        let row = |k: ScheduleKind| {
            let t = textbook(k, 8, 16, k.chunks(2), &c);
            (t.idle_per_stage_ns, t.peak_activations, t.parameter_copies)
        };
        assert_eq!(row(ScheduleKind::OneFOneB), (Some(21), Some(8), 1));
        assert_eq!(row(ScheduleKind::ZbH1), (Some(7), Some(8), 1));
        assert_eq!(row(ScheduleKind::DualPipe), (Some(6), Some(9), 2));
        // DualPipeV: PP = 16 stages on 8 devices, chunk ops of half a stage.
        assert_eq!(row(ScheduleKind::DualPipeV), (Some(14), Some(17), 1));
        for k in [
            ScheduleKind::OneFOneB,
            ScheduleKind::ZbH1,
            ScheduleKind::DualPipe,
            ScheduleKind::DualPipeV,
        ] {
            check(k, 8, 16, &c);
        }
    }

    /// DualPipe's F&B pairs hide one chunk's all-to-all under the other's compute: with an
    /// all-to-all A per chunk, the pair costs max(F + B, 2A) and the formula still holds; 1F1B
    /// pays 2A per microbatch per hop.
    #[test]
    fn f_and_b_overlap_hides_the_all_to_all() {
        for a in [0, 1, 2, 3, 5] {
            let c = Costs {
                all_to_all_ns: a,
                ..Costs::compute_only(2, 2, 1)
            };
            for kind in [ScheduleKind::DualPipe, ScheduleKind::DualPipeV] {
                for (p, m) in [(2, 4), (4, 8), (4, 12), (8, 16)] {
                    check_stages(kind, p, m, &c, a > 0);
                }
            }
            check(ScheduleKind::OneFOneB, 4, 8, &c);
        }
        // Busy time: DualPipe's pairs cost less than the F and B alone while A < F + B.
        let c = Costs {
            all_to_all_ns: 2,
            ..Costs::compute_only(2, 2, 1)
        };
        let dual = Schedule::new(ScheduleKind::DualPipe, 4, 8, 2).unwrap();
        let alone = 8 * (2 + 2 + 1 + 2 * 2);
        let busy = simulate(&dual, &c).unwrap().busy_ns;
        assert!(busy.iter().all(|&b| b < alone), "{busy:?} vs {alone}");
    }

    /// ZB-V (greedy, no closed form): at F = B = W its idle per stage is at least the V's
    /// start-up, (p − 1) chunk ops, and at most ZB-H1's in the same time (2(p − 1) half-stage
    /// chunk ops); its peak is 1F1B's p microbatches (2p half-stage chunks).
    #[test]
    fn zb_v_is_close_to_zero_bubble_at_1f1b_memory() {
        for (p, m) in shapes(ScheduleKind::ZbV)
            .into_iter()
            .filter(|&(p, m)| m >= p)
        {
            let s = Schedule::new(ScheduleKind::ZbV, p, m, 2).unwrap();
            let sim = simulate(&s, &Costs::compute_only(1, 1, 1)).unwrap();
            let hops = (p - 1) as u64;
            for idle in sim.idle_ns() {
                assert!(hops <= idle && idle <= 2 * hops, "p={p} m={m}: {idle}");
            }
            let peak = validate(&s).unwrap().peak_activations;
            assert!(peak.iter().all(|&x| x <= 2 * p), "p={p} m={m}: {peak:?}");
        }
        // p = 8, m = 16: exactly the lower bound.
        let s = Schedule::new(ScheduleKind::ZbV, 8, 16, 2).unwrap();
        let sim = simulate(&s, &Costs::compute_only(1, 1, 1)).unwrap();
        assert_eq!(sim.idle_ns(), vec![7; 8]);
    }

    #[test]
    fn fractions_follow_the_idle_time() {
        let f = |k, p, m, v| bubble_formula(k, p, m, v).unwrap();
        assert!((f(ScheduleKind::OneFOneB, 4, 8, 1) - 3.0 / 11.0).abs() < 1e-12);
        assert!((f(ScheduleKind::Interleaved, 4, 8, 2) - 3.0 / 19.0).abs() < 1e-12);
        assert!((f(ScheduleKind::ZbH1, 4, 8, 1) - 3.0 / 27.0).abs() < 1e-12);
        // DualPipe at p = 8, m = 16: 6 idle over 48 of work.
        assert!((f(ScheduleKind::DualPipe, 8, 16, 2) - 6.0 / 54.0).abs() < 1e-12);
        assert_eq!(bubble_formula(ScheduleKind::ZbV, 4, 8, 2), None);
        assert_eq!(bubble_formula(ScheduleKind::Interleaved, 4, 3, 2), None);
        assert_eq!(bubble_formula(ScheduleKind::GPipe, 0, 3, 1), None);
    }
}
