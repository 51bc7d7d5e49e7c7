//! Events grouped into tracks (one per device and lane), each sorted by start time so the
//! visible slice of a track is two binary searches away, however many events it holds.
//!
//! Events of one track that overlap in time go on sub-rows: the greedy lowest-free-row
//! assignment in start order that the Chrome exporter uses for its overflow threads (a row is
//! free when its last event ends at or before the new start), so a track takes as many rows as
//! events it has at once. Rows are assigned as events arrive (O(rows) for an in-order append;
//! a track that got out-of-order events is sorted and reassigned once per batch), never per
//! frame.
//!
//! Each sub-row also keeps an index of its own events (which never overlap, so they are in start
//! *and* end order) with running sums of busy time and of kind changes. A frame then costs
//! O(pixels × log events) however many events are in view: [`Track::bars`] finds the events
//! that start in one pixel column by binary search and sums their busy time by subtraction.
//!
//! Bars are coloured by gangway's kinds ([`BarKind::of`]: pipeline ops by their
//! [`PipelineOp`], never by name), or, for another tool's trace, by a hash of the slice's name
//! as Perfetto colours them ([`BarKind::Named`]). Beside the tracks: counter tracks, instants
//! ([`InstantMark`]), flow arrows ([`FlowLink`], linked once from an opened trace's bound flow
//! points) and what each device's lane is ([`TimelineData::lanes`]).

use std::collections::BTreeMap;
use std::ops::Range;

use gangway::trace::{Event, EventKind, Lane, PipelineOp};

use super::view::TimeView;

/// The events of one sub-row, for per-pixel sums: a row's events never overlap, so they are in
/// start order and in end order at once.
#[derive(Debug, Clone)]
struct RowIndex {
    /// Indices into the track's events, ascending.
    events: Vec<u32>,
    /// Start and (clamped) end of each, contiguous for the binary searches of a frame.
    starts: Vec<u64>,
    ends: Vec<u64>,
    /// Running busy time: `busy[k] - busy[m]` is the summed duration of the row's events `m..k`
    /// (one longer than `events`; forgetting drops a prefix, so only differences mean anything).
    busy: Vec<u64>,
    /// Running kind changes: `changes[k] == changes[m]` (m < k) when the row's events `m..=k`
    /// are all of one kind.
    changes: Vec<u32>,
}

impl RowIndex {
    fn new() -> Self {
        Self {
            events: Vec::new(),
            starts: Vec::new(),
            ends: Vec::new(),
            busy: vec![0],
            changes: Vec::new(),
        }
    }

    fn push(&mut self, index: u32, e: &Event, kind_changed: bool) {
        let busy = self.busy.last().copied().unwrap_or(0);
        let changes = self.changes.last().copied().unwrap_or(0);
        self.events.push(index);
        self.starts.push(e.start_ns);
        self.ends.push(e.clamped_end_ns());
        self.busy.push(busy.saturating_add(e.duration_ns()));
        self.changes.push(changes + u32::from(kind_changed));
    }

    /// Drops the entries of the first `cut` events of the track (renumbering the rest).
    fn forget(&mut self, cut: u32) {
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
    events: Vec<Event>,
    /// [`BarKind::of`] each event (parallel to `events`), so frames never look at names.
    kinds: Vec<BarKind>,
    /// Sub-row of each event (parallel to `events`); events on one sub-row never overlap.
    rows: Vec<u32>,
    /// Per sub-row, `(start, end)` of its latest-starting event.
    row_last: Vec<(u64, u64)>,
    /// Per sub-row, its events with running sums (parallel to `row_last`).
    row_index: Vec<RowIndex>,
    /// Events were appended out of start order: sort, then reassign every row.
    unsorted: bool,
    /// Longest event, so a search for events overlapping a window knows how far back to look.
    max_duration_ns: u64,
    /// Latest end of the events kept.
    max_end_ns: u64,
    /// Bars coloured by event name ([`BarKind::Named`]), as Perfetto colours another tool's
    /// slices, instead of by gangway's kinds.
    by_name: bool,
}

impl Track {
    fn new(device: usize, lane: Lane, by_name: bool) -> Self {
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
    pub fn row_count(&self) -> usize {
        self.row_last.len().max(1)
    }

    /// Appends `e`; an event out of start order marks the track for [`Track::settle`].
    fn insert(&mut self, e: Event) {
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
    fn settle(&mut self) {
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
    fn forget_before(&mut self, ns: u64) {
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

/// Everything a timeline draws.
#[derive(Debug, Clone, Default)]
pub struct TimelineData {
    /// Sorted by (device, lane).
    tracks: Vec<Track>,
    /// What each device's lane is ([`gangway::trace::Track`]: its label, kind and stages), by
    /// device.
    pub lanes: BTreeMap<usize, gangway::trace::Track>,
    span: Option<Range<u64>>,
    count: usize,
    /// Per track label override (e.g. "stage 2"), by device.
    pub device_prefix: Option<String>,
    /// A device's row title in place of "dev N lane": another tool's trace has a row per
    /// thread, each its own "device" (see `gangway::trace::chrome::ChromeTrace`).
    pub row_titles: BTreeMap<usize, String>,
    /// The group (a process) a device's rows are drawn under, titled where it changes.
    pub groups: BTreeMap<usize, String>,
    /// Counter tracks, drawn under their group's or device's rows.
    pub counters: Vec<CounterRow>,
    /// Instants, drawn as markers on their rows (global ones across all rows).
    pub instants: Vec<InstantMark>,
    /// Flow arrows between slices (see [`TimelineData::link_flows`]).
    pub flows: Vec<FlowLink>,
    /// Bars coloured by name (set before events are added): see [`Track`].
    by_name: bool,
}

/// An instant: a point in time on a row, or on every row.
#[derive(Debug, Clone, PartialEq)]
pub struct InstantMark {
    /// The track's device and lane; `None`: global, drawn across every row.
    pub track: Option<(usize, Lane)>,
    pub ns: u64,
    pub name: String,
}

/// One end of a flow arrow: a slice's track, sub-row and time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowEnd {
    pub device: usize,
    pub lane: Lane,
    pub sub_row: u32,
    pub ns: u64,
}

/// A flow point to link (see [`TimelineData::link_flows`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowPoint {
    /// The slice's track: device and lane.
    pub track: (usize, Lane),
    /// The slice's index among its track's events.
    pub index: usize,
    pub flow: gangway::trace::Flow,
}

/// A flow arrow, as Perfetto draws one: from the end of the sending slice to the start of the
/// receiving one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowLink {
    pub id: u64,
    pub from: FlowEnd,
    pub to: FlowEnd,
}

/// A counter track: values over time, drawn as a step plot.
#[derive(Debug, Clone, PartialEq)]
pub struct CounterRow {
    pub name: String,
    /// The group it is drawn in (a process of another tool's trace).
    pub group: Option<String>,
    /// The device it is drawn under (gangway's traces).
    pub device: Option<usize>,
    /// `(ns, value)` in time order; a value holds until the next.
    pub points: Vec<(u64, f64)>,
    pub min: f64,
    pub max: f64,
}

impl CounterRow {
    pub fn new(
        name: String,
        group: Option<String>,
        device: Option<usize>,
        points: Vec<(u64, f64)>,
    ) -> Self {
        let finite = || points.iter().map(|p| p.1).filter(|v| v.is_finite());
        let min = finite().fold(f64::INFINITY, f64::min);
        let max = finite().fold(f64::NEG_INFINITY, f64::max);
        Self {
            name,
            group,
            device,
            min: if min.is_finite() { min } else { 0.0 },
            max: if max.is_finite() { max } else { 0.0 },
            points,
        }
    }

    /// What the track shows over `t0..t1` ns: the largest value set in it, else the value held
    /// from before it; `None` before the first sample and after the last: O(log n + samples in
    /// it).
    pub fn value_over(&self, t0: f64, t1: f64) -> Option<f64> {
        let last = self.points.last()?;
        if t0 > last.0 as f64 {
            return None;
        }
        let from = self.points.partition_point(|p| (p.0 as f64) < t0);
        let to = self.points.partition_point(|p| (p.0 as f64) < t1);
        let set = self
            .points
            .get(from..to)
            .and_then(|s| s.iter().map(|p| p.1).reduce(f64::max));
        set.or_else(|| {
            from.checked_sub(1)
                .and_then(|i| self.points.get(i))
                .map(|p| p.1)
        })
    }
}

impl TimelineData {
    pub fn from_events(events: impl IntoIterator<Item = Event>) -> Self {
        let mut data = Self::default();
        data.extend(events);
        data
    }

    /// [`TimelineData::from_events`] with bars coloured by name ([`BarKind::Named`]): another
    /// tool's slices, whose kinds mean nothing in gangway's legend.
    pub fn from_events_by_name(events: impl IntoIterator<Item = Event>) -> Self {
        let mut data = Self {
            by_name: true,
            ..Self::default()
        };
        data.extend(events);
        data
    }

    /// Whether bars are coloured by name.
    pub fn colored_by_name(&self) -> bool {
        self.by_name
    }

    /// Links flow points into arrows: per id, its points in time order, each linked to the
    /// next (an `s`, its `t` steps, its `f`), from a sending end; ids with no sending end draw
    /// nothing. Each point names its slice by track and index in the track's events, which is
    /// the order events were added in when they came sorted by start (as an imported trace's
    /// do). For a complete trace (an opened file): O(points log points), once.
    pub fn link_flows(&mut self, points: impl IntoIterator<Item = FlowPoint>) {
        use gangway::trace::FlowRole;
        let mut ends: BTreeMap<u64, Vec<(u64, FlowRole, FlowEnd, u64)>> = BTreeMap::new();
        for p in points {
            let at = self
                .tracks
                .partition_point(|t| (t.device, t.lane) < p.track);
            let Some(t) = self
                .tracks
                .get(at)
                .filter(|t| (t.device, t.lane) == p.track)
            else {
                continue;
            };
            let (Some(e), Some(&sub_row)) = (t.events.get(p.index), t.rows.get(p.index)) else {
                continue;
            };
            let end = FlowEnd {
                device: t.device,
                lane: t.lane,
                sub_row,
                ns: e.start_ns,
            };
            ends.entry(p.flow.id).or_default().push((
                e.start_ns,
                p.flow.role,
                end,
                e.clamped_end_ns(),
            ));
        }
        self.flows.clear();
        for (id, mut points) in ends {
            // The sending end first, then the receiving ones by time.
            points.sort_by_key(|&(start, role, ..)| (role != FlowRole::Out, start));
            if points.first().is_none_or(|p| p.1 != FlowRole::Out) {
                continue;
            }
            for pair in points.windows(2) {
                let (_, _, mut from, from_end) = pair[0];
                from.ns = from_end;
                self.flows.push(FlowLink {
                    id,
                    from,
                    to: pair[1].2,
                });
            }
        }
    }

    /// Adds events: appended to their tracks in one pass; a track that got any out of start
    /// order is sorted and has its sub-rows reassigned once, at the end.
    pub fn extend(&mut self, events: impl IntoIterator<Item = Event>) {
        for e in events {
            self.insert(e);
        }
        for t in &mut self.tracks {
            t.settle();
        }
    }

    pub fn push(&mut self, e: Event) {
        let key = (e.device, e.lane);
        self.insert(e);
        let at = self.tracks.partition_point(|t| (t.device, t.lane) < key);
        if let Some(track) = self.tracks.get_mut(at) {
            track.settle();
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
            self.tracks
                .insert(at, Track::new(e.device, e.lane, self.by_name));
        }
        if let Some(track) = self.tracks.get_mut(at) {
            track.insert(e);
        }
    }

    pub fn tracks(&self) -> &[Track] {
        &self.tracks
    }

    /// Earliest start to latest end of the events kept.
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

    /// Drops events that ended before `ns`. The span then starts at the earliest event kept
    /// (a fitted view follows it), tracks left without events go, and sub-rows left empty are
    /// removed.
    pub fn forget_before(&mut self, ns: u64) {
        for t in &mut self.tracks {
            t.forget_before(ns);
        }
        self.tracks.retain(|t| !t.events.is_empty());
        self.count = self.tracks.iter().map(|t| t.events.len()).sum();
        let start = self
            .tracks
            .iter()
            .filter_map(|t| t.events.first())
            .map(|e| e.start_ns)
            .min();
        let end = self.tracks.iter().map(|t| t.max_end_ns).max();
        self.span = start.zip(end).map(|(s, e)| s..e.max(s));
    }

    /// Forgets every event (say, a new run whose clock starts again at 0): no tracks, no span.
    /// Device names and the label prefix stay.
    pub fn clear(&mut self) {
        self.tracks.clear();
        self.instants.clear();
        self.flows.clear();
        self.span = None;
        self.count = 0;
    }

    /// The row title of a track, e.g. "dev 0 compute" or "stage 2 compute" (device names are
    /// in the hover text and the Devices tab: they are too long for a row title), or the
    /// thread's title from [`TimelineData::row_titles`].
    pub fn track_label(&self, t: &Track) -> String {
        if let Some(title) = self.row_titles.get(&t.device) {
            return title.clone();
        }
        let prefix = self.device_prefix.as_deref().unwrap_or("dev");
        format!("{prefix} {} {}", t.device, t.lane.name())
    }

    /// The group a device's rows are drawn under, if any.
    pub fn group_of(&self, device: usize) -> Option<&str> {
        self.groups.get(&device).map(String::as_str)
    }

    /// The text on an event's block: a pipeline op's letter, microbatch and chunk ("F3",
    /// "B5.c1" for "B.c1" of microbatch 5), as the lab numbers its blocks; any other event's
    /// name, and an op already named with its number ("F0"), as it is.
    pub fn bar_label<'a>(&self, e: &'a Event) -> std::borrow::Cow<'a, str> {
        if let (Some(op), Some(mb)) = (PipelineOp::of(e), e.microbatch)
            && let Some(rest) = e.name.strip_prefix(op.letter())
            && (rest.is_empty() || rest.starts_with('.'))
        {
            // The op's letter, its microbatch, and the chunk its name shows.
            return format!("{}{mb}{rest}", op.letter()).into();
        }
        e.name.as_str().into()
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
    /// Another tool's slice, coloured by its name: one of [`NAME_COLORS`] by a hash of it.
    Named(u8),
}

/// The colours slices are given by name (Material shades that white text reads on, as
/// Perfetto's palette): a name keeps its colour from run to run and file to file.
pub const NAME_COLORS: [egui::Color32; 14] = [
    egui::Color32::from_rgb(0x1e, 0x88, 0xe5),
    egui::Color32::from_rgb(0x43, 0xa0, 0x47),
    egui::Color32::from_rgb(0xe5, 0x39, 0x35),
    egui::Color32::from_rgb(0x8e, 0x24, 0xaa),
    egui::Color32::from_rgb(0xf4, 0x51, 0x1e),
    egui::Color32::from_rgb(0x00, 0x89, 0x7b),
    egui::Color32::from_rgb(0x39, 0x49, 0xab),
    egui::Color32::from_rgb(0xc0, 0xca, 0x33),
    egui::Color32::from_rgb(0xd8, 0x1b, 0x60),
    egui::Color32::from_rgb(0x00, 0xac, 0xc1),
    egui::Color32::from_rgb(0x6d, 0x4c, 0x41),
    egui::Color32::from_rgb(0x5e, 0x35, 0xb1),
    egui::Color32::from_rgb(0xfb, 0x8c, 0x00),
    egui::Color32::from_rgb(0x54, 0x6e, 0x7a),
];

/// A stable hash of a name (FNV-1a), for its colour.
fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Whether `hay` contains `needle`, ignoring ASCII case (no allocation).
fn contains_ignore_ascii_case(hay: &str, needle: &str) -> bool {
    hay.as_bytes()
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
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

    /// [`BarKind::named`] by `e`'s name if `by_name`, else [`BarKind::of`].
    pub fn for_event(e: &Event, by_name: bool) -> Self {
        if by_name {
            Self::named(&e.name)
        } else {
            Self::of(e)
        }
    }

    /// The [`BarKind::Named`] of a name: the same name, the same colour.
    pub fn named(name: &str) -> Self {
        BarKind::Named((name_hash(name) % NAME_COLORS.len() as u64) as u8)
    }

    /// Pipeline ops by their [`PipelineOp`] (what the bubble counts too), all-to-alls by name,
    /// everything else by kind.
    pub fn of(e: &Event) -> Self {
        match e.kind {
            EventKind::Transfer => BarKind::Transfer,
            EventKind::HostEncode => BarKind::HostEncode,
            EventKind::Wait => BarKind::Wait,
            EventKind::Kernel => {
                if contains_ignore_ascii_case(&e.name, "all_to_all")
                    || contains_ignore_ascii_case(&e.name, "all-to-all")
                {
                    return BarKind::AllToAll;
                }
                match PipelineOp::of(e) {
                    Some(PipelineOp::Forward) => BarKind::Forward,
                    Some(PipelineOp::Backward) => BarKind::Backward,
                    Some(PipelineOp::WeightGrad) => BarKind::WeightGrad,
                    None => BarKind::Kernel,
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
            BarKind::Named(_) => "slice",
        }
    }

    /// The bar's colour; F, B and W in the pipeline figure's palette (one palette for both).
    pub fn color(self) -> egui::Color32 {
        use egui::Color32;
        use gangway::pipeline::figure::{BACKWARD, FORWARD, WEIGHT_GRAD};
        match self {
            BarKind::Forward => figure_color(FORWARD),
            BarKind::Backward => figure_color(BACKWARD),
            BarKind::WeightGrad => figure_color(WEIGHT_GRAD),
            BarKind::AllToAll => Color32::from_rgb(156, 39, 176),
            BarKind::Kernel => Color32::from_rgb(92, 107, 192),
            BarKind::Transfer => Color32::from_rgb(0, 150, 136),
            BarKind::HostEncode => Color32::from_rgb(230, 190, 40),
            BarKind::Wait => Color32::from_rgb(200, 80, 80),
            BarKind::Named(k) => NAME_COLORS[usize::from(k) % NAME_COLORS.len()],
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
fn row_bars(kinds: &[BarKind], row: &RowIndex, view: &TimeView, width: f32, out: &mut Vec<Bar>) {
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

/// A colour of the pipeline figure's palette as egui paints it.
pub fn figure_color(c: gangway::pipeline::figure::Rgba) -> egui::Color32 {
    let [r, g, b, a] = c.0;
    egui::Color32::from_rgba_unmultiplied(r, g, b, a)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use gangway::trace::EventMeta;

    /// A kernel; one named just `F`, `B` or `W` is marked as that pipeline op.
    fn kernel(device: usize, name: &str, start: u64, end: u64) -> Event {
        let meta = EventMeta::kernel(device);
        let meta = PipelineOp::of_letter(name).map_or(meta, |op| meta.op(op));
        meta.event(name.into(), start, end)
    }

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

    #[test]
    fn kind_of_ignores_case_without_allocating() {
        assert_eq!(
            BarKind::of(&kernel(0, "MoE All-To-All", 0, 1)),
            BarKind::AllToAll
        );
        assert_eq!(
            BarKind::of(&kernel(0, "x ALL_TO_ALL", 0, 1)),
            BarKind::AllToAll
        );
        assert_eq!(BarKind::of(&kernel(0, "all", 0, 1)), BarKind::Kernel);
    }
}
