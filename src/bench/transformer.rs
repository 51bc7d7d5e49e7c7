//! The `transformer` suite: training steps of `train lm`'s Transformer (forward, backward and
//! Adam, one program per step) on the bundled corpora. The dense model against the same model
//! with every other FFN an expert layer of `E` experts, top-1 (each token's FFN compute is the
//! dense model's: Switch against T5 at a fixed compute per token), and, on the adapter's 4
//! virtual devices, the MoE model with its devices on one axis against a `{data: 2, expert: 2}`
//! mesh.

use super::harness::{Blocking, BlockingRun};
use super::moe::Data;
use super::planned::Planned;
use super::work::{Work, WorkUnit};
use crate::Mesh;
use crate::device::{DeviceList, MeshDevice};
use crate::kernels::optim::AdamConfig;
use crate::sched::Runtime;
use crate::train::step_program::{DATA_AXIS, EXPERT_AXIS};
use crate::transformer::generate::shifted_targets;
use crate::transformer::{TransformerConfig, TransformerParams, TransformerTrainer};
use crate::{Device, Result};

#[derive(Debug, Clone)]
pub struct TransformerBenchOptions {
    /// The MoE model; the dense one is the same with `moe_every = 0`.
    pub config: TransformerConfig,
    /// Sequences per step.
    pub batch: usize,
    pub seed: u64,
}

impl TransformerBenchOptions {
    /// `train lm`'s defaults: 2 layers of width 64, 4 heads, T = 64, d_ff = 256, every other FFN
    /// 4 experts top-1, 8 sequences per step.
    pub fn standard() -> Self {
        Self {
            config: TransformerConfig::small(),
            batch: 8,
            seed: 1,
        }
    }

    pub fn quick() -> Self {
        let s = Self::standard();
        Self {
            config: TransformerConfig {
                context: 16,
                model: 16,
                heads: 2,
                hidden: 32,
                ..s.config
            },
            batch: 4,
            ..s
        }
    }
}

/// Batches cycled through by the timed steps.
const BATCHES: usize = 4;

/// One model's training steps on some devices.
struct LmSteps {
    trainer: TransformerTrainer,
    data: Data,
    context: usize,
    step: usize,
}

impl BlockingRun for LmSteps {
    fn run(&mut self) -> Result<()> {
        let (tokens, next) = self.data.get(self.step)?;
        let targets = shifted_targets(tokens, next, self.context);
        self.step += 1;
        self.trainer.step(tokens, &targets).map(|_| ())
    }
}

/// A case training `cfg` on `devices` as a `{data, expert}` mesh with `data` rows.
fn case(
    runtime: &Runtime,
    name: String,
    devices: &[MeshDevice],
    cfg: TransformerConfig,
    data: usize,
    o: &TransformerBenchOptions,
) -> Blocking<impl FnOnce() -> Result<LmSteps> + use<>, LmSteps> {
    let devices = devices.to_vec();
    let client = runtime.client("bench transformer", 1);
    let (batch, seed) = (o.batch, o.seed);
    let tokens = batch * cfg.context;
    // 6 FLOPs per parameter a token touches (forward and backward), as the moe suite counts.
    let active: usize = cfg
        .param_specs()
        .iter()
        .map(|s| {
            let is_expert = s.name.contains(".moe.w");
            s.len()
                / if is_expert {
                    cfg.experts / cfg.top_k
                } else {
                    1
                }
        })
        .sum();
    let work = Work::new(tokens as f64, WorkUnit::Token).with_flops(6.0 * (active * tokens) as f64);
    Blocking::new(name, work, move || {
        let params = TransformerParams::init(cfg)?;
        let groups = devices.len();
        let adam = AdamConfig::new(1e-3);
        let along = devices.len() / data.max(1);
        let mesh = Mesh::new(&devices, &[(DATA_AXIS, data), (EXPERT_AXIS, along)])?;
        let trainer = TransformerTrainer::new(&client, &mesh, &params, adam, groups)?;
        Ok(LmSteps {
            trainer,
            data: Data::new(cfg.context, batch, BATCHES, seed),
            context: cfg.context,
            step: 0,
        })
    })
}

/// The suite's cases on one adapter's devices.
pub fn plan(
    runtime: &Runtime,
    devices: &[Device],
    o: &TransformerBenchOptions,
) -> Result<Vec<Planned>> {
    o.config.validate()?;
    let mesh = devices.mesh_devices();
    let one = &mesh[..1];
    let moe = o.config;
    let dense = TransformerConfig {
        moe_every: 0,
        ..moe
    };
    let dense_name = format!("dense d_ff={}", dense.hidden);
    let moe_name = format!(
        "moe E={} K={} every {}",
        moe.experts, moe.top_k, moe.moe_every
    );
    let mut out: Vec<Planned> = vec![
        Planned::Run(Box::new(case(
            runtime,
            dense_name.clone(),
            one,
            dense,
            1,
            o,
        ))),
        Planned::Run(Box::new(
            case(runtime, moe_name.clone(), one, moe, 1, o).compared_to(dense_name),
        )),
    ];
    let axis = format!("{moe_name}: D=4 one axis");
    let grid = format!("{moe_name}: D=4 data 2 x expert 2");
    if mesh.len() >= 4 && moe.experts.is_multiple_of(4) {
        let four = &mesh[..4];
        out.push(Planned::Run(Box::new(
            case(runtime, axis.clone(), four, moe, 1, o).compared_to(moe_name),
        )));
        out.push(Planned::Run(Box::new(
            case(runtime, grid, four, moe, 2, o).compared_to(axis),
        )));
    } else {
        let why = format!(
            "needs 4 devices of the adapter and experts divisible by 4 ({} devices, {} experts)",
            mesh.len(),
            moe.experts
        );
        out.push(Planned::skip(axis, why.clone()));
        out.push(Planned::skip(grid, why));
    }
    Ok(out)
}
