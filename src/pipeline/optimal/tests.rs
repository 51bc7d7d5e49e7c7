#![allow(clippy::unwrap_used)]
//! The exact search against brute force and the simulator.
use super::*;
use crate::pipeline::{simulate, validate};

fn costs(f: u64, b: u64, w: u64, latency: u64) -> Costs {
    Costs {
        latency_ns: latency,
        ..Costs::compute_only(f, b, w)
    }
}

/// Every order of each device's ops (any order that keeps F before B before W of each virtual
/// stage's microbatch, and the memory limit) timed as early as its dependencies allow: the
/// shortest. No symmetry assumed, no branching rule: what the search must equal.
fn brute_force(family: Family, p: usize, m: usize, t: Times, memory: usize) -> u64 {
    let steps = if family.split() { 3 } else { 2 };
    let n = p * family.chunks();
    /// Every order of the ops of `held` (virtual stage, microbatch) pairs.
    fn orders(held: &[(usize, usize)], steps: u8, memory: usize) -> Vec<Vec<Op>> {
        fn go(
            held: &[(usize, usize)],
            steps: u8,
            memory: usize,
            state: &mut Vec<u8>,
            cur: &mut Vec<Op>,
            out: &mut Vec<Vec<Op>>,
        ) {
            if cur.len() == held.len() * steps as usize {
                out.push(cur.clone());
                return;
            }
            let live = state.iter().filter(|&&x| x > 0 && x < steps).count();
            for (i, &(v, j)) in held.iter().enumerate() {
                let k = state[i];
                if k == steps || (k as usize == F && live >= memory) {
                    continue;
                }
                state[i] += 1;
                cur.push((k as usize, v, j));
                go(held, steps, memory, state, cur, out);
                cur.pop();
                state[i] -= 1;
            }
        }
        let mut out = Vec::new();
        let mut state = vec![0; held.len()];
        go(held, steps, memory, &mut state, &mut Vec::new(), &mut out);
        out
    }
    let per_device: Vec<Vec<Vec<Op>>> = (0..p)
        .map(|d| {
            let held: Vec<(usize, usize)> = (0..n)
                .filter(|&v| family.device(p, v) == d)
                .flat_map(|v| (0..m).map(move |j| (v, j)))
                .collect();
            orders(&held, steps as u8, memory)
        })
        .collect();
    let mut best = u64::MAX;
    let mut pick = vec![0usize; p];
    loop {
        let chosen: Vec<&Vec<Op>> = pick.iter().zip(&per_device).map(|(&i, o)| &o[i]).collect();
        if let Some(span) = time(family, p, m, t, &chosen) {
            best = best.min(span);
        }
        // Next combination.
        let mut d = 0;
        loop {
            if d == p {
                return best;
            }
            pick[d] += 1;
            if pick[d] < per_device[d].len() {
                break;
            }
            pick[d] = 0;
            d += 1;
        }
    }
}

/// An op of a device's order: (kind, virtual stage, microbatch).
type Op = (usize, usize, usize);

/// The makespan of fixed per-device orders, each op as early as possible; `None` when the
/// orders wait on each other forever.
fn time(family: Family, p: usize, m: usize, t: Times, orders: &[&Vec<Op>]) -> Option<u64> {
    let n = p * family.chunks();
    let hop = |v: usize| {
        if family.device(p, v) == family.device(p, v + 1) {
            0
        } else {
            t.hop
        }
    };
    let mut fin = vec![[[None::<u64>; 8]; 3]; n];
    let mut next = vec![0usize; p];
    let mut free = vec![0u64; p];
    let mut left: usize = orders.iter().map(|o| o.len()).sum();
    while left > 0 {
        let mut moved = false;
        for d in 0..p {
            let Some(&(k, v, j)) = orders[d].get(next[d]) else {
                continue;
            };
            let ready = match k {
                F if v == 0 => Some(0),
                F => fin[v - 1][F][j].map(|e| e + hop(v - 1)),
                B => {
                    let own = fin[v][F][j];
                    if v + 1 == n {
                        own
                    } else {
                        own.zip(fin[v + 1][B][j]).map(|(a, b)| a.max(b + hop(v)))
                    }
                }
                _ => fin[v][B][j],
            };
            if let Some(r) = ready {
                let end = r.max(free[d]) + t.dur[k];
                fin[v][k][j] = Some(end);
                free[d] = end;
                next[d] += 1;
                left -= 1;
                moved = true;
            }
        }
        if !moved {
            return None;
        }
    }
    let _ = m;
    free.into_iter().max()
}

#[test]
fn the_search_equals_brute_force_on_tiny_settings() {
    for (p, m) in [(2, 2), (3, 2), (4, 2)] {
        for (f, b, w, hop) in [(1, 1, 1, 0), (1, 2, 1, 0), (2, 3, 1, 1), (1, 2, 2, 2)] {
            for memory in 1..=m {
                let c = costs(f, b, w, hop);
                let t = Times {
                    dur: [f, b, w],
                    hop,
                };
                let want = brute_force(Family::OneChunk, p, m, t, memory);
                let got = optimal(Family::OneChunk, p, m, &c, Some(memory)).unwrap();
                assert!(got.proven);
                assert_eq!(
                    got.makespan_ns, want,
                    "p {p} m {m} F/B/W {f}/{b}/{w} hop {hop} memory {memory}"
                );
            }
        }
    }
    // Three microbatches on two stages: 1,680 orders a stage, every pair of them.
    for (f, b, w, hop, memory) in [(1, 2, 1, 0, 2), (2, 3, 1, 1, 3)] {
        let t = Times {
            dur: [f, b, w],
            hop,
        };
        let got = optimal(Family::OneChunk, 2, 3, &costs(f, b, w, hop), Some(memory)).unwrap();
        assert_eq!(
            got.makespan_ns,
            brute_force(Family::OneChunk, 2, 3, t, memory),
            "m 3 {f}/{b}/{w}"
        );
    }
}

#[test]
fn the_optimum_is_a_valid_schedule_no_longer_than_any_other() {
    for (f, b, w) in [(1, 1, 1), (1, 2, 1), (2, 3, 1)] {
        let c = costs(f * 10, b * 10, w * 10, 3);
        let best = optimal(Family::OneChunk, 4, 6, &c, None).unwrap();
        assert!(best.proven, "F/B/W {f}/{b}/{w}: {} nodes", best.nodes);
        let v = validate(&best.schedule).unwrap();
        assert!(v.peak_activations.iter().all(|&a| a <= 6));
        // The simulator times its orders as the search did.
        assert_eq!(
            simulate(&best.schedule, &c).unwrap().makespan_ns,
            best.makespan_ns
        );
        for kind in [
            ScheduleKind::OneFOneB,
            ScheduleKind::ZbH1,
            ScheduleKind::GPipe,
        ] {
            let other = Schedule::new(kind, 4, 6, 1).unwrap();
            let span = simulate(&other, &c).unwrap().makespan_ns;
            assert!(
                best.makespan_ns <= span,
                "{kind:?}: {span} < {}",
                best.makespan_ns
            );
        }
    }
    // Under 1F1B's memory (p activations on stage 0) it is still no longer than ZB-H1.
    let c = costs(10, 20, 10, 0);
    let best = optimal(Family::OneChunk, 4, 6, &c, Some(4)).unwrap();
    let h1 = simulate(&Schedule::new(ScheduleKind::ZbH1, 4, 6, 1).unwrap(), &c).unwrap();
    assert!(best.proven && best.makespan_ns <= h1.makespan_ns);
    assert!(
        validate(&best.schedule)
            .unwrap()
            .peak_activations
            .iter()
            .all(|&a| a <= 4)
    );
}

#[test]
fn settings_past_the_exact_search_are_refused() {
    let c = costs(1, 1, 1, 0);
    assert!(optimal(Family::OneChunk, 5, 4, &c, None).is_err());
    assert!(optimal(Family::OneChunk, 4, 7, &c, None).is_err());
    assert!(optimal(Family::OneChunk, 0, 4, &c, None).is_err());
    assert!(optimal(Family::OneChunk, 2, 2, &c, Some(0)).is_err());
    // A budget too small to finish says so, with the best found.
    let short =
        optimal_within(Family::OneChunk, 4, 6, &costs(10, 20, 10, 3), None, 5, None).unwrap();
    assert!(!short.proven && short.makespan_ns > 0);
    // It says how far it reached: the optimum lies between its root bound and what it found.
    let proven = optimal(Family::OneChunk, 4, 6, &costs(10, 20, 10, 3), None).unwrap();
    assert!(short.lower_bound_ns <= proven.makespan_ns, "{short:?}");
    assert!(short.lower_bound_ns > 0 && short.lower_bound_ns < short.makespan_ns);
    assert_eq!(proven.lower_bound_ns, proven.makespan_ns);
}

const TWO_CHUNK_COSTS: [(u64, u64, u64, u64); 4] =
    [(1, 1, 1, 0), (1, 2, 1, 0), (2, 3, 1, 1), (1, 2, 2, 2)];

/// Brute force's figures at p = 2, m = 2, two chunk activations a stage, for the V and the
/// loop at [`TWO_CHUNK_COSTS`]: what `two_chunk_brute_force_at_two_microbatches` finds (it
/// takes about a minute a figure in a debug build, so the test below holds its output).
const TWO_BY_TWO: [(Family, [u64; 4]); 2] = [
    (Family::V, [17, 24, 44, 39]),
    (Family::Interleaved, [22, 30, 54, 58]),
];

/// The two-chunk searches equal brute force at the smallest settings: the V (its turn on one
/// device, B and W split) and two looped chunks (whole backwards), every device's every order,
/// at p = 2 and 3 with one microbatch; at p = 2 with two, brute force's figures (held in
/// [`TWO_BY_TWO`]), where a device must leave room for the V's return.
#[test]
fn two_chunk_searches_equal_brute_force_on_tiny_settings() {
    for family in [Family::V, Family::Interleaved] {
        for p in [2, 3] {
            for (f, b, w, hop) in TWO_CHUNK_COSTS {
                let got = optimal(family, p, 1, &costs(f, b, w, hop), Some(2)).unwrap();
                let want = brute_force(family, p, 1, two_chunk_times(family, f, b, w, hop), 2);
                assert!(got.proven);
                assert_eq!(
                    got.makespan_ns, want,
                    "{family:?} p {p} F/B/W {f}/{b}/{w} {hop}"
                );
            }
        }
    }
    for (family, figures) in TWO_BY_TWO {
        for ((f, b, w, hop), want) in TWO_CHUNK_COSTS.into_iter().zip(figures) {
            let got = optimal(family, 2, 2, &costs(f, b, w, hop), Some(2)).unwrap();
            assert!(got.proven);
            assert_eq!(
                got.makespan_ns, want,
                "{family:?} F/B/W {f}/{b}/{w} hop {hop}"
            );
        }
    }
}

fn two_chunk_times(family: Family, f: u64, b: u64, w: u64, hop: u64) -> Times {
    let dur = if family.split() {
        [f, b, w]
    } else {
        [f, b + w, 0]
    };
    Times { dur, hop }
}

/// [`TWO_BY_TWO`]'s figures, by brute force: `cargo test --release --lib
/// two_chunk_brute_force_at_two_microbatches -- --ignored`.
#[test]
#[ignore = "minutes in a debug build; its figures are held in TWO_BY_TWO"]
fn two_chunk_brute_force_at_two_microbatches() {
    for (family, figures) in TWO_BY_TWO {
        let found: Vec<u64> = TWO_CHUNK_COSTS
            .iter()
            .map(|&(f, b, w, hop)| {
                brute_force(family, 2, 2, two_chunk_times(family, f, b, w, hop), 2)
            })
            .collect();
        assert_eq!(found, figures, "{family:?}");
    }
}

/// The two-chunk optima are valid schedules of their family's shape that the simulator times
/// as the search did, within the memory they were given, and no schedule of the family is
/// shorter under the same memory: ZB-V, V-Half and V-Min for the V, interleaved and looped BFS
/// at v = 2 for the loop.
#[test]
fn a_two_chunk_optimum_is_no_longer_than_its_familys_schedules() {
    let share = costs(20, 40, 20, 3);
    let (p, m) = (4, 4);
    for (family, kinds) in [
        (
            Family::V,
            &[ScheduleKind::ZbV, ScheduleKind::VHalf, ScheduleKind::VMin][..],
        ),
        (
            Family::Interleaved,
            &[ScheduleKind::Interleaved, ScheduleKind::LoopedBfs][..],
        ),
    ] {
        let c = share.per_chunk(2);
        for &kind in kinds {
            let s = Schedule::for_costs(kind, p, m, 2, &c).unwrap();
            assert_eq!(Family::of(kind, 2), Some(family));
            let peak = validate(&s).unwrap().peak_activations;
            let memory = peak.iter().copied().max().unwrap();
            let best = optimal(family, p, m, &c, Some(memory)).unwrap();
            assert!(best.proven, "{kind}: {} nodes", best.nodes);
            let v = validate(&best.schedule).unwrap();
            assert!(v.peak_activations.iter().all(|&a| a <= memory), "{kind}");
            assert_eq!(
                simulate(&best.schedule, &c).unwrap().makespan_ns,
                best.makespan_ns,
                "{kind}: the simulator times the optimum's orders as the search did"
            );
            let span = simulate(&s, &c).unwrap().makespan_ns;
            assert!(
                best.makespan_ns <= span,
                "{kind}: {span} < {}",
                best.makespan_ns
            );
        }
    }
    // Past the two-chunk search's sizes it says so.
    assert!(optimal(Family::V, 4, 5, &share, None).is_err());
    assert_eq!(Family::of(ScheduleKind::DualPipe, 2), None);
    assert_eq!(Family::of(ScheduleKind::ZbH1, 1), Some(Family::OneChunk));
}
