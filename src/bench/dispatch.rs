//! The `dispatch` suite: Pathways' dispatch micro-benchmarks on one adapter's (virtual) devices,
//! timed on the host (what is measured is the host's dispatch work, not the kernels).
//!
//! - **chain** (Fig. 7): S stages, each a tiny kernel on a different device, S = 1, 2, 4, 8 up to
//!   the devices there are. Sequential dispatch runs one node at a time; parallel dispatch records
//!   everything up front and keeps up to S runs in flight, so successive runs overlap across the
//!   stages.
//! - **granularity** (Fig. 5): 128 tiny computations on one device as OpByOp (one host call each),
//!   Chained (one call runs a 128-node chain) and Fused (one node applying all 128 in one kernel).
//! - **raw wgpu**: each chain and granularity case again, recorded straight into wgpu with no
//!   runtime (`dispatch_raw.rs`): the floor. Every gangway chain and granularity case is
//!   compared to its raw twin, so its speed-up is the fraction of the floor it reaches.
//! - **shares** (Fig. 9): four clients with proportional shares 1:1:1:1 and 1:2:4:8 competing for
//!   one admission slot; the metrics give each client's fraction of the admissions while all were
//!   backlogged.
//! - **tracing**: the parallel chain at S = min(4, devices) with tracing off and on (every run
//!   keeps its events for its handle; kernels timed by GPU timestamps, or on the host), compared
//!   to off; the off case also measures what a disabled tracer call costs. The traced cases'
//!   events go to `--trace` when it is given.
//!
//! Every case runs on the process's one runtime; the shares case sets its admission policy for
//! its own runs and puts it back after, the tracing cases likewise their kernel timing.

use super::dispatch_raw::RawCalls;
pub use super::dispatch_raw::TINY;
use super::harness::{Blocking, BlockingRun, Extras};
use super::planned::Planned;
use super::work::{Work, WorkUnit};
use crate::program::{CompileOptions, Executable, Program, ProgramBuilder, chain};
use crate::sched::{Client, DispatchMode, Policy, RunOptions, Runtime};
use crate::trace::{EventMeta, Tracer};
use crate::{Device, Result};
use std::collections::VecDeque;
use std::sync::Arc;

/// Computations of the granularity cases.
const GRANULARITY: usize = 128;

#[derive(Debug, Clone)]
pub struct DispatchOptions {
    /// Longest chain (capped at the devices there are).
    pub max_stages: usize,
    /// Runs per timed sample.
    pub runs: usize,
    /// Where the traced cases record (`--trace`); off: a private tracer each.
    pub trace: Tracer,
}

impl DispatchOptions {
    pub fn standard() -> Self {
        Self {
            max_stages: 8,
            runs: 20,
            trace: Tracer::off(),
        }
    }

    pub fn quick() -> Self {
        Self {
            max_stages: 2,
            runs: 4,
            ..Self::standard()
        }
    }
}

/// A compiled program and a client: one case's state.
struct Chain {
    client: Client,
    exec: Arc<Executable>,
    mode: DispatchMode,
    runs: usize,
    /// Host calls per run (OpByOp calls the one-node program 128 times).
    calls: usize,
    /// Traced runs: each keeps its events, which then go to this tracer (when it is on).
    trace: Option<Tracer>,
}

impl BlockingRun for Chain {
    /// `runs` runs: sequential dispatch waits for each; parallel keeps the executable's slots full.
    fn run(&mut self) -> Result<()> {
        let input = vec![0.0f32; TINY];
        let opts = RunOptions {
            mode: self.mode,
            microbatch: None,
            trace: self.trace.is_some(),
        };
        let finish = |h: crate::sched::RunHandle| -> Result<()> {
            match &self.trace {
                Some(tracer) => {
                    let (_, events) = h.wait_traced()?;
                    events.into_iter().for_each(|e| tracer.emit(e));
                }
                None => {
                    h.wait_bytes()?;
                }
            }
            Ok(())
        };
        // A run waited for at once is one call, as a user makes it: the caller may drive it.
        if self.trace.is_none()
            && (self.mode == DispatchMode::Sequential || self.exec.in_flight() == 1)
        {
            for _ in 0..self.runs * self.calls {
                self.client
                    .run_bytes(&self.exec, vec![input.clone()], opts)?;
            }
            return Ok(());
        }
        let mut in_flight = VecDeque::new();
        for _ in 0..self.runs * self.calls {
            in_flight.push_back(self.client.submit(&self.exec, vec![input.clone()], opts)?);
            if (in_flight.len() >= self.exec.in_flight() || self.mode == DispatchMode::Sequential)
                && let Some(h) = in_flight.pop_front()
            {
                finish(h)?;
            }
        }
        in_flight.into_iter().try_for_each(finish)
    }
}

/// How a chain case runs: its runtime, dispatch mode, runs per sample and host calls per run.
#[derive(Clone)]
struct ChainRuns {
    runtime: Runtime,
    mode: DispatchMode,
    runs: usize,
    calls: usize,
}

fn compile(
    program: Program,
    devices: &[Device],
    in_flight: usize,
    how: ChainRuns,
) -> Result<Chain> {
    let exec = Arc::new(program.compile(
        devices,
        CompileOptions {
            in_flight,
            ..CompileOptions::default()
        },
    )?);
    Ok(Chain {
        client: how.runtime.client(exec.program().name(), 1),
        exec,
        mode: how.mode,
        runs: how.runs,
        calls: how.calls,
        trace: None,
    })
}

/// A case timed on the host whose state `prepare` builds.
fn case<R: BlockingRun + 'static>(
    name: String,
    computations: usize,
    prepare: impl FnOnce() -> Result<R> + 'static,
) -> Blocking<impl FnOnce() -> Result<R>, R> {
    Blocking::new(
        name,
        Work::new(computations as f64, WorkUnit::Computation),
        prepare,
    )
}

/// The name of a chain case run by `how` (a dispatch mode's name, or [`RAW`]).
fn chain_name(stages: usize, how: &str) -> String {
    format!("chain {stages} stages, {how}")
}

/// The name of a granularity case run by `how`.
fn granularity_name(kind: &str, how: &str) -> String {
    format!("granularity {kind}, {how}")
}

/// What the floor cases are called after: no runtime, straight wgpu.
const RAW: &str = "raw wgpu";

fn chain_case(
    runtime: &Runtime,
    devices: &[Device],
    stages: usize,
    mode: DispatchMode,
    runs: usize,
) -> Planned {
    let devices = devices[..stages].to_vec();
    let how = ChainRuns {
        runtime: runtime.clone(),
        mode,
        runs,
        calls: 1,
    };
    let bench = case(chain_name(stages, mode.name()), stages * runs, move || {
        compile(
            chain(&(0..stages).collect::<Vec<_>>(), TINY)?,
            &devices,
            stages.max(2),
            how,
        )
    });
    Planned::Run(Box::new(bench.compared_to(chain_name(stages, RAW))))
}

/// The chain recorded straight into wgpu, one device after the other (the floor).
fn raw_chain_case(devices: &[Device], stages: usize, runs: usize) -> Planned {
    let devices = devices[..stages].to_vec();
    Planned::Run(Box::new(case(
        chain_name(stages, RAW),
        stages * runs,
        move || RawCalls::new(&devices, 1, false, 1, runs),
    )))
}

/// A granularity case recorded straight into wgpu (the floor).
fn raw_granularity_case(device: &Device, kind: &'static str) -> Planned {
    let device = [device.clone()];
    Planned::Run(Box::new(case(
        granularity_name(kind, RAW),
        GRANULARITY,
        move || match kind {
            "OpByOp" => RawCalls::new(&device, 1, false, GRANULARITY, 1),
            "Chained" => RawCalls::new(&device, GRANULARITY, false, 1, 1),
            _ => RawCalls::new(&device, GRANULARITY, true, 1, 1),
        },
    )))
}

fn granularity_case(
    runtime: &Runtime,
    device: &Device,
    kind: &'static str,
    mode: DispatchMode,
) -> Planned {
    let device = vec![device.clone()];
    let runtime = runtime.clone();
    let bench = case(
        granularity_name(kind, mode.name()),
        GRANULARITY,
        move || {
            let (program, calls) = match kind {
                "OpByOp" => (chain(&[0], TINY)?, GRANULARITY),
                "Chained" => {
                    let mut p = ProgramBuilder::new("chained x128");
                    let mut v = p.arg(&[0], TINY);
                    for i in 0..GRANULARITY {
                        v = p.affine(&format!("op {i}"), &[0], v, 1.0, 1.0);
                    }
                    p.result(v);
                    (p.build()?, 1)
                }
                _ => {
                    let mut p = ProgramBuilder::new("fused x128");
                    let x = p.arg(&[0], TINY);
                    let y = p.fused_affine("fused", &[0], x, 1.0, 1.0, GRANULARITY as u32);
                    p.result(y);
                    (p.build()?, 1)
                }
            };
            let how = ChainRuns {
                runtime,
                mode,
                runs: 1,
                calls,
            };
            compile(program, &device, 1, how)
        },
    );
    Planned::Run(Box::new(bench.compared_to(granularity_name(kind, RAW))))
}

/// Four backlogged clients with proportional shares on one admission slot.
struct Shares {
    runtime: Runtime,
    clients: Vec<(Client, Arc<Executable>)>,
    per_client: usize,
    /// Each client's fraction of the first `per_client` admissions of the last run.
    split: Vec<f64>,
}

impl BlockingRun for Shares {
    fn run(&mut self) -> Result<()> {
        // Proportional shares on one admission slot, for this case only: the runtime is the
        // process's, and it goes back to what it was after.
        let before = self.runtime.admission();
        self.runtime.set_admission(Policy::Proportional, 1);
        let result = self.backlogged();
        self.runtime.set_admission(before.0, before.1);
        result
    }

    fn extras(&mut self) -> Result<Extras> {
        let mut e = Extras::default();
        for (c, f) in self.split.iter().enumerate() {
            e.metrics.insert(format!("admitted c{c}"), *f);
        }
        e.note = format!(
            "admissions while all {} clients are backlogged (first {})",
            self.clients.len(),
            self.per_client
        );
        Ok(e)
    }
}

impl Shares {
    /// Every client's runs queued while admission is paused, then admitted and run.
    fn backlogged(&mut self) -> Result<()> {
        // The record is bounded (older gangs are forgotten): start each run from an empty one.
        self.runtime.clear_gang_order();
        self.runtime.pause_admission();
        let mut handles = Vec::new();
        for (client, exec) in &self.clients {
            for _ in 0..self.per_client {
                handles.push(client.submit(exec, vec![vec![0.0; TINY]], RunOptions::default())?);
            }
        }
        self.runtime.resume_admission();
        handles.into_iter().try_for_each(|h| h.wait().map(|_| ()))?;
        let order = self.runtime.gang_order();
        let mut seen = std::collections::HashSet::new();
        let admitted: Vec<usize> = order
            .first()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter(|r| seen.insert(r.run))
            .map(|r| r.client)
            .take(self.per_client)
            .collect();
        self.split = (0..self.clients.len())
            .map(|c| {
                admitted.iter().filter(|&&x| x == c).count() as f64 / admitted.len().max(1) as f64
            })
            .collect();
        Ok(())
    }
}

fn shares_case(runtime: &Runtime, device: &Device, shares: [u32; 4], runs: usize) -> Planned {
    let text: Vec<String> = shares.iter().map(u32::to_string).collect();
    let per_client = (runs * 2).max(16);
    let device = vec![device.clone()];
    let runtime = runtime.clone();
    Planned::Run(Box::new(case(
        format!("shares {}", text.join(":")),
        per_client * shares.len(),
        move || {
            let opts = CompileOptions {
                in_flight: per_client,
                ..CompileOptions::default()
            };
            let clients = shares
                .iter()
                .map(|&s| {
                    Ok((
                        runtime.client(&format!("share {s}"), s),
                        Arc::new(chain(&[0], TINY)?.compile(&device, opts)?),
                    ))
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(Shares {
                runtime,
                clients,
                per_client,
                split: Vec::new(),
            })
        },
    )))
}

/// The parallel chain, traced or not.
struct Traced {
    chain: Chain,
    runtime: Runtime,
    /// Traced kernels timed with GPU timestamps (else on the host).
    gpu_timestamps: bool,
    /// Whether to measure the disabled tracer's per-call cost at the end.
    off: bool,
    stages: usize,
    seconds_per_run: f64,
}

impl BlockingRun for Traced {
    fn run(&mut self) -> Result<()> {
        // The process's runtime: its timing goes back to what it was after this case's runs.
        let before = self.runtime.gpu_timestamps();
        self.runtime.set_gpu_timestamps(self.gpu_timestamps);
        let start = std::time::Instant::now();
        let result = self.chain.run();
        self.seconds_per_run = start.elapsed().as_secs_f64() / self.chain.runs as f64;
        self.runtime.set_gpu_timestamps(before);
        result
    }

    /// Off: what a disabled tracer call costs, measured; each computation makes about ten
    /// (encode, submit, completion, transfers), each a branch when off.
    fn extras(&mut self) -> Result<Extras> {
        let mut e = Extras::default();
        if self.off {
            let off = Tracer::off();
            const CALLS: u32 = 1_000_000;
            let start = std::time::Instant::now();
            for i in 0..CALLS {
                let s = off.span();
                off.finish(s, EventMeta::kernel(i as usize), || String::from("x"));
            }
            let per_call = start.elapsed().as_secs_f64() / f64::from(CALLS);
            let per_computation = self.seconds_per_run / self.stages as f64;
            e.metrics.insert("off ns/call".into(), per_call * 1e9);
            e.metrics.insert(
                "off % of a computation".into(),
                100.0 * 10.0 * per_call / per_computation.max(1e-12),
            );
        }
        Ok(e)
    }
}

fn tracing_case(
    runtime: &Runtime,
    devices: &[Device],
    mode: &'static str,
    o: &DispatchOptions,
) -> Planned {
    let runs = o.runs;
    let on = o.trace.clone();
    let stages = devices.len().min(4);
    let name = |m: &str| format!("tracing {m}, chain {stages} stages");
    let devices = devices[..stages].to_vec();
    let runtime = runtime.clone();
    let bench = case(name(mode), stages * runs, move || {
        let how = ChainRuns {
            runtime: runtime.clone(),
            mode: DispatchMode::Parallel,
            runs,
            calls: 1,
        };
        let mut chain = compile(
            chain(&(0..stages).collect::<Vec<_>>(), TINY)?,
            &devices,
            stages.max(2),
            how,
        )?;
        chain.trace = (mode != "off").then_some(on);
        Ok(Traced {
            chain,
            runtime,
            gpu_timestamps: mode == "GPU timestamps",
            off: mode == "off",
            stages,
            seconds_per_run: 0.0,
        })
    });
    Planned::Run(Box::new(if mode == "off" {
        bench
    } else {
        bench.compared_to(name("off"))
    }))
}

/// Every case on one adapter's devices, on `runtime`.
pub fn plan(runtime: &Runtime, devices: &[Device], o: &DispatchOptions) -> Result<Vec<Planned>> {
    let mut out = Vec::new();
    let longest = o.max_stages.min(devices.len());
    for stages in [1, 2, 4, 8, 16, 32].into_iter().filter(|&s| s <= longest) {
        out.push(raw_chain_case(devices, stages, o.runs));
        for mode in [DispatchMode::Sequential, DispatchMode::Parallel] {
            out.push(chain_case(runtime, devices, stages, mode, o.runs));
        }
    }
    for kind in ["OpByOp", "Chained", "Fused"] {
        out.push(raw_granularity_case(&devices[0], kind));
    }
    for mode in [DispatchMode::Sequential, DispatchMode::Parallel] {
        for kind in ["OpByOp", "Chained", "Fused"] {
            out.push(granularity_case(runtime, &devices[0], kind, mode));
        }
    }
    for shares in [[1, 1, 1, 1], [1, 2, 4, 8]] {
        out.push(shares_case(runtime, &devices[0], shares, o.runs));
    }
    for mode in ["off", "GPU timestamps", "host timing"] {
        out.push(tracing_case(runtime, devices, mode, o));
    }
    Ok(out)
}
