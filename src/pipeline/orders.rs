//! The compute order (F, B, W) of each stage for each schedule kind; transfers are added around
//! it by `Schedule::new`. Shapes are checked before these run.

use super::schedule::{OpKind, ScheduleKind};

/// `(kind, microbatch, chunk)` in the order `stage` runs them.
pub(crate) type ComputeOrder = Vec<(OpKind, usize, usize)>;

pub(crate) fn compute_order(
    kind: ScheduleKind,
    stages: usize,
    microbatches: usize,
    chunks: usize,
    stage: usize,
) -> ComputeOrder {
    match kind {
        ScheduleKind::GPipe => gpipe(microbatches),
        ScheduleKind::OneFOneB => one_f_one_b(stages, microbatches, stage),
        ScheduleKind::Interleaved => interleaved(stages, microbatches, chunks, stage),
        ScheduleKind::ZbH1 => zb_h1(stages, microbatches, stage),
    }
}

/// All forwards, then all backwards, both in microbatch order 0..m (the backward order does not
/// change the makespan; FIFO frees activations in the order they were made).
fn gpipe(m: usize) -> ComputeOrder {
    let f = (0..m).map(|mb| (OpKind::Forward, mb, 0));
    let b = (0..m).map(|mb| (OpKind::Backward, mb, 0));
    f.chain(b).collect()
}

/// PipeDream-Flush: `min(p - s - 1, m)` warm-up forwards, then F/B pairs, then the remaining
/// backwards, so stage `s` never holds more than `min(p - s, m)` activations.
fn one_f_one_b(p: usize, m: usize, s: usize) -> ComputeOrder {
    let warmup = (p - s - 1).min(m);
    let mut order = Vec::with_capacity(2 * m);
    order.extend((0..warmup).map(|mb| (OpKind::Forward, mb, 0)));
    for k in 0..m - warmup {
        order.push((OpKind::Forward, warmup + k, 0));
        order.push((OpKind::Backward, k, 0));
    }
    order.extend((m - warmup..m).map(|mb| (OpKind::Backward, mb, 0)));
    order
}

/// Megatron-LM's `forward_backward_pipelining_with_interleaving`: the k-th forward (and k-th
/// backward, chunks reversed) walks microbatches in groups of `p` per chunk; warm-up is
/// `2(p - s - 1) + (v - 1)p` forwards, capped at `m v`. Megatron's special case of running the
/// whole batch as warm-up when `m == p` is left out: it changes nothing but memory.
fn interleaved(p: usize, m: usize, v: usize, s: usize) -> ComputeOrder {
    let total = m * v;
    let warmup = (2 * (p - s - 1) + (v - 1) * p).min(total);
    let unit = |k: usize, kind: OpKind| {
        let in_group = k % (p * v);
        let chunk = in_group / p;
        let chunk = if kind == OpKind::Forward {
            chunk
        } else {
            v - 1 - chunk
        };
        (kind, (k / (p * v)) * p + in_group % p, chunk)
    };
    let mut order = Vec::with_capacity(2 * total);
    order.extend((0..warmup).map(|k| unit(k, OpKind::Forward)));
    for k in 0..total - warmup {
        order.push(unit(warmup + k, OpKind::Forward));
        order.push(unit(k, OpKind::Backward));
    }
    order.extend((total - warmup..total).map(|k| unit(k, OpKind::Backward)));
    order
}

/// ZB-H1: 1F1B's F/B order with each W placed as late as memory allows. Stage `s` may hold `s`
/// weight gradients back (its activations stay alive until W), which keeps every stage at the
/// `p` in-flight microbatches of 1F1B's stage 0; the held-back Ws fill the cool-down bubble
/// where stage `s` waits for gradients from the stages below it.
fn zb_h1(p: usize, m: usize, s: usize) -> ComputeOrder {
    let warmup = (p - s - 1).min(m);
    let defer = s;
    let mut order = Vec::with_capacity(3 * m);
    let mut next_w = 0;
    order.extend((0..warmup).map(|mb| (OpKind::Forward, mb, 0)));
    for k in 0..m - warmup {
        order.push((OpKind::Forward, warmup + k, 0));
        order.push((OpKind::Backward, k, 0));
        if k + 1 - next_w > defer {
            order.push((OpKind::WeightGrad, next_w, 0));
            next_w += 1;
        }
    }
    for mb in m - warmup..m {
        order.push((OpKind::Backward, mb, 0));
        if next_w <= mb {
            order.push((OpKind::WeightGrad, next_w, 0));
            next_w += 1;
        }
    }
    order.extend((next_w..m).map(|mb| (OpKind::WeightGrad, mb, 0)));
    order
}
