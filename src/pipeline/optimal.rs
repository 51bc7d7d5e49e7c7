//! The shortest schedule there is, for small settings: a branch and bound over one-chunk
//! schedules with B and W split (ZB-H1's shape), under the same dependencies, costs and memory
//! limit as the schedules it is compared with. What the zero-bubble authors computed with an ILP
//! solver for their own figures; here every schedule's gap to it can be shown.
//!
//! The problem: stage `s` runs `F`, `B` and `W` of every microbatch, one op at a time. `F(s, j)`
//! needs `F(s − 1, j)` plus a hand-off; `B(s, j)` needs `F(s, j)` and `B(s + 1, j)` plus a
//! hand-off; `W(s, j)` needs `B(s, j)`. A stage holds an activation from its `F` until its `W`,
//! at most `memory` at a time. Sends do not hold a stage (the simulator's default), so a hand-off
//! only delays its receiver.
//!
//! The search:
//! - microbatches are identical, so each stage runs its `F`s, its `B`s and its `W`s each in
//!   microbatch order (symmetry breaking; the published schedules all do, and the brute-force
//!   test, which does not assume it, finds nothing shorter);
//! - branching is Giffler and Thompson's: of the ops that may start, the one that could finish
//!   first fixes a stage, and every op of that stage that could start before then is a branch,
//!   so every active schedule, one of them optimal, is in the tree;
//! - bounds: each stage's free time plus its remaining work, and each op's earliest start plus
//!   the longest chain after it (its tail);
//! - states reached before with every time no later are cut (dominance by a table keyed by how
//!   many ops of each kind each stage has run).
//!
//! A search that passes its node budget stops with the best schedule found and says it is not
//! proven. [`super::Schedule::for_costs`]'s plans and the patterns are the starting bound.

use super::schedule::Schedule;
use super::schedule_kind::{OpKind, ScheduleKind};
use super::simulate::Costs;
use super::step::{ComputeOrder, Step};
use crate::error::ScheduleError;
use std::collections::HashMap;

/// The largest settings the exact search takes.
pub const MAX_STAGES: usize = 4;
pub const MAX_MICROBATCHES: usize = 6;

/// Nodes a search may visit before it stops unproven.
pub(super) const NODE_BUDGET: u64 = 20_000_000;

/// Time-vectors kept per state for the dominance test, at most.
const TABLE_LIMIT: usize = 4_000_000;

/// The best schedule found, and whether the search proved that nothing is shorter.
#[derive(Debug, Clone)]
pub struct Optimum {
    pub makespan_ns: u64,
    /// Its orders as a one-chunk, split-backward schedule (ZB-H1's shape and kind).
    pub schedule: Schedule,
    /// True when the search finished: no schedule under the limit is shorter.
    pub proven: bool,
    pub nodes: u64,
}

/// Op kinds, as indices.
const F: usize = 0;
const B: usize = 1;
const W: usize = 2;

/// Per stage, its ops in order: `(kind, microbatch)`.
type Orders = Vec<Vec<(usize, usize)>>;

#[derive(Clone, Copy)]
struct Times {
    dur: [u64; 3],
    hop: u64,
}

/// Why the exact search does not take `stages` × `microbatches` under `costs`, if it does not:
/// what callers that show the optimum only where it applies ask first.
pub fn beyond_the_search(stages: usize, microbatches: usize, costs: &Costs) -> Option<String> {
    if stages > MAX_STAGES || microbatches > MAX_MICROBATCHES {
        Some(format!(
            "the exact search takes up to {MAX_STAGES} stages and {MAX_MICROBATCHES} \
             microbatches, got {stages} and {microbatches}"
        ))
    } else if costs.blocking_sends {
        Some("the exact search models sends that run beside compute, not blocking ones".into())
    } else {
        None
    }
}

/// The shortest schedule of `stages` × `microbatches` under `costs` holding at most `memory`
/// activations a stage (`None`: as many as the microbatches). `costs` must not block on sends.
pub fn optimal(
    stages: usize,
    microbatches: usize,
    costs: &Costs,
    memory: Option<usize>,
) -> Result<Optimum, ScheduleError> {
    optimal_within(stages, microbatches, costs, memory, NODE_BUDGET)
}

/// [`optimal`] visiting about `budget` nodes at most (an interactive caller's bound on its time);
/// past it, the best schedule found (the first complete one at least), not proven.
pub fn optimal_within(
    stages: usize,
    microbatches: usize,
    costs: &Costs,
    memory: Option<usize>,
    budget: u64,
) -> Result<Optimum, ScheduleError> {
    let (p, m) = (stages, microbatches);
    if p == 0 || m == 0 {
        return Err(ScheduleError::Zero {
            what: if p == 0 { "stages" } else { "microbatches" },
        });
    }
    if let Some(reason) = beyond_the_search(p, m, costs) {
        return Err(ScheduleError::Shape {
            kind: "optimal",
            reason,
        });
    }
    let memory = memory.unwrap_or(m).min(m);
    if memory == 0 {
        return Err(ScheduleError::Zero { what: "memory" });
    }
    let times = Times {
        dur: [
            costs.forward_ns.saturating_add(costs.all_to_all_ns),
            costs.backward_ns.saturating_add(costs.all_to_all_ns),
            costs.weight_grad_ns,
        ],
        hop: costs.transfer_ns()?,
    };
    let mut search = Search::new(p, m, memory, times, budget);
    search.run();
    let (makespan_ns, orders) = search.best.clone().ok_or_else(|| ScheduleError::Shape {
        kind: "optimal",
        reason: format!("no schedule holds at most {memory} activations a stage"),
    })?;
    let orders = orders
        .into_iter()
        .map(|order| {
            order
                .into_iter()
                .map(|(k, j)| Step {
                    kind: [OpKind::Forward, OpKind::Backward, OpKind::WeightGrad][k],
                    mb: j,
                    chunk: 0,
                    overlapped: false,
                    glued: false,
                })
                .collect::<ComputeOrder>()
        })
        .collect();
    Ok(Optimum {
        makespan_ns,
        schedule: Schedule::from_orders(ScheduleKind::ZbH1, p, m, 1, orders),
        proven: !search.cut,
        nodes: search.nodes,
    })
}

/// Search state: per stage, how many of each kind it ran, when it is free, and when each op
/// finished.
struct Search {
    p: usize,
    m: usize,
    memory: usize,
    t: Times,
    done: Vec<[usize; 3]>,
    free: Vec<u64>,
    /// `[kind][stage][mb]`.
    fin: [Vec<Vec<u64>>; 3],
    order: Orders,
    /// `[kind][stage]`: the longest chain from an op's start to the end, its own time included.
    tail: [Vec<u64>; 3],
    best: Option<(u64, Orders)>,
    nodes: u64,
    budget: u64,
    /// The budget stopped the search.
    cut: bool,
    seen: HashMap<Vec<u8>, Vec<Vec<u64>>>,
    stored: usize,
}

impl Search {
    fn new(p: usize, m: usize, memory: usize, t: Times, budget: u64) -> Self {
        let [fd, bd, wd] = t.dur;
        // B(s) → B(s−1) → … → B(0) → W(0) (at least B(s) → W(s)).
        let mut tail = [
            vec![0; p],
            (0..p).map(|s| bd + s as u64 * (t.hop + bd) + wd).collect(),
            vec![wd; p],
        ];
        for s in (0..p).rev() {
            // F(s) → F(s+1) … F(p−1) → B(p−1) → … ; or F(s) → B(s).
            tail[F][s] = fd
                + if s + 1 < p {
                    (t.hop + tail[F][s + 1]).max(tail[B][s])
                } else {
                    tail[B][s]
                };
        }
        Self {
            p,
            m,
            memory,
            t,
            done: vec![[0; 3]; p],
            free: vec![0; p],
            fin: [
                vec![vec![0; m]; p],
                vec![vec![0; m]; p],
                vec![vec![0; m]; p],
            ],
            order: vec![Vec::new(); p],
            tail,
            best: None,
            nodes: 0,
            budget,
            cut: false,
            seen: HashMap::new(),
            stored: 0,
        }
    }

    /// When the next op of kind `k` on stage `s` could start, if it may start now.
    fn ready(&self, s: usize, k: usize) -> Option<u64> {
        let j = self.done[s][k];
        if j >= self.m {
            return None;
        }
        let hop = self.t.hop;
        let at = match k {
            F => {
                if self.done[s][F] - self.done[s][W] >= self.memory {
                    return None;
                }
                if s == 0 {
                    0
                } else if self.done[s - 1][F] > j {
                    self.fin[F][s - 1][j] + hop
                } else {
                    return None;
                }
            }
            B => {
                if self.done[s][F] <= j {
                    return None;
                }
                let own = self.fin[F][s][j];
                if s + 1 == self.p {
                    own
                } else if self.done[s + 1][B] > j {
                    own.max(self.fin[B][s + 1][j] + hop)
                } else {
                    return None;
                }
            }
            _ => {
                if self.done[s][B] <= j {
                    return None;
                }
                self.fin[B][s][j]
            }
        };
        Some(at.max(self.free[s]))
    }

    /// A lower bound on the makespan of any completion of this state.
    // Indexes several `[kind][stage][mb]` arrays at once: ranges read plainer than zips.
    #[allow(clippy::needless_range_loop)]
    fn bound(&self, makespan: u64) -> u64 {
        let (p, m) = (self.p, self.m);
        let hop = self.t.hop;
        let mut lb = makespan;
        // Earliest starts of every unscheduled op, ignoring the other ops of its stage except
        // through the stage's free time: F in stage order, B in reverse, W after B.
        let mut est = [
            vec![vec![0u64; m]; p],
            vec![vec![0u64; m]; p],
            vec![vec![0u64; m]; p],
        ];
        for s in 0..p {
            for j in 0..m {
                est[F][s][j] = if j < self.done[s][F] {
                    self.fin[F][s][j]
                } else {
                    let pred = if s == 0 { 0 } else { est[F][s - 1][j] + hop };
                    pred.max(self.free[s]) + self.t.dur[F]
                };
            }
        }
        for s in (0..p).rev() {
            for j in 0..m {
                est[B][s][j] = if j < self.done[s][B] {
                    self.fin[B][s][j]
                } else {
                    let after = if s + 1 == p {
                        0
                    } else {
                        est[B][s + 1][j] + hop
                    };
                    after.max(est[F][s][j]).max(self.free[s]) + self.t.dur[B]
                };
                est[W][s][j] = if j < self.done[s][W] {
                    self.fin[W][s][j]
                } else {
                    est[B][s][j].max(self.free[s]) + self.t.dur[W]
                };
                lb = lb.max(est[W][s][j]);
            }
        }
        // est holds finish times here: the tail after each op's finish bounds the end.
        for s in 0..p {
            for k in [F, B] {
                if let Some(j) = (self.done[s][k]..m).next() {
                    let start = est[k][s][j] - self.t.dur[k];
                    lb = lb.max(start + self.tail[k][s]);
                }
            }
            // The stage's remaining work, from its first possible start.
            let work: u64 = (0..3)
                .map(|k| (m - self.done[s][k]) as u64 * self.t.dur[k])
                .sum();
            let first = (0..3)
                .filter(|&k| self.done[s][k] < m)
                .map(|k| est[k][s][self.done[s][k]] - self.t.dur[k])
                .min()
                .unwrap_or(self.free[s]);
            lb = lb.max(first.max(self.free[s]) + work);
        }
        lb
    }

    /// The state's times that its future depends on, and the state's key.
    fn signature(&self, makespan: u64) -> (Vec<u8>, Vec<u64>) {
        let key: Vec<u8> = self
            .done
            .iter()
            .flat_map(|d| d.iter().map(|&n| n as u8))
            .collect();
        let mut times = self.free.clone();
        times.push(makespan);
        for s in 0..self.p {
            let d = self.done[s];
            for j in 0..d[F] {
                let needed = (s + 1 < self.p && j >= self.done[s + 1][F]) || j >= d[B];
                if needed {
                    times.push(self.fin[F][s][j]);
                }
            }
            for j in 0..d[B] {
                let needed = (s > 0 && j >= self.done[s - 1][B]) || j >= d[W];
                if needed {
                    times.push(self.fin[B][s][j]);
                }
            }
        }
        (key, times)
    }

    /// True when a state with the same counts and no later times was searched already.
    fn dominated(&mut self, makespan: u64) -> bool {
        let (key, times) = self.signature(makespan);
        let entry = self.seen.entry(key).or_default();
        if entry
            .iter()
            .any(|old| old.iter().zip(&times).all(|(o, t)| o <= t))
        {
            return true;
        }
        if self.stored < TABLE_LIMIT {
            entry.retain(|old| !old.iter().zip(&times).all(|(o, t)| t <= o));
            entry.push(times);
            self.stored += 1;
        }
        false
    }

    fn run(&mut self) {
        self.dfs(0, 0);
    }

    fn dfs(&mut self, scheduled: usize, makespan: u64) {
        self.nodes += 1;
        // Past the budget, stop once there is a schedule to give (the first dive finds one).
        if self.nodes > self.budget && self.best.is_some() {
            self.cut = true;
            return;
        }
        if scheduled == 3 * self.p * self.m {
            if self.best.as_ref().is_none_or(|b| makespan < b.0) {
                self.best = Some((makespan, self.order.clone()));
            }
            return;
        }
        if let Some((best, _)) = &self.best
            && self.bound(makespan) >= *best
        {
            return;
        }
        if self.dominated(makespan) {
            return;
        }
        // Giffler–Thompson: the op that could finish first fixes the stage.
        let mut first: Option<(u64, usize)> = None;
        for s in 0..self.p {
            for k in 0..3 {
                if let Some(start) = self.ready(s, k) {
                    let end = start + self.t.dur[k];
                    if first.is_none_or(|(e, _)| end < e) {
                        first = Some((end, s));
                    }
                }
            }
        }
        let Some((end, s)) = first else {
            // Nothing may start: the memory limit holds every stage (no W can run).
            return;
        };
        // B first: it is on the critical path; then W, which frees memory; then F.
        for k in [B, W, F] {
            let Some(start) = self.ready(s, k) else {
                continue;
            };
            if start >= end {
                continue;
            }
            let j = self.done[s][k];
            let finish = start + self.t.dur[k];
            let (free, fin) = (self.free[s], self.fin[k][s][j]);
            self.free[s] = finish;
            self.fin[k][s][j] = finish;
            self.done[s][k] += 1;
            self.order[s].push((k, j));
            self.dfs(scheduled + 1, makespan.max(finish));
            self.order[s].pop();
            self.done[s][k] -= 1;
            self.fin[k][s][j] = fin;
            self.free[s] = free;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::pipeline::{simulate, validate};

    fn costs(f: u64, b: u64, w: u64, latency: u64) -> Costs {
        Costs {
            latency_ns: latency,
            ..Costs::compute_only(f, b, w)
        }
    }

    /// Every per-stage order (any order of each stage's ops that keeps F before B before W of
    /// each microbatch and the memory limit) timed as early as its dependencies allow: the
    /// shortest. No symmetry assumed, no branching rule: what the search must equal.
    fn brute_force(p: usize, m: usize, t: Times, memory: usize) -> u64 {
        fn orders(m: usize, memory: usize) -> Vec<Vec<(usize, usize)>> {
            fn go(
                m: usize,
                memory: usize,
                state: &mut Vec<u8>,
                cur: &mut Vec<(usize, usize)>,
                out: &mut Vec<Vec<(usize, usize)>>,
            ) {
                if cur.len() == 3 * m {
                    out.push(cur.clone());
                    return;
                }
                let live = state.iter().filter(|&&x| x == 1 || x == 2).count();
                for j in 0..m {
                    let k = state[j] as usize;
                    if k == 3 || (k == F && live >= memory) {
                        continue;
                    }
                    state[j] += 1;
                    cur.push((k, j));
                    go(m, memory, state, cur, out);
                    cur.pop();
                    state[j] -= 1;
                }
            }
            let mut out = Vec::new();
            go(m, memory, &mut vec![0; m], &mut Vec::new(), &mut out);
            out
        }
        let per_stage = orders(m, memory);
        let mut best = u64::MAX;
        let mut pick = vec![0usize; p];
        loop {
            if let Some(span) = time(
                p,
                m,
                t,
                &pick.iter().map(|&i| &per_stage[i]).collect::<Vec<_>>(),
            ) {
                best = best.min(span);
            }
            // Next combination.
            let mut s = 0;
            loop {
                if s == p {
                    return best;
                }
                pick[s] += 1;
                if pick[s] < per_stage.len() {
                    break;
                }
                pick[s] = 0;
                s += 1;
            }
        }
    }

    /// The makespan of fixed per-stage orders, each op as early as possible; `None` when the
    /// orders wait on each other forever.
    fn time(p: usize, m: usize, t: Times, orders: &[&Vec<(usize, usize)>]) -> Option<u64> {
        let mut fin = vec![[[None::<u64>; 8]; 3]; p];
        let mut next = vec![0usize; p];
        let mut free = vec![0u64; p];
        let mut left = 3 * p * m;
        while left > 0 {
            let mut moved = false;
            for s in 0..p {
                let Some(&(k, j)) = orders[s].get(next[s]) else {
                    continue;
                };
                let ready = match k {
                    F if s == 0 => Some(0),
                    F => fin[s - 1][F][j].map(|e| e + t.hop),
                    B => {
                        let own = fin[s][F][j];
                        if s + 1 == p {
                            own
                        } else {
                            own.zip(fin[s + 1][B][j]).map(|(a, b)| a.max(b + t.hop))
                        }
                    }
                    _ => fin[s][B][j],
                };
                if let Some(r) = ready {
                    let end = r.max(free[s]) + t.dur[k];
                    fin[s][k][j] = Some(end);
                    free[s] = end;
                    next[s] += 1;
                    left -= 1;
                    moved = true;
                }
            }
            if !moved {
                return None;
            }
        }
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
                    let want = brute_force(p, m, t, memory);
                    let got = optimal(p, m, &c, Some(memory)).unwrap();
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
            let got = optimal(2, 3, &costs(f, b, w, hop), Some(memory)).unwrap();
            assert_eq!(
                got.makespan_ns,
                brute_force(2, 3, t, memory),
                "m 3 {f}/{b}/{w}"
            );
        }
    }

    #[test]
    fn the_optimum_is_a_valid_schedule_no_longer_than_any_other() {
        for (f, b, w) in [(1, 1, 1), (1, 2, 1), (2, 3, 1)] {
            let c = costs(f * 10, b * 10, w * 10, 3);
            let best = optimal(4, 6, &c, None).unwrap();
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
        let best = optimal(4, 6, &c, Some(4)).unwrap();
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
        assert!(optimal(5, 4, &c, None).is_err());
        assert!(optimal(4, 7, &c, None).is_err());
        assert!(optimal(0, 4, &c, None).is_err());
        assert!(optimal(2, 2, &c, Some(0)).is_err());
        // A budget too small to finish says so, with the best found.
        let short = optimal_within(4, 6, &costs(10, 20, 10, 3), None, 5).unwrap();
        assert!(!short.proven && short.makespan_ns > 0);
    }
}
