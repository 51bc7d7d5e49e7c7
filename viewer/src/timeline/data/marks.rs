//! What a timeline draws beside the tracks' bars: counter tracks ([`CounterRow`]), instants
//! ([`InstantMark`]) and the ends of flow arrows ([`FlowPoint`] in, [`FlowLink`] out; see
//! [`TimelineData::link_flows`](super::TimelineData::link_flows)).

use gangway::trace::Lane;

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
///
/// [`TimelineData::link_flows`]: super::TimelineData::link_flows
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
