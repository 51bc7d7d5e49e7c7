//! The [`Benchmark`] trait and the loop that measures one: prepare once (untimed), warm up, then
//! time samples. A sample is one `run` + `sync`; its time is what the benchmark measured itself
//! (from the runtime's trace: a kernel's GPU timestamps, or a step's span) when it did, else the
//! host wall time around both calls.

use super::host::{HostCost, Snapshot};
use super::report::{Stats, Timing};
use crate::Result;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Instant;

/// What one run of a benchmark does, for its derived figure and its place on the roofline.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Work {
    /// How much of `unit` one run does; the derived figure is `amount / median` (scaled).
    pub amount: f64,
    pub unit: WorkUnit,
    /// Floating-point operations one run does, when known (gives the fraction of peak FLOP/s).
    pub flops: Option<f64>,
    /// Bytes one run must move to or from device memory at least, when known (gives the
    /// arithmetic intensity, and with `flops` the roofline).
    pub bytes: Option<f64>,
}

/// What a benchmark counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WorkUnit {
    Flop,
    Byte,
    Token,
    Computation,
    Sample,
}

impl WorkUnit {
    /// The derived figure's unit and the factor that turns `amount / s` into it.
    pub fn figure(self) -> (&'static str, f64) {
        match self {
            WorkUnit::Flop => ("GFLOP/s", 1e-9),
            WorkUnit::Byte => ("GB/s", 1e-9),
            WorkUnit::Token => ("tokens/s", 1.0),
            WorkUnit::Computation => ("computations/s", 1.0),
            WorkUnit::Sample => ("samples/s", 1.0),
        }
    }
}

impl Work {
    pub fn new(amount: f64, unit: WorkUnit) -> Self {
        Self {
            amount,
            unit,
            flops: (unit == WorkUnit::Flop).then_some(amount),
            bytes: (unit == WorkUnit::Byte).then_some(amount),
        }
    }

    pub fn with_flops(self, flops: f64) -> Self {
        Self {
            flops: Some(flops),
            ..self
        }
    }

    pub fn with_bytes(self, bytes: f64) -> Self {
        Self {
            bytes: Some(bytes),
            ..self
        }
    }
}

/// Named results beyond the timing (bubble fractions, shares, errors), a note for people, and
/// what the host spent per run ([`measure`] fills it).
#[derive(Debug, Clone, Default)]
pub struct Extras {
    pub metrics: BTreeMap<String, f64>,
    pub note: String,
    pub host: Option<HostCost>,
}

/// One benchmark case, measured by [`measure`]: `prepare` once, then `run` + `sync` per warm-up
/// run and per sample.
pub trait Benchmark {
    /// The case's name, unique within its suite.
    fn case(&self) -> String;
    /// What one run does.
    fn work(&self) -> Work;
    /// Another case of the same suite this one is compared to (its speed-up is reported).
    fn baseline(&self) -> Option<String> {
        None
    }
    /// Allocates, uploads and compiles; untimed.
    fn prepare(&mut self) -> Result<()>;
    /// Starts (or does) one run's work.
    fn run(&mut self) -> Result<()>;
    /// Waits until the run is done. Returns the run's time when the benchmark measured it itself
    /// (GPU timestamps, or a trace); `None` means the sample is the host wall time of `run` +
    /// `sync`.
    fn sync(&mut self) -> Result<Option<Timed>>;
    /// Called once after the samples: what else the runs showed.
    fn extras(&mut self) -> Result<Extras> {
        Ok(Extras::default())
    }
}

/// A run's time as the benchmark measured it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timed {
    pub seconds: f64,
    pub timing: Timing,
}

impl Timed {
    pub fn gpu(seconds: f64) -> Self {
        Self {
            seconds,
            timing: Timing::Gpu,
        }
    }
}

/// Warm-up runs and timed samples per case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Sampling {
    pub warmup: usize,
    pub samples: usize,
}

/// Measures `bench`: prepare, `warmup` untimed runs, then `samples` (at least one) timed ones.
/// The benchmark's own times are used only when every sample has one, all by the same clock;
/// otherwise the host wall times. The host's launches, CPU and switches are counted over the
/// samples ([`HostCost`], per run).
pub fn measure(bench: &mut dyn Benchmark, sampling: Sampling) -> Result<(Stats, Extras)> {
    bench.prepare()?;
    for _ in 0..sampling.warmup {
        bench.run()?;
        bench.sync()?;
    }
    let n = sampling.samples.max(1);
    let (mut wall, mut own) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let before = Snapshot::now();
    for _ in 0..n {
        let start = Instant::now();
        bench.run()?;
        let t = bench.sync()?;
        wall.push(start.elapsed().as_secs_f64());
        own.extend(t);
    }
    let host = before.per_run(&Snapshot::now(), n);
    let (timing, samples) = match own.first() {
        Some(first) if own.len() == wall.len() && own.iter().all(|t| t.timing == first.timing) => {
            (first.timing, own.iter().map(|t| t.seconds).collect())
        }
        _ => (Timing::Wall, wall),
    };
    let extras = Extras {
        host: Some(host),
        ..bench.extras()?
    };
    Ok((Stats::new(timing, sampling.warmup, samples), extras))
}

/// The error of a benchmark run before it was prepared.
pub fn unprepared(case: &str) -> crate::Error {
    crate::Error::InvalidArgument {
        what: "benchmark",
        reason: format!("{case} was run before it was prepared"),
    }
}

/// Times the host side of a closure benchmark: for suites whose work is one blocking call.
pub struct Blocking<P, R> {
    pub case: String,
    pub work: Work,
    pub baseline: Option<String>,
    prepare: Option<P>,
    state: Option<R>,
}

impl<P, R> std::fmt::Debug for Blocking<P, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blocking")
            .field("case", &self.case)
            .finish()
    }
}

/// What a [`Blocking`] benchmark does once prepared: one blocking run, and extras at the end.
pub trait BlockingRun {
    fn run(&mut self) -> Result<()>;
    /// The last run's time, when it measured one itself.
    fn timed(&mut self) -> Option<Timed> {
        None
    }
    fn extras(&mut self) -> Result<Extras> {
        Ok(Extras::default())
    }
}

impl<P, R> Blocking<P, R>
where
    P: FnOnce() -> Result<R>,
    R: BlockingRun,
{
    /// A case whose `prepare` builds the state `R` and whose runs block until done (so `sync` has
    /// nothing left to wait for), timed on the host unless `R` times itself.
    pub fn new(case: String, work: Work, prepare: P) -> Self {
        Self {
            case,
            work,
            baseline: None,
            prepare: Some(prepare),
            state: None,
        }
    }

    pub fn compared_to(mut self, baseline: String) -> Self {
        self.baseline = Some(baseline);
        self
    }

    fn state(&mut self) -> Result<&mut R> {
        let case = &self.case;
        self.state.as_mut().ok_or_else(|| unprepared(case))
    }
}

impl<P, R> Benchmark for Blocking<P, R>
where
    P: FnOnce() -> Result<R>,
    R: BlockingRun,
{
    fn case(&self) -> String {
        self.case.clone()
    }
    fn work(&self) -> Work {
        self.work
    }
    fn baseline(&self) -> Option<String> {
        self.baseline.clone()
    }
    fn prepare(&mut self) -> Result<()> {
        if let Some(p) = self.prepare.take() {
            self.state = Some(p()?);
        }
        Ok(())
    }
    fn run(&mut self) -> Result<()> {
        self.state()?.run()
    }
    fn sync(&mut self) -> Result<Option<Timed>> {
        Ok(self.state()?.timed())
    }
    fn extras(&mut self) -> Result<Extras> {
        self.state()?.extras()
    }
}
