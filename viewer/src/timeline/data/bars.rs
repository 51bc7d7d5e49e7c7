//! A sub-row's events as bars to paint: [`RowIndex`], a sub-row's events with running sums of
//! busy time and of kind changes, and the per-pixel bars read from it ([`Bar`], [`bars`],
//! [`bars_by_row`]). An event at least a pixel wide is a bar of its own; narrower ones are
//! summed per pixel column by binary search and subtraction, so a frame costs O(pixels × log
//! events) however many events are in view.

use gangway::trace::Event;

use super::kind::BarKind;
use crate::timeline::view::TimeView;

/// The events of one sub-row, for per-pixel sums: a row's events never overlap, so they are in
/// start order and in end order at once.
#[derive(Debug, Clone)]
pub(super) struct RowIndex {
    /// Indices into the track's events, ascending.
    pub(super) events: Vec<u32>,
    /// Start and (clamped) end of each, contiguous for the binary searches of a frame.
    pub(super) starts: Vec<u64>,
    pub(super) ends: Vec<u64>,
    /// Running busy time: `busy[k] - busy[m]` is the summed duration of the row's events `m..k`
    /// (one longer than `events`; forgetting drops a prefix, so only differences mean anything).
    pub(super) busy: Vec<u64>,
    /// Running kind changes: `changes[k] == changes[m]` (m < k) when the row's events `m..=k`
    /// are all of one kind.
    changes: Vec<u32>,
}

impl RowIndex {
    pub(super) fn new() -> Self {
        Self {
            events: Vec::new(),
            starts: Vec::new(),
            ends: Vec::new(),
            busy: vec![0],
            changes: Vec::new(),
        }
    }

    pub(super) fn push(&mut self, index: u32, e: &Event, kind_changed: bool) {
        let busy = self.busy.last().copied().unwrap_or(0);
        let changes = self.changes.last().copied().unwrap_or(0);
        self.events.push(index);
        self.starts.push(e.start_ns);
        self.ends.push(e.clamped_end_ns());
        self.busy.push(busy.saturating_add(e.duration_ns()));
        self.changes.push(changes + u32::from(kind_changed));
    }

    /// Drops the entries of the first `cut` events of the track (renumbering the rest).
    pub(super) fn forget(&mut self, cut: u32) {
        let gone = self.events.partition_point(|&i| i < cut);
        self.events.drain(..gone);
        self.starts.drain(..gone);
        self.ends.drain(..gone);
        self.busy.drain(..gone);
        self.changes.drain(..gone);
        for i in &mut self.events {
            *i -= cut;
        }
    }
}

/// Busy-fraction steps: neighbouring pixel columns whose busy fractions round to the same step
/// (and whose kinds agree) merge into one bar.
const DENSITY_LEVELS: f64 = 10.0;

/// A bar to paint: one event at least a pixel wide, or a run of pixel columns holding narrower
/// events, painted by how busy they are.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bar {
    pub x0: f32,
    pub x1: f32,
    /// The events' kind, or [`BarKind::Kernel`] where kinds mix.
    pub kind: BarKind,
    /// Events in this bar (1 for a single event).
    pub merged: usize,
    /// Index (into the slice given to [`bars`], or [`Track::events`]) of the first event.
    ///
    /// [`Track::events`]: super::Track::events
    pub first: usize,
    /// Summed duration of the bar's events.
    pub busy_ns: u64,
    /// A run of whole pixel columns of sub-pixel events (painted with
    /// [`Bar::busy_fraction`] as opacity), not one event drawn to scale.
    pub dense: bool,
}

impl Bar {
    /// How busy the bar's pixels are, in `[0, 1]`: its events' time over the time it spans at
    /// `ns_per_px` (at least one pixel's worth). 1 for an event drawn to scale; 0.2 for a
    /// zoomed-out stretch of a trace that is busy a fifth of the time.
    pub fn busy_fraction(&self, ns_per_px: f64) -> f32 {
        let span_ns = f64::from((self.x1 - self.x0).max(1.0)) * ns_per_px;
        if span_ns > 0.0 {
            (self.busy_ns as f64 / span_ns).clamp(0.0, 1.0) as f32
        } else {
            1.0
        }
    }
}

/// The bars of `events` (sorted by start, none overlapping: one sub-row) under `view`, culled
/// to `0..width`: events at least a pixel wide get a bar each; narrower ones are summed per
/// pixel column, and neighbouring columns of equal busy fraction merge, so a frame paints at
/// most about one bar per pixel.
pub fn bars(events: &[Event], width: f32, view: &TimeView) -> Vec<Bar> {
    bars_by_row(events, &[], width, view)
        .into_iter()
        .next()
        .unwrap_or_default()
}

/// [`bars`] per sub-row: `rows[i]` is the sub-row of `events[i]` (missing entries count as
/// row 0); bars merge only with neighbours on their own row. Indexes `events` in one pass, then
/// as [`Track::bars`] (which keeps that index between frames).
///
/// [`Track::bars`]: super::Track::bars
pub fn bars_by_row(events: &[Event], rows: &[u32], width: f32, view: &TimeView) -> Vec<Vec<Bar>> {
    let kinds: Vec<BarKind> = events.iter().map(BarKind::of).collect();
    let mut index = vec![RowIndex::new()];
    for (i, (e, &kind)) in events.iter().zip(&kinds).enumerate() {
        let row = rows.get(i).map_or(0, |&r| r as usize);
        if row >= index.len() {
            index.resize_with(row + 1, RowIndex::new);
        }
        if let Some(r) = index.get_mut(row) {
            let changed = r
                .events
                .last()
                .is_some_and(|&prev| kinds.get(prev as usize) != Some(&kind));
            r.push(u32::try_from(i).unwrap_or(u32::MAX), e, changed);
        }
    }
    index
        .iter()
        .map(|row| {
            let mut out = Vec::new();
            row_bars(&kinds, row, view, width, &mut out);
            out
        })
        .collect()
}

/// The first `k` in `from..n` where `holds(k)` is false (it holds on a prefix), searched
/// outwards from `from`: O(log(k - from)).
fn gallop(from: usize, n: usize, holds: impl Fn(usize) -> bool) -> usize {
    let mut lo = from;
    let mut step = 1usize;
    let mut hi = n;
    while lo < n {
        let probe = lo.saturating_add(step - 1).min(n - 1);
        if holds(probe) {
            lo = probe + 1;
            step = step.saturating_mul(2);
        } else {
            hi = probe;
            break;
        }
    }
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if holds(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// The bars of one sub-row: walks its events from the first visible one; an event at least a
/// pixel wide is a bar; otherwise every event starting in the same pixel column is found by a
/// binary search and summed from the running sums, so each column costs O(log n).
pub(super) fn row_bars(
    kinds: &[BarKind],
    row: &RowIndex,
    view: &TimeView,
    width: f32,
    out: &mut Vec<Bar>,
) {
    let RowIndex {
        events: idx,
        starts,
        ends,
        busy,
        changes,
    } = row;
    let n = idx.len();
    if starts.len() != n || ends.len() != n || busy.len() != n + 1 || changes.len() != n {
        return;
    }
    let (origin, ns_per_px) = (view.start_ns, view.ns_per_px);
    let px = |ns: u64| (ns as f64 - origin) / ns_per_px;
    let kind = |k: usize| {
        kinds
            .get(idx[k] as usize)
            .copied()
            .unwrap_or(BarKind::Kernel)
    };
    let width64 = f64::from(width);
    // Ends ascend along a row: the first visible event is a binary search away.
    let mut i = ends.partition_point(|&e| px(e) < 0.0);
    // The busy step of the last bar, while it is a dense run.
    let mut run: Option<i64> = None;
    while i < n {
        let (x0, x1) = (px(starts[i]), px(ends[i]));
        if x0 >= width64 {
            break;
        }
        if x1 - x0 >= 1.0 {
            out.push(Bar {
                x0: x0.max(-1.0) as f32,
                x1: x1.min(width64 + 1.0) as f32,
                kind: kind(i),
                merged: 1,
                first: idx[i] as usize,
                busy_ns: busy[i + 1].saturating_sub(busy[i]),
                dense: false,
            });
            run = None;
            i += 1;
            continue;
        }
        // Every event starting in this pixel column; all but the last end in it too (a row's
        // events never overlap), and the last, if wide, gets a bar of its own.
        let col = x0.floor();
        let mut j = gallop(i + 1, n, |k| px(starts[k]) < col + 1.0);
        if j > i + 1 && px(ends[j - 1]) - px(starts[j - 1]) >= 1.0 {
            j -= 1;
        }
        let busy_ns = busy[j].saturating_sub(busy[i]);
        let kind = if changes[j - 1] == changes[i] {
            kind(i)
        } else {
            BarKind::Kernel
        };
        let step = ((busy_ns as f64 / ns_per_px).min(1.0) * DENSITY_LEVELS).round() as i64;
        let (cx0, cx1) = (col.max(-1.0) as f32, (col + 1.0).min(width64 + 1.0) as f32);
        match out.last_mut() {
            Some(last) if run == Some(step) && last.kind == kind && last.x1 >= cx0 => {
                last.x1 = cx1;
                last.merged += j - i;
                last.busy_ns = last.busy_ns.saturating_add(busy_ns);
            }
            _ => {
                out.push(Bar {
                    x0: cx0,
                    x1: cx1,
                    kind,
                    merged: j - i,
                    first: idx[i] as usize,
                    busy_ns,
                    dense: true,
                });
                run = Some(step);
            }
        }
        i = j;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::timeline::data::{TimelineData, kernel};

    #[test]
    fn zoomed_out_bars_carry_busy_fraction_not_solid_coverage() {
        // 1 µs kernels every 5 µs: 20 % busy. 200k of them over 1 s, in 1000 px: 1 ms a pixel,
        // 200 events a pixel.
        let events: Vec<Event> = (0..200_000u64)
            .map(|i| kernel(0, "k", i * 5_000, i * 5_000 + 1_000))
            .collect();
        let d = TimelineData::from_events(events.clone());
        let width = 1_000.0;
        let view = TimeView {
            start_ns: 0.0,
            ns_per_px: 1e6,
        };
        let rows = d.tracks()[0].bars(&view, width);
        assert_eq!(rows.len(), 1);
        let bars = &rows[0];
        assert!(bars.iter().all(|b| b.dense));
        assert_eq!(bars.iter().map(|b| b.merged).sum::<usize>(), 200_000);
        assert_eq!(bars.iter().map(|b| b.busy_ns).sum::<u64>(), 200_000_000);
        // One even density: one bar, not a thousand.
        assert!(bars.len() <= 3, "{} bars", bars.len());
        for b in bars {
            let f = b.busy_fraction(view.ns_per_px);
            assert!((f - 0.2).abs() < 0.01, "{b:?}: {f}");
        }
        // The slice path gives the same bars.
        assert_eq!(&bars_by_row(&events, &[], width, &view)[0], bars);

        // Zoomed in to 10 ns a pixel, each kernel is a solid bar of its own.
        let near = TimeView {
            start_ns: 0.0,
            ns_per_px: 10.0,
        };
        let bars = &d.tracks()[0].bars(&near, width)[0];
        assert_eq!(bars.len(), 2);
        assert!(
            bars.iter()
                .all(|b| !b.dense && b.merged == 1 && b.busy_fraction(10.0) == 1.0)
        );

        // Half the trace at 60 % busy: the two halves paint at different opacities.
        let mixed = TimelineData::from_events((0..2_000u64).map(|i| {
            let busy = if i < 1_000 { 1_000 } else { 3_000 };
            kernel(0, "k", i * 5_000, i * 5_000 + busy)
        }));
        let view = TimeView {
            start_ns: 0.0,
            ns_per_px: 100_000.0,
        };
        let bars = &mixed.tracks()[0].bars(&view, 100.0)[0];
        let fractions: Vec<f32> = bars
            .iter()
            .map(|b| (b.busy_fraction(view.ns_per_px) * 100.0).round() / 100.0)
            .collect();
        assert_eq!(fractions, [0.2, 0.6], "{bars:?}");
    }

    #[test]
    fn mixed_kinds_merge_as_kernel_and_wide_events_stand_alone() {
        // F and B alternate at 10 ns; then a long W.
        let mut events: Vec<Event> = (0..100u64)
            .map(|i| kernel(0, if i % 2 == 0 { "F" } else { "B" }, i * 10, i * 10 + 5))
            .collect();
        events.push(kernel(0, "W", 1_000, 5_000));
        let d = TimelineData::from_events(events.clone());
        let view = TimeView {
            start_ns: 0.0,
            ns_per_px: 100.0,
        };
        let bars = &d.tracks()[0].bars(&view, 100.0)[0];
        assert_eq!(bars.len(), 2, "{bars:?}");
        assert_eq!(
            (bars[0].kind, bars[0].dense, bars[0].merged),
            (BarKind::Kernel, true, 100)
        );
        assert!((bars[0].busy_fraction(100.0) - 0.5).abs() < 1e-6);
        assert_eq!(
            (bars[1].kind, bars[1].dense, bars[1].first),
            (BarKind::WeightGrad, false, 100)
        );
        assert_eq!((bars[1].x0, bars[1].x1), (10.0, 50.0));
        // Only F: the run keeps its kind.
        let only_f = TimelineData::from_events(events.iter().filter(|e| e.name == "F").cloned());
        let bars = &only_f.tracks()[0].bars(&view, 100.0)[0];
        assert_eq!(bars[0].kind, BarKind::Forward);
        assert_eq!(
            &bars_by_row(
                only_f.tracks()[0].events(),
                only_f.tracks()[0].rows(),
                100.0,
                &view
            )[0],
            bars
        );
    }

    #[test]
    fn gallop_finds_the_end_of_a_prefix() {
        for n in 0..40usize {
            for from in 0..=n {
                for cut in from..=n {
                    assert_eq!(
                        gallop(from, n, |k| k < cut),
                        cut,
                        "n {n} from {from} cut {cut}"
                    );
                }
            }
        }
    }
}
