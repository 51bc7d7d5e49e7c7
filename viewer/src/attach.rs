//! Following a job that runs in another process: an [`Attachment`] reads one job served with
//! `--live` (the live protocol: the book's `reference/live-protocol.md`) through the library's
//! one client, [`LiveClient`], on a reader thread of its own ([`background::spawn_stream`]). The
//! reader sends what arrived in batches, at most one per the window's [`FramePace`], and asks
//! for a repaint with each; the UI takes them every frame ([`Attachment::poll`]) into a timeline of the
//! last minute, each device's utilization over a sliding window (the Live tab's measure), a
//! series per metric and a [`Recording`] that "Save trace" writes as a gangway trace.
//!
//! A connection that cannot be made, or that is lost before the job's `end`, is tried again
//! every [`RETRY`] until the `end` arrives or the user detaches. A refusal (a wrong or missing
//! token, another protocol) is not retried: it would be refused again. Reattached to the same
//! job (same process id and epoch), the history the server sends again is not taken twice:
//! events that ended before the newest one already received, and metrics older than the newest
//! one, are skipped. A different job at the same address starts everything afresh.
//!
//! Memory stays bounded however long the attachment lasts: the timeline keeps the last 60 s
//! (and at most [`MAX_EVENTS`] events), the recording the newest [`MAX_EVENTS`] events and
//! [`MAX_METRICS`] metrics (what it forgot is counted, and Save says so), each metric series at
//! most [`MAX_POINTS`] points (thinned, so a long curve keeps its shape), and the reader stops
//! reading while [`MAX_PENDING`] records wait for a UI that draws no frames (a hidden window):
//! the server then drops records for this viewer, counts them and tells it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use gangway::live::{End, EndStatus, Hello, LiveClient, LiveError, Metric, Record, Recording};

use crate::background::{self, Job, Sink, Stream};
use crate::pace::FramePace;
use crate::timeline::{TimeAxis, TimelineData, TimelineState};
use crate::utilization::Utilization;

/// How long the reader waits before trying a failed or lost connection again.
pub const RETRY: Duration = Duration::from_secs(2);
/// How long one try to connect and receive the hello may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Events kept on the timeline, counted back from the newest (as the Live tab keeps them).
const KEEP_NS: u64 = 60_000_000_000;
/// Events kept on the timeline and in the recording, each.
pub const MAX_EVENTS: usize = 200_000;
/// Metrics kept in the recording.
pub const MAX_METRICS: usize = 200_000;
/// Points kept per metric series; beyond it the older half is thinned to every other point.
pub const MAX_POINTS: usize = 20_000;
/// Records the reader may have sent that the UI has not taken yet before it stops reading.
pub const MAX_PENDING: usize = 100_000;
/// How often utilization is sampled and the timeline trimmed.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// What the reader thread sends the UI.
#[derive(Debug)]
enum Msg {
    /// Connected (again), with the server's hello.
    Attached(Box<Hello>),
    /// Records in arrival order.
    Records(Vec<Record>),
    /// The connection could not be made or was lost: why. The reader tries again after
    /// [`RETRY`].
    Lost(String),
}

/// Why the reader thread ended.
#[derive(Debug)]
enum Finish {
    /// The job's `end` arrived (it is in the last batch of records).
    JobEnded,
    /// The server refused the attach: its reason.
    Refused(String),
    /// The UI detached.
    Detached,
}

/// Where one attachment stands.
#[derive(Debug, Clone, PartialEq)]
pub enum State {
    /// Trying to connect for the first time.
    Connecting,
    /// Attached; the job runs.
    Running,
    /// The job's `end` arrived.
    Finished(End),
    /// The connection could not be made (`attached_before` false) or was lost: why. Tried
    /// again every [`RETRY`].
    Retrying { why: String, attached_before: bool },
    /// The server refused the attach: not retried.
    Refused(String),
    /// The reader thread stopped unexpectedly.
    Failed(String),
    /// The user detached before the job's end.
    Detached,
}

impl State {
    /// The state in words, for the UI.
    pub fn describe(&self) -> String {
        match self {
            State::Connecting => "connecting…".into(),
            State::Running => "running".into(),
            State::Finished(end) => describe_end(end),
            State::Retrying {
                why,
                attached_before: true,
            } => format!(
                "connection lost: {why}; reconnecting every {} s",
                RETRY.as_secs()
            ),
            State::Retrying { why, .. } => format!(
                "cannot connect: {why}; reconnecting every {} s",
                RETRY.as_secs()
            ),
            State::Refused(why) => format!("refused: {why} (not retried: Reconnect tries again)"),
            State::Failed(why) => format!("stopped: {why}"),
            State::Detached => "detached: not reading (Reconnect attaches again)".into(),
        }
    }

    /// One or two words, for the list of attachments.
    pub fn short(&self) -> &'static str {
        match self {
            State::Connecting => "connecting",
            State::Running => "running",
            State::Finished(End {
                status: EndStatus::Ok,
                ..
            }) => "finished ok",
            State::Finished(_) => "finished with an error",
            State::Retrying { .. } => "reconnecting",
            State::Refused(_) => "refused",
            State::Failed(_) => "stopped",
            State::Detached => "detached",
        }
    }
}

/// How a job ended, in words.
pub fn describe_end(end: &End) -> String {
    match (end.status, &end.error) {
        (EndStatus::Ok, _) => format!("finished: ok (exit code {})", end.exit_code),
        (EndStatus::Error, Some(e)) => {
            format!("finished: error (exit code {}): {e}", end.exit_code)
        }
        (EndStatus::Error, None) => format!("finished: error (exit code {})", end.exit_code),
    }
}

/// The reader thread of one connection, stopped when dropped.
#[derive(Debug)]
struct Reader {
    stream: Stream<Msg, Finish>,
    stop: Arc<AtomicBool>,
    /// Records sent and not yet taken by the UI.
    pending: Arc<AtomicUsize>,
}

impl Drop for Reader {
    /// The thread sees it within 50 ms (or when a connect in progress times out) and ends; no
    /// one waits for it.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A metric series: `[x, value]` points, x the step (or, for a metric of no step, seconds on
/// the job's clock).
#[derive(Debug, Clone, Default)]
pub struct Series {
    pub points: Vec<[f64; 2]>,
}

impl Series {
    fn push(&mut self, p: [f64; 2]) {
        self.points.push(p);
        if self.points.len() > MAX_POINTS {
            // Every other point of the older half goes: the curve keeps its whole extent.
            let half = self.points.len() / 2;
            let mut i = 0;
            self.points.retain(|_| {
                i += 1;
                i > half || i % 2 == 1
            });
        }
    }

    /// The newest point.
    pub fn last(&self) -> Option<[f64; 2]> {
        self.points.last().copied()
    }
}

/// The producer's clock, estimated from the times in what it sent: its `now` is at least the
/// newest time received, and both clocks run at the same rate. The estimate is the largest
/// offset seen (a heartbeat's is exact, up to the network's delay).
#[derive(Debug, Clone)]
struct ProducerClock {
    base: Instant,
    offset_ns: Option<i128>,
}

impl ProducerClock {
    fn new() -> Self {
        Self {
            base: Instant::now(),
            offset_ns: None,
        }
    }

    fn local_ns(&self) -> i128 {
        i128::try_from(self.base.elapsed().as_nanos()).unwrap_or(i128::MAX / 2)
    }

    fn saw(&mut self, t_ns: u64) {
        let offset = i128::from(t_ns) - self.local_ns();
        self.offset_ns = Some(self.offset_ns.map_or(offset, |o| o.max(offset)));
    }

    /// The producer's time now, in ns since its trace epoch.
    fn now(&self) -> Option<u64> {
        let o = self.offset_ns?;
        u64::try_from((self.local_ns() + o).max(0)).ok()
    }
}

/// What a reattachment to the same job skips of the history it is sent again.
#[derive(Debug, Clone)]
struct Skip {
    events_until: u64,
    metrics_until: u64,
    at_last: Vec<Metric>,
}

/// "Save trace": where, whether an overwrite waits for confirmation, and the outcome.
#[derive(Debug)]
pub struct SaveState {
    pub path: String,
    /// A save to this path waits for the user to confirm replacing the file there.
    pub confirm_overwrite: Option<PathBuf>,
    job: Option<Job<Result<String, String>>>,
    pub message: Option<Result<String, String>>,
}

/// One job followed over the live protocol.
#[derive(Debug)]
pub struct Attachment {
    /// Tells attachments apart in widget ids.
    pub id: u64,
    pub addr: String,
    token: Option<String>,
    pub state: State,
    /// What arrived (the newest [`MAX_EVENTS`] events and [`MAX_METRICS`] metrics); `None`
    /// until the first hello.
    pub recording: Option<Recording>,
    /// Events and metrics the recording forgot to stay bounded.
    pub forgotten_events: u64,
    pub forgotten_metrics: u64,
    /// Events and metrics the server dropped for earlier connections (each connection's
    /// `dropped` totals start again at 0).
    dropped_before: (u64, u64),
    /// The last minute of events, for the timeline.
    pub data: TimelineData,
    pub timeline: TimelineState,
    /// Each device's utilization, on the job's clock.
    pub utilization: Utilization,
    /// Metric name → labels in words ("" for none, "expert 3") → series.
    pub series: BTreeMap<String, BTreeMap<String, Series>>,
    clock: ProducerClock,
    last_sample: Option<Instant>,
    newest_event_end: u64,
    newest_metric: Option<(u64, Vec<Metric>)>,
    skip: Option<Skip>,
    connections: u32,
    reader: Option<Reader>,
    ctx: Option<egui::Context>,
    pub save: SaveState,
}

impl Attachment {
    /// Starts following the job at `addr` (HOST:PORT), attaching with `token` if given.
    pub fn start(id: u64, addr: &str, token: Option<String>, ctx: Option<egui::Context>) -> Self {
        let mut a = Self {
            id,
            addr: addr.trim().to_string(),
            token: token.filter(|t| !t.is_empty()),
            state: State::Connecting,
            recording: None,
            forgotten_events: 0,
            forgotten_metrics: 0,
            dropped_before: (0, 0),
            data: TimelineData::default(),
            // The last minute, counted back from now, following the newest events.
            timeline: TimelineState {
                axis: TimeAxis::BeforeNewest,
                follow_live: true,
                ..TimelineState::default()
            },
            utilization: Utilization::default(),
            series: BTreeMap::new(),
            clock: ProducerClock::new(),
            last_sample: None,
            newest_event_end: 0,
            newest_metric: None,
            skip: None,
            connections: 0,
            reader: None,
            ctx,
            save: SaveState {
                path: "gangway-attached.json".into(),
                confirm_overwrite: None,
                job: None,
                message: None,
            },
        };
        a.connect();
        a
    }

    /// (Re)starts the reader thread; one already running is stopped first.
    pub fn connect(&mut self) {
        self.reader = None;
        let stop = Arc::new(AtomicBool::new(false));
        let pending = Arc::new(AtomicUsize::new(0));
        let (addr, token) = (self.addr.clone(), self.token.clone());
        let (s, p) = (stop.clone(), pending.clone());
        let pace = FramePace::of(self.ctx.as_ref());
        let spawned = background::spawn_stream("gangway-viewer-attach", self.ctx.clone(), {
            move |sink: &Sink<Msg>| read(&addr, token.as_deref(), &s, &p, &pace, sink)
        });
        match spawned {
            Ok(stream) => {
                if !matches!(self.state, State::Finished(_) | State::Running) {
                    self.state = State::Connecting;
                }
                self.reader = Some(Reader {
                    stream,
                    stop,
                    pending,
                });
            }
            Err(e) => self.state = State::Failed(e),
        }
    }

    /// Whether a reader thread runs (connecting, attached or waiting to retry).
    pub fn is_reading(&self) -> bool {
        self.reader.is_some()
    }

    /// Stops the reader; what arrived stays.
    pub fn detach(&mut self) {
        self.reader = None;
        if !matches!(self.state, State::Finished(_)) {
            self.state = State::Detached;
        }
    }

    /// The server's latest hello, once attached.
    pub fn hello(&self) -> Option<&Hello> {
        self.recording.as_ref().map(|r| &r.hello)
    }

    /// Events and metrics the server dropped for this viewer, over every connection.
    pub fn dropped(&self) -> (u64, u64) {
        let (e, m) = self
            .recording
            .as_ref()
            .map_or((0, 0), |r| (r.dropped_events, r.dropped_metrics));
        (self.dropped_before.0 + e, self.dropped_before.1 + m)
    }

    /// Takes what the reader sent, samples utilization and polls a save. Call every frame.
    pub fn poll(&mut self, ctx: Option<&egui::Context>) {
        if self.ctx.is_none() {
            self.ctx = ctx.cloned();
        }
        let (messages, done, pending) = match &self.reader {
            Some(r) => {
                let (m, d) = r.stream.poll("the attachment's reader");
                (m, d, Some(r.pending.clone()))
            }
            None => (Vec::new(), None, None),
        };
        for m in messages {
            match m {
                Msg::Attached(hello) => self.attached(*hello),
                Msg::Records(records) => {
                    if let Some(p) = &pending {
                        p.fetch_sub(records.len(), Ordering::Relaxed);
                    }
                    self.take(records);
                }
                Msg::Lost(why) => {
                    self.state = State::Retrying {
                        why,
                        attached_before: self.connections > 0,
                    };
                }
            }
        }
        if let Some(done) = done {
            self.reader = None;
            match done {
                Ok(Finish::JobEnded | Finish::Detached) => {}
                Ok(Finish::Refused(why)) => self.state = State::Refused(why),
                Err(e) => self.state = State::Failed(e),
            }
        }
        self.sample();
        if let Some(done) = self.save.job.as_ref().and_then(|j| j.poll("saving")) {
            self.save.job = None;
            self.save.message = Some(done.and_then(|r| r));
        }
    }

    /// A hello at the start of a connection.
    fn attached(&mut self, hello: Hello) {
        self.connections += 1;
        self.state = State::Running;
        let same_job = self.recording.as_ref().is_some_and(|r| {
            r.hello.pid == hello.pid
                && r.hello.epoch_unix_ns == hello.epoch_unix_ns
                && r.hello.command == hello.command
        });
        if same_job {
            // The server sends its history again: skip what came before.
            self.skip = Some(Skip {
                events_until: self.newest_event_end,
                metrics_until: self.newest_metric.as_ref().map_or(0, |m| m.0),
                at_last: self
                    .newest_metric
                    .as_ref()
                    .map(|m| m.1.clone())
                    .unwrap_or_default(),
            });
            if let Some(r) = &mut self.recording {
                self.dropped_before.0 += std::mem::take(&mut r.dropped_events);
                self.dropped_before.1 += std::mem::take(&mut r.dropped_metrics);
            }
        } else {
            self.forget_all();
            if self.save.path == "gangway-attached.json" && hello.pid != 0 {
                self.save.path = format!("gangway-pid{}.json", hello.pid);
            }
            self.recording = Some(Recording::new(hello.clone()));
        }
        self.set_hello(hello);
    }

    /// Forgets everything received (a different job answered at the address).
    fn forget_all(&mut self) {
        self.recording = None;
        self.forgotten_events = 0;
        self.forgotten_metrics = 0;
        self.dropped_before = (0, 0);
        self.data.clear();
        self.utilization.clear();
        self.series.clear();
        self.clock = ProducerClock::new();
        self.newest_event_end = 0;
        self.newest_metric = None;
        self.skip = None;
    }

    /// The hello's devices title the timeline's lanes: each device's rows under its label.
    fn set_hello(&mut self, hello: Hello) {
        self.data.lanes = hello
            .devices
            .iter()
            .map(|d| (d.track.id, d.track.clone()))
            .collect();
        let ranks = hello.ranks > 1;
        self.data.groups = hello
            .devices
            .iter()
            .map(|d| {
                let title = if ranks {
                    format!("rank {} on {}: {}", d.rank, d.host, d.track.label)
                } else {
                    d.track.label.clone()
                };
                (d.track.id, title)
            })
            .collect();
        if let Some(r) = &mut self.recording {
            r.hello = hello;
        }
    }

    /// Takes one batch of records in.
    fn take(&mut self, records: Vec<Record>) {
        let mut arrived = Vec::new();
        for record in records {
            match record {
                Record::Event { rank, event } => {
                    let end = event.clamped_end_ns();
                    if self.skip.as_ref().is_some_and(|s| end <= s.events_until) {
                        continue;
                    }
                    self.clock.saw(end);
                    self.newest_event_end = self.newest_event_end.max(end);
                    self.utilization.push(&event);
                    arrived.push(event.clone());
                    self.record(Record::Event { rank, event });
                }
                Record::Metric(m) => {
                    if self.skip.as_ref().is_some_and(|s| {
                        m.t_ns < s.metrics_until
                            || (m.t_ns == s.metrics_until && s.at_last.contains(&m))
                    }) {
                        continue;
                    }
                    self.metric(&m);
                    self.record(Record::Metric(m));
                }
                Record::Hello(hello) => self.set_hello(hello),
                Record::End(end) => {
                    self.state = State::Finished(end.clone());
                    self.record(Record::End(end));
                }
                Record::Heartbeat { t_ns } => {
                    self.clock.saw(t_ns);
                    self.record(Record::Heartbeat { t_ns });
                }
                other @ Record::Dropped { .. } => self.record(other),
                Record::Attach(_) | Record::Refused { .. } => {}
            }
        }
        if !arrived.is_empty() {
            self.data.extend(arrived);
        }
        self.bound_recording();
    }

    fn record(&mut self, record: Record) {
        if let Some(r) = &mut self.recording {
            r.push(record);
        }
    }

    /// A metric into its series.
    fn metric(&mut self, m: &Metric) {
        self.clock.saw(m.t_ns);
        match &mut self.newest_metric {
            Some((t, at)) if *t == m.t_ns => at.push(m.clone()),
            Some((t, _)) if *t > m.t_ns => {}
            newest => *newest = Some((m.t_ns, vec![m.clone()])),
        }
        let labels = m
            .labels
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ");
        let x = m.step.map_or(m.t_ns as f64 / 1e9, |s| s as f64);
        self.series
            .entry(m.name.clone())
            .or_default()
            .entry(labels)
            .or_default()
            .push([x, m.value]);
    }

    /// Forgets the recording's oldest events and metrics beyond the caps, a quarter of a cap at
    /// a time (removing from a vector's front moves the rest).
    fn bound_recording(&mut self) {
        let Some(r) = &mut self.recording else {
            return;
        };
        if r.events.len() > MAX_EVENTS + MAX_EVENTS / 4 {
            let cut = r.events.len() - MAX_EVENTS;
            r.events.drain(..cut);
            r.event_ranks.drain(..cut.min(r.event_ranks.len()));
            self.forgotten_events += cut as u64;
        }
        if r.metrics.len() > MAX_METRICS + MAX_METRICS / 4 {
            let cut = r.metrics.len() - MAX_METRICS;
            r.metrics.drain(..cut);
            self.forgotten_metrics += cut as u64;
        }
    }

    /// About four times a second: each device's utilization over the last window (while the
    /// job runs), and the timeline trimmed to the last minute and the cap.
    fn sample(&mut self) {
        if self.last_sample.is_some_and(|t| t.elapsed() < SAMPLE_EVERY) {
            return;
        }
        self.last_sample = Some(Instant::now());
        if let Some(span) = self.data.span()
            && span.end > KEEP_NS
        {
            self.data.forget_before(span.end - KEEP_NS);
        }
        // A flood of short events: forget the older part until under the cap.
        for _ in 0..8 {
            match self.data.span() {
                Some(span) if self.data.len() > MAX_EVENTS => {
                    self.data
                        .forget_before(span.start + (span.end - span.start) / 4);
                }
                _ => break,
            }
        }
        if self.state != State::Running {
            return;
        }
        let Some(now) = self.clock.now() else {
            return;
        };
        let devices = self.data.lanes.keys().copied();
        let tracks = self.data.tracks().iter().map(|t| t.device);
        self.utilization.sample(now, devices.chain(tracks));
    }

    /// Latest utilization of `device`, in `[0, 1]`.
    pub fn current(&self, device: usize) -> Option<f64> {
        self.utilization.current(device)
    }

    /// The newest value of the metric `name` (no labels).
    pub fn latest(&self, name: &str) -> Option<[f64; 2]> {
        self.series.get(name)?.get("")?.last()
    }

    /// Whether a save runs.
    pub fn is_saving(&self) -> bool {
        self.save.job.is_some()
    }

    /// Writes what was received as a gangway trace to the save path, in the background. A file
    /// there is replaced only with `overwrite` (the user confirmed); otherwise the save waits
    /// for that ([`SaveState::confirm_overwrite`]).
    pub fn save(&mut self, overwrite: bool) {
        let path = PathBuf::from(self.save.path.trim());
        if path.as_os_str().is_empty() {
            self.save.message = Some(Err("nothing to save to: the save path is empty".into()));
            return;
        }
        if !overwrite && path.exists() {
            self.save.confirm_overwrite = Some(path);
            return;
        }
        self.save.confirm_overwrite = None;
        let Some(recording) = self.recording.clone() else {
            self.save.message = Some(Err("nothing to save: nothing arrived yet".into()));
            return;
        };
        let forgotten = self.forgotten_events;
        let (dropped, _) = self.dropped();
        let job = background::spawn("gangway-viewer-save", self.ctx.clone(), move || {
            let json = recording.to_chrome_trace();
            crate::files::write_file(&path, json.as_bytes(), overwrite).map(|()| {
                let mut said = format!(
                    "saved {} events to {}; the job dropped {dropped} events for this viewer",
                    recording.events.len(),
                    path.display()
                );
                if forgotten > 0 {
                    said.push_str(&format!(
                        "; {forgotten} older events were not kept (the viewer keeps the newest \
                         {MAX_EVENTS})"
                    ));
                }
                said
            })
        });
        match job {
            Ok(job) => self.save.job = Some(job),
            Err(e) => self.save.message = Some(Err(e)),
        }
    }
}

/// The gangway error's own words, without the "live stream: " every live error starts with.
fn why(e: &gangway::Error) -> String {
    match e {
        gangway::Error::Live(LiveError::Closed { .. }) => {
            "the connection closed before the job's end".into()
        }
        gangway::Error::Live(l) => l.to_string(),
        other => other.to_string(),
    }
}

/// The reader thread: connects, forwards records, and tries again after [`RETRY`] when the
/// connection fails or is lost, until the job's end, a refusal or `stop`.
fn read(
    addr: &str,
    token: Option<&str>,
    stop: &AtomicBool,
    pending: &AtomicUsize,
    pace: &FramePace,
    sink: &Sink<Msg>,
) -> Finish {
    loop {
        if stop.load(Ordering::Relaxed) {
            return Finish::Detached;
        }
        match LiveClient::connect(addr, token, CONNECT_TIMEOUT) {
            Ok(mut client) => {
                sink.send(Msg::Attached(Box::new(client.hello().clone())));
                match pump(&mut client, stop, pending, pace, sink) {
                    Ok(finish) => return finish,
                    Err(e) => sink.send(Msg::Lost(e)),
                }
            }
            Err(gangway::Error::Live(LiveError::Refused { reason })) => {
                return Finish::Refused(reason);
            }
            Err(e) => sink.send(Msg::Lost(why(&e))),
        }
        let retry_at = Instant::now() + RETRY;
        while Instant::now() < retry_at {
            if stop.load(Ordering::Relaxed) {
                return Finish::Detached;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Forwards one connection's records in batches until its end (`Ok`), `stop` (`Ok`), or an
/// error (`Err`: why, after what came before it).
fn pump(
    client: &mut LiveClient,
    stop: &AtomicBool,
    pending: &AtomicUsize,
    pace: &FramePace,
    sink: &Sink<Msg>,
) -> Result<Finish, String> {
    let mut batch: Vec<Record> = Vec::new();
    let mut sent = Instant::now();
    let flush = |batch: &mut Vec<Record>| {
        if !batch.is_empty() {
            pending.fetch_add(batch.len(), Ordering::Relaxed);
            sink.send(Msg::Records(std::mem::take(batch)));
        }
    };
    loop {
        if stop.load(Ordering::Relaxed) {
            return Ok(Finish::Detached);
        }
        if pending.load(Ordering::Relaxed) >= MAX_PENDING {
            // The UI takes nothing (a hidden window draws no frames): the records wait in the
            // server's bounded queue, which drops and counts them, not in this process.
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        match client.recv(Duration::from_millis(50)) {
            Ok(Some(record)) => {
                let end = matches!(record, Record::End(_));
                batch.push(record);
                if end {
                    flush(&mut batch);
                    return Ok(Finish::JobEnded);
                }
            }
            Ok(None) => {}
            Err(e) => {
                flush(&mut batch);
                return Err(why(&e));
            }
        }
        // One batch (and one repaint) per frame budget, however fast records come.
        if sent.elapsed() >= pace.every() || batch.len() >= 8192 {
            flush(&mut batch);
            sent = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_series_is_thinned_and_keeps_its_ends() {
        let mut s = Series::default();
        for i in 0..(MAX_POINTS * 3) {
            s.push([i as f64, 0.0]);
        }
        assert!(s.points.len() <= MAX_POINTS);
        assert_eq!(s.points.first().map(|p| p[0]), Some(0.0));
        assert_eq!(s.last().map(|p| p[0]), Some((MAX_POINTS * 3 - 1) as f64));
        assert!(s.points.windows(2).all(|w| w[0][0] < w[1][0]));
    }

    #[test]
    fn states_read_as_the_watcher_says_them() {
        assert_eq!(
            State::Finished(End::ok()).describe(),
            "finished: ok (exit code 0)"
        );
        assert_eq!(
            State::Finished(End::error(130, "interrupted (Ctrl-C)")).describe(),
            "finished: error (exit code 130): interrupted (Ctrl-C)"
        );
        assert!(
            State::Retrying {
                why: "x".into(),
                attached_before: true
            }
            .describe()
            .contains("reconnecting every 2 s")
        );
    }
}
