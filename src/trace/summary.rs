//! A trace summed up for a machine with no display (`gangway trace`) and for the viewer's
//! Files tab: events by phase and what is not drawn, processes and threads with the span, busy
//! time and utilization of each thread, the names that took the most time, counter tracks, and
//! for gangway's own traces each device's kernels against transfers (with the bytes its transfers
//! moved, by kind), each program's kernels per run, and the pipeline bubble.
//!
//! Pure data: the CLI and the viewer format it. One pass over the (start-sorted) events, so a
//! million-event trace sums up in well under a second.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use super::bubble::{PipelineBubble, pipeline_bubble};
use super::chrome::{ChromeTrace, Dialect};
use super::event::{Direction, Event, EventKind, TransferKind};

/// A count of something, by what it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Count {
    pub what: String,
    pub count: u64,
}

/// One row's time: a thread of a foreign trace, a lane of a gangway device.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ThreadSummary {
    /// The thread's id as the file wrote it; for gangway traces the lane.
    pub tid: String,
    pub name: Option<String>,
    /// Its title, as the viewer's row shows it.
    pub label: String,
    pub slices: u64,
    /// First slice's start, from the trace's start.
    pub start_ns: u64,
    /// First slice's start to last slice's end.
    pub span_ns: u64,
    /// The union of its slices' intervals (nested or overlapping slices count once).
    pub busy_ns: u64,
    /// `busy / span`, in `[0, 1]` (0 for an empty span).
    pub utilization: f64,
}

/// A process (a gangway device) and its threads, in display order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcessSummary {
    pub pid: String,
    pub name: Option<String>,
    pub threads: Vec<ThreadSummary>,
}

/// The time slices of one name took, summed (nested slices each count: inclusive time).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NameTotal {
    pub name: String,
    pub count: u64,
    pub total_ns: u64,
}

/// A counter track: its samples and their range.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CounterSummary {
    pub process: String,
    pub name: String,
    pub samples: usize,
    pub min: f64,
    pub max: f64,
}

/// A gangway device: kernels against transfers, each as a count and the union of its
/// intervals, and the device's busy time (either) over the trace's span.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceSummary {
    pub device: usize,
    pub name: Option<String>,
    pub kernels: u64,
    pub kernel_ns: u64,
    pub transfers: u64,
    pub transfer_ns: u64,
    pub busy_ns: u64,
    /// `busy / trace span` (see [`utilization`](mod@super::utilization)).
    pub utilization: f64,
    /// The bytes its transfers moved, every kind together (0 where the trace has none).
    pub transfer_bytes: u64,
    /// Its transfers that say what they moved, by kind and direction (only those it had).
    pub moved: Vec<MovedBytes>,
}

/// A device's transfers of one kind and direction, and the bytes they moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MovedBytes {
    pub kind: TransferKind,
    pub direction: Direction,
    pub transfers: u64,
    pub bytes: u64,
}

/// A device being summed.
#[derive(Debug, Default)]
struct DeviceSum {
    kernels: u64,
    kernel: Union,
    transfers: u64,
    transfer: Union,
    busy: Union,
    moved: BTreeMap<(TransferKind, Direction), (u64, u64)>,
}

/// One compiled program of a gangway trace (events carry its id): what one run of it runs. A run
/// runs each of its kernel nodes once on each device of the node's gang (one kernel event each),
/// so the distinct (device, node) pairs of its kernel events are its kernels per run, and its
/// kernel events over them the runs the trace holds (fractional where the trace cut a run off).
/// A kernel is most often one launch; a node may record several (a transposing matmul's two
/// passes, Adam over more tensors than one launch takes), which `gangway bench` counts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProgramSummary {
    /// The program's id in the trace.
    pub program: u64,
    /// Kernels (a node on one device) per run, every device together.
    pub kernels_per_run: u64,
    /// Transfer events (uploads, sends, receives, read-backs, gathers) per run.
    pub transfers_per_run: f64,
    /// Runs in the trace.
    pub runs: f64,
    /// The name of its first kernel (by node), to tell the programs apart.
    pub first_kernel: Option<String>,
}

/// A program being summed.
#[derive(Debug, Default)]
struct ProgramSum<'a> {
    kernels: u64,
    transfers: u64,
    pairs: HashSet<(usize, u32)>,
    first: Option<(u32, &'a str)>,
}

/// See the module doc.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceSummary {
    /// `"gangway"` or `"foreign"` (see [`Dialect`]).
    pub dialect: &'static str,
    /// Trace events read, of every phase.
    pub events: u64,
    /// Slices drawn (`X`, and `B`/`E` pairs).
    pub slices: usize,
    /// Instants (`i`/`I`) with a time.
    pub instants: usize,
    /// First slice's start to last slice's end.
    pub span_ns: u64,
    pub phases: Vec<Count>,
    pub not_drawn: Vec<Count>,
    pub processes: Vec<ProcessSummary>,
    /// The `top` names by total time, most first.
    pub top_names: Vec<NameTotal>,
    pub counters: Vec<CounterSummary>,
    /// Gangway traces only.
    pub devices: Vec<DeviceSummary>,
    /// Gangway traces only: every program with kernel events, by id.
    pub programs: Vec<ProgramSummary>,
    /// Gangway traces with pipeline ops only.
    pub bubble: Option<PipelineBubble>,
}

/// A running union of intervals given in order of start.
#[derive(Debug, Clone, Copy, Default)]
struct Union {
    current: Option<(u64, u64)>,
    total: u64,
}

impl Union {
    fn add(&mut self, start: u64, end: u64) {
        self.current = match self.current {
            Some((s, e)) if start <= e => Some((s, e.max(end))),
            Some((s, e)) => {
                self.total += e - s;
                Some((start, end))
            }
            None => Some((start, end)),
        };
    }

    fn total(&self) -> u64 {
        self.total + self.current.map_or(0, |(s, e)| e - s)
    }
}

/// A row being summed.
#[derive(Debug, Clone, Copy, Default)]
struct RowSum {
    slices: u64,
    first: u64,
    last: u64,
    busy: Union,
}

fn counts(list: &[(String, u64)]) -> Vec<Count> {
    list.iter()
        .map(|(what, count)| Count {
            what: what.clone(),
            count: *count,
        })
        .collect()
}

impl TraceSummary {
    /// Sums up `trace`, keeping the `top` names that took the most time.
    pub fn of(trace: &ChromeTrace, top: usize) -> Self {
        let events = &trace.events;
        let origin = events.first().map_or(0, |e| e.start_ns);
        let end = events
            .iter()
            .map(Event::clamped_end_ns)
            .max()
            .unwrap_or(origin);
        // Rows: (device, lane) for gangway's traces; a foreign trace's lane is always compute.
        let mut rows: HashMap<(usize, u8), RowSum> = HashMap::new();
        let mut names: HashMap<&str, (u64, u64)> = HashMap::new();
        let mut devices: HashMap<usize, DeviceSum> = HashMap::new();
        let mut programs: HashMap<u64, ProgramSum<'_>> = HashMap::new();
        // Events are sorted by start: every union below is fed in order.
        for e in events {
            let (s, t) = (e.start_ns, e.clamped_end_ns());
            let row = rows.entry((e.device, e.lane as u8)).or_insert(RowSum {
                first: s,
                ..RowSum::default()
            });
            row.slices += 1;
            row.last = row.last.max(t);
            row.busy.add(s, t);
            let n = names.entry(e.name.as_str()).or_default();
            n.0 += 1;
            n.1 += t - s;
            if trace.dialect == Dialect::Gangway && e.is_device_work() {
                let d = devices.entry(e.device).or_default();
                if e.kind == EventKind::Kernel {
                    d.kernels += 1;
                    d.kernel.add(s, t);
                } else {
                    d.transfers += 1;
                    d.transfer.add(s, t);
                    if let Some(m) = e.moved {
                        let sum = d.moved.entry((m.kind, m.direction)).or_default();
                        sum.0 += 1;
                        sum.1 += m.bytes;
                    }
                }
                d.busy.add(s, t);
                if let Some(id) = e.program {
                    let p = programs.entry(id).or_default();
                    if e.kind == EventKind::Kernel {
                        p.kernels += 1;
                        let node = e.node.unwrap_or(u32::MAX);
                        p.pairs.insert((e.device, node));
                        if p.first.is_none_or(|(n, _)| node < n) {
                            p.first = Some((node, e.name.as_str()));
                        }
                    } else {
                        p.transfers += 1;
                    }
                }
            }
        }
        let thread = |tid: String, name: Option<String>, label: String, r: &RowSum| {
            let span = r.last - r.first;
            ThreadSummary {
                tid,
                name,
                label,
                slices: r.slices,
                start_ns: r.first - origin,
                span_ns: span,
                busy_ns: r.busy.total(),
                utilization: if span > 0 {
                    r.busy.total() as f64 / span as f64
                } else {
                    0.0
                },
            }
        };
        let mut processes: Vec<ProcessSummary> = Vec::new();
        match trace.dialect {
            Dialect::Foreign => {
                for (i, row) in trace.rows.iter().enumerate() {
                    let pid = row.pid.to_string();
                    if processes.last().is_none_or(|p| p.pid != pid) {
                        processes.push(ProcessSummary {
                            pid,
                            name: row.process_name.clone(),
                            threads: Vec::new(),
                        });
                    }
                    let sum = rows.get(&(i, crate::trace::Lane::Compute as u8));
                    if let (Some(p), Some(r)) = (processes.last_mut(), sum) {
                        p.threads.push(thread(
                            row.tid.to_string(),
                            row.thread_name.clone(),
                            row.thread_label(),
                            r,
                        ));
                    }
                }
            }
            Dialect::Gangway => {
                let mut keys: Vec<(usize, u8)> = rows.keys().copied().collect();
                keys.sort_unstable();
                for (device, lane) in keys {
                    let pid = device.to_string();
                    if processes.last().is_none_or(|p| p.pid != pid) {
                        processes.push(ProcessSummary {
                            pid,
                            name: device_name(trace, device),
                            threads: Vec::new(),
                        });
                    }
                    let lane_name = crate::trace::Lane::ALL
                        .get(usize::from(lane))
                        .map_or("?", |l| l.name());
                    if let (Some(p), Some(r)) = (processes.last_mut(), rows.get(&(device, lane))) {
                        p.threads.push(thread(
                            lane_name.to_string(),
                            Some(lane_name.to_string()),
                            lane_name.to_string(),
                            r,
                        ));
                    }
                }
            }
        }
        let mut top_names: Vec<NameTotal> = names
            .into_iter()
            .map(|(name, (count, total_ns))| NameTotal {
                name: name.to_string(),
                count,
                total_ns,
            })
            .collect();
        top_names.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.name.cmp(&b.name)));
        top_names.truncate(top);
        let span_ns = end - origin;
        let mut devices: Vec<DeviceSummary> = devices
            .into_iter()
            .map(|(device, d)| DeviceSummary {
                device,
                name: device_name(trace, device),
                kernels: d.kernels,
                kernel_ns: d.kernel.total(),
                transfers: d.transfers,
                transfer_ns: d.transfer.total(),
                busy_ns: d.busy.total(),
                utilization: if span_ns > 0 {
                    d.busy.total() as f64 / span_ns as f64
                } else {
                    0.0
                },
                transfer_bytes: d.moved.values().map(|&(_, bytes)| bytes).sum(),
                moved: (d.moved.into_iter())
                    .map(|((kind, direction), (transfers, bytes))| MovedBytes {
                        kind,
                        direction,
                        transfers,
                        bytes,
                    })
                    .collect(),
            })
            .collect();
        devices.sort_by_key(|d| d.device);
        let mut programs: Vec<ProgramSummary> = programs
            .into_iter()
            .filter(|(_, p)| !p.pairs.is_empty())
            .map(|(program, p)| {
                let launches = p.pairs.len() as u64;
                let runs = p.kernels as f64 / launches as f64;
                ProgramSummary {
                    program,
                    kernels_per_run: launches,
                    transfers_per_run: p.transfers as f64 / runs,
                    runs,
                    first_kernel: p.first.map(|(_, name)| name.to_string()),
                }
            })
            .collect();
        programs.sort_by_key(|p| p.program);
        let counters = trace
            .counters
            .iter()
            .map(|c| CounterSummary {
                process: super::chrome::process_label(&c.pid, c.process_name.as_deref()),
                name: c.name.clone(),
                samples: c.points.len(),
                min: c.points.iter().map(|p| p.1).fold(f64::INFINITY, f64::min),
                max: c
                    .points
                    .iter()
                    .map(|p| p.1)
                    .fold(f64::NEG_INFINITY, f64::max),
            })
            .collect();
        let bubble = match trace.dialect {
            Dialect::Gangway => pipeline_bubble(events),
            Dialect::Foreign => None,
        };
        TraceSummary {
            dialect: match trace.dialect {
                Dialect::Gangway => "gangway",
                Dialect::Foreign => "foreign",
            },
            events: trace.event_count(),
            slices: events.len(),
            instants: trace.instants.len(),
            span_ns,
            phases: counts(&trace.phases),
            not_drawn: counts(&trace.not_drawn),
            processes,
            top_names,
            counters,
            devices,
            programs,
            bubble,
        }
    }
}

fn device_name(trace: &ChromeTrace, device: usize) -> Option<String> {
    trace
        .tracks
        .iter()
        .find(|t| t.id == device)
        .map(|t| t.label.clone())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::trace::chrome::{parse, to_json};
    use crate::trace::{EventMeta, FlowRole};

    #[test]
    fn a_foreign_trace_sums_per_thread_and_name() {
        let trace = parse(&json!([
            {"ph": "M", "name": "process_name", "pid": 9, "args": {"name": "python3"}},
            {"ph": "M", "name": "thread_name", "pid": 9, "tid": 1, "args": {"name": "main"}},
            // Nested: busy 0..10 once, names each count.
            {"ph": "X", "name": "step", "cat": "op", "pid": 9, "tid": 1, "ts": 100, "dur": 10},
            {"ph": "X", "name": "mm", "cat": "op", "pid": 9, "tid": 1, "ts": 101, "dur": 4},
            {"ph": "X", "name": "mm", "cat": "op", "pid": 9, "tid": 1, "ts": 130, "dur": 10},
            {"ph": "X", "name": "io", "cat": "op", "pid": "disk", "tid": 2, "ts": 110, "dur": 5},
            {"ph": "i", "name": "mark", "pid": 9, "tid": 1, "ts": 100},
            {"ph": "C", "name": "mem", "pid": 9, "ts": 100, "args": {"value": 3}},
            {"ph": "C", "name": "mem", "pid": 9, "ts": 120, "args": {"value": 7}},
        ]))
        .unwrap();
        let s = TraceSummary::of(&trace, 2);
        assert_eq!(s.dialect, "foreign");
        assert_eq!((s.events, s.slices, s.span_ns), (9, 4, 40_000));
        let p: Vec<(&str, Option<&str>, usize)> = s
            .processes
            .iter()
            .map(|p| (p.pid.as_str(), p.name.as_deref(), p.threads.len()))
            .collect();
        assert_eq!(p, [("9", Some("python3"), 1), ("disk", None, 1)]);
        let main = &s.processes[0].threads[0];
        assert_eq!(
            (main.tid.as_str(), main.name.as_deref(), main.slices),
            ("1", Some("main"), 3)
        );
        assert_eq!(
            (main.start_ns, main.span_ns, main.busy_ns),
            (0, 40_000, 20_000)
        );
        assert!((main.utilization - 0.5).abs() < 1e-12);
        assert_eq!(s.processes[1].threads[0].start_ns, 10_000);
        let top: Vec<(&str, u64, u64)> = s
            .top_names
            .iter()
            .map(|n| (n.name.as_str(), n.count, n.total_ns))
            .collect();
        assert_eq!(top, [("mm", 2, 14_000), ("step", 1, 10_000)]);
        assert_eq!(s.instants, 1);
        assert!(s.not_drawn.is_empty(), "{:?}", s.not_drawn);
        assert_eq!(
            (s.counters[0].samples, s.counters[0].min, s.counters[0].max),
            (2, 3.0, 7.0)
        );
        assert!(s.devices.is_empty() && s.bubble.is_none());
    }

    #[test]
    fn a_gangway_trace_sums_kernels_against_transfers_and_its_bubble() {
        use crate::trace::PipelineOp::{Backward, Forward};
        let k = |d: usize, op, name: &str, s: u64, e: u64| {
            EventMeta::kernel(d).op(op).event(name.into(), s, e)
        };
        let events = vec![
            k(0, Forward, "F0", 0, 100),
            k(0, Backward, "B0", 200, 300),
            EventMeta::transfer(0)
                .flow(1, FlowRole::Out)
                .event("send".into(), 100, 150),
            EventMeta::transfer(1)
                .flow(1, FlowRole::In)
                .moved(TransferKind::PointToPoint, Direction::In, 3_000)
                .event("recv".into(), 120, 160),
            EventMeta::transfer(1)
                .moved(TransferKind::AllToAll, Direction::In, 500)
                .event("gather".into(), 300, 310),
            EventMeta::transfer(1)
                .moved(TransferKind::AllToAll, Direction::In, 700)
                .event("gather".into(), 320, 330),
            k(1, Forward, "F0", 160, 200),
            k(1, Backward, "B0", 200, 260),
            EventMeta::host_encode(1).event("encode".into(), 0, 400),
        ];
        let trace = parse(&to_json(
            &events,
            &[crate::trace::Track::device(0, "gpu A")],
        ))
        .unwrap();
        let s = TraceSummary::of(&trace, 10);
        assert_eq!(s.dialect, "gangway");
        let d: Vec<(usize, u64, u64, u64, u64, u64)> = s
            .devices
            .iter()
            .map(|d| {
                (
                    d.device,
                    d.kernels,
                    d.kernel_ns,
                    d.transfers,
                    d.transfer_ns,
                    d.busy_ns,
                )
            })
            .collect();
        assert_eq!(d, [(0, 2, 200, 1, 50, 250), (1, 2, 100, 3, 60, 160)]);
        // Bytes by kind and direction: the send said none, device 1's three transfers did.
        assert_eq!(
            (s.devices[0].transfer_bytes, s.devices[0].moved.len()),
            (0, 0)
        );
        assert_eq!(s.devices[1].transfer_bytes, 4_200);
        let moved: Vec<(TransferKind, Direction, u64, u64)> = (s.devices[1].moved.iter())
            .map(|m| (m.kind, m.direction, m.transfers, m.bytes))
            .collect();
        assert_eq!(
            moved,
            [
                (TransferKind::PointToPoint, Direction::In, 1, 3_000),
                (TransferKind::AllToAll, Direction::In, 2, 1_200)
            ]
        );
        // Events of no program count for no program.
        assert!(s.programs.is_empty(), "{:?}", s.programs);
        assert_eq!(s.devices[0].name.as_deref(), Some("gpu A"));
        assert!((s.devices[0].utilization - 250.0 / 400.0).abs() < 1e-12);
        // The one bubble computation: both stages' ops over 0..300.
        let b = s.bubble.unwrap();
        assert_eq!((b.stages, b.makespan_ns), (2, 300));
        assert!((b.fraction - (1.0 - 300.0 / 600.0)).abs() < 1e-12);
        let lanes: Vec<Vec<&str>> = s
            .processes
            .iter()
            .map(|p| p.threads.iter().map(|t| t.tid.as_str()).collect())
            .collect();
        assert_eq!(
            lanes,
            [
                vec!["compute", "transfer"],
                vec!["host", "compute", "transfer"]
            ]
        );
    }

    /// Two and a half runs of a program of three kernel nodes, one of them on two devices (four
    /// launches a run), with a read-back each; and one run of another program.
    #[test]
    fn a_gangway_trace_counts_each_programs_kernels_per_run() {
        let mut events = Vec::new();
        let mut t = 0;
        let mut at = |meta: EventMeta, name: &str| {
            t += 10;
            meta.event(name.into(), t, t + 5)
        };
        for run in 0..3 {
            let kernels: &[(usize, u32, &str)] = if run < 2 {
                &[(0, 1, "embed"), (0, 2, "mm"), (1, 2, "mm"), (1, 3, "loss")]
            } else {
                &[(0, 1, "embed"), (0, 2, "mm")]
            };
            for &(d, node, name) in kernels {
                events.push(at(EventMeta::kernel(d).program(7).node(node), name));
            }
            if run < 2 {
                events.push(at(EventMeta::transfer(1).program(7).node(4), "read back"));
            }
        }
        events.push(at(EventMeta::kernel(0).program(9).node(0), "eval"));
        let trace = parse(&to_json(&events, &[])).unwrap();
        let s = TraceSummary::of(&trace, 10);
        let p: Vec<(u64, u64, f64, f64, Option<&str>)> = s
            .programs
            .iter()
            .map(|p| {
                (
                    p.program,
                    p.kernels_per_run,
                    p.runs,
                    p.transfers_per_run,
                    p.first_kernel.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            p,
            [
                (7, 4, 2.5, 2.0 / 2.5, Some("embed")),
                (9, 1, 1.0, 0.0, Some("eval"))
            ]
        );
    }
}
