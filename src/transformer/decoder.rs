//! The Transformer's forward with a key/value cache on one device, for generation: a [`Decoder`]
//! holds `B` sequences' caches beside the weights as program variables, and runs `P` new bytes
//! of every sequence at once (a prompt's prefill, then one byte a sequence per decode step) as
//! one compiled program, whose attention is [`CachedAttention`] (it stores the new keys and
//! values and attends to everything cached before them).
//!
//! The program is the step program's forward (the same layer code: `step_program`), with
//! cached attention in place of attention over whole sequences. An MoE model's expert layers
//! route **dropless** here (capacity factor `E/K`): every token goes to its top-K experts
//! whatever else is in the batch, so a cached position's keys and values are those a full
//! forward would compute, and a sample does not depend on the others it is batched with.
//! [`super::generate`]'s host reference routes the same way.

use super::{TransformerConfig, TransformerParams, VOCAB};
use crate::kernels::attention::default_scale;
use crate::kernels::cached_attention::check_positions;
use crate::kernels::{CachedAttention, TensorType};
use crate::mesh::MeshShape;
use crate::program::{CompileOptions, Executable, HostData, Program, Variables};
use crate::sched::{Client, RunOptions};
use crate::train::layout::ShardLayout;
use crate::train::step_program::{Builder, EXPERT_AXIS, Mode};
use crate::train::{GroupSplit, StepModel, StepShape};
use crate::{DType, Error, MeshDevice, Result, Tensor};
use std::collections::HashMap;
use std::sync::Arc;

/// `B` sequences' caches and the programs that extend them, on one device.
pub struct Decoder {
    client: Client,
    device: MeshDevice,
    shape: StepShape<TransformerConfig>,
    batch: usize,
    variables: Variables,
    /// Positions `0..filled` of every sequence are in the caches.
    filled: usize,
    /// Compiled programs by new bytes a sequence.
    programs: HashMap<usize, Arc<Executable>>,
}

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder")
            .field("device", &self.device.label())
            .field("batch", &self.batch)
            .field("config", &self.shape.config)
            .finish_non_exhaustive()
    }
}

impl Decoder {
    /// A decoder of `batch` sequences of `params`' model on `device` (one of `client`'s
    /// runtime's), its caches empty.
    pub fn new(
        client: &Client,
        device: &MeshDevice,
        params: &TransformerParams,
        batch: usize,
    ) -> Result<Self> {
        params.check()?;
        let Some(local) = device.local() else {
            return Err(invalid(format!(
                "{} is another rank's device",
                device.label()
            )));
        };
        if batch == 0 {
            return Err(invalid("a decoder needs at least one sequence".into()));
        }
        let cfg = params.config;
        let config = cfg.with_capacity_factor(crate::kernels::router::dropless_factor(
            cfg.experts,
            cfg.top_k,
        ));
        let shape = StepShape::new(
            config,
            crate::kernels::optim::AdamConfig::new(1e-3),
            &MeshShape::line(EXPERT_AXIS, 1),
            GroupSplit::even(1, 1)?,
            batch,
        );
        let names: Vec<String> = cfg.param_specs().into_iter().map(|s| s.name).collect();
        let devices = [device.clone()];
        let layout = ShardLayout {
            devices: &devices,
            expert_devices: 1,
            shapes: &shape.shard_shapes(),
            expert: &cfg.expert_tensors(),
            names: &names,
        };
        let mut variables = layout.param_variables(&params.tensors)?;
        let cache = [batch * cfg.context, cfg.model];
        for l in 0..cfg.layers {
            for which in ["k", "v"] {
                let t = Tensor::zeros(local, &cache, DType::F32)?;
                variables.insert(cache_var(which, l), vec![t]);
            }
        }
        Ok(Self {
            client: client.clone(),
            device: device.clone(),
            shape,
            batch,
            variables,
            filled: 0,
            programs: HashMap::new(),
        })
    }

    /// Sequences.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// `T`: the most positions a sequence's cache holds.
    pub fn context(&self) -> usize {
        self.shape.config.context
    }

    /// The logits `[B·P, V]` of `ids` (`B` sequences of `P` new bytes, one after another) at
    /// positions `start..start + P` of every sequence, whose keys and values join the caches;
    /// positions `0..start` must be in the caches already (from earlier calls: a gap is an
    /// error), and `start + P` at most the context `T`. Positions from `start + P` on count as
    /// empty afterwards.
    pub fn extend(&mut self, ids: &[u32], start: usize) -> Result<Vec<f32>> {
        let (b, t) = (self.batch, self.shape.config.context);
        if ids.is_empty() || !ids.len().is_multiple_of(b) {
            return Err(Error::ShapeMismatch {
                what: "decoder",
                expected: format!("P ≥ 1 byte ids for each of {b} sequences"),
                got: format!("{} ids", ids.len()),
            });
        }
        if let Some(bad) = ids.iter().find(|&&v| v as usize >= VOCAB) {
            return Err(invalid(format!("byte id {bad} is not below {VOCAB}")));
        }
        if start > self.filled {
            return Err(invalid(format!(
                "position {start} follows a gap: the caches hold positions 0..{}",
                self.filled
            )));
        }
        let p = ids.len() / b;
        let positions: Vec<u32> = (0..b)
            .flat_map(|_| (start..start + p).map(|x| x as u32))
            .collect();
        check_positions(&positions, b, t)?;
        let exec = self.program(p)?;
        let args: Vec<HostData> = vec![ids.to_vec().into(), positions.into()];
        let out = self.client.run_bytes(&exec, args, RunOptions::default())?;
        let logits: Vec<f32> = bytemuck::pod_collect_to_vec(out.first().map_or(&[][..], |v| v));
        if logits.len() != ids.len() * VOCAB {
            return Err(invalid(format!(
                "the program gave {} logits for {} bytes",
                logits.len(),
                ids.len()
            )));
        }
        self.filled = start + p;
        Ok(logits)
    }

    fn program(&mut self, rows: usize) -> Result<Arc<Executable>> {
        if let Some(p) = self.programs.get(&rows) {
            return Ok(p.clone());
        }
        let program = build(&self.shape, self.batch, rows)?;
        let devices = [self.device.clone()];
        let exec =
            program.compile_with(&devices[..], CompileOptions::default(), &self.variables)?;
        let exec = Arc::new(exec);
        self.programs.insert(rows, exec.clone());
        Ok(exec)
    }
}

/// The variable of layer `l`'s cached keys (`which` = `"k"`) or values (`"v"`).
fn cache_var(which: &str, l: usize) -> String {
    format!("kv cache {which} {l}")
}

fn invalid(reason: String) -> Error {
    Error::InvalidArgument {
        what: "decoder",
        reason,
    }
}

/// The cached forward of `rows` new bytes for each of `batch` sequences. Arguments: the ids and
/// their positions (u32 `[batch·rows, 1]` each); result: the logits `[batch·rows, V]`.
fn build(shape: &StepShape<TransformerConfig>, batch: usize, rows: usize) -> Result<Program> {
    let cfg = shape.config;
    let mut x = Builder::begin("transformer cached", shape, Mode::Forward);
    let gang = x.gang.clone();
    let n = batch * rows;
    let ids = x.b.typed_arg(&gang, TensorType::u32(&[n, 1]));
    let positions = x.b.typed_arg(&gang, TensorType::u32(&[n, 1]));
    let cache = TensorType::f32(&[batch * cfg.context, cfg.model]);
    let attention = CachedAttention {
        heads: cfg.heads,
        scale: default_scale(cfg.head_dim()),
        capacity: cfg.context,
    };
    let mut h = x.embed("embeddings", ids, positions);
    for l in 0..cfg.layers {
        let ix = cfg.layer_index(l);
        let at = |what: &str| format!("l{l} {what}");
        let [_, _, q, k, v] = x.attention_in(&at, &ix, h);
        let kc = x.b.variable(&cache_var("k", l), &gang, cache.clone());
        let vc = x.b.variable(&cache_var("v", l), &gang, cache.clone());
        let [o, _, _] = x.b.kernel(
            &at("cached attention"),
            &gang,
            Arc::new(attention),
            &[q, k, v, positions, kc, vc],
        );
        (h, _, _) = x.layer_rest(&at, &ix, (h, o), n);
    }
    let [_, _, logits] = x.head(&|what: &str| what.to_string(), h);
    x.b.result(logits);
    x.end(Mode::Forward, None, None)
}
