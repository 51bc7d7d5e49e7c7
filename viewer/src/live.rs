//! Real work on the real devices, in the background: discover devices and start the app's one
//! [`Runtime`] over them, traced and **served live** on a loopback port ([`DeviceHub::served_at`]):
//! every run's events reach the Live tab through the same stream a job of another process serves
//! (`gangway::live`), which `gangway watch`, `gangway trace record` and other viewers can follow
//! too ([`follow`]). Then run the chain program (one tiny kernel per device, Pathways Fig. 4/7)
//! over and over as one of its clients.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use gangway::live::{Hello, LiveClient, LiveDevice, LiveServer, Record, ServeOptions};
use gangway::program::{CompileOptions, Executable};
use gangway::sched::{Client, DispatchMode, RunOptions, Runtime, RuntimeOptions};
use gangway::trace::{Event, Tracer, Track};
use gangway::{Device, DeviceInfo, DiscoveryOptions, discover};

use crate::background::{self, Job, Sink, Stream};
use crate::pace::FramePace;

/// Elements each chain kernel touches.
const CHAIN_LEN: usize = 4096;
/// How long the worker runs without the UI taking its events before it holds.
const UNPOLLED_NS: u64 = 1_000_000_000;

/// Devices found at start-up, shared by everything that runs real work.
#[derive(Debug, Clone)]
pub enum Discovery {
    Pending,
    Found(Vec<Device>),
    /// Why real runs are off (no adapter, bad settings).
    Unavailable(String),
}

/// The runtime's stream on loopback, or why it could not be served.
type Served = Result<Arc<LiveServer>, String>;

/// Discovers devices on a background thread so the window opens at once, and owns the app's one
/// runtime over them: every real run (the live workload, the dispatch comparison, the lab's run,
/// MoE training) is a client of it, so they share the devices in one gang order and one clock.
#[derive(Debug, Clone)]
pub struct DeviceHub {
    state: Arc<Mutex<Discovery>>,
    runtime: Arc<Mutex<Option<Runtime>>>,
    /// The runtime's stream, served on loopback; or why it is not.
    server: Arc<Mutex<Option<Served>>>,
}

/// Events of the viewer's own runs a late follower gets first: the Live tab's minute at the
/// chain's rate, and a bound on what the viewer holds for followers.
const SERVED_HISTORY: usize = 20_000;

/// Serves `runtime`'s events on a free loopback port, its hello naming `devices`.
fn serve_runs(runtime: &Runtime, devices: &[Device]) -> gangway::Result<LiveServer> {
    let mut hello = Hello::for_this_process();
    hello.devices = devices
        .iter()
        .map(|d| LiveDevice {
            id: d.id(),
            rank: 0,
            host: String::new(),
            adapter: d.info().name.clone(),
            backend: d.info().backend.clone(),
            track: Track::device(d.id(), d.label()),
        })
        .collect();
    let options = ServeOptions {
        history_events: SERVED_HISTORY,
        ..ServeOptions::default()
    };
    let server = LiveServer::bind("127.0.0.1:0", options, hello)?;
    server.attach_tracer(0, runtime.tracer())?;
    Ok(server)
}

impl DeviceHub {
    /// Starts discovery (honouring `WGPU_BACKEND` and `GANGWAY_VIRTUAL_DEVICES`).
    pub fn discover_in_background(ctx: Option<egui::Context>) -> Self {
        Self::discover_with(ctx, None)
    }

    /// Like [`Self::discover_in_background`], with `virtual_devices` per adapter (when set)
    /// overriding `GANGWAY_VIRTUAL_DEVICES`.
    pub fn discover_with(ctx: Option<egui::Context>, virtual_devices: Option<usize>) -> Self {
        let state = Arc::new(Mutex::new(Discovery::Pending));
        let runtime = Arc::new(Mutex::new(None));
        let server = Arc::new(Mutex::new(None));
        let hub = Self {
            state: state.clone(),
            runtime: runtime.clone(),
            server: server.clone(),
        };
        // Its result is the hub's state: the job itself is not polled.
        let spawned = background::spawn("gangway-discover", ctx, move || {
            let found = DiscoveryOptions::from_env()
                .map(|mut o| {
                    if let Some(n) = virtual_devices {
                        o.virtual_devices = n.max(1);
                    }
                    o
                })
                .and_then(|o| discover(&o))
                .and_then(|devices| {
                    let traced = RuntimeOptions {
                        tracer: Tracer::new(),
                        // Nothing here reads the gang order: its record would grow for the
                        // first twenty minutes of the Live tab (16 MB over 4 devices).
                        gang_order_keep: 0,
                        ..RuntimeOptions::default()
                    };
                    let started = Runtime::new(devices.clone(), traced)?;
                    let served = serve_runs(&started, &devices)
                        .map(Arc::new)
                        .map_err(|e| format!("the viewer's runs are not served: {e}"));
                    *server.lock().unwrap_or_else(PoisonError::into_inner) = Some(served);
                    *runtime.lock().unwrap_or_else(PoisonError::into_inner) = Some(started);
                    Ok(devices)
                })
                .map_or_else(|e| Discovery::Unavailable(e.to_string()), Discovery::Found);
            *state.lock().unwrap_or_else(PoisonError::into_inner) = found;
        });
        if let Err(e) = spawned {
            hub.set(Discovery::Unavailable(format!(
                "cannot start discovery: {e}"
            )));
        }
        hub
    }

    /// A hub that never looks for devices (tests, `--no-devices`).
    pub fn disabled(reason: &str) -> Self {
        Self {
            state: Arc::new(Mutex::new(Discovery::Unavailable(reason.into()))),
            runtime: Arc::default(),
            server: Arc::default(),
        }
    }

    /// The server of the runtime's stream, for the metrics of the viewer's own runs.
    pub fn server(&self) -> Option<Arc<LiveServer>> {
        let server = self.server.lock().unwrap_or_else(PoisonError::into_inner);
        server.as_ref().and_then(|s| s.as_ref().ok().cloned())
    }

    /// Where the runtime's stream is served (loopback), once the runtime exists; or why it is
    /// not served.
    pub fn served_at(&self) -> Option<Result<SocketAddr, String>> {
        let server = self.server.lock().unwrap_or_else(PoisonError::into_inner);
        server
            .as_ref()
            .map(|s| s.as_ref().map(|s| s.local_addr()).map_err(Clone::clone))
    }

    /// The app's runtime, once devices were found.
    pub fn runtime(&self) -> Option<Runtime> {
        self.runtime
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, d: Discovery) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = d;
    }

    pub fn get(&self) -> Discovery {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub fn devices(&self) -> Option<Vec<Device>> {
        match self.get() {
            Discovery::Found(d) => Some(d),
            _ => None,
        }
    }

    pub fn infos(&self) -> Vec<DeviceInfo> {
        self.devices()
            .map(|d| d.iter().map(|d| d.info().clone()).collect())
            .unwrap_or_default()
    }
}

/// The chain program over `devices` (one stage per device, at most 4), compiled for
/// `in_flight` concurrent runs.
pub fn chain(devices: &[Device], in_flight: usize) -> gangway::Result<Arc<Executable>> {
    let stages = devices.len().clamp(1, 4);
    let program = gangway::program::chain(&(0..stages).collect::<Vec<_>>(), CHAIN_LEN)?;
    Ok(Arc::new(program.compile(
        devices,
        CompileOptions {
            in_flight: in_flight.max(1),
            ..CompileOptions::default()
        },
    )?))
}

/// The viewer's client of `runtime` for `mode`'s runs.
pub fn chain_client(runtime: &Runtime, mode: DispatchMode) -> Client {
    runtime.client(&format!("viewer {}", mode.name()), 1)
}

/// Submits `runs` runs of `exec` in `mode` (sequential waits for each; parallel keeps every
/// slot full) and waits for all; with `trace`, returns every run's events.
pub fn run_chain(
    client: &Client,
    exec: &Arc<Executable>,
    mode: DispatchMode,
    runs: usize,
    trace: bool,
) -> gangway::Result<Vec<Event>> {
    let opts = RunOptions {
        mode,
        trace,
        ..RunOptions::default()
    };
    let mut events = Vec::new();
    let mut finish = |h: gangway::sched::RunHandle| -> gangway::Result<()> {
        events.extend(h.wait_traced()?.1);
        Ok(())
    };
    let mut in_flight = std::collections::VecDeque::new();
    for _ in 0..runs {
        in_flight.push_back(client.submit(exec, vec![vec![0.5f32; CHAIN_LEN]], opts)?);
        if (in_flight.len() >= exec.in_flight() || mode == DispatchMode::Sequential)
            && let Some(h) = in_flight.pop_front()
        {
            finish(h)?;
        }
    }
    in_flight.into_iter().try_for_each(&mut finish)?;
    Ok(events)
}

/// A background workload on the app's runtime, whose tracer is the live view's stream.
#[derive(Debug)]
pub struct LiveRunner {
    pub tracer: Tracer,
    /// The workload while it runs; its result is its error if it stopped on one.
    job: Option<Job<Result<(), String>>>,
    /// Why the workload could not start, until [`Self::error`] says it.
    not_started: Option<String>,
    /// When set, the worker stops submitting (it keeps its runtime).
    pub hold: Arc<AtomicBool>,
    /// When the UI last took events (trace clock, ns). A window that is minimized or hidden
    /// draws no frames: the worker then holds rather than fill the event channel.
    last_poll_ns: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    pub mode: DispatchMode,
}

impl LiveRunner {
    /// Starts running the chain on the runtime's devices forever (until dropped), in batches of 8
    /// runs, resting after each four times as long as it took (from 30 to 400 ms), so a 2-core
    /// machine stays usable.
    pub fn start(runtime: Runtime, mode: DispatchMode) -> Self {
        let tracer = runtime.tracer().clone();
        let hold = Arc::new(AtomicBool::new(false));
        let last_poll_ns = Arc::new(AtomicU64::new(tracer.now_ns()));
        let stop = Arc::new(AtomicBool::new(false));
        let job = {
            let stop = stop.clone();
            let (hold, last_poll_ns) = (hold.clone(), last_poll_ns.clone());
            let held = move |now: u64| {
                hold.load(Ordering::Relaxed)
                    || now.saturating_sub(last_poll_ns.load(Ordering::Relaxed)) > UNPOLLED_NS
            };
            background::spawn("gangway-live", None, move || {
                work(&runtime, mode, &held, &stop)
            })
        };
        let (job, not_started) = match job {
            Ok(job) => (Some(job), None),
            Err(e) => (None, Some(format!("cannot start the live workload: {e}"))),
        };
        Self {
            tracer,
            job,
            not_started,
            hold,
            last_poll_ns,
            stop,
            mode,
        }
    }

    /// Says the UI took the events up to `now_ns` (trace clock).
    pub fn heartbeat(&self, now_ns: u64) {
        self.last_poll_ns.store(now_ns, Ordering::Relaxed);
    }

    /// The worker's last error, if it stopped on one.
    pub fn error(&mut self) -> Option<String> {
        if let Some(e) = self.not_started.take() {
            return Some(e);
        }
        let ended = self.job.as_ref()?.poll("the live workload")?;
        if let Some(mut job) = self.job.take() {
            job.join();
        }
        ended.err()
    }

    /// Nanoseconds on the trace clock now.
    pub fn now_ns(&self) -> u64 {
        self.tracer.now_ns()
    }
}

impl Drop for LiveRunner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(job) = &mut self.job {
            job.join();
        }
    }
}

/// The share of the time the live workload runs: it rests after each batch in proportion.
const WORKLOAD_DUTY: f64 = 0.2;
/// The least rest between batches.
const LEAST_REST: Duration = Duration::from_millis(30);
/// The longest rest: well inside [`UNPOLLED_NS`], since the UI takes events (and says so) only
/// when some arrive; a longer rest would read as a UI that stopped looking, and hold the
/// workload for good.
const MOST_REST: Duration = Duration::from_millis(400);

/// The rest after a batch that took `batch`: enough that the workload runs [`WORKLOAD_DUTY`] of
/// the time, from [`LEAST_REST`] to [`MOST_REST`] (the first batch compiles its kernels). It is
/// a demonstration: where the GPU is the CPU (lavapipe), batches with only the least rest
/// between kept the tab at 84-91 % of a core with the README's `--virtual-devices 2`, and at
/// this share at 65 % (the rest is drawing); on a real GPU a batch takes well under a
/// millisecond, and the least rest decides.
fn rest_after(batch: Duration) -> Duration {
    batch
        .mul_f64((1.0 - WORKLOAD_DUTY) / WORKLOAD_DUTY)
        .clamp(LEAST_REST, MOST_REST)
}

fn work(
    runtime: &Runtime,
    mode: DispatchMode,
    held: &dyn Fn(u64) -> bool,
    stop: &AtomicBool,
) -> Result<(), String> {
    let tracer = runtime.tracer();
    let result = (|| -> gangway::Result<()> {
        let exec = chain(runtime.devices(), 4)?;
        let client = chain_client(runtime, mode);
        while !stop.load(Ordering::Relaxed) {
            if held(tracer.now_ns()) {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            let started = Instant::now();
            run_chain(&client, &exec, mode, 8, false)?;
            // The server has every event; the tracer's own copy would only grow. (The Live
            // tab's follower asks for the frames, as the events reach it.)
            drop(tracer.take_events());
            std::thread::sleep(rest_after(started.elapsed()));
        }
        Ok(())
    })();
    result.map_err(|e| e.to_string())
}

/// Follows the stream served at `addr` on a thread of its own: its events in batches, at most
/// one per the window's [`FramePace`] (each asks for a frame), until the handle is dropped. A
/// connection that fails or is lost is tried again every second; the thread's result says
/// why it stopped.
pub fn follow(addr: SocketAddr, ctx: Option<egui::Context>) -> Result<Follower, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let s = Arc::clone(&stop);
    let pace = FramePace::of(ctx.as_ref());
    let stream = background::spawn_stream("gangway-viewer-follow", ctx, move |sink| {
        follow_until(addr, &s, &pace, sink)
    })?;
    Ok(Follower { stream, stop })
}

/// A stream being followed ([`follow`]); dropping it stops the thread within 50 ms.
#[derive(Debug)]
pub struct Follower {
    pub stream: Stream<Vec<Event>, String>,
    stop: Arc<AtomicBool>,
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn follow_until(
    addr: SocketAddr,
    stop: &AtomicBool,
    pace: &FramePace,
    sink: &Sink<Vec<Event>>,
) -> String {
    // The end of the newest event taken: connected again, the server's history repeats what
    // came before, which is skipped.
    let mut newest: Option<u64> = None;
    while !stop.load(Ordering::Relaxed) {
        let seen = newest;
        let mut client = match LiveClient::connect(addr, None, Duration::from_secs(5)) {
            Ok(c) => c,
            Err(_) => {
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
        };
        let mut batch = Vec::new();
        let mut sent = Instant::now();
        loop {
            if stop.load(Ordering::Relaxed) {
                return "stopped".into();
            }
            match client.recv(Duration::from_millis(50)) {
                Ok(Some(Record::Event { event, .. })) => {
                    let end = event.clamped_end_ns();
                    if seen.is_some_and(|n| end <= n) {
                        continue;
                    }
                    newest = Some(newest.map_or(end, |n| n.max(end)));
                    batch.push(event);
                }
                Ok(Some(Record::End(_))) => return "the stream ended".into(),
                Ok(_) => {}
                // Lost: what came is sent, and the connection is made again.
                Err(_) => break,
            }
            if !batch.is_empty() && (sent.elapsed() >= pace.every() || batch.len() >= 8192) {
                sink.send(std::mem::take(&mut batch));
                sent = Instant::now();
            }
        }
        if !batch.is_empty() {
            sink.send(batch);
        }
    }
    "stopped".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workload_rests_in_proportion_within_bounds() {
        assert_eq!(rest_after(Duration::from_micros(200)), LEAST_REST);
        let batch = Duration::from_millis(20);
        let rest = rest_after(batch);
        let duty = batch.as_secs_f64() / (batch + rest).as_secs_f64();
        assert!((duty - WORKLOAD_DUTY).abs() < 1e-9, "{duty}");
        assert_eq!(rest_after(Duration::from_secs(2)), MOST_REST);
        assert!(MOST_REST.as_nanos() < u128::from(UNPOLLED_NS) / 2);
    }
}
