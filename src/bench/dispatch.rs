//! `gangway bench dispatch`: Pathways' dispatch micro-benchmarks on this machine's devices.
//!
//! - **chain** (Fig. 7): S stages, each a tiny kernel on a different device, S = 1…max. Sequential
//!   dispatch runs one node at a time; parallel dispatch records everything up front and keeps up
//!   to S runs in flight, so successive runs overlap across the stages.
//! - **granularity** (Fig. 5): 128 tiny computations on one device as OpByOp (one host call each),
//!   Chained (one call runs a 128-node chain) and Fused (one node applying all 128 in one kernel).
//! - **shares** (Fig. 9): four clients with proportional shares 1:1:1:1 and 1:2:4:8 competing for
//!   one admission slot; reported as each client's fraction of the admissions.
//! - **tracing**: the chain at S = min(4, devices) with tracing off and on, in the same process.

use super::median_seconds;
use crate::program::{CompileOptions, Executable, Program, ProgramBuilder};
use crate::sched::{DispatchMode, Policy, RunOptions, Runtime, RuntimeOptions};
use crate::trace::{EventMeta, Tracer};
use crate::{Device, Result};
use serde::Serialize;
use std::sync::Arc;

/// Elements each tiny kernel touches.
pub const TINY: usize = 256;

#[derive(Debug, Clone)]
pub struct DispatchBenchOptions {
    pub max_stages: usize,
    /// Runs per timed repetition.
    pub runs: usize,
    pub warmup: usize,
    pub reps: usize,
}

/// One measured case.
#[derive(Debug, Clone, Serialize)]
pub struct DispatchResult {
    pub suite: &'static str,
    pub case: String,
    pub mode: String,
    pub stages: usize,
    /// Kernel computations per timed repetition.
    pub computations: usize,
    pub median_s: f64,
    pub computations_per_s: f64,
    /// What else the row means (a share split, a ratio).
    pub note: String,
}

fn chain(stages: usize) -> Result<Program> {
    let mut p = ProgramBuilder::new(format!("chain x{stages}"));
    let mut v = p.arg(&[0], TINY);
    for s in 0..stages {
        v = p.affine(&format!("stage {s}"), &[s], v, 1.0, 1.0);
    }
    p.result(v);
    p.build()
}

/// Times `runs` runs of `exec`: sequential dispatch waits for each; parallel keeps the
/// executable's slots full.
fn time_runs(
    runtime: &Runtime,
    exec: &Arc<Executable>,
    mode: DispatchMode,
    o: &DispatchBenchOptions,
) -> Result<f64> {
    let client = runtime.client(&format!("bench {}", exec.program().name()), 1);
    let input = vec![0.0f32; exec.program().value(exec.program().args()[0]).shard_len];
    let opts = RunOptions {
        mode,
        microbatch: None,
    };
    median_seconds(o.warmup, o.reps, || {
        let mut in_flight = std::collections::VecDeque::new();
        for _ in 0..o.runs {
            in_flight.push_back(client.submit(exec, vec![input.clone()], opts)?);
            if (in_flight.len() >= exec.in_flight() || mode == DispatchMode::Sequential)
                && let Some(h) = in_flight.pop_front()
            {
                h.wait()?;
            }
        }
        in_flight.into_iter().try_for_each(|h| h.wait().map(|_| ()))
    })
}

fn result(
    suite: &'static str,
    case: String,
    mode: &str,
    stages: usize,
    computations: usize,
    median_s: f64,
    note: String,
) -> DispatchResult {
    DispatchResult {
        suite,
        case,
        mode: mode.to_string(),
        stages,
        computations,
        median_s,
        computations_per_s: computations as f64 / median_s,
        note,
    }
}

/// Fig. 7: computations per second of an S-stage chain, sequential vs parallel dispatch.
pub fn chain_suite(
    devices: &[Device],
    o: &DispatchBenchOptions,
    mut progress: impl FnMut(&DispatchResult),
) -> Result<Vec<DispatchResult>> {
    let runtime = Runtime::new(devices.to_vec(), RuntimeOptions::default())?;
    let mut out = Vec::new();
    for stages in 1..=o.max_stages.min(devices.len()) {
        let exec = Arc::new(chain(stages)?.compile(
            devices,
            CompileOptions {
                in_flight: stages.max(2),
                ..CompileOptions::default()
            },
        )?);
        for mode in [DispatchMode::Sequential, DispatchMode::Parallel] {
            let t = time_runs(&runtime, &exec, mode, o)?;
            let r = result(
                "chain",
                format!("{stages} stages"),
                mode.name(),
                stages,
                stages * o.runs,
                t,
                String::new(),
            );
            progress(&r);
            out.push(r);
        }
    }
    Ok(out)
}

/// Fig. 5: OpByOp, Chained and Fused, 128 computations on the first device.
pub fn granularity_suite(
    devices: &[Device],
    o: &DispatchBenchOptions,
    mut progress: impl FnMut(&DispatchResult),
) -> Result<Vec<DispatchResult>> {
    const N: usize = 128;
    let device = &devices[..1];
    let runtime = Runtime::new(device.to_vec(), RuntimeOptions::default())?;
    let one = Arc::new(chain(1)?.compile(device, CompileOptions::default())?);
    let mut p = ProgramBuilder::new("chained x128");
    let mut v = p.arg(&[0], TINY);
    for i in 0..N {
        v = p.affine(&format!("op {i}"), &[0], v, 1.0, 1.0);
    }
    p.result(v);
    let chained = Arc::new(p.build()?.compile(device, CompileOptions::default())?);
    let mut p = ProgramBuilder::new("fused x128");
    let x = p.arg(&[0], TINY);
    let y = p.fused_affine("fused", &[0], x, 1.0, 1.0, N as u32);
    p.result(y);
    let fused = Arc::new(p.build()?.compile(device, CompileOptions::default())?);
    let client = runtime.client("granularity", 1);
    let input = vec![0.0f32; TINY];
    let mut out = Vec::new();
    for mode in [DispatchMode::Sequential, DispatchMode::Parallel] {
        let opts = RunOptions {
            mode,
            microbatch: None,
        };
        let cases: [(&str, &Arc<Executable>, usize); 3] = [
            ("OpByOp", &one, N),
            ("Chained", &chained, 1),
            ("Fused", &fused, 1),
        ];
        for (name, exec, calls) in cases {
            let t = median_seconds(o.warmup, o.reps, || {
                for _ in 0..calls {
                    client.run(exec, vec![input.clone()], opts)?;
                }
                Ok(())
            })?;
            let r = result(
                "granularity",
                name.to_string(),
                mode.name(),
                1,
                N,
                t,
                format!("{calls} host call(s)"),
            );
            progress(&r);
            out.push(r);
        }
    }
    Ok(out)
}

/// Fig. 9: four clients with proportional shares, all backlogged, one admission at a time.
pub fn shares_suite(
    devices: &[Device],
    o: &DispatchBenchOptions,
    mut progress: impl FnMut(&DispatchResult),
) -> Result<Vec<DispatchResult>> {
    let device = &devices[..1];
    let per_client = (o.runs * 2).max(16);
    let mut out = Vec::new();
    for shares in [[1u32, 1, 1, 1], [1, 2, 4, 8]] {
        let runtime = Runtime::new(
            device.to_vec(),
            RuntimeOptions {
                policy: Policy::Proportional,
                max_in_flight: 1,
                ..RuntimeOptions::default()
            },
        )?;
        let opts = CompileOptions {
            in_flight: per_client,
            ..CompileOptions::default()
        };
        let clients = shares
            .iter()
            .map(|&s| {
                Ok((
                    runtime.client(&format!("share {s}"), s),
                    Arc::new(chain(1)?.compile(device, opts)?),
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        runtime.pause_admission();
        let start = std::time::Instant::now();
        let mut handles = Vec::new();
        for (client, exec) in &clients {
            for _ in 0..per_client {
                handles.push(client.submit(exec, vec![vec![0.0; TINY]], RunOptions::default())?);
            }
        }
        runtime.resume_admission();
        handles.into_iter().try_for_each(|h| h.wait().map(|_| ()))?;
        let elapsed = start.elapsed().as_secs_f64();
        // While every client is backlogged: the first `per_client` admissions.
        let mut seen = std::collections::HashSet::new();
        let admitted: Vec<usize> = runtime.gang_order()[0]
            .iter()
            .filter(|r| seen.insert(r.run))
            .map(|r| r.client)
            .take(per_client)
            .collect();
        let split: Vec<String> = (0..shares.len())
            .map(|c| {
                let n = admitted.iter().filter(|&&x| x == c).count();
                format!("{:.0}%", 100.0 * n as f64 / admitted.len().max(1) as f64)
            })
            .collect();
        let shares_text: Vec<String> = shares.iter().map(u32::to_string).collect();
        let r = result(
            "shares",
            format!("shares {}", shares_text.join(":")),
            "parallel",
            1,
            per_client * shares.len(),
            elapsed,
            format!(
                "first {per_client} admissions while all are backlogged: {}",
                split.join(" / ")
            ),
        );
        progress(&r);
        out.push(r);
    }
    Ok(out)
}

/// Tracing off vs on, on the parallel chain; plus the measured cost of the off path per call.
/// The traced repetitions go to `trace` when it is on (else to a private tracer).
pub fn tracing_suite(
    devices: &[Device],
    o: &DispatchBenchOptions,
    trace: &Tracer,
    mut progress: impl FnMut(&DispatchResult),
) -> Result<Vec<DispatchResult>> {
    let stages = devices.len().min(4);
    let mut out = Vec::new();
    let mut times = Vec::new();
    let on = if trace.is_on() {
        trace.clone()
    } else {
        Tracer::new()
    };
    for (tracer, gpu_timestamps) in [(Tracer::off(), false), (on.clone(), true), (on, false)] {
        let on = tracer.is_on();
        let runtime = Runtime::new(
            devices.to_vec(),
            RuntimeOptions {
                tracer,
                gpu_timestamps,
                ..RuntimeOptions::default()
            },
        )?;
        let exec = Arc::new(chain(stages)?.compile(
            devices,
            CompileOptions {
                in_flight: stages.max(2),
                ..CompileOptions::default()
            },
        )?);
        let t = time_runs(&runtime, &exec, DispatchMode::Parallel, o)?;
        times.push(t);
        let note = if on {
            format!("{:+.1}% vs off", 100.0 * (t / times[0] - 1.0))
        } else {
            off_path_note(t / (stages * o.runs) as f64)
        };
        let case = match (on, gpu_timestamps) {
            (false, _) => "off",
            (true, true) => "on, GPU timestamps",
            (true, false) => "on, host timing",
        };
        let r = result(
            "tracing",
            format!("chain {stages} stages, tracing {case}"),
            "parallel",
            stages,
            stages * o.runs,
            t,
            note,
        );
        progress(&r);
        out.push(r);
    }
    Ok(out)
}

/// What the tracer's off path costs per computation, measured: each computation makes about ten
/// tracing calls (encode, submit, completion, transfers), each a branch when off.
fn off_path_note(seconds_per_computation: f64) -> String {
    let off = Tracer::off();
    const CALLS: u32 = 1_000_000;
    let start = std::time::Instant::now();
    for i in 0..CALLS {
        let s = off.span();
        off.finish(s, EventMeta::kernel(i as usize), || String::from("x"));
    }
    let per_call = start.elapsed().as_secs_f64() / f64::from(CALLS);
    format!(
        "off path: {:.1} ns/call, ~{:.4}% of a computation",
        per_call * 1e9,
        100.0 * 10.0 * per_call / seconds_per_computation
    )
}

/// The Markdown table of results.
pub fn table(results: &[DispatchResult]) -> String {
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            vec![
                r.suite.to_string(),
                r.case.clone(),
                r.mode.clone(),
                format!("{:.2}", r.median_s * 1e3),
                format!("{:.0}", r.computations_per_s),
                r.note.clone(),
            ]
        })
        .collect();
    super::markdown_table(
        &[
            "suite",
            "case",
            "dispatch",
            "median ms",
            "computations/s",
            "note",
        ],
        &rows,
    )
}
