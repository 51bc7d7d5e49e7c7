//! Live jobs: `--live ADDR` serves this process's trace events, metrics and end over TCP
//! ([`gangway::live::LiveServer`]: the job never waits on a client), and the commands that
//! attach through the one library client ([`gangway::live::LiveClient`]): `gangway watch` (a
//! terminal view, once a second) and `gangway trace record` (the stream saved as a trace).
//!
//! The process's server is one global ([`SERVER`]), so that every command's progress callback
//! can publish its metrics ([`metric`]) without threading it through; with no `--live` each call
//! is one atomic load. Under `mpirun` the job has one address: rank 0 serves, and once the mesh
//! is formed ([`join_mesh`]) every other rank forwards its events and metrics to it over the
//! job's transport ([`FORWARDER`], [`gangway::live::Forwarder`]), on rank 0's clock.

use crate::cli::{AttachArgs, LiveArgs, WatchArgs};
use anyhow::{Context, Result, bail};
use gangway::live::{
    End, EndStatus, Forwarder, Hello, LiveClient, LiveDevice, LiveServer, Metric, Record,
    Recording, ServeOptions,
};
use gangway::mesh::Mesh;
use gangway::trace::{BusyTime, Event, Tracer, Track};
use gangway::{Device, Job, MeshDevice};
use std::collections::{BTreeMap, VecDeque};
use std::net::ToSocketAddrs;
use std::path::Path;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// This process's server, when it serves (`--live`).
static SERVER: OnceLock<LiveServer> = OnceLock::new();
/// What a rank other than 0 forwards through, once the mesh is formed (`--live` under mpirun).
static FORWARDER: OnceLock<Forwarder> = OnceLock::new();
/// Whether this rank (not 0) forwards to rank 0's server: `--live` was given.
static FORWARDS: AtomicBool = AtomicBool::new(false);
/// Whether the stream carries trace events (not `--live-metrics-only`).
static EVENTS: AtomicBool = AtomicBool::new(true);

/// Whether this process serves live (rank 0 of a job, or the only process). The job's own
/// metrics (a training step's loss, the same on every rank of an SPMD job) are published by it
/// alone.
pub(crate) fn serving() -> bool {
    SERVER.get().is_some()
}

/// Starts serving at `args.live` (rank 0 of a job, or the only process), streaming `tracer`'s
/// events; the first line on stderr names the bound address (and a token made for a
/// non-loopback address). Nothing happens without `--live`.
pub(crate) fn serve(args: &LiveArgs, tracer: &Tracer, job: &Job) -> Result<()> {
    let Some(addr) = &args.live else {
        return Ok(());
    };
    if !job.is_root() {
        FORWARDS.store(true, Ordering::Relaxed);
        return Ok(());
    }
    let loopback = addr
        .to_socket_addrs()
        .with_context(|| format!("--live {addr}: not an address"))?
        .all(|a| a.ip().is_loopback());
    let made = (!loopback && args.live_token.is_none()).then(gangway::live::generate_token);
    let token = args.live_token.clone().or(made.clone());
    EVENTS.store(!args.live_metrics_only, Ordering::Relaxed);
    let hello = hello(job);
    let options = ServeOptions {
        token,
        ..ServeOptions::default()
    };
    let server = LiveServer::bind(addr.as_str(), options, hello)
        .with_context(|| format!("--live {addr}"))?;
    std::eprintln!("live: serving this job at {}", server.local_addr());
    if let Some(token) = made {
        std::eprintln!("live: clients need the token {token} (--token, or GANGWAY_LIVE_TOKEN)");
    }
    if EVENTS.load(Ordering::Relaxed) {
        server.attach_tracer(job.rank(), tracer)?;
    }
    server.serve_ranks(job)?;
    let _ = SERVER.set(server);
    Ok(())
}

/// Once the job's mesh is formed (a job of several ranks): rank 0 names every rank's devices in
/// its hello, lanes numbered as in the trace gathered at the end (rank r's device i after the
/// devices of the ranks before r); every other rank measures its clock against rank 0's and
/// forwards `tracer`'s events from now on.
pub(crate) fn join_mesh(mesh: &Mesh, tracer: &Tracer, job: &Job) -> Result<()> {
    if job.size() < 2 {
        return Ok(());
    }
    // Each rank's devices take as many lanes as its largest device id needs.
    let mut lanes = vec![0usize; job.size()];
    let rank_of = |d: &MeshDevice| d.remote_rank().unwrap_or(job.rank());
    for d in mesh.devices() {
        if let Some(l) = lanes.get_mut(rank_of(d)) {
            *l = (*l).max(d.info().id + 1);
        }
    }
    let base = |rank: usize| lanes[..rank.min(lanes.len())].iter().sum::<usize>();
    if FORWARDS.load(Ordering::Relaxed) {
        if let Some(forwarder) = Forwarder::start(job, tracer, base(job.rank()))? {
            let clock = forwarder.clock();
            std::eprintln!(
                "live: rank {} forwards to rank 0's server; its trace clock is {:+.1} µs to rank \
                 0's (± {:.1} µs, half the best of {} probes' round trips)",
                job.rank(),
                clock.to_root_ns as f64 / 1e3,
                clock.round_trip_ns as f64 / 2e3,
                gangway::live::forward::PROBES
            );
            let _ = FORWARDER.set(forwarder);
        }
        return Ok(());
    }
    let Some(server) = SERVER.get() else {
        return Ok(());
    };
    let mut hello = hello(job);
    hello.hosts = vec![String::new(); job.size()];
    hello.devices = mesh
        .devices()
        .iter()
        .map(|d| {
            let (rank, info) = (rank_of(d), d.info());
            let host = match d {
                MeshDevice::Remote(r) => r.host.clone(),
                MeshDevice::Local(_) => job.host(),
            };
            if let Some(h) = hello.hosts.get_mut(rank) {
                h.clone_from(&host);
            }
            let id = base(rank) + info.id;
            let mut track = Track::device(id, info.label());
            track.rank = Some(rank);
            LiveDevice {
                id,
                rank,
                host,
                adapter: info.name.clone(),
                backend: info.backend.clone(),
                track,
            }
        })
        .collect();
    if let Err(e) = server.update_hello(hello) {
        std::eprintln!("live: the hello could not be updated: {e}");
    }
    Ok(())
}

/// At the end of a job of several ranks, before its last collective: each rank other than 0
/// forwards what is left and says it is done; rank 0 waits for them (a few seconds at most),
/// so its `end` comes after every rank's last event.
pub(crate) fn ranks_done(job: &Job) {
    if let Some(forwarder) = FORWARDER.get() {
        forwarder.finish();
    }
    if let Some(server) = SERVER.get()
        && job.size() > 1
        && !server.await_ranks(job.size(), RANKS_GRACE)
    {
        std::eprintln!(
            "live: not every rank said it was done forwarding within {RANKS_GRACE:?}; the stream \
             ends without the rest"
        );
    }
}

/// How long rank 0 waits at the end for the other ranks' last forwarded events.
const RANKS_GRACE: Duration = Duration::from_secs(5);

/// The hello of this job, devices aside.
fn hello(job: &Job) -> Hello {
    let mut hello = Hello::for_this_process();
    hello.ranks = job.size();
    hello.events = EVENTS.load(Ordering::Relaxed);
    hello
}

/// Tells clients that attach from now on which devices the job runs on.
pub(crate) fn set_devices(devices: &[Device], tracks: &[Track], job: &Job) {
    let Some(server) = SERVER.get() else {
        return;
    };
    let mut hello = hello(job);
    hello.hosts = vec![job.host()];
    hello.devices = devices
        .iter()
        .zip(tracks)
        .map(|(d, track)| LiveDevice {
            id: d.id(),
            rank: job.rank(),
            host: job.host(),
            adapter: d.info().name.clone(),
            backend: d.info().backend.clone(),
            track: track.clone(),
        })
        .collect();
    if let Err(e) = server.update_hello(hello) {
        std::eprintln!("live: the hello could not be updated: {e}");
    }
}

/// Streams `metric` to the clients, when serving; on another rank it is forwarded to rank 0,
/// labelled with its rank.
pub(crate) fn metric(metric: Metric) {
    if let Some(server) = SERVER.get() {
        server.publish_metric(metric);
    } else if let Some(forwarder) = FORWARDER.get() {
        forwarder.metric(metric);
    }
}

/// The training metrics of one step ([`gangway::train::Progress::metrics`]).
pub(crate) fn training_step(p: &gangway::train::Progress, lr: f32) {
    if !serving() {
        return;
    }
    for m in p.metrics(lr) {
        metric(m);
    }
}

/// One finished bench case: its median seconds (labelled by suite, case and adapter index), or
/// nothing for a case that did not run.
pub(crate) fn bench_case(result: &gangway::bench::report::CaseResult) {
    let Some(stats) = &result.stats else {
        return;
    };
    metric(
        Metric::now("bench/median_s", stats.median_s)
            .label("suite", result.suite.clone())
            .label("case", result.case.clone())
            .label("adapter", result.adapter.to_string()),
    );
}

/// Sends the end (the exit code and the error, if any) and lets the clients drain.
pub(crate) fn finish(result: &Result<()>, error_line: impl FnOnce() -> String) {
    let Some(server) = SERVER.get() else {
        return;
    };
    let end = match result {
        Ok(()) => End::ok(),
        Err(_) => End::error(1, error_line()),
    };
    server.finish(end);
}

/// Ctrl-C: the end a client gets says so (exit code 130).
pub(crate) fn interrupted() {
    if let Some(server) = SERVER.get() {
        server.finish(End::error(130, "interrupted (Ctrl-C)"));
    }
}

fn connect(args: &AttachArgs) -> Result<LiveClient> {
    LiveClient::connect(
        args.addr.as_str(),
        args.token.as_deref(),
        Duration::from_secs(args.connect_timeout.max(1)),
    )
    .with_context(|| format!("attaching to {}", args.addr))
}

/// `gangway trace record ADDR --out FILE`: every record until the job ends (or the connection
/// closes), written as a Chrome trace.
pub(crate) fn record(args: &AttachArgs, out: &Path, force: bool) -> Result<()> {
    if out.exists() && !force {
        bail!("{} exists: pass --force to replace it", out.display());
    }
    let mut client = connect(args)?;
    let mut recording = Recording::new(client.hello().clone());
    std::eprintln!("recording {} into {}", args.addr, out.display());
    let result = client.record_until_end(&mut recording);
    gangway::fsutil::write_atomic(out, recording.to_chrome_trace().as_bytes())
        .with_context(|| format!("writing {}", out.display()))?;
    std::eprintln!(
        "wrote {} events and {} metrics to {} ({} events dropped by the job for this client){}",
        recording.events.len(),
        recording.metrics.len(),
        out.display(),
        recording.dropped_events,
        match &recording.end {
            Some(end) => format!("; the job ended: {}", describe(end)),
            None => "; the connection closed before the job's end".into(),
        }
    );
    result.with_context(|| format!("reading {}", args.addr))?;
    Ok(())
}

fn describe(end: &End) -> String {
    match (end.status, &end.error) {
        (EndStatus::Ok, _) => "ok".into(),
        (EndStatus::Error, Some(e)) => format!("error (exit {}): {e}", end.exit_code),
        (EndStatus::Error, None) => format!("error (exit {})", end.exit_code),
    }
}

/// How often `watch` prints, and the window of each device's utilization: its busy time over
/// the last this much of the job's clock (up to the newest event), so a watcher that joined late
/// measures the job's last second, not the history it was sent.
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// What `watch` shows: the latest metrics, and the device work of the job's last window.
struct Snapshot {
    latest: BTreeMap<String, Metric>,
    /// Device work ending in the window before `newest_ns`.
    recent: VecDeque<Event>,
    /// The latest end of any event: the job's clock as far as the stream tells it.
    newest_ns: u64,
    events: u64,
}

/// `gangway watch ADDR`: a snapshot a second (one with `--once`) until the job ends; the exit
/// code is the job's.
pub(crate) fn watch(args: &WatchArgs) -> Result<i32> {
    let mut client = connect(&args.attach)?;
    let hello = client.hello().clone();
    println!(
        "attached to {} (gangway {}, pid {}): {}",
        args.attach.addr,
        hello.version,
        hello.pid,
        hello.command.join(" ")
    );
    let mut recording = Recording::new(hello);
    let mut snap = Snapshot {
        latest: BTreeMap::new(),
        recent: VecDeque::new(),
        newest_ns: 0,
        events: 0,
    };
    let mut next = Instant::now() + WATCH_EVERY;
    loop {
        let record = match client.recv(Duration::from_millis(100)) {
            Ok(r) => r,
            Err(gangway::Error::Live(gangway::live::LiveError::Closed { .. })) => {
                print_snapshot(&mut snap, &recording);
                println!("the connection closed before the job's end");
                return Ok(1);
            }
            Err(e) => return Err(e.into()),
        };
        if let Some(record) = record {
            take(&mut snap, &record);
            let ended = recording.push(record);
            // Events are summed as they come; a watcher keeps none of them.
            recording.events.clear();
            recording.event_ranks.clear();
            recording.metrics.clear();
            if ended {
                print_snapshot(&mut snap, &recording);
                let end = recording.end.as_ref().map(describe).unwrap_or_default();
                println!("the job ended: {end}");
                return Ok(recording.end.map_or(1, |e| e.exit_code));
            }
        }
        if Instant::now() >= next {
            print_snapshot(&mut snap, &recording);
            if args.once {
                return Ok(0);
            }
            next = Instant::now() + WATCH_EVERY;
        }
    }
}

fn take(snap: &mut Snapshot, record: &Record) {
    match record {
        Record::Metric(m) => {
            snap.latest.insert(m.name.clone(), m.clone());
        }
        Record::Event { event, .. } => {
            snap.events += 1;
            snap.newest_ns = snap.newest_ns.max(event.clamped_end_ns());
            if event.is_device_work() {
                snap.recent.push_back(event.clone());
            }
            let from = snap.newest_ns.saturating_sub(WATCH_EVERY.as_nanos() as u64);
            while snap.recent.front().is_some_and(|e| e.end_ns < from) {
                snap.recent.pop_front();
            }
        }
        _ => {}
    }
}

fn print_snapshot(snap: &mut Snapshot, recording: &Recording) {
    let value = |name: &str| snap.latest.get(name).map(|m| m.value);
    let step = snap
        .latest
        .get("train/loss")
        .and_then(|m| m.step)
        .map_or("-".into(), |s| s.to_string());
    let mut line = format!("step {step}");
    if let Some(loss) = value("train/loss") {
        line.push_str(&format!("  loss {loss:.4}"));
    }
    if let Some(tps) = value("train/tokens_per_s") {
        line.push_str(&format!("  {tps:.0} tok/s"));
    }
    if let Some(bpb) = value("train/valid_bpb") {
        line.push_str(&format!("  valid {bpb:.3} bpb"));
    }
    if let Some(d) = value("train/dropped_fraction") {
        line.push_str(&format!("  dropped {:.1}%", d * 100.0));
    }
    let window = snap.newest_ns.saturating_sub(WATCH_EVERY.as_nanos() as u64)..snap.newest_ns;
    let recent = snap.recent.make_contiguous();
    let devices: Vec<String> = recording
        .hello
        .devices
        .iter()
        .map(|d| {
            let u = BusyTime::of(recent, d.track.id).utilization(window.clone());
            format!("{} {:.0}%", d.track.id, u * 100.0)
        })
        .collect();
    if !recording.hello.events {
        // Served with --live-metrics-only: no events, so no utilization to measure.
        line.push_str("  (metrics only: no events)");
    } else {
        if !devices.is_empty() {
            line.push_str(&format!("  utilization [{}]", devices.join(", ")));
        }
        line.push_str(&format!(
            "  events {}  dropped events {}",
            snap.events, recording.dropped_events
        ));
    }
    println!("{line}");
}
