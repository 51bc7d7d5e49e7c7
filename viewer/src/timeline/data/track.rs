//! One row of the timeline, [`Track`]: one lane of one device, its events sorted by start and
//! packed onto sub-rows (the greedy lowest-free-row assignment, [`next_row`]) as they arrive,
//! and the queries a frame makes of it: the events in a window, the bars of each sub-row, the
//! event under the pointer; and forgetting old events.

use std::ops::Range;

use gangway::trace::{Event, Lane};

use super::bars::{Bar, RowIndex, row_bars};
use super::kind::BarKind;
use crate::timeline::view::TimeView;

/// Greedy step: the lowest sub-row free at `start` (its last event ended by then), or a new
/// one. Events must come in start order.
fn next_row(
    row_last: &mut Vec<(u64, u64)>,
    index: &mut Vec<RowIndex>,
    start: u64,
    end: u64,
) -> usize {
    let row = match row_last.iter().position(|&(_, e)| e <= start) {
        Some(row) => row,
        None => {
            row_last.push((start, end));
            index.push(RowIndex::new());
            row_last.len() - 1
        }
    };
    if let Some(last) = row_last.get_mut(row) {
        *last = (start, end);
    }
    row
}

/// One row of the timeline: one lane of one device.
#[derive(Debug, Clone)]
pub struct Track {
    pub device: usize,
    pub lane: Lane,
    /// Sorted by `start_ns` (ties keep arrival order).
    pub(super) events: Vec<Event>,
    /// [`BarKind::of`] each event (parallel to `events`), so frames never look at names.
    kinds: Vec<BarKind>,
    /// Sub-row of each event (parallel to `events`); events on one sub-row never overlap.
    pub(super) rows: Vec<u32>,
    /// Per sub-row, `(start, end)` of its latest-starting event.
    row_last: Vec<(u64, u64)>,
    /// Per sub-row, its events with running sums (parallel to `row_last`).
    row_index: Vec<RowIndex>,
    /// Events were appended out of start order: sort, then reassign every row.
    unsorted: bool,
    /// Longest event, so a search for events overlapping a window knows how far back to look.
    max_duration_ns: u64,
    /// Latest end of the events kept.
    pub(super) max_end_ns: u64,
    /// Bars coloured by event name ([`BarKind::Named`]), as Perfetto colours another tool's
    /// slices, instead of by gangway's kinds.
    by_name: bool,
}

impl Track {
    pub(super) fn new(device: usize, lane: Lane, by_name: bool) -> Self {
        Self {
            by_name,
            device,
            lane,
            events: Vec::new(),
            kinds: Vec::new(),
            rows: Vec::new(),
            row_last: Vec::new(),
            row_index: Vec::new(),
            unsorted: false,
            max_duration_ns: 0,
            max_end_ns: 0,
        }
    }

    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// The sub-row of each event of [`Track::events`] (same order).
    pub fn rows(&self) -> &[u32] {
        &self.rows
    }

    /// How many sub-rows the track takes (at least 1). Every sub-row holds an event: rows left
    /// empty by [`TimelineData::forget_before`] are removed.
    ///
    /// [`TimelineData::forget_before`]: super::TimelineData::forget_before
    pub fn row_count(&self) -> usize {
        self.row_last.len().max(1)
    }

    /// Appends `e`; an event out of start order marks the track for [`Track::settle`].
    pub(super) fn insert(&mut self, e: Event) {
        self.max_duration_ns = self.max_duration_ns.max(e.duration_ns());
        self.max_end_ns = self.max_end_ns.max(e.clamped_end_ns());
        // Live events arrive nearly in order: appending is the common case.
        let in_order = !self.unsorted
            && self
                .events
                .last()
                .is_none_or(|last| last.start_ns <= e.start_ns);
        self.kinds.push(BarKind::for_event(&e, self.by_name));
        self.events.push(e);
        if in_order {
            self.index_event(self.events.len() - 1);
        } else {
            self.unsorted = true;
        }
    }

    /// Puts event `at` (the latest-starting so far) on its sub-row.
    fn index_event(&mut self, at: usize) {
        let Self {
            events,
            kinds,
            rows,
            row_last,
            row_index,
            ..
        } = self;
        let Some(e) = events.get(at) else {
            return;
        };
        let row = next_row(row_last, row_index, e.start_ns, e.clamped_end_ns());
        rows.push(u32::try_from(row).unwrap_or(u32::MAX));
        let kind = kinds.get(at).copied();
        if let Some(r) = row_index.get_mut(row) {
            let changed = r
                .events
                .last()
                .is_some_and(|&prev| kinds.get(prev as usize).copied() != kind);
            r.push(u32::try_from(at).unwrap_or(u32::MAX), e, changed);
        }
    }

    /// After out-of-order appends: sorts the events by start (stable: ties keep arrival
    /// order) and reassigns every sub-row. Once per batch, never per frame.
    pub(super) fn settle(&mut self) {
        if !self.unsorted {
            return;
        }
        self.unsorted = false;
        self.events.sort_by_key(|e| e.start_ns);
        let by_name = self.by_name;
        self.kinds = self
            .events
            .iter()
            .map(|e| BarKind::for_event(e, by_name))
            .collect();
        self.rows.clear();
        self.row_last.clear();
        self.row_index.clear();
        for at in 0..self.events.len() {
            self.index_event(at);
        }
    }

    /// The index range of the events that overlap `window` (plus, at the front, possibly a few
    /// that end just before it), found by binary search: O(log n).
    fn visible_range(&self, window: Range<u64>) -> Range<usize> {
        let from = window.start.saturating_sub(self.max_duration_ns);
        let first = self.events.partition_point(|e| e.start_ns < from);
        let last = self.events.partition_point(|e| e.start_ns < window.end);
        first..last.max(first)
    }

    /// Events that overlap `window` (plus, at the front, possibly a few that end just before
    /// it), found by binary search: O(log n + visible).
    pub fn visible(&self, window: Range<u64>) -> &[Event] {
        self.events
            .get(self.visible_range(window))
            .unwrap_or_default()
    }

    /// [`Track::visible`] with the sub-row of each of those events.
    pub fn visible_with_rows(&self, window: Range<u64>) -> (&[Event], &[u32]) {
        let range = self.visible_range(window);
        match (self.events.get(range.clone()), self.rows.get(range)) {
            (Some(events), Some(rows)) => (events, rows),
            _ => (&[], &[]),
        }
    }

    /// The bars of every sub-row under `view` across `0..width` pixels (as [`bars_by_row`],
    /// which gives the same bars): O(pixel columns × log n + wide bars), however many events
    /// are in view. `first` of each bar indexes [`Track::events`].
    ///
    /// [`bars_by_row`]: super::bars_by_row
    pub fn bars(&self, view: &TimeView, width: f32) -> Vec<Vec<Bar>> {
        self.row_index
            .iter()
            .map(|row| {
                let mut out = Vec::new();
                row_bars(&self.kinds, row, view, width, &mut out);
                out
            })
            .collect()
    }

    /// The bars of sub-row `row` alone (see [`Track::bars`]).
    pub fn bars_of_row(&self, row: usize, view: &TimeView, width: f32) -> Vec<Bar> {
        let mut out = Vec::new();
        if let Some(index) = self.row_index.get(row) {
            row_bars(&self.kinds, index, view, width, &mut out);
        }
        out
    }

    /// The event of sub-row `row` that covers `t ± slack` (the latest-starting, if several):
    /// O(log n).
    pub fn pick(&self, row: usize, t: f64, slack: f64) -> Option<&Event> {
        let r = self.row_index.get(row)?;
        let n = r.starts.partition_point(|&s| s as f64 <= t + slack);
        let last = n.checked_sub(1)?;
        let end = *r.ends.get(last)?;
        let e = self.events.get(*r.events.get(last)? as usize)?;
        (end as f64 >= t - slack).then_some(e)
    }

    /// Drops events that ended before `ns` (keeps memory bounded for a long live session).
    /// Sub-rows left empty are removed and the ones above move down, so the track shrinks.
    pub(super) fn forget_before(&mut self, ns: u64) {
        self.settle();
        // The longest prefix (by start) of events that all ended before `ns`: O(cut).
        let cut = self
            .events
            .iter()
            .position(|e| e.clamped_end_ns() >= ns)
            .unwrap_or(self.events.len());
        if cut == 0 {
            return;
        }
        self.events.drain(..cut);
        self.kinds.drain(..cut);
        self.rows.drain(..cut);
        let cut = u32::try_from(cut).unwrap_or(u32::MAX);
        for r in &mut self.row_index {
            r.forget(cut);
        }
        if self.row_index.iter().any(|r| r.events.is_empty()) {
            let mut renumber = Vec::with_capacity(self.row_index.len());
            let mut next = 0u32;
            for r in &self.row_index {
                renumber.push(next);
                next += u32::from(!r.events.is_empty());
            }
            for row in &mut self.rows {
                *row = renumber.get(*row as usize).copied().unwrap_or(0);
            }
            let mut kept = self.row_index.iter().map(|r| !r.events.is_empty());
            self.row_last.retain(|_| kept.next().unwrap_or(true));
            self.row_index.retain(|r| !r.events.is_empty());
        }
        // A row's last event ends last on that row.
        self.max_end_ns = self
            .row_index
            .iter()
            .filter_map(|r| r.ends.last().copied())
            .max()
            .unwrap_or(0);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::timeline::data::{TimelineData, kernel};

    /// Every sub-row holds an event, rows agree with the row index, and rows never overlap.
    fn assert_consistent(d: &TimelineData) {
        for t in d.tracks() {
            assert!(!t.events.is_empty(), "an empty track is kept");
            assert_eq!(t.row_index.len(), t.row_last.len());
            assert_eq!(t.rows.len(), t.events.len());
            assert_eq!(t.kinds.len(), t.events.len());
            let used = t.rows.iter().map(|&r| r as usize + 1).max().unwrap_or(1);
            assert_eq!(t.row_count(), used, "stale empty sub-rows");
            for (r, index) in t.row_index.iter().enumerate() {
                assert!(!index.events.is_empty(), "sub-row {r} is empty");
                assert_eq!(index.busy.len(), index.events.len() + 1);
                for w in index.events.windows(2) {
                    let (a, b) = (&t.events[w[0] as usize], &t.events[w[1] as usize]);
                    assert!(a.clamped_end_ns() <= b.start_ns, "overlap on sub-row {r}");
                }
                for &i in &index.events {
                    assert_eq!(t.rows[i as usize] as usize, r);
                }
            }
        }
        let span = d.all_events().fold(None, |s: Option<Range<u64>>, e| {
            Some(match s {
                None => e.start_ns..e.clamped_end_ns(),
                Some(s) => s.start.min(e.start_ns)..s.end.max(e.clamped_end_ns()),
            })
        });
        assert_eq!(d.span(), span, "span is not the kept events'");
        assert_eq!(d.len(), d.all_events().count());
    }

    #[test]
    fn out_of_order_batches_sort_once_and_ties_keep_arrival_order() {
        let events = vec![
            kernel(0, "c", 300, 400),
            kernel(0, "a", 100, 200),
            kernel(0, "b1", 200, 250),
            kernel(0, "b2", 200, 260),
            kernel(0, "d", 50, 500),
        ];
        let d = TimelineData::from_events(events.clone());
        let names: Vec<&str> = d.tracks()[0]
            .events()
            .iter()
            .map(|e| e.name.as_str())
            .collect();
        assert_eq!(names, ["d", "a", "b1", "b2", "c"]);
        assert_eq!(d.tracks()[0].rows(), [0, 1, 1, 2, 1]);
        assert_consistent(&d);
        // One by one: the same.
        let mut one = TimelineData::default();
        for e in events {
            one.push(e);
        }
        assert_eq!(one.tracks()[0].rows(), d.tracks()[0].rows());
        assert_consistent(&one);
        // Picking on each sub-row.
        let t = &d.tracks()[0];
        assert_eq!(t.pick(0, 450.0, 1.0).map(|e| e.name.as_str()), Some("d"));
        assert_eq!(t.pick(1, 350.0, 1.0).map(|e| e.name.as_str()), Some("c"));
        assert_eq!(t.pick(1, 280.0, 1.0), None);
        assert_eq!(t.pick(2, 255.0, 1.0).map(|e| e.name.as_str()), Some("b2"));
        assert_eq!(t.pick(3, 255.0, 1.0), None);
    }

    #[test]
    fn forgetting_moves_the_span_and_drops_empty_rows_and_tracks() {
        let mut d = TimelineData::default();
        // Device 1 only early; device 0 throughout, with a burst of overlap early on.
        d.extend((0..100u64).map(|i| kernel(0, "k", i * 1_000, i * 1_000 + 500)));
        d.extend((0..10u64).map(|i| kernel(1, "k", i * 1_000, i * 1_000 + 500)));
        d.push(kernel(0, "over", 2_100, 2_400));
        d.push(kernel(0, "long", 2_000, 30_000));
        assert_consistent(&d);
        assert_eq!(d.tracks()[0].row_count(), 3);
        assert_eq!(d.span(), Some(0..99_500));

        d.forget_before(20_000);
        assert_consistent(&d);
        assert_eq!(d.tracks().len(), 1, "device 1 has nothing left");
        // "long" (2 000..30 000) ends after the cut: kept, and so is all that starts after it.
        assert_eq!(d.span(), Some(2_000..99_500));
        assert_eq!(d.tracks()[0].events()[0].name, "long");
        assert_eq!(d.tracks()[0].row_count(), 3);

        d.forget_before(40_000);
        assert_consistent(&d);
        assert_eq!(d.tracks()[0].row_count(), 1);
        assert_eq!(d.span(), Some(40_000..99_500));
        assert!(d.tracks()[0].rows().iter().all(|&r| r == 0));
        // Appending after a forget continues the same rows.
        d.push(kernel(0, "next", 100_000, 100_500));
        d.push(kernel(0, "overlap", 100_100, 100_200));
        assert_consistent(&d);
        assert_eq!(d.tracks()[0].row_count(), 2);

        d.forget_before(u64::MAX);
        assert_consistent(&d);
        assert!(d.is_empty() && d.tracks().is_empty() && d.span().is_none());

        // A clock restart: clear, then the new run's events alone.
        d.extend((0..10u64).map(|i| kernel(0, "k", 1_000_000 + i, 1_000_001 + i)));
        d.clear();
        d.extend((0..10u64).map(|i| kernel(0, "k", i * 10, i * 10 + 5)));
        assert_consistent(&d);
        assert_eq!(d.span(), Some(0..95));
        assert_eq!(d.tracks()[0].row_count(), 1);
    }
}
