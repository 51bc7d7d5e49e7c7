//! V-Half and V-Min, built as "Pipeline Parallelism with Controllable Memory" (Qi et al. 2024)
//! builds them: a building block gives each stage the slots (one chunk op each) of its F on
//! chunk 0, F on chunk 1, B on chunk 1 and B on chunk 0 for microbatch 0, microbatch `i` taking
//! the same slots plus `6i`; Ws go in the free slots after their Bs; then the warm-up and
//! cool-down are "squeezed": each op of those phases moves to the earliest free slot its inputs
//! allow that keeps the stage within the block's memory, twice (with the Ws, then without them),
//! and every stage runs its ops in slot order. The block offsets, the W placement and the squeeze
//! follow the authors' reference (`stable_pattern_v_half` / `_v_min`, `put_w`, `reorder` and
//! `eager_execution_time` of their V-Half/V-Min scheduler), and at F = B = W give the makespans it
//! gives (tests in `orders.rs`).

use super::schedule_kind::{OpKind, ScheduleKind};
use super::step::{ComputeOrder, Step};

/// Per op type, its slots by microbatch: 0 F chunk 0, 1 F chunk 1, 2 B chunk 1, 3 B chunk 0,
/// then the Ws: one list (4), or split by chunk (4: chunk 1's, 5: chunk 0's).
type Slots = Vec<Vec<usize>>;

/// Each stage's compute order for `kind` (V-Half or V-Min) at `p` stages and `m` microbatches.
pub(crate) fn orders(kind: ScheduleKind, p: usize, m: usize) -> Vec<ComputeOrder> {
    let block: Vec<Slots> = (0..p)
        .map(|s| {
            offsets(kind, p, s)
                .iter()
                .map(|&x| (0..m).map(|mb| x + 6 * mb).collect())
                .collect()
        })
        .collect();
    let first = squeeze(p, block, true);
    let second = squeeze(p, first.into_iter().map(without_w).collect(), false);
    second
        .into_iter()
        .map(|stage| {
            let mut stage = without_w(stage);
            put_w(&mut stage, true);
            let mut ops: Vec<(usize, usize, usize)> = stage
                .iter()
                .enumerate()
                .flat_map(|(t, slots)| slots.iter().enumerate().map(move |(mb, &x)| (x, t, mb)))
                .collect();
            ops.sort_unstable();
            ops.into_iter().map(|(_, t, mb)| step(t, mb)).collect()
        })
        .collect()
}

/// The authors' building-block offsets of stage `s`'s four F and B ops.
fn offsets(kind: ScheduleKind, p: usize, s: usize) -> [usize; 4] {
    match kind {
        ScheduleKind::VMin => {
            let gap = if p.is_multiple_of(3) { 2 } else { 0 };
            [s, 2 * p - s - 1, 2 * p + gap + s, 4 * p + gap - s - 1]
        }
        _ => {
            let gap = if p.is_multiple_of(2) { 3 } else { 0 };
            [
                2 * s,
                3 * p - s - 2,
                3 * p + gap + 2 * s - 1,
                6 * p + gap - s - 2,
            ]
        }
    }
}

fn step(t: usize, mb: usize) -> Step {
    let (kind, chunk) = match t {
        0 => (OpKind::Forward, 0),
        1 => (OpKind::Forward, 1),
        2 => (OpKind::Backward, 1),
        3 => (OpKind::Backward, 0),
        4 => (OpKind::WeightGrad, 1),
        _ => (OpKind::WeightGrad, 0),
    };
    Step::new(kind, mb, chunk)
}

/// The last slot any op of a stage takes.
fn last_slot(stage: &[Vec<usize>]) -> usize {
    stage
        .iter()
        .filter_map(|l| l.last())
        .copied()
        .max()
        .unwrap_or(0)
}

fn without_w(mut stage: Slots) -> Slots {
    stage.truncate(4);
    stage
}

/// The next op of a stage's lists in slot order (ties by type): (slot, type).
fn next_op(stage: &[Vec<usize>], at: &[usize]) -> Option<(usize, usize)> {
    (0..stage.len())
        .filter_map(|t| stage[t].get(at[t]).map(|&x| (x, t)))
        .min()
}

/// Puts each B's W in the first slot left free after it (chunk 1's first when `split`, one
/// list otherwise), the rest after the last op.
fn put_w(stage: &mut Slots, split: bool) {
    let bound = last_slot(stage);
    stage.push(Vec::new());
    if split {
        stage.push(Vec::new());
    }
    let mut owed = [0usize; 2];
    let mut at = [0usize; 4];
    for i in 0..=bound {
        match next_op(&stage[..4], &at) {
            Some((x, t)) if x == i => {
                at[t] += 1;
                if t >= 2 {
                    owed[if split { t - 2 } else { 0 }] += 1;
                }
            }
            _ => {
                if let Some(w) = (0..2).find(|&w| owed[w] > 0) {
                    stage[4 + w].push(i);
                    owed[w] -= 1;
                }
            }
        }
    }
    let mut i = bound;
    for w in 0..2 {
        while owed[w] > 0 {
            i += 1;
            stage[4 + w].push(i);
            owed[w] -= 1;
        }
    }
}

/// The most activations a stage holds over its slots: an F adds one, a W frees one (without W
/// lists, the first free slot after a B does).
fn memory(stage: &Slots) -> i64 {
    let has_w = stage.len() > 4;
    let bound = last_slot(stage);
    let mut at = vec![0usize; stage.len()];
    let (mut cur, mut most, mut owed) = (0i64, 0i64, 0usize);
    for i in 0..=bound {
        match next_op(stage, &at) {
            Some((x, t)) if x == i => {
                at[t] += 1;
                cur += [1, 1, 0, 0, -1, -1][t];
                if (2..4).contains(&t) {
                    owed += 1;
                }
            }
            _ if !has_w && owed > 0 => {
                cur -= 1;
                owed -= 1;
            }
            _ => {}
        }
        most = most.max(cur);
    }
    most
}

/// The ops of every stage in global slot order: (slot, stage, type, microbatch).
fn global_order(stages: &[Slots]) -> Vec<(usize, usize, usize, usize)> {
    let mut ops: Vec<(usize, usize, usize, usize)> = stages
        .iter()
        .enumerate()
        .flat_map(|(s, stage)| {
            stage.iter().enumerate().flat_map(move |(t, slots)| {
                slots.iter().enumerate().map(move |(mb, &x)| (x, s, t, mb))
            })
        })
        .collect();
    ops.sort_unstable();
    ops
}

/// The slot an op's inputs are ready after (`None`: from the start).
fn ready_after(stages: &[Slots], s: usize, t: usize, mb: usize) -> Option<usize> {
    let p = stages.len();
    let mut deps: Vec<usize> = Vec::new();
    if (t == 0 || t == 2) && s > 0 {
        deps.push(stages[s - 1][t][mb]);
    }
    if (t == 1 || t == 3) && s + 1 < p {
        deps.push(stages[s + 1][t][mb]);
    }
    if (1..4).contains(&t) {
        deps.push(stages[s][t - 1][mb]);
    }
    if t == 4 {
        let mut bs: Vec<usize> = stages[s][2].iter().chain(&stages[s][3]).copied().collect();
        bs.sort_unstable();
        deps.push(bs[mb]);
    }
    if mb > 0 {
        deps.push(stages[s][t][mb - 1]);
    }
    deps.into_iter().max()
}

/// One squeeze pass (with the Ws placed first when `with_w`): outside the steady phase (from
/// stage 0's first B on chunk 0 to the last microbatch's first F), each op moves to the earliest
/// free slot after its inputs that keeps its stage within the memory the block had; then every
/// op is timed as soon as it can run in that order at unit costs, and those start times are the
/// new slots.
fn squeeze(p: usize, mut stages: Vec<Slots>, with_w: bool) -> Vec<Slots> {
    if with_w {
        stages.iter_mut().for_each(|s| put_w(s, false));
    }
    let budget = stages.iter().map(memory).max().unwrap_or(0);
    let mut taken: Vec<Vec<bool>> = stages
        .iter()
        .map(|st| vec![false; last_slot(st) + 1])
        .collect();
    let last_mb = stages[0][0].len().saturating_sub(1);
    let types = stages[0].len();
    let mut phase = 0;
    // Each (stage, type) list's next op; the earliest head goes next, in slot order as it
    // stands when reached (moved ops only move earlier, so the heads' order holds).
    let mut at = vec![vec![0usize; types]; p];
    loop {
        let head = (0..p)
            .flat_map(|s| (0..types).map(move |t| (s, t)))
            .filter_map(|(s, t)| stages[s][t].get(at[s][t]).map(|&x| (x, s, t, at[s][t])))
            .min();
        let Some((was, s, t, mb)) = head else { break };
        at[s][t] += 1;
        if t == 3 && s == 0 && phase == 0 {
            phase = 1;
        }
        let fixed = match phase {
            1 => {
                if t == 0 && mb == last_mb {
                    phase = 2;
                }
                true
            }
            0 => !with_w,
            _ => false,
        };
        if !fixed {
            let from = ready_after(&stages, s, t, mb).map_or(0, |x| x + 1);
            let mut placed = false;
            for slot in (from..was).filter(|&x| !taken[s][x]) {
                stages[s][t][mb] = slot;
                if memory(&stages[s]) <= budget {
                    placed = true;
                    break;
                }
            }
            if !placed {
                stages[s][t][mb] = was;
            }
        }
        taken[s][stages[s][t][mb]] = true;
    }
    if !with_w {
        stages.iter_mut().for_each(|s| put_w(s, false));
    }
    unit_times(stages)
}

/// Each op's start when every stage runs its ops in slot order, each as soon as its inputs are
/// in, at one slot per op: the slots the next pass works on.
fn unit_times(stages: Vec<Slots>) -> Vec<Slots> {
    let p = stages.len();
    let mut end: Vec<Slots> = stages
        .iter()
        .map(|st| st.iter().map(|l| vec![0; l.len()]).collect())
        .collect();
    let mut last: Vec<Option<(usize, usize)>> = vec![None; p];
    for (_, s, t, mb) in global_order(&stages) {
        let mut ready = 0;
        if (t == 0 || t == 2) && s > 0 {
            ready = ready.max(end[s - 1][t][mb]);
        }
        if (t == 1 || t == 3) && s + 1 < p {
            ready = ready.max(end[s + 1][t][mb]);
        }
        if (1..4).contains(&t) {
            ready = ready.max(end[s][t - 1][mb]);
        }
        if mb > 0 {
            ready = ready.max(end[s][t][mb - 1]);
        }
        if let Some((lt, lmb)) = last[s] {
            ready = ready.max(end[s][lt][lmb]);
        }
        end[s][t][mb] = ready + 1;
        last[s] = Some((t, mb));
    }
    end.into_iter()
        .map(|st| {
            st.into_iter()
                .map(|l| l.into_iter().map(|e| e - 1).collect())
                .collect()
        })
        .collect()
}
