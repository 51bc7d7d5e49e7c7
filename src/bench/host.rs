//! The host's cost of a benchmark's runs: kernel launches, CPU time and context switches in a
//! window around each timed sample ([`Snapshot::starting`] and [`Snapshot::ending`]), averaged
//! per run ([`HostCost::mean`]). A window reads the calling thread's CPU time after a 1 ns sleep,
//! because Linux brings a running thread's time up to date only when it stops; without it the
//! reading's own cost landed in the window. On a real GPU a small kernel takes microseconds, and
//! what is left of a step is this.
//!
//! CPU time and switches are read per thread from Linux's `/proc/self/task` (`schedstat`: time on
//! a CPU in nanoseconds; `status`: voluntary and involuntary context switches) and split by
//! thread: gangway's own (the process's main thread, the calling thread, and the threads the
//! runtime started, [`crate::sched::threads`]) and the rest (the driver's: on a software adapter
//! such as lavapipe those run the kernels themselves, so their time is the "GPU" and not the
//! host's overhead). A thread that
//! ends inside the window takes its counts with it; one that starts is counted from zero. Other
//! systems report launches and GPU objects created alone.
//!
//! Context switches are split the same way: on lavapipe most of them are the driver's (its queue
//! thread wakes for every submission and waits on its compute threads for every dispatch), which
//! only fewer launches reduce; gangway's own are its hand-offs and waits.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// What the host spent per run of a benchmark, over its timed samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HostCost {
    /// Kernel launches (compute dispatches recorded) per run.
    pub launches: f64,
    /// CPU seconds per run of gangway's threads: the caller's and the runtime's.
    pub runtime_cpu_s: Option<f64>,
    /// CPU seconds per run of every other thread of the process (the driver's).
    pub driver_cpu_s: Option<f64>,
    /// Voluntary context switches per run, every thread (waits and hand-offs).
    pub voluntary_switches: Option<f64>,
    /// Involuntary context switches per run, every thread (preemption).
    pub involuntary_switches: Option<f64>,
    /// Context switches per run, both kinds, of gangway's threads alone (absent in reports
    /// before it was counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_switches: Option<f64>,
    /// GPU objects (buffers, bind groups, query sets, pipelines) created per run: zero in the
    /// steady state of a compiled program (absent in reports before it was counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_objects: Option<f64>,
}

impl HostCost {
    /// The mean of per-run costs (one per sample, when the samples were not back to back); each
    /// optional count only where every one has it. Nothing gives zero launches.
    pub fn mean(costs: &[HostCost]) -> HostCost {
        let n = costs.len().max(1) as f64;
        let all = |f: fn(&HostCost) -> Option<f64>| -> Option<f64> {
            costs
                .iter()
                .map(f)
                .sum::<Option<f64>>()
                .filter(|_| !costs.is_empty())
                .map(|s| s / n)
        };
        HostCost {
            launches: costs.iter().map(|c| c.launches).sum::<f64>() / n,
            runtime_cpu_s: all(|c| c.runtime_cpu_s),
            driver_cpu_s: all(|c| c.driver_cpu_s),
            voluntary_switches: all(|c| c.voluntary_switches),
            involuntary_switches: all(|c| c.involuntary_switches),
            runtime_switches: all(|c| c.runtime_switches),
            gpu_objects: all(|c| c.gpu_objects),
        }
    }

    /// Runtime CPU microseconds per launch.
    pub fn runtime_us_per_launch(&self) -> Option<f64> {
        let cpu = self.runtime_cpu_s?;
        (self.launches > 0.0).then(|| cpu * 1e6 / self.launches)
    }

    /// Context switches per run, both kinds.
    pub fn switches(&self) -> Option<f64> {
        Some(self.voluntary_switches? + self.involuntary_switches?)
    }

    /// A short line for tables: `48 launches, 1.2 ms runtime CPU (25 µs/launch), 3.4 ms
    /// driver CPU, 210 switches (40 gangway's)`, and the GPU objects created where there were
    /// any.
    pub fn summary(&self) -> String {
        use super::format::{number, seconds};
        let mut parts = vec![format!("{} launches", number(self.launches))];
        if let Some(cpu) = self.runtime_cpu_s {
            let per = self
                .runtime_us_per_launch()
                .map_or(String::new(), |u| format!(" ({} µs/launch)", number(u)));
            parts.push(format!("{} runtime CPU{per}", seconds(cpu)));
        }
        if let Some(cpu) = self.driver_cpu_s {
            parts.push(format!("{} driver CPU", seconds(cpu)));
        }
        if let Some(s) = self.switches() {
            let ours = self
                .runtime_switches
                .map_or(String::new(), |r| format!(" ({} gangway's)", number(r)));
            parts.push(format!("{} switches{ours}", number(s)));
        }
        if let Some(n) = self.gpu_objects.filter(|&n| n > 0.0) {
            parts.push(format!("{} GPU objects created", number(n)));
        }
        parts.join(", ")
    }
}

/// One thread's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct ThreadCounts {
    cpu_ns: u64,
    voluntary: u64,
    involuntary: u64,
    /// The caller's thread or a runtime worker.
    ours: bool,
}

/// The process's counters at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    launches: u64,
    objects: u64,
    /// Per thread id; `None` where `/proc/self/task` cannot be read.
    threads: Option<HashMap<u64, ThreadCounts>>,
}

impl Snapshot {
    /// The counters at the start of a short window (one sample) that [`Snapshot::ending`]
    /// closes. Linux brings a running thread's CPU time up to date only when it stops running,
    /// so a snapshot of the busy caller would lag by whatever it did since it last waited
    /// (reading these very counters, a few hundred µs in a debug build), and that would land
    /// in the window. So the caller's counters are read last, right after a 1 ns sleep.
    pub fn starting() -> Self {
        Self {
            launches: crate::device::launches(),
            objects: crate::device::objects_created(),
            threads: threads(Caller::Last),
        }
    }

    /// The counters at the end of a window [`Snapshot::starting`] opened: the caller's switches
    /// read first, then its CPU time after the same sleep (whose switch is thus not counted),
    /// then the other threads'.
    pub fn ending() -> Self {
        let launches = crate::device::launches();
        let objects = crate::device::objects_created();
        Self {
            launches,
            objects,
            threads: threads(Caller::First),
        }
    }

    /// Per run of `runs`, from `self` (taken before) to `after`.
    pub fn per_run(&self, after: &Snapshot, runs: usize) -> HostCost {
        let n = runs.max(1) as f64;
        let launches = after.launches.saturating_sub(self.launches) as f64 / n;
        let gpu_objects = Some(after.objects.saturating_sub(self.objects) as f64 / n);
        let Some((before, now)) = self.threads.as_ref().zip(after.threads.as_ref()) else {
            return HostCost {
                launches,
                runtime_cpu_s: None,
                driver_cpu_s: None,
                voluntary_switches: None,
                involuntary_switches: None,
                runtime_switches: None,
                gpu_objects,
            };
        };
        let (mut ours, mut theirs, mut voluntary, mut involuntary) = (0u64, 0u64, 0u64, 0u64);
        let mut our_switches = 0u64;
        for (tid, t) in now {
            let was = before.get(tid).copied().unwrap_or_default();
            let cpu = t.cpu_ns.saturating_sub(was.cpu_ns);
            let switches = t.voluntary.saturating_sub(was.voluntary)
                + t.involuntary.saturating_sub(was.involuntary);
            if t.ours {
                ours += cpu;
                our_switches += switches;
            } else {
                theirs += cpu;
            }
            voluntary += t.voluntary.saturating_sub(was.voluntary);
            involuntary += t.involuntary.saturating_sub(was.involuntary);
        }
        HostCost {
            launches,
            runtime_cpu_s: Some(ours as f64 * 1e-9 / n),
            driver_cpu_s: Some(theirs as f64 * 1e-9 / n),
            voluntary_switches: Some(voluntary as f64 / n),
            involuntary_switches: Some(involuntary as f64 / n),
            runtime_switches: Some(our_switches as f64 / n),
            gpu_objects,
        }
    }
}

/// Where a window's snapshot reads the calling thread ([`Snapshot::starting`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Caller {
    First,
    Last,
}

/// One thread's counters from its `schedstat` and `status`; `None` when it has ended. For the
/// calling thread (`sleep`), a 1 ns sleep (so Linux brings its CPU time up to date) comes before
/// both reads ([`Caller::Last`]) or between the status and the schedstat ([`Caller::First`]).
fn read_thread(dir: &std::path::Path, ours: bool, sleep: Option<Caller>) -> Option<ThreadCounts> {
    let read = |file: &str| std::fs::read_to_string(dir.join(file)).ok();
    let nap = || std::thread::sleep(std::time::Duration::from_nanos(1));
    let (schedstat, status) = match sleep {
        None => (read("schedstat")?, read("status")?),
        Some(Caller::Last) => {
            nap();
            (read("schedstat")?, read("status")?)
        }
        Some(Caller::First) => {
            let status = read("status")?;
            nap();
            (read("schedstat")?, status)
        }
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    Some(ThreadCounts {
        cpu_ns: schedstat
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        voluntary: field("voluntary_ctxt_switches:"),
        involuntary: field("nonvoluntary_ctxt_switches:"),
        ours,
    })
}

/// Every live thread's counters, from `/proc/self/task`; `caller`: read the calling thread first
/// or last, with the sleep of [`read_thread`].
fn threads(caller: Caller) -> Option<HashMap<u64, ThreadCounts>> {
    let pid = std::process::id() as u64;
    let me = crate::sched::threads::current_thread_id();
    let runtime = crate::sched::threads::runtime_thread_ids();
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    let mut others = Vec::new();
    let mut mine = None;
    for task in tasks.flatten() {
        let Some(tid) = task
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u64>().ok())
        else {
            continue;
        };
        let ours = tid == pid || Some(tid) == me || runtime.contains(&tid);
        if Some(tid) == me {
            mine = Some((tid, task.path(), ours));
        } else {
            others.push((tid, task.path(), ours));
        }
    }
    let mut out = HashMap::new();
    let mut read_mine = |out: &mut HashMap<u64, ThreadCounts>| {
        if let Some((tid, dir, ours)) = mine.take()
            && let Some(c) = read_thread(&dir, ours, Some(caller))
        {
            out.insert(tid, c);
        }
    };
    if caller == Caller::First {
        read_mine(&mut out);
    }
    // A thread may end between the listing and the reads: it is left out.
    for (tid, dir, ours) in others {
        if let Some(c) = read_thread(&dir, ours, None) {
            out.insert(tid, c);
        }
    }
    read_mine(&mut out);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::Snapshot;

    /// Busy work on the calling thread shows as gangway's CPU; a sleep shows as a voluntary
    /// switch. Linux only (elsewhere only launches are counted).
    #[test]
    fn the_callers_work_and_waits_are_counted() {
        let before = Snapshot::starting();
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < std::time::Duration::from_millis(60) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
        let cost = before.per_run(&Snapshot::ending(), 1);
        if cfg!(target_os = "linux") {
            let cpu = cost.runtime_cpu_s.unwrap_or(0.0);
            // Other tests share the two cores: a fraction of the 60 ms is enough.
            assert!(cpu > 0.005, "{cost:?}");
            assert!(cost.voluntary_switches.unwrap_or(0.0) >= 1.0, "{cost:?}");
            // The sleep was the caller's own switch.
            assert!(cost.runtime_switches.unwrap_or(0.0) >= 1.0, "{cost:?}");
        }
    }

    /// A window opened and closed around busy work counts that work, and an empty window
    /// counts next to nothing: the caller's own reading and its 1 ns sleeps stay out.
    #[test]
    fn a_windows_snapshots_keep_their_own_cost_out() {
        if !cfg!(target_os = "linux") {
            return;
        }
        let before = Snapshot::starting();
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < std::time::Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let busy = before.per_run(&Snapshot::ending(), 1);
        assert!(busy.runtime_cpu_s.unwrap_or(0.0) > 0.003, "{busy:?}");
        // The fewest of a few tries: other tests share the cores and may preempt one.
        let empty = (0..5)
            .map(|_| {
                let before = Snapshot::starting();
                before.per_run(&Snapshot::ending(), 1)
            })
            .min_by(|a, b| a.runtime_cpu_s.partial_cmp(&b.runtime_cpu_s).unwrap())
            .unwrap();
        assert!(empty.runtime_cpu_s.unwrap_or(1.0) < 200e-6, "{empty:?}");
        assert_eq!(
            empty.voluntary_switches.map(|v| v <= 1.0),
            Some(true),
            "{empty:?}"
        );
    }
}
