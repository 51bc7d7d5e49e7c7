//! The `btm` suite: throughput of Branch-Train-Merge's branch phase, one expert LM per bundled
//! domain trained from a common seed, on N devices against one. The ELMs never communicate, so
//! the expectation is near-linear scaling, as far as the hardware lets the devices run at once.
//! A sample is the wall time of the whole branch phase (training, and a small validation pass
//! per ELM); tokens are training tokens.

use super::harness::{Blocking, BlockingRun};
use super::planned::Planned;
use super::work::{Work, WorkUnit};
use crate::btm::branch;
use crate::data::Corpus;
use crate::moe::{MoeLmConfig, MoeLmParams};
use crate::sched::Runtime;
use crate::train::TrainOptions;
use crate::{Device, Error, Mesh, Result};

#[derive(Debug, Clone)]
pub struct BtmBenchOptions {
    pub config: MoeLmConfig,
    /// Training steps per ELM.
    pub steps: u32,
    /// Tokens per step.
    pub batch: usize,
}

impl BtmBenchOptions {
    pub fn standard() -> Self {
        Self {
            config: super::moe::MoeBenchOptions::standard().config,
            steps: 20,
            batch: 128,
        }
    }

    pub fn quick() -> Self {
        Self {
            config: super::moe::MoeBenchOptions::quick().config,
            steps: 2,
            batch: 16,
        }
    }
}

struct Branching {
    runtime: Runtime,
    devices: Mesh,
    domains: Vec<(String, Corpus)>,
    seed: MoeLmParams,
    opts: TrainOptions,
}

impl BlockingRun for Branching {
    fn run(&mut self) -> Result<()> {
        let elms = branch(
            &self.runtime,
            &self.devices,
            &self.domains,
            &self.seed,
            &self.opts,
            |_, _| {},
        )?;
        let trained: u64 = elms.iter().map(|e| e.report.tokens).sum();
        let expected = (self.domains.len() * self.opts.batch) as u64 * u64::from(self.opts.steps);
        if trained != expected {
            return Err(Error::Mismatch {
                what: "btm bench".into(),
                detail: format!("trained {trained} tokens, expected {expected}"),
            });
        }
        Ok(())
    }
}

fn case_name(domains: usize, devices: usize) -> String {
    format!("branch {domains} domains on {devices} device(s)")
}

/// Branching on 1 device, and on as many as there are domains (capped at the devices there are),
/// on `runtime`.
pub fn plan(runtime: &Runtime, devices: &[Device], o: &BtmBenchOptions) -> Result<Vec<Planned>> {
    o.config.validate()?;
    let domains = Corpus::bundled_all()?.by_domain();
    let n = domains.len();
    let tokens = (n * o.batch) as f64 * f64::from(o.steps);
    let work = Work::new(tokens, WorkUnit::Token)
        .with_flops(6.0 * super::moe::active_params(&o.config) as f64 * tokens);
    let mut counts = vec![1, devices.len().min(n)];
    counts.dedup();
    Ok(counts
        .into_iter()
        .map(|count| {
            let (devices, domains) = (Mesh::line(&devices[..count]), domains.clone());
            let (config, steps, batch) = (o.config, o.steps, o.batch);
            let runtime = runtime.clone();
            let bench = Blocking::new(case_name(n, count), work, move || {
                Ok(Branching {
                    runtime,
                    devices,
                    domains,
                    seed: MoeLmParams::init(config)?,
                    opts: TrainOptions {
                        steps,
                        batch,
                        // One batch: the evaluation is not what is measured.
                        eval_units: batch,
                        ..TrainOptions::default()
                    },
                })
            });
            Planned::Run(Box::new(if count == 1 {
                bench
            } else {
                bench.compared_to(case_name(n, 1))
            }))
        })
        .collect())
}
