//! The suites `gangway bench` runs, and how each plans its cases on one adapter. Planning is cheap
//! (nothing runs on the device), so the number of cases is known before the first one runs.

use super::planned::Planned;
use super::{
    attention, btm, dispatch, generate, matmul, memory, moe, pipeline, scaleout, transformer,
};
use crate::sched::Runtime;
use crate::{Device, Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Suite {
    Matmul,
    Attention,
    Memory,
    Dispatch,
    Pipeline,
    Moe,
    Transformer,
    Generate,
    Btm,
    Scaleout,
}

impl Suite {
    pub const ALL: [Suite; 10] = [
        Suite::Matmul,
        Suite::Attention,
        Suite::Memory,
        Suite::Dispatch,
        Suite::Pipeline,
        Suite::Moe,
        Suite::Transformer,
        Suite::Generate,
        Suite::Btm,
        Suite::Scaleout,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Suite::Matmul => "matmul",
            Suite::Attention => "attention",
            Suite::Memory => "memory",
            Suite::Dispatch => "dispatch",
            Suite::Pipeline => "pipeline",
            Suite::Moe => "moe",
            Suite::Transformer => "transformer",
            Suite::Generate => "generate",
            Suite::Btm => "btm",
            Suite::Scaleout => "scaleout",
        }
    }

    /// One line on what the suite measures.
    pub fn about(self) -> &'static str {
        match self {
            Suite::Matmul => "GFLOP/s of every matmul variant, square and expert shapes",
            Suite::Attention => {
                "GFLOP/s of causal attention, forward (tiled vs naive) and backward"
            }
            Suite::Memory => "GB/s of a streaming elementwise kernel",
            Suite::Dispatch => {
                "Pathways' dispatch: chains, granularity, proportional shares, tracing cost"
            }
            Suite::Pipeline => {
                "one pipelined MLP training step per schedule; bubbles; MoE DualPipe(V) overlapped"
            }
            Suite::Moe => "MoE LM training steps: vs dense, experts sweep, all-to-all share",
            Suite::Transformer => {
                "Transformer training steps: MoE vs dense, one axis vs a data x expert mesh"
            }
            Suite::Generate => {
                "Transformer generation: prefill and cached decode tokens/s vs the host reference"
            }
            Suite::Btm => "Branch-Train-Merge branch phase on N devices against 1",
            Suite::Scaleout => {
                "the job's wire between ranks, and a MoE training step over every rank's devices"
            }
        }
    }

    /// Whether the suite's cases are measured in rounds ([`super::run`]): all prepared at once
    /// (their buffers and programs alive together, up to [`ROUNDS_BYTES`]), then sampled one run
    /// each per round. The kernel suites and `dispatch` are. The training suites (`pipeline`,
    /// `moe`, `transformer`, `generate`, `btm`, `scaleout`) are not: each case holds a model, its
    /// optimiser state and several devices' buffers, and its runs change that state, so their
    /// cases still run one after the other, each case's samples back to back.
    pub fn in_rounds(self) -> bool {
        matches!(
            self,
            Suite::Matmul | Suite::Attention | Suite::Memory | Suite::Dispatch
        )
    }

    pub fn from_name(name: &str) -> Result<Suite> {
        Suite::ALL
            .into_iter()
            .find(|s| s.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| Error::InvalidArgument {
                what: "bench",
                reason: format!(
                    "unknown suite {name:?}; the suites are {}",
                    Suite::ALL.map(Suite::name).join(", ")
                ),
            })
    }

    /// The suite's cases on one adapter's devices (its virtual devices, for multi-device cases).
    /// `elsewhere`, for the first adapter of a run, holds the other chosen adapters' devices:
    /// the cases over two adapters (MoE's `parallel: D=4 over two adapters`) are planned there.
    pub fn plan(
        self,
        runtime: &Runtime,
        devices: &[Device],
        elsewhere: Option<&[Device]>,
        o: &SuiteOptions,
    ) -> Result<Vec<Planned>> {
        let first = devices.first().ok_or_else(|| Error::InvalidArgument {
            what: "bench",
            reason: "an adapter without devices".into(),
        })?;
        Ok(match self {
            Suite::Matmul => matmul::plan(runtime, first, &o.matmul),
            Suite::Attention => attention::plan(runtime, first, &o.attention),
            Suite::Memory => memory::plan(runtime, first, &o.memory),
            Suite::Dispatch => dispatch::plan(runtime, devices, &o.dispatch)?,
            Suite::Pipeline => pipeline::plan(runtime, devices, &o.pipeline)?,
            Suite::Moe => moe::plan(runtime, devices, elsewhere, &o.moe)?,
            Suite::Transformer => transformer::plan(runtime, devices, &o.transformer)?,
            Suite::Generate => generate::plan(runtime, devices, &o.generate)?,
            Suite::Btm => btm::plan(runtime, devices, &o.btm)?,
            // Over the whole mesh, once: planned with the run's first adapter.
            Suite::Scaleout if elsewhere.is_some() => scaleout::plan(runtime, &o.scaleout, &o.moe)?,
            Suite::Scaleout => vec![Planned::skip(
                "scaleout".to_string(),
                "runs once per job, over every rank's devices (with the first adapter)".to_string(),
            )],
        })
    }
}

/// The most device memory (the cases' compulsory bytes, [`super::Work::bytes`]) the cases of one
/// round may hold at once; a suite with more is measured in several groups, each in rounds.
pub const ROUNDS_BYTES: f64 = 1024.0 * 1024.0 * 1024.0;

/// Every suite's sizes.
#[derive(Debug, Clone)]
pub struct SuiteOptions {
    pub matmul: matmul::MatmulOptions,
    pub attention: attention::AttentionOptions,
    pub memory: memory::MemoryOptions,
    pub dispatch: dispatch::DispatchOptions,
    pub pipeline: pipeline::PipelineOptions,
    pub moe: moe::MoeBenchOptions,
    pub transformer: transformer::TransformerBenchOptions,
    pub generate: transformer::TransformerBenchOptions,
    pub btm: btm::BtmBenchOptions,
    pub scaleout: scaleout::ScaleoutOptions,
}

impl SuiteOptions {
    /// Checks every size is positive: a zero would time nothing (or nothing meaningful).
    pub fn validate(&self) -> Result<()> {
        let sizes: [(&str, &[usize]); 12] = [
            ("--matmul-sizes", &self.matmul.sizes),
            ("--contexts", &self.attention.contexts),
            ("--stream-sizes", &self.memory.sizes),
            ("--max-stages", &[self.dispatch.max_stages]),
            ("--runs", &[self.dispatch.runs]),
            ("--stages", &[self.pipeline.stages]),
            ("--microbatches", &self.pipeline.microbatches),
            ("--tokens", &[self.moe.tokens]),
            ("--experts", &self.moe.experts),
            ("--devices", &self.moe.devices),
            ("--branch-steps", &[self.btm.steps as usize]),
            ("--exchange-sizes", &self.scaleout.sizes),
        ];
        for (flag, values) in sizes {
            if values.is_empty() || values.contains(&0) {
                return Err(Error::InvalidArgument {
                    what: "bench",
                    reason: format!("{flag} needs positive values, got {values:?}"),
                });
            }
        }
        Ok(())
    }

    /// The sizes worth comparing between machines.
    pub fn standard() -> Self {
        Self {
            matmul: matmul::MatmulOptions::standard(),
            attention: attention::AttentionOptions::standard(),
            memory: memory::MemoryOptions::standard(),
            dispatch: dispatch::DispatchOptions::standard(),
            pipeline: pipeline::PipelineOptions::standard(),
            moe: moe::MoeBenchOptions::standard(),
            transformer: transformer::TransformerBenchOptions::standard(),
            generate: transformer::TransformerBenchOptions::standard(),
            btm: btm::BtmBenchOptions::standard(),
            scaleout: scaleout::ScaleoutOptions::standard(),
        }
    }

    /// Tiny sizes: every suite, every code path, in well under a minute on software adapters.
    pub fn quick() -> Self {
        Self {
            matmul: matmul::MatmulOptions::quick(),
            attention: attention::AttentionOptions::quick(),
            memory: memory::MemoryOptions::quick(),
            dispatch: dispatch::DispatchOptions::quick(),
            pipeline: pipeline::PipelineOptions::quick(),
            moe: moe::MoeBenchOptions::quick(),
            transformer: transformer::TransformerBenchOptions::quick(),
            generate: transformer::TransformerBenchOptions::quick(),
            btm: btm::BtmBenchOptions::quick(),
            scaleout: scaleout::ScaleoutOptions::quick(),
        }
    }
}
