//! The shortest schedule there is, for small settings: a branch and bound over the schedules of
//! a [`Family`] (one chunk a stage with B and W split, ZB-H1's shape; two chunks a stage in a V
//! with B and W split, ZB-V's, V-Half's and V-Min's; or two chunks looped with whole backwards,
//! interleaved's), under the same dependencies, costs and memory limit as the schedules it is
//! compared with. What the zero-bubble authors computed with an ILP solver for their own
//! one-chunk figures; here every schedule's gap to it can be shown.
//!
//! The problem: the model is cut into virtual stages, one or two on each stage (device) as the
//! family places them. Virtual stage `v` runs `F`, `B` and `W` of every microbatch, and its
//! device one op at a time. `F(v, j)` needs `F(v − 1, j)`; `B(v, j)` needs `F(v, j)` and
//! `B(v + 1, j)`; `W(v, j)` needs `B(v, j)` (in the interleaved family there is no `W`: a `B`
//! computes the weight gradient too). Between virtual stages on different devices a hand-off
//! comes in between (the V's turn is on one device and has none). A device holds an activation
//! from each `F` until its `W` (its `B` where it has none), at most `memory` at a time. Sends do
//! not hold a device (the simulator's default), so a hand-off only delays its receiver.
//!
//! The search:
//! - microbatches are identical, so each virtual stage runs its `F`s, its `B`s and its `W`s each
//!   in microbatch order (symmetry breaking; the published schedules all do, and the brute-force
//!   tests, which do not assume it, find nothing shorter);
//! - branching is Giffler and Thompson's: of the ops that may start, the one that could finish
//!   first fixes a device, and every op of that device that could start before then is a
//!   branch, so every active schedule, one of them optimal, is in the tree;
//! - bounds: each device's free time plus its remaining work, and each op's earliest start plus
//!   the longest chain after it (its tail);
//! - states reached before with every time no later are cut (dominance by a table keyed by how
//!   many ops of each kind each virtual stage has run).
//!
//! A search that passes its node budget stops with the best schedule found and says it is not
//! proven. [`super::Schedule::for_costs`]'s plans and the patterns are the starting bound.

use super::schedule::Schedule;
use super::schedule_kind::{OpKind, Placement, ScheduleKind};
use super::simulate::Costs;
use super::step::{ComputeOrder, Step};
use crate::error::ScheduleError;
use std::collections::HashMap;

/// The largest settings the exact search takes: one chunk a stage.
pub const MAX_STAGES: usize = 4;
pub const MAX_MICROBATCHES: usize = 6;
/// The largest settings it takes with two chunks a stage, twice the ops a microbatch.
pub const MAX_TWO_CHUNK_STAGES: usize = 4;
pub const MAX_TWO_CHUNK_MICROBATCHES: usize = 4;

/// Nodes a search may visit before it stops unproven.
pub(super) const NODE_BUDGET: u64 = 20_000_000;

/// Time-vectors kept per state for the dominance test, at most.
const TABLE_LIMIT: usize = 4_000_000;

/// The schedules a search ranges over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// One chunk a stage, B and W split (ZB-H1's shape; 1F1B's and GPipe's orders among them).
    OneChunk,
    /// Two chunks a stage in a V, B and W split (ZB-V's, V-Half's, V-Min's, DualPipeV's).
    V,
    /// Two chunks a stage looped, whole backwards (interleaved 1F1B's and looped BFS's at v = 2).
    Interleaved,
}

impl Family {
    /// The family a schedule of `kind` with `chunks` a stage belongs to, if a search covers it.
    pub fn of(kind: ScheduleKind, chunks: usize) -> Option<Family> {
        match (kind.placement(), chunks) {
            (Placement::Looped, 1) => Some(Family::OneChunk),
            (Placement::V, 2) => Some(Family::V),
            (Placement::Looped, 2) if !kind.splits_backward() => Some(Family::Interleaved),
            _ => None,
        }
    }

    /// Chunks a stage.
    pub fn chunks(self) -> usize {
        match self {
            Family::OneChunk => 1,
            Family::V | Family::Interleaved => 2,
        }
    }

    fn split(self) -> bool {
        self != Family::Interleaved
    }

    /// The kind its optimum is written as.
    fn kind(self) -> ScheduleKind {
        match self {
            Family::OneChunk => ScheduleKind::ZbH1,
            Family::V => ScheduleKind::ZbV,
            Family::Interleaved => ScheduleKind::Interleaved,
        }
    }

    /// In words, for a line that states the optimum.
    pub fn describe(self) -> &'static str {
        match self {
            Family::OneChunk => "one-chunk schedule",
            Family::V => "two-chunk V schedule (B and W split)",
            Family::Interleaved => "two-chunk interleaved schedule (whole backwards)",
        }
    }

    /// The device of virtual stage `v` of `p` stages.
    fn device(self, p: usize, v: usize) -> usize {
        match self {
            Family::V if v >= p => 2 * p - 1 - v,
            _ => v % p,
        }
    }
}

/// The best schedule found, and whether the search proved that nothing is shorter.
#[derive(Debug, Clone)]
pub struct Optimum {
    pub makespan_ns: u64,
    /// Its orders, as a schedule of the family's shape (ZB-H1's kind for one chunk, ZB-V's for
    /// the V, interleaved's for two looped chunks).
    pub schedule: Schedule,
    pub family: Family,
    /// True when the search finished: no schedule under the limit is shorter.
    pub proven: bool,
    /// No schedule under the limit is shorter than this: the makespan where proven, else the
    /// search's lower bound at its root (how far it reached: the optimum lies between the two).
    pub lower_bound_ns: u64,
    pub nodes: u64,
}

/// Op kinds, as indices.
const F: usize = 0;
const B: usize = 1;
const W: usize = 2;

/// Per device, its ops in order: `(kind, virtual stage, microbatch)`.
type Orders = Vec<Vec<(usize, usize, usize)>>;

#[derive(Clone, Copy)]
struct Times {
    dur: [u64; 3],
    hop: u64,
}

/// Why the exact search does not take `stages` × `microbatches` of `family` under `costs`, if it
/// does not: what callers that show the optimum only where it applies ask first.
pub fn beyond_the_search(
    family: Family,
    stages: usize,
    microbatches: usize,
    costs: &Costs,
) -> Option<String> {
    let (most_p, most_m) = match family {
        Family::OneChunk => (MAX_STAGES, MAX_MICROBATCHES),
        Family::V | Family::Interleaved => (MAX_TWO_CHUNK_STAGES, MAX_TWO_CHUNK_MICROBATCHES),
    };
    if stages > most_p || microbatches > most_m {
        Some(format!(
            "the exact search over {}s takes up to {most_p} stages and {most_m} microbatches, \
             got {stages} and {microbatches}",
            family.describe()
        ))
    } else if costs.blocking_sends {
        Some("the exact search models sends that run beside compute, not blocking ones".into())
    } else {
        None
    }
}

/// The shortest schedule of `family` with `stages` × `microbatches` under `costs` (one chunk
/// op's) holding at most `memory` chunk activations a stage (`None`: all of them), with the
/// full node budget. `costs` must not block on sends.
pub fn optimal(
    family: Family,
    stages: usize,
    microbatches: usize,
    costs: &Costs,
    memory: Option<usize>,
) -> Result<Optimum, ScheduleError> {
    optimal_within(
        family,
        stages,
        microbatches,
        costs,
        memory,
        NODE_BUDGET,
        None,
    )
}

/// The shortest schedule of `family`, `costs` being one chunk op's and `memory` in chunk
/// activations a stage (`None`: all of them), visiting about `budget` nodes at most (an
/// interactive caller's bound on its time); past it, the best schedule found (the first
/// complete one at least), not proven. `seed`, a schedule of the family within the memory
/// (the one compared, say), is the first bound: the search starts from it, so what it gives is
/// never longer, even unproven.
pub fn optimal_within(
    family: Family,
    stages: usize,
    microbatches: usize,
    costs: &Costs,
    memory: Option<usize>,
    budget: u64,
    seed: Option<&Schedule>,
) -> Result<Optimum, ScheduleError> {
    let (p, m) = (stages, microbatches);
    if p == 0 || m == 0 {
        return Err(ScheduleError::Zero {
            what: if p == 0 { "stages" } else { "microbatches" },
        });
    }
    if let Some(reason) = beyond_the_search(family, p, m, costs) {
        return Err(ScheduleError::Shape {
            kind: "optimal",
            reason,
        });
    }
    let all = m * family.chunks();
    let memory = memory.unwrap_or(all).min(all);
    if memory == 0 {
        return Err(ScheduleError::Zero { what: "memory" });
    }
    let backward = costs.backward_ns.saturating_add(costs.all_to_all_ns);
    let times = Times {
        dur: if family.split() {
            [
                costs.forward_ns.saturating_add(costs.all_to_all_ns),
                backward,
                costs.weight_grad_ns,
            ]
        } else {
            [
                costs.forward_ns.saturating_add(costs.all_to_all_ns),
                backward.saturating_add(costs.weight_grad_ns),
                0,
            ]
        },
        hop: costs.transfer_ns()?,
    };
    let mut search = Search::new(family, p, m, memory, times, budget);
    if let Some(seed) = seed {
        search.seed(family, seed);
    }
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
                .map(|(k, v, j)| {
                    let kind = [OpKind::Forward, OpKind::Backward, OpKind::WeightGrad][k];
                    Step::new(kind, j, search.chunk[v])
                })
                .collect::<ComputeOrder>()
        })
        .collect();
    let proven = !search.cut;
    Ok(Optimum {
        makespan_ns,
        schedule: Schedule::from_orders(family.kind(), p, m, family.chunks(), orders),
        family,
        proven,
        lower_bound_ns: if proven {
            makespan_ns
        } else {
            search.root_bound.min(makespan_ns)
        },
        nodes: search.nodes,
    })
}

/// Search state: per virtual stage, how many of each kind it ran and when each op finished;
/// per device, when it is free.
struct Search {
    p: usize,
    m: usize,
    /// Virtual stages.
    n: usize,
    split: bool,
    memory: usize,
    t: Times,
    /// Per virtual stage: its device, its chunk there, and the hand-off to the next one.
    device: Vec<usize>,
    chunk: Vec<usize>,
    hop_next: Vec<u64>,
    done: Vec<[usize; 3]>,
    free: Vec<u64>,
    /// Per device, by chunk: Fs it may not start until it runs another op (see [`Self::dfs`]).
    blocked: Vec<u8>,
    /// Whether a device may decline its first F ([`Self::dfs`]): with two chunks a stage.
    declines: bool,
    /// `[kind][virtual stage][mb]`.
    fin: [Vec<Vec<u64>>; 3],
    order: Orders,
    /// `[kind][virtual stage]`: the longest chain from an op's start to the end, its own time
    /// included.
    tail: [Vec<u64>; 3],
    best: Option<(u64, Orders)>,
    nodes: u64,
    budget: u64,
    /// The budget stopped the search.
    cut: bool,
    seen: HashMap<Vec<u8>, Vec<Vec<u64>>>,
    stored: usize,
    /// The bound before anything is scheduled.
    root_bound: u64,
}

impl Search {
    fn new(family: Family, p: usize, m: usize, memory: usize, t: Times, budget: u64) -> Self {
        let n = p * family.chunks();
        let device: Vec<usize> = (0..n).map(|v| family.device(p, v)).collect();
        let chunk = (0..n)
            .map(|v| (0..v).filter(|&u| device[u] == device[v]).count())
            .collect();
        let hop_next: Vec<u64> = (0..n)
            .map(|v| {
                if v + 1 < n && device[v + 1] != device[v] {
                    t.hop
                } else {
                    0
                }
            })
            .collect();
        let [fd, bd, wd] = t.dur;
        // B(v) → B(v−1) → … → B(0) → W(0) (at least B(v) → W(v)).
        let mut tail = [vec![0; n], vec![0; n], vec![wd; n]];
        for v in 0..n {
            tail[B][v] = bd
                + if v == 0 {
                    wd
                } else {
                    wd.max(hop_next[v - 1] + tail[B][v - 1])
                };
        }
        for v in (0..n).rev() {
            // F(v) → F(v+1) … → B(last) → … ; or F(v) → B(v).
            tail[F][v] = fd
                + if v + 1 < n {
                    (hop_next[v] + tail[F][v + 1]).max(tail[B][v])
                } else {
                    tail[B][v]
                };
        }
        Self {
            p,
            m,
            n,
            split: family.split(),
            memory,
            t,
            device,
            chunk,
            hop_next,
            done: vec![[0; 3]; n],
            free: vec![0; p],
            blocked: vec![0; p],
            declines: family.chunks() > 1,
            fin: [
                vec![vec![0; m]; n],
                vec![vec![0; m]; n],
                vec![vec![0; m]; n],
            ],
            order: vec![Vec::new(); p],
            tail,
            best: None,
            nodes: 0,
            budget,
            cut: false,
            seen: HashMap::new(),
            stored: 0,
            root_bound: 0,
        }
    }

    /// Starts from `seed`'s orders, timed as this search times them, if it is a schedule of
    /// the family's shape within the memory (anything else is ignored).
    fn seed(&mut self, family: Family, seed: &Schedule) {
        if Family::of(seed.kind, seed.chunks) != Some(family)
            || seed.stages != self.p
            || seed.microbatches != self.m
        {
            return;
        }
        let orders: Orders = (0..self.p)
            .map(|stage| {
                seed.ops[stage]
                    .iter()
                    .filter(|op| op.kind.is_compute())
                    .map(|op| {
                        let k = match op.kind {
                            OpKind::Forward => F,
                            OpKind::Backward => B,
                            _ => W,
                        };
                        (k, seed.virtual_stage(stage, op.chunk), op.microbatch)
                    })
                    .collect()
            })
            .collect();
        if let Some(span) = self.time(&orders) {
            self.best = Some((span, orders));
        }
    }

    /// The makespan of fixed per-device orders, each op as early as its inputs and its device
    /// allow, under the memory; `None` where they are not a complete schedule of this search's
    /// shape or wait on each other forever.
    fn time(&mut self, orders: &Orders) -> Option<u64> {
        let total: usize = orders.iter().map(Vec::len).sum();
        if total != self.kinds().len() * self.n * self.m {
            return None;
        }
        let mut next = vec![0usize; self.p];
        let mut makespan = 0;
        let mut left = total;
        while left > 0 {
            let mut moved = false;
            for d in 0..self.p {
                let Some(&(k, v, j)) = orders[d].get(next[d]) else {
                    continue;
                };
                let ready = (self.device.get(v) == Some(&d) && self.done[v][k] == j)
                    .then(|| self.ready(v, k))
                    .flatten();
                if let Some(start) = ready {
                    let finish = self.place(d, k, v, start).0;
                    makespan = makespan.max(finish);
                    next[d] += 1;
                    left -= 1;
                    moved = true;
                }
            }
            if !moved {
                break;
            }
        }
        // Back to the empty state the search starts from.
        self.done.iter_mut().for_each(|d| *d = [0; 3]);
        self.free.iter_mut().for_each(|f| *f = 0);
        (left == 0).then_some(makespan)
    }

    /// Runs the next op of kind `k` of virtual stage `v` on device `d` from `start`: its
    /// finish, and what [`Self::unplace`] needs to take it back.
    fn place(&mut self, d: usize, k: usize, v: usize, start: u64) -> (u64, (u64, u64)) {
        let j = self.done[v][k];
        let finish = start + self.t.dur[k];
        let undo = (self.free[d], self.fin[k][v][j]);
        self.free[d] = finish;
        self.fin[k][v][j] = finish;
        self.done[v][k] += 1;
        (finish, undo)
    }

    fn unplace(&mut self, d: usize, k: usize, v: usize, (free, fin): (u64, u64)) {
        self.done[v][k] -= 1;
        let j = self.done[v][k];
        self.fin[k][v][j] = fin;
        self.free[d] = free;
    }

    /// The op kinds each virtual stage runs.
    fn kinds(&self) -> &'static [usize] {
        if self.split { &[F, B, W] } else { &[F, B] }
    }

    /// Activations device `d` holds: its Fs whose W (whole B) has not run.
    fn held(&self, d: usize) -> usize {
        let last = if self.split { W } else { B };
        (0..self.n)
            .filter(|&v| self.device[v] == d)
            .map(|v| self.done[v][F] - self.done[v][last])
            .sum()
    }

    /// When the next op of kind `k` of virtual stage `v` could start, if it may start now.
    fn ready(&self, v: usize, k: usize) -> Option<u64> {
        let j = self.done[v][k];
        if j >= self.m {
            return None;
        }
        let at = match k {
            F => {
                let d = self.device[v];
                if self.held(d) >= self.memory || self.blocked[d] & (1 << self.chunk[v]) != 0 {
                    return None;
                }
                if v == 0 {
                    0
                } else if self.done[v - 1][F] > j {
                    self.fin[F][v - 1][j] + self.hop_next[v - 1]
                } else {
                    return None;
                }
            }
            B => {
                if self.done[v][F] <= j {
                    return None;
                }
                let own = self.fin[F][v][j];
                if v + 1 == self.n {
                    own
                } else if self.done[v + 1][B] > j {
                    own.max(self.fin[B][v + 1][j] + self.hop_next[v])
                } else {
                    return None;
                }
            }
            _ => {
                if self.done[v][B] <= j {
                    return None;
                }
                self.fin[B][v][j]
            }
        };
        Some(at.max(self.free[self.device[v]]))
    }

    /// A lower bound on the makespan of any completion of this state.
    // Indexes several `[kind][stage][mb]` arrays at once: ranges read plainer than zips.
    #[allow(clippy::needless_range_loop)]
    fn bound(&self, makespan: u64) -> u64 {
        let (n, m) = (self.n, self.m);
        let mut lb = makespan;
        let free = |v: usize| self.free[self.device[v]];
        // Earliest finishes of every unscheduled op, ignoring the other ops of its device
        // except through the device's free time: F in virtual-stage order, B in reverse, W
        // after B.
        let mut est = [
            vec![vec![0u64; m]; n],
            vec![vec![0u64; m]; n],
            vec![vec![0u64; m]; n],
        ];
        for v in 0..n {
            for j in 0..m {
                est[F][v][j] = if j < self.done[v][F] {
                    self.fin[F][v][j]
                } else {
                    let pred = if v == 0 {
                        0
                    } else {
                        est[F][v - 1][j] + self.hop_next[v - 1]
                    };
                    pred.max(free(v)) + self.t.dur[F]
                };
            }
        }
        for v in (0..n).rev() {
            for j in 0..m {
                est[B][v][j] = if j < self.done[v][B] {
                    self.fin[B][v][j]
                } else {
                    let after = if v + 1 == n {
                        0
                    } else {
                        est[B][v + 1][j] + self.hop_next[v]
                    };
                    after.max(est[F][v][j]).max(free(v)) + self.t.dur[B]
                };
                est[W][v][j] = if !self.split {
                    est[B][v][j]
                } else if j < self.done[v][W] {
                    self.fin[W][v][j]
                } else {
                    est[B][v][j].max(free(v)) + self.t.dur[W]
                };
                lb = lb.max(est[W][v][j]);
            }
        }
        // est holds finish times here: the tail after each op's finish bounds the end.
        for v in 0..n {
            for k in [F, B] {
                if let Some(j) = (self.done[v][k]..m).next() {
                    let start = est[k][v][j] - self.t.dur[k];
                    lb = lb.max(start + self.tail[k][v]);
                }
            }
        }
        // Each device's remaining work, from its first possible start.
        for d in 0..self.p {
            let (mut work, mut first) = (0u64, None::<u64>);
            for v in (0..n).filter(|&v| self.device[v] == d) {
                for &k in self.kinds() {
                    let left = m - self.done[v][k];
                    work += left as u64 * self.t.dur[k];
                    if left > 0 {
                        let start = est[k][v][self.done[v][k]] - self.t.dur[k];
                        first = Some(first.map_or(start, |f: u64| f.min(start)));
                    }
                }
            }
            let first = first.unwrap_or(self.free[d]);
            lb = lb.max(first.max(self.free[d]) + work);
        }
        lb
    }

    /// The state's times that its future depends on, and the state's key.
    fn signature(&self, makespan: u64) -> (Vec<u8>, Vec<u64>) {
        let key: Vec<u8> = self
            .done
            .iter()
            .flat_map(|d| d.iter().map(|&n| n as u8))
            .chain(self.blocked.iter().copied())
            .collect();
        let mut times = self.free.clone();
        times.push(makespan);
        for v in 0..self.n {
            let d = self.done[v];
            for j in 0..d[F] {
                let needed = (v + 1 < self.n && j >= self.done[v + 1][F]) || j >= d[B];
                if needed {
                    times.push(self.fin[F][v][j]);
                }
            }
            for j in 0..d[B] {
                let needed = (v > 0 && j >= self.done[v - 1][B]) || (self.split && j >= d[W]);
                if needed {
                    times.push(self.fin[B][v][j]);
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
        self.root_bound = self.bound(0);
        self.dfs(0, 0);
    }

    fn dfs(&mut self, scheduled: usize, makespan: u64) {
        self.nodes += 1;
        // Past the budget, stop once there is a schedule to give (the first dive finds one).
        if self.nodes > self.budget && self.best.is_some() {
            self.cut = true;
            return;
        }
        if scheduled == self.kinds().len() * self.n * self.m {
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
        // Giffler–Thompson: the op that could finish first fixes the device.
        let mut first: Option<(u64, usize, usize, usize)> = None;
        for v in 0..self.n {
            for &k in self.kinds() {
                if let Some(start) = self.ready(v, k) {
                    let end = start + self.t.dur[k];
                    if first.is_none_or(|(e, ..)| end < e) {
                        first = Some((end, self.device[v], k, v));
                    }
                }
            }
        }
        let Some((end, d, first_kind, first_v)) = first else {
            // Nothing may start: the memory limit holds every device (no W can run).
            return;
        };
        // B first: it is on the critical path; then W, which frees memory; then F.
        for k in [B, W, F] {
            if k == W && !self.split {
                continue;
            }
            for v in 0..self.n {
                if self.device[v] != d {
                    continue;
                }
                let Some(start) = self.ready(v, k) else {
                    continue;
                };
                if start >= end {
                    continue;
                }
                let j = self.done[v][k];
                let (finish, undo) = self.place(d, k, v, start);
                let blocked = std::mem::take(&mut self.blocked[d]);
                self.order[d].push((k, v, j));
                self.dfs(scheduled + 1, makespan.max(finish));
                self.order[d].pop();
                self.blocked[d] = blocked;
                self.unplace(d, k, v, undo);
            }
        }
        // Under a memory limit the active schedules need not hold an optimal one, nor any: a
        // device with two chunks that starts every F it can may fill its memory with one arm's
        // activations while the other arm's F, still on its way, needs room (the V's return).
        // So the device may also decline that F: it runs another op first, whenever one is
        // ready, and every schedule stays in the tree.
        if self.declines && first_kind == F {
            let bit = 1 << self.chunk[first_v];
            self.blocked[d] |= bit;
            self.dfs(scheduled, makespan);
            self.blocked[d] &= !bit;
        }
    }
}

#[cfg(test)]
mod tests;
