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
//!
//! The parts, each using only those before it: `kind` (bar colours) → `bars` (a sub-row's
//! index and its per-pixel bars) → `track` (sub-row packing and queries); `marks` (counters,
//! instants, flows) stands alone; this module ties them into [`TimelineData`].

mod bars;
mod kind;
mod marks;
mod track;

use std::collections::BTreeMap;
use std::ops::Range;

use gangway::trace::{Event, Lane, PipelineOp};

pub use bars::{Bar, bars, bars_by_row};
pub use kind::{BarKind, NAME_COLORS, figure_color};
pub use marks::{CounterRow, FlowEnd, FlowLink, FlowPoint, InstantMark};
pub use track::Track;

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

    /// A row for every track an instant is on, slices or not: a thread with only instants is
    /// drawn, its marks on an empty row, as Perfetto draws it (Chromium's startup trace has 70
    /// such threads of 80). Call it once [`TimelineData::instants`] is set.
    pub fn add_instant_rows(&mut self) {
        let keys: Vec<(usize, Lane)> = self.instants.iter().filter_map(|i| i.track).collect();
        for key in keys {
            self.track_at(key);
        }
    }

    /// The index of the track of `key` (device, lane), made (empty) where there is none.
    fn track_at(&mut self, key: (usize, Lane)) -> usize {
        let at = self.tracks.partition_point(|t| (t.device, t.lane) < key);
        if self
            .tracks
            .get(at)
            .is_none_or(|t| (t.device, t.lane) != key)
        {
            self.tracks
                .insert(at, Track::new(key.0, key.1, self.by_name));
        }
        at
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
        let at = self.track_at((e.device, e.lane));
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
    /// "B5.c1" for "B.c1" of microbatch 5), the microbatch counted from 1 as the lab numbers its
    /// blocks (an event's `microbatch` is an index, from 0); any other event's name, and an op
    /// already named with its number ("F0"), as it is.
    pub fn bar_label<'a>(&self, e: &'a Event) -> std::borrow::Cow<'a, str> {
        if let (Some(op), Some(mb)) = (PipelineOp::of(e), e.microbatch)
            && let Some(rest) = e.name.strip_prefix(op.letter())
            && (rest.is_empty() || rest.starts_with('.'))
        {
            // The op's letter, its microbatch, and the chunk its name shows.
            return format!("{}{}{rest}", op.letter(), u64::from(mb) + 1).into();
        }
        e.name.as_str().into()
    }
}

/// A kernel; one named just `F`, `B` or `W` is marked as that pipeline op (the tests' events).
#[cfg(test)]
fn kernel(device: usize, name: &str, start: u64, end: u64) -> Event {
    let meta = gangway::trace::EventMeta::kernel(device);
    let meta = PipelineOp::of_letter(name).map_or(meta, |op| meta.op(op));
    meta.event(name.into(), start, end)
}
