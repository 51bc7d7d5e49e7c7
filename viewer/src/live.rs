//! Real work on the real devices, in the background: discover devices, then run the chain
//! program (one tiny kernel per device, Pathways Fig. 4/7) over and over through a traced
//! [`Runtime`], streaming every event to the UI through [`Tracer::subscribe`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use gangway::program::{CompileOptions, Executable, ProgramBuilder};
use gangway::sched::{Client, DispatchMode, RunOptions, Runtime, RuntimeOptions};
use gangway::trace::Tracer;
use gangway::{Device, DeviceInfo, DiscoveryOptions, discover};

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

/// Discovers devices on a background thread so the window opens at once.
#[derive(Debug, Clone)]
pub struct DeviceHub {
    state: Arc<Mutex<Discovery>>,
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
        let hub = Self {
            state: state.clone(),
        };
        let spawned = std::thread::Builder::new()
            .name("gangway-discover".into())
            .spawn(move || {
                let found = DiscoveryOptions::from_env()
                    .map(|mut o| {
                        if let Some(n) = virtual_devices {
                            o.virtual_devices = n.max(1);
                        }
                        o
                    })
                    .and_then(|o| discover(&o))
                    .map_or_else(|e| Discovery::Unavailable(e.to_string()), Discovery::Found);
                *state.lock().unwrap_or_else(PoisonError::into_inner) = found;
                if let Some(ctx) = ctx {
                    ctx.request_repaint();
                }
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
        }
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
    let mut p = ProgramBuilder::new(format!("chain x{stages}"));
    let mut v = p.arg(&[0], CHAIN_LEN);
    for s in 0..stages {
        v = p.affine(&format!("stage {s}"), &[s], v, 1.0, 1.0);
    }
    p.result(v);
    let program = p.build()?;
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
/// slot full) and waits for all.
pub fn run_chain(
    client: &Client,
    exec: &Arc<Executable>,
    mode: DispatchMode,
    runs: usize,
) -> gangway::Result<()> {
    let opts = RunOptions {
        mode,
        microbatch: None,
    };
    let mut in_flight = std::collections::VecDeque::new();
    for _ in 0..runs {
        in_flight.push_back(client.submit(exec, vec![vec![0.5f32; CHAIN_LEN]], opts)?);
        if (in_flight.len() >= exec.in_flight() || mode == DispatchMode::Sequential)
            && let Some(h) = in_flight.pop_front()
        {
            h.wait()?;
        }
    }
    in_flight.into_iter().try_for_each(|h| h.wait().map(|_| ()))
}

/// A background workload, tracing into the live view's stream.
#[derive(Debug)]
pub struct LiveRunner {
    pub tracer: Tracer,
    errors: Receiver<String>,
    /// When set, the worker stops submitting (it keeps its runtime).
    pub hold: Arc<AtomicBool>,
    /// When the UI last took events (trace clock, ns). A window that is minimized or hidden
    /// draws no frames: the worker then holds rather than fill the event channel.
    last_poll_ns: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    worker: Option<JoinHandle<()>>,
    pub mode: DispatchMode,
}

impl LiveRunner {
    /// Starts running the chain on `devices` forever (until dropped), in batches of 8 runs with
    /// a short rest between, so a 2-core machine stays usable.
    pub fn start(
        devices: Vec<Device>,
        mode: DispatchMode,
        tracer: Tracer,
        ctx: Option<egui::Context>,
    ) -> Self {
        let (err_tx, errors) = channel();
        let hold = Arc::new(AtomicBool::new(false));
        let last_poll_ns = Arc::new(AtomicU64::new(tracer.now_ns()));
        let stop = Arc::new(AtomicBool::new(false));
        let worker = {
            let (tracer, stop) = (tracer.clone(), stop.clone());
            let (hold, last_poll_ns) = (hold.clone(), last_poll_ns.clone());
            let held = move |now: u64| {
                hold.load(Ordering::Relaxed)
                    || now.saturating_sub(last_poll_ns.load(Ordering::Relaxed)) > UNPOLLED_NS
            };
            std::thread::Builder::new()
                .name("gangway-live".into())
                .spawn(move || work(devices, tracer, mode, &held, &stop, &err_tx, ctx))
        };
        let (worker, errors) = match worker {
            Ok(h) => (Some(h), errors),
            Err(e) => {
                // Reported through the same path as worker errors.
                let (tx, rx) = channel();
                let _ = tx.send(format!("cannot start the live workload: {e}"));
                (None, rx)
            }
        };
        Self {
            tracer,
            errors,
            hold,
            last_poll_ns,
            stop,
            worker,
            mode,
        }
    }

    /// Says the UI took the events up to `now_ns` (trace clock).
    pub fn heartbeat(&self, now_ns: u64) {
        self.last_poll_ns.store(now_ns, Ordering::Relaxed);
    }

    /// The worker's last error, if it stopped on one.
    pub fn error(&self) -> Option<String> {
        self.errors.try_iter().last()
    }

    /// Nanoseconds on the trace clock now.
    pub fn now_ns(&self) -> u64 {
        self.tracer.now_ns()
    }
}

impl Drop for LiveRunner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.worker.take() {
            let _ = h.join();
        }
    }
}

fn work(
    devices: Vec<Device>,
    tracer: Tracer,
    mode: DispatchMode,
    held: &dyn Fn(u64) -> bool,
    stop: &AtomicBool,
    errors: &Sender<String>,
    ctx: Option<egui::Context>,
) {
    let result = (|| -> gangway::Result<()> {
        let exec = chain(&devices, 4)?;
        let runtime = Runtime::new(
            devices,
            RuntimeOptions {
                tracer: tracer.clone(),
                ..RuntimeOptions::default()
            },
        )?;
        let client = chain_client(&runtime, mode);
        while !stop.load(Ordering::Relaxed) {
            if held(tracer.now_ns()) {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            run_chain(&client, &exec, mode, 8)?;
            // The subscriber has every event; the tracer's own copy would only grow.
            drop(tracer.take_events());
            if let Some(ctx) = &ctx {
                ctx.request_repaint();
            }
            std::thread::sleep(Duration::from_millis(30));
        }
        Ok(())
    })();
    if let Err(e) = result {
        let _ = errors.send(e.to_string());
    }
}
