//! The overlapped 1F1B schedules against the generators of PP-Schedule-Visualization
//! (`generate_1f1b_overlap_schedule`, `generate_1f1b_interleave_overlap_schedule` in its
//! `src/strategies.py`, run by its `execution_model.py`, whose overlapped op costs F + B as an F&B
//! pair with no all-to-all does here): the same order on every stage, and the same makespan,
//! bubble and peak activations. The figures below are that code's output at p ∈ {2, 4, 8},
//! m ∈ {4, 8, 16}, F/B ∈ {1/2, 1/1, 2/3} (interleaved with v = 2), every setting its generators
//! accept (they need m at least the warm-up).

use super::compute_orders;
use crate::pipeline::schedule_kind::{OpKind, ScheduleKind};
use crate::pipeline::{Costs, Schedule, simulate};

/// `(kind, p, m, F, B, makespan, peak activations of the fullest stage)`.
const REFERENCE: [(ScheduleKind, usize, usize, u64, u64, u64, usize); 36] = [
    (ScheduleKind::OneFOneBOverlap, 2, 4, 1, 2, 15, 4),
    (ScheduleKind::OneFOneBOverlap, 2, 4, 1, 1, 10, 4),
    (ScheduleKind::OneFOneBOverlap, 2, 4, 2, 3, 25, 4),
    (ScheduleKind::OneFOneBOverlap, 2, 8, 1, 2, 27, 4),
    (ScheduleKind::OneFOneBOverlap, 2, 8, 1, 1, 18, 4),
    (ScheduleKind::OneFOneBOverlap, 2, 8, 2, 3, 45, 4),
    (ScheduleKind::OneFOneBOverlap, 2, 16, 1, 2, 51, 4),
    (ScheduleKind::OneFOneBOverlap, 2, 16, 1, 1, 34, 4),
    (ScheduleKind::OneFOneBOverlap, 2, 16, 2, 3, 85, 4),
    (ScheduleKind::OneFOneBOverlap, 4, 8, 1, 2, 33, 8),
    (ScheduleKind::OneFOneBOverlap, 4, 8, 1, 1, 22, 8),
    (ScheduleKind::OneFOneBOverlap, 4, 8, 2, 3, 55, 8),
    (ScheduleKind::OneFOneBOverlap, 4, 16, 1, 2, 57, 8),
    (ScheduleKind::OneFOneBOverlap, 4, 16, 1, 1, 38, 8),
    (ScheduleKind::OneFOneBOverlap, 4, 16, 2, 3, 95, 8),
    (ScheduleKind::OneFOneBOverlap, 8, 16, 1, 2, 69, 16),
    (ScheduleKind::OneFOneBOverlap, 8, 16, 1, 1, 46, 16),
    (ScheduleKind::OneFOneBOverlap, 8, 16, 2, 3, 115, 16),
    (ScheduleKind::InterleavedOverlap, 2, 4, 1, 2, 27, 6),
    (ScheduleKind::InterleavedOverlap, 2, 4, 1, 1, 18, 6),
    (ScheduleKind::InterleavedOverlap, 2, 4, 2, 3, 45, 6),
    (ScheduleKind::InterleavedOverlap, 2, 8, 1, 2, 51, 6),
    (ScheduleKind::InterleavedOverlap, 2, 8, 1, 1, 34, 6),
    (ScheduleKind::InterleavedOverlap, 2, 8, 2, 3, 85, 6),
    (ScheduleKind::InterleavedOverlap, 2, 16, 1, 2, 99, 6),
    (ScheduleKind::InterleavedOverlap, 2, 16, 1, 1, 66, 6),
    (ScheduleKind::InterleavedOverlap, 2, 16, 2, 3, 165, 6),
    (ScheduleKind::InterleavedOverlap, 4, 8, 1, 2, 57, 12),
    (ScheduleKind::InterleavedOverlap, 4, 8, 1, 1, 38, 12),
    (ScheduleKind::InterleavedOverlap, 4, 8, 2, 3, 95, 12),
    (ScheduleKind::InterleavedOverlap, 4, 16, 1, 2, 105, 12),
    (ScheduleKind::InterleavedOverlap, 4, 16, 1, 1, 70, 12),
    (ScheduleKind::InterleavedOverlap, 4, 16, 2, 3, 175, 12),
    (ScheduleKind::InterleavedOverlap, 8, 16, 1, 2, 117, 24),
    (ScheduleKind::InterleavedOverlap, 8, 16, 1, 1, 78, 24),
    (ScheduleKind::InterleavedOverlap, 8, 16, 2, 3, 195, 24),
];

/// A stage's order as the reference prints it: `F<mb>.<chunk>`, an F&B pair joined by `&`.
fn written(kind: ScheduleKind, p: usize, m: usize, v: usize) -> Vec<String> {
    compute_orders(kind, p, m, v)
        .into_iter()
        .map(|order| {
            let mut out = String::new();
            for (i, s) in order.iter().enumerate() {
                let letter = if s.kind == OpKind::Forward { 'F' } else { 'B' };
                let after_pair = i > 0 && order[i - 1].overlapped;
                let sep = if i == 0 {
                    ""
                } else if after_pair {
                    "&"
                } else {
                    " "
                };
                out += &format!("{sep}{letter}{}.{}", s.mb, s.chunk);
            }
            out
        })
        .collect()
}

#[test]
fn each_stage_runs_the_reference_order() {
    assert_eq!(
        written(ScheduleKind::OneFOneBOverlap, 4, 8, 1),
        [
            "F0.0 F1.0 F2.0 F3.0 F4.0 F5.0 F6.0 F7.0&B0.0 B1.0 B2.0 B3.0 B4.0 B5.0 B6.0 B7.0",
            "F0.0 F1.0 F2.0 F3.0 F4.0 F5.0&B0.0 F6.0&B1.0 F7.0&B2.0 B3.0 B4.0 B5.0 B6.0 B7.0",
            "F0.0 F1.0 F2.0 F3.0&B0.0 F4.0&B1.0 F5.0&B2.0 F6.0&B3.0 F7.0&B4.0 B5.0 B6.0 B7.0",
            "F0.0 F1.0&B0.0 F2.0&B1.0 F3.0&B2.0 F4.0&B3.0 F5.0&B4.0 F6.0&B5.0 F7.0&B6.0 B7.0",
        ]
    );
    assert_eq!(
        written(ScheduleKind::InterleavedOverlap, 2, 4, 2),
        [
            "F0.0 F1.0 F0.1 F1.1 F2.0 F3.0&B0.1 F2.1&B1.1 F3.1&B0.0 B1.0 B2.1 B3.1 B2.0 B3.0",
            "F0.0 F1.0 F0.1 F1.1&B0.1 F2.0&B1.1 F3.0&B0.0 F2.1&B1.0 F3.1&B2.1 B3.1 B2.0 B3.0",
        ]
    );
}

#[test]
fn makespan_bubble_and_peak_are_the_references() {
    for (kind, p, m, f, b, makespan, peak) in REFERENCE {
        let v = kind.chunks(2);
        let s = Schedule::new(kind, p, m, v).unwrap();
        let sim = simulate(&s, &Costs::compute_only(f, b, 0)).unwrap();
        let at = format!("{kind} p={p} m={m} F={f} B={b}");
        assert_eq!(sim.makespan_ns, makespan, "{at}");
        assert_eq!(sim.peak_activations.iter().max(), Some(&peak), "{at}");
        // The reference's bubble rate: (makespan − ideal) / ideal, ideal = m·v·(F + B).
        let ideal = (m * v) as f64 * (f + b) as f64;
        let want = (makespan as f64 - ideal) / ideal;
        assert!((sim.bubble_over_ideal() - want).abs() < 1e-12, "{at}");
        // With nothing to hide, the textbook's idle time is the simulation's.
        let book = crate::pipeline::textbook(kind, p, m, v, &Costs::compute_only(f, b, 0));
        assert_eq!(
            book.idle_per_stage_ns,
            Some(makespan - (m * v) as u64 * (f + b)),
            "{at}"
        );
        assert_eq!(book.peak_activations, Some(peak), "{at}");
    }
}

/// Where the reference refuses (the warm-up would take more microbatches than there are), the
/// warm-up takes them all and nothing runs overlapped: the order is still valid.
#[test]
fn short_batches_have_no_pairs_and_stay_valid() {
    for kind in [
        ScheduleKind::OneFOneBOverlap,
        ScheduleKind::InterleavedOverlap,
    ] {
        for (p, m) in [(4, 4), (8, 4), (8, 8)] {
            let Ok(s) = Schedule::new(kind, p, m, kind.chunks(2)) else {
                continue;
            };
            crate::pipeline::validate(&s).unwrap();
            let first = &compute_orders(kind, p, m, kind.chunks(2))[0];
            assert!(first.iter().all(|s| !s.overlapped), "{kind} p={p} m={m}");
        }
    }
}

/// With an all-to-all to hide, the pairs hide it: shorter than 1F1B, which pays it in full.
#[test]
fn pairs_hide_an_all_to_all() {
    let costs = Costs {
        all_to_all_ns: 2,
        ..Costs::compute_only(2, 3, 0)
    };
    let run = |kind| simulate(&Schedule::new(kind, 4, 16, 1).unwrap(), &costs).unwrap();
    let (plain, overlap) = (
        run(ScheduleKind::OneFOneB),
        run(ScheduleKind::OneFOneBOverlap),
    );
    assert!(
        overlap.makespan_ns < plain.makespan_ns,
        "{} against {}",
        overlap.makespan_ns,
        plain.makespan_ns
    );
}
