//! Flow binding: each `s`/`t`/`f` point re-attaches to the innermost slice of its thread that
//! covers it, in one sweep in time per thread.

use super::ThreadIx;
use super::reader::{Fields, Scalar};
use crate::trace::event::{Event, Flow};
use std::collections::{BinaryHeap, HashMap};

/// A flow's id: a number, or a string (`"0x1f"` in hex, decimal, or any other text hashed).
pub(super) fn flow_id(ev: &Fields<'_>) -> Option<u64> {
    match ev.id.as_ref().or(ev.bind_id.as_ref())? {
        Scalar::U64(n) => Some(*n),
        Scalar::I64(n) => Some(*n as u64),
        Scalar::Str(s) => Some(
            s.strip_prefix("0x")
                .and_then(|h| u64::from_str_radix(h, 16).ok())
                .or_else(|| s.parse().ok())
                .unwrap_or_else(|| fnv1a(s.as_bytes())),
        ),
        _ => None,
    }
}

/// FNV-1a: a stable 64-bit hash of a string id.
pub(super) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Binds each flow point, in file order, to the innermost slice of its thread that covers it
/// (the latest to start; of slices starting together, the shorter, as they nest; of equal
/// ones, the later in the file). A slice's first flow is also its [`Event::flow`]. `slices_of`
/// holds each thread's slices as indices into `events`, which is in file order.
///
/// One sweep in time per thread, O(n log n): scanning the thread's slices for every point took
/// 8 minutes (debug build) to open a 1M-event trace with 100k flow points.
///
/// Returns every binding, as (index into `events`, flow), in file order, and how many points
/// no slice covers.
pub(super) fn bind_flows(
    events: &mut [Event],
    slices_of: &mut [Vec<usize>],
    flow_points: &[(ThreadIx, u64, Flow)],
) -> (Vec<(usize, Flow)>, usize) {
    let mut points_of: HashMap<ThreadIx, Vec<usize>> = HashMap::new();
    for (p, (thread, ..)) in flow_points.iter().enumerate() {
        points_of.entry(*thread).or_default().push(p);
    }
    let mut targets = vec![None; flow_points.len()];
    for (thread, mut points) in points_of {
        let Some(slices) = slices_of.get_mut(thread as usize) else {
            continue;
        };
        slices.sort_by_key(|&e| events[e].start_ns);
        points.sort_by_key(|&p| flow_points[p].1);
        // The slices started by the point's time, by (start, shorter, index in `events`): the
        // innermost on top. One that ended before a point ended before
        // every later point too, so it is dropped for good once it reaches the top.
        let mut open = BinaryHeap::new();
        let mut next = 0;
        for p in points {
            let ts = flow_points[p].1;
            while let Some(&e) = slices.get(next)
                && events[e].start_ns <= ts
            {
                let end = std::cmp::Reverse(events[e].clamped_end_ns());
                open.push((events[e].start_ns, end, e));
                next += 1;
            }
            while let Some(&(_, _, e)) = open.peek()
                && events[e].clamped_end_ns() < ts
            {
                open.pop();
            }
            targets[p] = open.peek().map(|&(_, _, e)| e);
        }
    }
    let mut unbound = 0;
    let mut bound = Vec::with_capacity(flow_points.len());
    for ((_, _, flow), target) in flow_points.iter().zip(targets) {
        match target {
            Some(e) => {
                events[e].flow.get_or_insert(*flow);
                bound.push((e, *flow));
            }
            None => unbound += 1,
        }
    }
    (bound, unbound)
}
