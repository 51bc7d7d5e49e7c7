//! What a file turned out to be ([`Loaded`]): a Chrome trace indexed for the timeline
//! ([`OpenedTrace`]), or a `gangway bench --json` report; and reading one, told apart by the
//! library's [`gangway::trace::chrome::sniff`] before it is read whole. Blocking: the files tab
//! runs it on a worker thread.

use std::path::Path;
use std::sync::Arc;

use gangway::bench::Report;
use gangway::trace::Lane;
use gangway::trace::PipelineBubble;
use gangway::trace::chrome::{ChromeTrace, Dialect, Document, Id, InstantScope, process_label};
use serde_json::Value;

use crate::timeline::{CounterRow, FlowPoint, InstantMark, TimelineData};

/// What a file turned out to be.
#[derive(Debug, Clone)]
pub enum Loaded {
    Trace(Box<OpenedTrace>),
    Bench(Box<Report>),
}

/// An opened Chrome trace.
#[derive(Debug, Clone)]
pub struct OpenedTrace {
    /// Shared, so saving it again runs off the UI thread without a copy.
    pub data: Arc<TimelineData>,
    /// Set when the trace looks like a pipeline run: see [`pipeline_bubble`].
    pub bubble: Option<PipelineBubble>,
    /// gangway's own trace, or another tool's (one row per thread).
    pub dialect: Dialect,
    /// Trace events read, by phase, and what of them is not drawn (see
    /// [`gangway::trace::chrome::ChromeTrace`]).
    pub phases: Vec<(String, u64)>,
    pub not_drawn: Vec<(String, u64)>,
    /// The file's bytes as read (gzipped or not): what saving the opened trace writes.
    pub source: Arc<[u8]>,
}

impl OpenedTrace {
    /// The file's summary: every phase read and what is not drawn, e.g. "261 trace events: M 8,
    /// X 223, f 14, i 2, s 14 · not drawn: instant (i/I) 2".
    pub fn phase_line(&self) -> String {
        let list = |l: &[(String, u64)]| {
            l.iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let total: u64 = self.phases.iter().map(|(_, n)| n).sum();
        let mut line = format!("{total} trace events: {}", list(&self.phases));
        if !self.not_drawn.is_empty() {
            line.push_str(&format!(" · not drawn: {}", list(&self.not_drawn)));
        }
        line
    }
}

impl Loaded {
    pub fn summary(&self) -> String {
        match self {
            Loaded::Trace(t) => match t.dialect {
                Dialect::Gangway => format!("Chrome trace: {} events", t.data.len()),
                Dialect::Foreign => format!(
                    "Chrome trace: {} slices on {} threads, {} counter tracks",
                    t.data.len(),
                    t.data.row_titles.len(),
                    t.data.counters.len()
                ),
            },
            Loaded::Bench(r) => format!(
                "benchmark report: {} results on {} adapter(s)",
                r.results.len(),
                r.adapters.len()
            ),
        }
    }

    /// The trace's timeline, if this is a trace.
    pub fn trace(&self) -> Option<&OpenedTrace> {
        match self {
            Loaded::Trace(t) => Some(t),
            Loaded::Bench(_) => None,
        }
    }
}

/// The pipeline bubble of an opened trace, by the one computation
/// ([`gangway::trace::pipeline_bubble`]) that `gangway trace` uses too.
pub fn pipeline_bubble(data: &TimelineData) -> Option<PipelineBubble> {
    gangway::trace::pipeline_bubble(data.all_events())
}

/// Recognises and parses a JSON document.
pub fn interpret(v: &Value) -> Result<Loaded, String> {
    interpret_as(gangway::trace::chrome::sniff_value(v), v)
}

/// [`interpret`] of a document of known kind.
fn interpret_as(kind: Document, v: &Value) -> Result<Loaded, String> {
    match kind {
        Document::Trace => gangway::trace::chrome::parse(v).map(|t| {
            let source: Arc<[u8]> = serde_json::to_vec(v).unwrap_or_default().into();
            opened_trace(t, source)
        }),
        Document::BenchReport => Report::from_value(v.clone()).map(|r| Loaded::Bench(Box::new(r))),
        Document::OldBenchResults => Err(
            "a gangway bench result array from before schema version 1: \
             rerun gangway bench --json"
                .into(),
        ),
        Document::OtherArray => Err("a JSON array, but not of Chrome trace events (its first \
             element has no \"ph\") nor of gangway bench results"
            .into()),
        Document::Unknown => {
            Err("not a Chrome trace (no \"traceEvents\") nor a gangway bench report".into())
        }
    }
}

/// An imported trace, indexed for the timeline: gangway's by device and lane (a pipeline run's
/// lanes titled as the run names them, stages or folded devices or gangs, as in the lab),
/// another tool's one row per thread under its process, its slices coloured by name; counter
/// tracks under theirs; instants on their rows; flows linked into arrows. `source`: the file's
/// bytes, for saving.
fn opened_trace(trace: ChromeTrace, source: Arc<[u8]>) -> Loaded {
    let ChromeTrace {
        dialect,
        events,
        flows,
        instants,
        tracks,
        rows,
        counters,
        phases,
        not_drawn,
    } = trace;
    let bubble = match dialect {
        Dialect::Gangway => gangway::trace::pipeline_bubble(&events),
        Dialect::Foreign => None,
    };
    // Each event's place in its track: the import sorted events by start, so a track keeps
    // them in this order.
    let mut next_in_track: std::collections::HashMap<(usize, Lane), usize> = Default::default();
    let places: Vec<((usize, Lane), usize)> = events
        .iter()
        .map(|e| {
            let track = (e.device, e.lane);
            let n = next_in_track.entry(track).or_default();
            *n += 1;
            (track, *n - 1)
        })
        .collect();
    let mut data = match dialect {
        Dialect::Gangway => TimelineData::from_events(events),
        Dialect::Foreign => TimelineData::from_events_by_name(events),
    };
    data.link_flows(flows.into_iter().filter_map(|b| {
        let &(track, index) = places.get(b.event)?;
        Some(FlowPoint {
            track,
            index,
            flow: b.flow,
        })
    }));
    data.instants = instants
        .into_iter()
        .map(|i| InstantMark {
            track: match i.scope {
                InstantScope::Global => None,
                _ => i.device.map(|d| (d, i.lane)),
            },
            ns: i.ns,
            name: i.name,
        })
        .collect();
    data.add_instant_rows();
    if bubble.is_some() {
        // Titled as the run's tracks say its lanes are: stages, or folded, devices or gangs.
        data.device_prefix = Some(gangway::trace::track::kind_of(&tracks).word().into());
    }
    data.lanes = tracks.into_iter().map(|t| (t.id, t)).collect();
    for (i, row) in rows.iter().enumerate() {
        data.row_titles.insert(i, row.thread_label());
        data.groups.insert(i, row.process_label());
    }
    data.counters = counters
        .into_iter()
        .map(|c| {
            let (group, device) = match (dialect, &c.pid) {
                (Dialect::Gangway, Id::Int(pid)) => (None, usize::try_from(*pid).ok()),
                _ => (Some(process_label(&c.pid, c.process_name.as_deref())), None),
            };
            CounterRow::new(c.name, group, device, c.points)
        })
        .collect();
    Loaded::Trace(Box::new(OpenedTrace {
        data: Arc::new(data),
        bubble,
        dialect,
        phases,
        not_drawn,
        source,
    }))
}

/// Parses and interprets a file's bytes (gzipped or not); `name` is what errors call the file.
pub fn open_bytes(bytes: &[u8], name: &str) -> Result<Loaded, String> {
    let raw = bytes;
    let text = gangway::trace::chrome::text_of(bytes).map_err(|e| format!("{name}: {e}"))?;
    let bytes: &[u8] = &text;
    let not_json = |e: serde_json::Error| format!("{name} is not JSON: {e}");
    let kind =
        gangway::trace::chrome::sniff(bytes).map_err(|e| format!("{name} is not JSON: {e}"))?;
    let loaded = if kind == Document::Trace {
        // Straight from the text: a `Value` of a large trace would take most of the time and
        // memory of the open.
        gangway::trace::chrome::parse_slice(bytes).map(|t| opened_trace(t, Arc::from(raw)))
    } else {
        let v: Value = serde_json::from_slice(bytes).map_err(not_json)?;
        interpret_as(kind, &v)
    };
    loaded.map_err(|e| format!("{name}: {e}"))
}

/// Reads and interprets the file at `path`. Blocking: the UI runs it on a worker thread.
pub fn open(path: &Path) -> Result<Loaded, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    open_bytes(&bytes, &path.display().to_string())
}
