//! Structure check for Chrome trace-event JSON, so tests can assert a real trace will open
//! cleanly in Perfetto and `chrome://tracing` without a person looking at it.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

/// What [`check`] found in a valid trace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChromeSummary {
    /// Processes named by `process_name` metadata.
    pub processes: usize,
    /// Threads named by `thread_name` metadata.
    pub threads: usize,
    /// Complete (`X`) events.
    pub complete: usize,
    /// Counter (`C`) samples.
    pub counters: usize,
    /// Flows with their `s` and `f` events.
    pub flow_pairs: usize,
}

type Thread = (i64, i64);

/// A complete event's interval in integer nanoseconds, so abutting slices compare exactly.
struct Slice {
    start: i64,
    end: i64,
    index: usize,
}

struct FlowPoint {
    thread: Thread,
    ts: i64,
    index: usize,
    /// Binds to the slice enclosing `ts` (`s`, and `f` with `"bp": "e"`), else the next slice.
    enclosing: bool,
    cat: Option<String>,
    name: Option<String>,
}

#[derive(Default)]
struct Flow {
    starts: Vec<FlowPoint>,
    ends: Vec<FlowPoint>,
}

/// Checks the subset of the format [`to_json`](super::to_json) writes (phases `M`, `X`, `C`,
/// `s`, `f`):
///
/// - the top level is an object with a `traceEvents` array of objects;
/// - every event has `ph` and an integer `pid`; `X`, `s`, `f` and thread metadata have an
///   integer `tid`; all but `M` have a finite `ts`; `X` has a finite `dur >= 0`;
/// - every pid used has `process_name` metadata, every (pid, tid) used by `X`, `s` or `f` has
///   `thread_name` metadata;
/// - `X` events on one thread neither overlap nor nest;
/// - every flow id has exactly one `s` and one `f`, with equal `cat` and `name`, `s.ts <= f.ts`,
///   and each binds to a slice on its thread;
/// - counters have a name and a non-empty `args` of numbers.
///
/// Errors name the offending `traceEvents[i]` and what is wrong with it.
pub fn check(trace: &Value) -> Result<ChromeSummary, String> {
    let events = trace
        .get("traceEvents")
        .and_then(Value::as_array)
        .ok_or("top level must be an object with a \"traceEvents\" array")?;

    let mut summary = ChromeSummary::default();
    let mut process_names = BTreeSet::new();
    let mut thread_names = BTreeSet::new();
    // First event that needs each pid / thread to be named.
    let mut pids_used: BTreeMap<i64, usize> = BTreeMap::new();
    let mut threads_used: BTreeMap<Thread, usize> = BTreeMap::new();
    let mut slices: BTreeMap<Thread, Vec<Slice>> = BTreeMap::new();
    let mut flows: BTreeMap<String, Flow> = BTreeMap::new();

    for (i, event) in events.iter().enumerate() {
        let obj = event
            .as_object()
            .ok_or_else(|| format!("traceEvents[{i}] is not an object"))?;
        let ph = obj
            .get("ph")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("traceEvents[{i}] has no string \"ph\""))?;
        let ev = Ev { i, ph, obj };
        let pid = ev.int("pid")?;
        pids_used.entry(pid).or_insert(i);
        match ph {
            "M" => {
                let name = ev.string("name")?;
                match name {
                    "process_name" => {
                        ev.arg_string("name")?;
                        process_names.insert(pid);
                    }
                    "thread_name" => {
                        let tid = ev.int("tid")?;
                        ev.arg_string("name")?;
                        thread_names.insert((pid, tid));
                    }
                    "process_sort_index" => ev.arg_int("sort_index")?,
                    "thread_sort_index" => {
                        ev.int("tid")?;
                        ev.arg_int("sort_index")?;
                    }
                    _ => {}
                }
            }
            "X" => {
                ev.string("name")?;
                let thread = (pid, ev.int("tid")?);
                let start = ev.time("ts")?;
                let dur = ev.time("dur")?;
                if dur < 0 {
                    return Err(format!("{} has negative \"dur\"", ev.describe()));
                }
                threads_used.entry(thread).or_insert(i);
                slices.entry(thread).or_default().push(Slice {
                    start,
                    end: start.saturating_add(dur),
                    index: i,
                });
                summary.complete += 1;
            }
            "C" => {
                ev.string("name")?;
                ev.time("ts")?;
                let args = ev.args()?;
                if args.is_empty() {
                    return Err(format!("{} has empty \"args\"", ev.describe()));
                }
                if let Some((k, _)) = args.iter().find(|(_, v)| !v.is_number()) {
                    return Err(format!(
                        "{}: counter arg {k:?} is not a number",
                        ev.describe()
                    ));
                }
                summary.counters += 1;
            }
            "s" | "f" => {
                let thread = (pid, ev.int("tid")?);
                let point = FlowPoint {
                    thread,
                    ts: ev.time("ts")?,
                    index: i,
                    enclosing: ph == "s" || obj.get("bp").and_then(Value::as_str) == Some("e"),
                    cat: obj.get("cat").and_then(Value::as_str).map(str::to_string),
                    name: obj.get("name").and_then(Value::as_str).map(str::to_string),
                };
                let id = match obj.get("id") {
                    Some(id @ (Value::Number(_) | Value::String(_))) => id.to_string(),
                    _ => return Err(format!("{} has no number or string \"id\"", ev.describe())),
                };
                threads_used.entry(thread).or_insert(i);
                let flow = flows.entry(id).or_default();
                match ph {
                    "s" => flow.starts.push(point),
                    _ => flow.ends.push(point),
                }
            }
            _ => return Err(format!("{} has unsupported phase", ev.describe())),
        }
    }

    for (pid, i) in pids_used {
        if !process_names.contains(&pid) {
            return Err(format!(
                "pid {pid} (first used by traceEvents[{i}]) has no process_name metadata"
            ));
        }
    }
    for ((pid, tid), i) in threads_used {
        if !thread_names.contains(&(pid, tid)) {
            return Err(format!(
                "pid {pid} tid {tid} (first used by traceEvents[{i}]) has no thread_name metadata"
            ));
        }
    }

    for ((pid, tid), list) in &mut slices {
        list.sort_by_key(|s| (s.start, s.end));
        for pair in list.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            if b.start < a.end {
                return Err(format!(
                    "X events overlap on pid {pid} tid {tid}: traceEvents[{}] {} [{} ns, {} ns) \
                     and traceEvents[{}] {} [{} ns, {} ns)",
                    a.index,
                    name_of(events, a.index),
                    a.start,
                    a.end,
                    b.index,
                    name_of(events, b.index),
                    b.start,
                    b.end
                ));
            }
        }
    }

    for (id, flow) in &flows {
        let (s, f) = match (flow.starts.as_slice(), flow.ends.as_slice()) {
            ([s], [f]) => (s, f),
            (starts, ends) => {
                let at = |points: &[FlowPoint]| {
                    let idx: Vec<_> = points.iter().map(|p| p.index).collect();
                    format!("{idx:?}")
                };
                return Err(format!(
                    "flow id {id} needs exactly one \"s\" and one \"f\", has {} s at traceEvents{} \
                     and {} f at traceEvents{}",
                    starts.len(),
                    at(starts),
                    ends.len(),
                    at(ends)
                ));
            }
        };
        if (&s.cat, &s.name) != (&f.cat, &f.name) {
            return Err(format!(
                "flow id {id}: s (traceEvents[{}]) and f (traceEvents[{}]) differ in cat or \
                 name, so viewers will not pair them",
                s.index, f.index
            ));
        }
        if s.ts > f.ts {
            return Err(format!(
                "flow id {id}: s (traceEvents[{}]) at {} ns is after f (traceEvents[{}]) at {} ns",
                s.index, s.ts, f.index, f.ts
            ));
        }
        for p in [s, f] {
            let list = slices.get(&p.thread).map_or(&[][..], Vec::as_slice);
            if !binds(list, p) {
                let how = if p.enclosing {
                    "enclosing"
                } else {
                    "following"
                };
                return Err(format!(
                    "flow id {id}: traceEvents[{}] at {} ns on pid {} tid {} has no {how} X slice",
                    p.index, p.ts, p.thread.0, p.thread.1
                ));
            }
        }
        summary.flow_pairs += 1;
    }

    summary.processes = process_names.len();
    summary.threads = thread_names.len();
    Ok(summary)
}

/// Whether a flow point has a slice to attach to on its (sorted, non-overlapping) thread.
fn binds(slices: &[Slice], p: &FlowPoint) -> bool {
    if p.enclosing {
        let after = slices.partition_point(|s| s.start <= p.ts);
        after > 0 && slices[after - 1].end >= p.ts
    } else {
        slices.partition_point(|s| s.start < p.ts) < slices.len()
    }
}

fn name_of(events: &[Value], i: usize) -> String {
    let name = events[i].get("name").and_then(Value::as_str).unwrap_or("");
    format!("{name:?}")
}

/// One event under check, for field access with specific errors.
struct Ev<'a> {
    i: usize,
    ph: &'a str,
    obj: &'a Map<String, Value>,
}

impl<'a> Ev<'a> {
    fn describe(&self) -> String {
        match self.obj.get("name").and_then(Value::as_str) {
            Some(name) => format!("traceEvents[{}] ({} {name:?})", self.i, self.ph),
            None => format!("traceEvents[{}] ({})", self.i, self.ph),
        }
    }

    fn int(&self, key: &str) -> Result<i64, String> {
        let v = self.obj.get(key);
        v.and_then(Value::as_i64).ok_or_else(|| match v {
            None => format!("{} has no {key:?}", self.describe()),
            Some(v) => format!("{}: {key:?} must be an integer, is {v}", self.describe()),
        })
    }

    fn string(&self, key: &str) -> Result<&'a str, String> {
        self.obj
            .get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("{} has no string {key:?}", self.describe()))
    }

    /// A `ts`/`dur` in µs as integer nanoseconds (rounded: the export writes whole ns).
    fn time(&self, key: &str) -> Result<i64, String> {
        match self.obj.get(key).and_then(Value::as_f64) {
            Some(us) if us.is_finite() => Ok((us * 1_000.0).round() as i64),
            _ => Err(format!("{} has no finite number {key:?}", self.describe())),
        }
    }

    fn args(&self) -> Result<&'a Map<String, Value>, String> {
        self.obj
            .get("args")
            .and_then(Value::as_object)
            .ok_or_else(|| format!("{} has no \"args\" object", self.describe()))
    }

    fn arg_string(&self, key: &str) -> Result<(), String> {
        match self.args()?.get(key) {
            Some(Value::String(_)) => Ok(()),
            _ => Err(format!("{} has no string args.{key}", self.describe())),
        }
    }

    fn arg_int(&self, key: &str) -> Result<(), String> {
        match self.args()?.get(key) {
            Some(v) if v.is_i64() || v.is_u64() => Ok(()),
            _ => Err(format!("{} has no integer args.{key}", self.describe())),
        }
    }
}
