//! The [`Benchmark`] trait and what measures one: prepare once (untimed), warm up, then time
//! samples, all back to back ([`measure`]) or one at a time ([`Sampler`], which the runner drives
//! in rounds across a suite's cases). A sample is one `run` + `sync`; its time is what the
//! benchmark measured itself (from the runtime's trace: a kernel's GPU timestamps, or a step's
//! span) when it did, else the host wall time around both calls. The host's cost is counted in a
//! window around each sample. A test-only knob ([`slowdown`]) makes every sample really longer.

use super::host::{HostCost, Snapshot};
use super::report::{Stats, Timing};
use super::work::{Sampling, Work};
use crate::Result;
use std::collections::BTreeMap;
use std::time::Instant;

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

/// Measures `bench`: prepare, `warmup` untimed runs, then `samples` (at least one) timed ones,
/// back to back ([`Sampler`] one sample at a time, for samples taken in rounds across cases).
pub fn measure(bench: &mut dyn Benchmark, sampling: Sampling) -> Result<(Stats, Extras)> {
    let mut sampler = Sampler::prepare(bench, sampling)?;
    for _ in 0..sampling.samples.max(1) {
        sampler.sample(bench)?;
    }
    sampler.finish(bench)
}

/// The environment variable of the test-only slowdown ([`slowdown`]).
pub const SLOWDOWN_VAR: &str = "GANGWAY_BENCH_SLOWDOWN";

/// Test-only: the factor `GANGWAY_BENCH_SLOWDOWN` asks every sample to take (a number above 1,
/// say `1.2`), for checking that `bench compare` flags a real slowdown. `None` when unset; an
/// unreadable or out-of-range value is an error rather than silently ignored.
pub fn slowdown() -> Result<Option<f64>> {
    let Ok(v) = std::env::var(SLOWDOWN_VAR) else {
        return Ok(None);
    };
    match v.trim().parse::<f64>() {
        Ok(f) if f.is_finite() && (1.0..=100.0).contains(&f) => Ok((f > 1.0).then_some(f)),
        _ => Err(crate::Error::InvalidArgument {
            what: "bench",
            reason: format!("{SLOWDOWN_VAR}={v:?}: a factor from 1 to 100 (test-only)"),
        }),
    }
}

/// Busy-waits on the calling thread for `seconds` and returns the time it took by the host clock
/// (at least `seconds`: more when the thread was preempted).
fn spin(seconds: f64) -> f64 {
    let start = Instant::now();
    let mut x = 0u64;
    while start.elapsed().as_secs_f64() < seconds {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
    start.elapsed().as_secs_f64()
}

/// One case being measured a sample at a time: [`Sampler::prepare`] prepares it, each
/// [`Sampler::sample`] times one run (the first after the warm-up runs), [`Sampler::finish`]
/// gives the statistics. The runner takes the samples of several cases in rounds
/// ([`super::run`]), so a burst of load lands on one sample of each case rather than on every
/// sample of one.
///
/// The benchmark's own times are used only when every sample has one, all by the same clock;
/// otherwise the host wall times. The host's launches, CPU and switches are counted around each
/// sample and averaged ([`HostCost`], per run).
///
/// With [`slowdown`] set (test-only), each sample really takes that factor longer: after the run,
/// the caller's thread spins for the rest, and the spin's measured duration is added to the
/// sample (to the benchmark's own time, or within the wall time).
#[derive(Debug)]
pub struct Sampler {
    warmup: usize,
    /// Warm-up runs still to do before the first sample.
    pending: usize,
    wall: Vec<f64>,
    own: Vec<Timed>,
    host: Vec<HostCost>,
    slowdown: Option<f64>,
}

impl Sampler {
    /// Prepares `bench` (untimed); its warm-up runs come right before its first sample.
    pub fn prepare(bench: &mut dyn Benchmark, sampling: Sampling) -> Result<Self> {
        let slowdown = slowdown()?;
        bench.prepare()?;
        Ok(Self {
            warmup: sampling.warmup,
            pending: sampling.warmup,
            wall: Vec::new(),
            own: Vec::new(),
            host: Vec::new(),
            slowdown,
        })
    }

    /// Times one run.
    pub fn sample(&mut self, bench: &mut dyn Benchmark) -> Result<()> {
        while self.pending > 0 {
            self.pending -= 1;
            bench.run()?;
            bench.sync()?;
        }
        let before = Snapshot::starting();
        let start = Instant::now();
        bench.run()?;
        let mut t = bench.sync()?;
        if let Some(factor) = self.slowdown {
            let took = t.map_or_else(|| start.elapsed().as_secs_f64(), |t| t.seconds);
            let spun = spin((factor - 1.0) * took);
            if let Some(t) = &mut t {
                t.seconds += spun;
            }
        }
        self.wall.push(start.elapsed().as_secs_f64());
        let host = before.per_run(&Snapshot::ending(), 1);
        self.host.push(host);
        self.own.extend(t);
        Ok(())
    }

    /// The samples' statistics, and the benchmark's extras with the host's cost per run.
    pub fn finish(self, bench: &mut dyn Benchmark) -> Result<(Stats, Extras)> {
        let (timing, samples) = match self.own.first() {
            Some(first)
                if self.own.len() == self.wall.len()
                    && self.own.iter().all(|t| t.timing == first.timing) =>
            {
                (first.timing, self.own.iter().map(|t| t.seconds).collect())
            }
            _ => (Timing::Wall, self.wall),
        };
        let extras = Extras {
            host: Some(HostCost::mean(&self.host)),
            ..bench.extras()?
        };
        Ok((Stats::new(timing, self.warmup, samples), extras))
    }
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
