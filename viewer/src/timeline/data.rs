//! Events grouped into tracks (one per device and lane), each sorted by start time so the
//! visible slice of a track is two binary searches away, however many events it holds.
//!
//! Events of one track that overlap in time go on sub-rows: the greedy lowest-free-row
//! assignment in start order that the Chrome exporter uses for its overflow threads (a row is
//! free when its last event ends at or before the new start), so a track takes as many rows as
//! events it has at once. Rows are assigned as events arrive (O(rows) for an in-order append;
//! a track that got an out-of-order insert is reassigned once per batch), never per frame.

use std::collections::BTreeMap;
use std::ops::Range;

use gangway::trace::{Event, EventKind, Lane};

/// One row of the timeline: one lane of one device.
#[derive(Debug, Clone)]
pub struct Track {
    pub device: usize,
    pub lane: Lane,
    /// Sorted by `start_ns` (ties keep arrival order).
    events: Vec<Event>,
    /// Sub-row of each event (parallel to `events`); events on one sub-row never overlap.
    rows: Vec<u32>,
    /// Per sub-row, `(start, end)` of its latest-starting event.
    row_last: Vec<(u64, u64)>,
    /// An out-of-order insert happened: `rows` must be reassigned.
    dirty: bool,
    /// Longest event, so a search for events overlapping a window knows how far back to look.
    max_duration_ns: u64,
}

impl Track {
    fn new(device: usize, lane: Lane) -> Self {
        Self {
            device,
            lane,
            events: Vec::new(),
            rows: Vec::new(),
            row_last: Vec::new(),
            dirty: false,
            max_duration_ns: 0,
        }
    }

    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// The sub-row of each event of [`Track::events`] (same order).
    pub fn rows(&self) -> &[u32] {
        &self.rows
    }

    /// How many sub-rows the track takes (at least 1).
    pub fn row_count(&self) -> usize {
        self.row_last.len().max(1)
    }

    /// Inserts `e` keeping start order; an out-of-order insert marks the rows for
    /// [`Track::assign_rows`].
    fn insert(&mut self, e: Event) {
        self.max_duration_ns = self.max_duration_ns.max(e.duration_ns());
        // Live events arrive nearly in order: appending is the common case.
        if self
            .events
            .last()
            .is_none_or(|last| last.start_ns <= e.start_ns)
        {
            if !self.dirty {
                let row = self.next_row(e.start_ns, e.clamped_end_ns());
                self.rows.push(row);
            }
            self.events.push(e);
        } else {
            let at = self.events.partition_point(|x| x.start_ns <= e.start_ns);
            self.events.insert(at, e);
            self.dirty = true;
        }
    }

    /// Greedy step: the lowest sub-row free at `start` (its last event ended by then), or a
    /// new one. Events must come in start order.
    fn next_row(&mut self, start: u64, end: u64) -> u32 {
        let free = self.row_last.iter().position(|&(_, e)| e <= start);
        let row = match free {
            Some(row) => row,
            None => {
                self.row_last.push((start, end));
                self.row_last.len() - 1
            }
        };
        if let Some(last) = self.row_last.get_mut(row) {
            *last = (start, end);
        }
        u32::try_from(row).unwrap_or(u32::MAX)
    }

    /// Reassigns every event's sub-row, in start order, if an out-of-order insert asked for it.
    fn assign_rows(&mut self) {
        if !self.dirty {
            return;
        }
        self.dirty = false;
        self.row_last.clear();
        let spans: Vec<(u64, u64)> = self
            .events
            .iter()
            .map(|e| (e.start_ns, e.clamped_end_ns()))
            .collect();
        self.rows = spans
            .into_iter()
            .map(|(start, end)| self.next_row(start, end))
            .collect();
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

    /// Drops events that ended before `ns` (keeps memory bounded for a long live session),
    /// and the sub-rows at the top left empty.
    fn forget_before(&mut self, ns: u64) {
        let cut = self
            .events
            .partition_point(|e| e.start_ns.saturating_add(self.max_duration_ns) < ns);
        if cut == 0 {
            return;
        }
        self.assign_rows();
        self.events.drain(..cut);
        self.rows.drain(..cut.min(self.rows.len()));
        // The cut is a prefix by start (ties are never split), so a row whose latest event
        // starts before the first kept event is empty.
        let first_kept = self.events.first().map_or(u64::MAX, |e| e.start_ns);
        while self
            .row_last
            .last()
            .is_some_and(|&(start, _)| start < first_kept)
        {
            self.row_last.pop();
        }
    }
}

/// Everything a timeline draws.
#[derive(Debug, Clone, Default)]
pub struct TimelineData {
    /// Sorted by (device, lane).
    tracks: Vec<Track>,
    pub device_names: BTreeMap<usize, String>,
    span: Option<Range<u64>>,
    count: usize,
    /// Per track label override (e.g. "stage 2"), by device.
    pub device_prefix: Option<String>,
}

impl TimelineData {
    pub fn from_events(events: impl IntoIterator<Item = Event>) -> Self {
        let mut data = Self::default();
        data.extend(events);
        data
    }

    /// Adds events; sub-rows of tracks that got out-of-order events are reassigned once, at
    /// the end.
    pub fn extend(&mut self, events: impl IntoIterator<Item = Event>) {
        for e in events {
            self.insert(e);
        }
        for t in &mut self.tracks {
            t.assign_rows();
        }
    }

    pub fn push(&mut self, e: Event) {
        let key = (e.device, e.lane);
        self.insert(e);
        let at = self.tracks.partition_point(|t| (t.device, t.lane) < key);
        if let Some(track) = self.tracks.get_mut(at) {
            track.assign_rows();
        }
    }

    fn insert(&mut self, e: Event) {
        let start = e.start_ns;
        let end = e.clamped_end_ns();
        self.span = Some(match self.span.take() {
            None => start..end,
            Some(s) => s.start.min(start)..s.end.max(end),
        });
        self.count += 1;
        let key = (e.device, e.lane);
        let at = self.tracks.partition_point(|t| (t.device, t.lane) < key);
        if self
            .tracks
            .get(at)
            .is_none_or(|t| (t.device, t.lane) != key)
        {
            self.tracks.insert(at, Track::new(e.device, e.lane));
        }
        if let Some(track) = self.tracks.get_mut(at) {
            track.insert(e);
        }
    }

    pub fn tracks(&self) -> &[Track] {
        &self.tracks
    }

    /// Earliest start to latest end of everything pushed.
    pub fn span(&self) -> Option<Range<u64>> {
        self.span.clone()
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Every event, track by track.
    pub fn all_events(&self) -> impl Iterator<Item = &Event> {
        self.tracks.iter().flat_map(|t| t.events.iter())
    }

    /// Drops events that ended before `ns`; the span keeps its start so views stay stable.
    pub fn forget_before(&mut self, ns: u64) {
        for t in &mut self.tracks {
            t.forget_before(ns);
        }
        self.count = self.tracks.iter().map(|t| t.events.len()).sum();
    }

    /// The row title of a track, e.g. "dev 0 compute" or "stage 2 compute" (device names are
    /// in the hover text and the Devices tab: they are too long for a row title).
    pub fn track_label(&self, t: &Track) -> String {
        let prefix = self.device_prefix.as_deref().unwrap_or("dev");
        format!("{prefix} {} {}", t.device, t.lane.name())
    }
}

/// What a bar shows, by kind and, for kernels, by name prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BarKind {
    Forward,
    Backward,
    WeightGrad,
    AllToAll,
    Kernel,
    Transfer,
    HostEncode,
    Wait,
}

impl BarKind {
    pub const ALL: [BarKind; 8] = [
        BarKind::Forward,
        BarKind::Backward,
        BarKind::WeightGrad,
        BarKind::AllToAll,
        BarKind::Kernel,
        BarKind::Transfer,
        BarKind::HostEncode,
        BarKind::Wait,
    ];

    /// Pipeline ops are named `F`, `B`, `W` (optionally followed by a microbatch, `.c<chunk>`
    /// or ` mb`): "F3", "B.c1" count, "Fused" does not.
    pub fn of(e: &Event) -> Self {
        match e.kind {
            EventKind::Transfer => BarKind::Transfer,
            EventKind::HostEncode => BarKind::HostEncode,
            EventKind::Wait => BarKind::Wait,
            EventKind::Kernel => {
                let lower = e.name.to_ascii_lowercase();
                if lower.contains("all_to_all") || lower.contains("all-to-all") {
                    return BarKind::AllToAll;
                }
                let mut chars = e.name.chars();
                let first = chars.next();
                let op_like = chars.next().is_none_or(|c| !c.is_ascii_alphabetic());
                match (first, op_like) {
                    (Some('F'), true) => BarKind::Forward,
                    (Some('B'), true) => BarKind::Backward,
                    (Some('W'), true) => BarKind::WeightGrad,
                    _ => BarKind::Kernel,
                }
            }
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            BarKind::Forward => "forward F",
            BarKind::Backward => "backward B",
            BarKind::WeightGrad => "weight-grad W",
            BarKind::AllToAll => "all-to-all",
            BarKind::Kernel => "kernel",
            BarKind::Transfer => "transfer",
            BarKind::HostEncode => "host encode",
            BarKind::Wait => "wait",
        }
    }

    pub fn color(self) -> egui::Color32 {
        use egui::Color32;
        match self {
            BarKind::Forward => Color32::from_rgb(66, 133, 244),
            BarKind::Backward => Color32::from_rgb(52, 168, 83),
            BarKind::WeightGrad => Color32::from_rgb(251, 140, 0),
            BarKind::AllToAll => Color32::from_rgb(156, 39, 176),
            BarKind::Kernel => Color32::from_rgb(92, 107, 192),
            BarKind::Transfer => Color32::from_rgb(0, 150, 136),
            BarKind::HostEncode => Color32::from_rgb(230, 190, 40),
            BarKind::Wait => Color32::from_rgb(200, 80, 80),
        }
    }
}

/// A bar to paint: one event, or several adjacent ones narrower than a pixel merged together.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bar {
    pub x0: f32,
    pub x1: f32,
    pub kind: BarKind,
    /// Events merged into this bar (1 for a single event).
    pub merged: usize,
    /// Index (into the slice given to [`bars`]) of the first event.
    pub first: usize,
}

/// The bars of `events` (sorted by start) under `x_of`, culled to `0..width` and with runs of
/// sub-pixel events merged into one bar, so a frame paints at most a few bars per pixel.
pub fn bars(events: &[Event], width: f32, x_of: impl Fn(f64) -> f32) -> Vec<Bar> {
    bars_by_row(events, &[], width, x_of)
        .into_iter()
        .next()
        .unwrap_or_default()
}

/// [`bars`] per sub-row: `rows[i]` is the sub-row of `events[i]` (missing entries count as
/// row 0); bars merge only with neighbours on their own row. One pass over `events`.
pub fn bars_by_row(
    events: &[Event],
    rows: &[u32],
    width: f32,
    x_of: impl Fn(f64) -> f32,
) -> Vec<Vec<Bar>> {
    let mut by_row: Vec<Vec<Bar>> = vec![Vec::new()];
    for (i, e) in events.iter().enumerate() {
        let row = rows.get(i).map_or(0, |&r| r as usize);
        if row >= by_row.len() {
            by_row.resize_with(row + 1, Vec::new);
        }
        let Some(out) = by_row.get_mut(row) else {
            continue;
        };
        let x0 = x_of(e.start_ns as f64);
        let x1 = x_of(e.clamped_end_ns() as f64);
        if x1 < 0.0 || x0 > width {
            continue;
        }
        let (x0, x1) = (x0.max(-1.0), x1.min(width + 1.0));
        let kind = BarKind::of(e);
        let narrow = x1 - x0 < 1.0;
        if narrow
            && let Some(last) = out.last_mut()
            && (last.merged > 1 || last.x1 - last.x0 < 1.0)
            && x0 <= last.x1 + 1.0
        {
            last.x1 = last.x1.max(x1);
            if last.kind != kind {
                last.kind = BarKind::Kernel;
            }
            last.merged += 1;
            continue;
        }
        out.push(Bar {
            x0,
            x1,
            kind,
            merged: 1,
            first: i,
        });
    }
    by_row
}
