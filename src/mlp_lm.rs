//! A small dense byte-level language model, an MLP over a context window: the smallest model the
//! one [`Trainer`](crate::train::Trainer) trains, and the proof that a new model is a
//! [`StepModel`] and nothing else. Everything it has of its own is in this file: its sizes, its
//! parameters and how they start, its step program and a plain-Rust reference of its loss; the
//! trainer gives it devices, data parallelism, uneven splits, checkpoints and statistics.
//!
//! ```text
//! x      = concat_c E[ctx[t][c]]       [T, C·d_e]   E: [256, d_e]
//! h1     = relu(x · W1)                [T, d]       W1: [C·d_e, d]
//! h2     = relu(h1 · W2)               [T, d]       W2: [d, d]
//! logits = h2 · W3                     [T, 256]     W3: [d, 256]
//! loss   = mean_t CE(logits[t], y[t])
//! ```
//!
//! A batch unit is one token: its context window of `C` byte ids and the byte after it, as
//! [`crate::data::Batches`] yields them. Every value starts as `Rng::new(seed).symmetric() ·
//! sqrt(3 / fan_in)` in parameter order (the embedding's fan-in is 1). With no expert layers
//! every parameter is replicated: the devices are data-parallel only.

use crate::kernels::matmul::Activation;
use crate::kernels::{EmbedGather, EmbedGrad, Epilogue, TensorType};
use crate::program::Program;
use crate::train::step_program::{Builder, Mode};
use crate::train::{
    Batcher, ExpertRouting, LegacyFormats, ParamSpec, Params, StepModel, StepShape,
};
use crate::{Error, Result, Rng};
use serde::{Deserialize, Serialize};

/// Bytes: the vocabulary.
pub const VOCAB: usize = 256;
const EMBED: usize = 0;
const W1: usize = 1;
const W2: usize = 2;
const W3: usize = 3;

/// The model's sizes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MlpLmConfig {
    /// `C`: bytes of context per token.
    pub context: usize,
    /// `d_e`: embedding width per byte.
    pub embed: usize,
    /// `d`: the hidden width.
    pub hidden: usize,
    pub seed: u64,
}

impl Default for MlpLmConfig {
    fn default() -> Self {
        Self {
            context: 8,
            embed: 16,
            hidden: 64,
            seed: 0,
        }
    }
}

/// The MLP LM's parameters.
pub type MlpLmParams = Params<MlpLmConfig>;

impl StepModel for MlpLmConfig {
    const NAME: &'static str = "mlp-lm";

    fn validate(&self) -> Result<()> {
        let fits = [self.context * self.embed, self.hidden, VOCAB]
            .iter()
            .all(|&n| n > 0 && n.saturating_mul(self.hidden.max(VOCAB)) <= u32::MAX as usize);
        if !fits || self.embed == 0 {
            return Err(Error::InvalidArgument {
                what: "mlp lm config",
                reason: format!(
                    "sizes must be positive and each tensor under 2^32 values: {self:?}"
                ),
            });
        }
        Ok(())
    }

    fn param_specs(&self) -> Vec<ParamSpec> {
        let (cde, d) = (self.context * self.embed, self.hidden);
        vec![
            ParamSpec::new("embed".into(), &[VOCAB, self.embed], 1),
            ParamSpec::new("w1".into(), &[cde, d], cde),
            ParamSpec::new("w2".into(), &[d, d], d),
            ParamSpec::new("w3".into(), &[d, VOCAB], d),
        ]
    }

    fn init(&self) -> Result<Vec<Vec<f32>>> {
        let mut rng = Rng::new(self.seed);
        Ok(self
            .param_specs()
            .iter()
            .map(|s| {
                let scale = (3.0 / s.fan_in as f32).sqrt();
                (0..s.len()).map(|_| rng.symmetric() * scale).collect()
            })
            .collect())
    }

    fn expert_tensors(&self) -> Vec<bool> {
        vec![false; 4]
    }

    /// Dense: it routes nothing.
    fn routing(&self) -> Option<ExpertRouting> {
        None
    }

    fn build_step(shape: &StepShape<Self>, mode: Mode) -> Result<Program> {
        build(shape, mode)
    }
}

/// No older formats: its first files were safetensors.
impl LegacyFormats for MlpLmConfig {}

impl Batcher for MlpLmConfig {
    fn unit_rows(&self) -> usize {
        1
    }

    fn window(&self) -> usize {
        self.context
    }

    fn row_inputs(&self) -> usize {
        self.context
    }

    fn check_batch(&self, contexts: &[u32], targets: &[u32], groups: usize) -> Result<usize> {
        crate::train::check_window_batch("mlp lm batch", self.context, contexts, targets, groups)
    }
}

/// The step: per round, forward and backward of every device's group; then the step end every
/// model shares. Results: per round the row losses (training and forward), or the packed
/// gradients, or the variables read back.
fn build(shape: &StepShape<MlpLmConfig>, mode: Mode) -> Result<Program> {
    let cfg = shape.config;
    let mut x = Builder::begin("mlp lm", shape, mode);
    if let Mode::Read(_) = mode {
        return x.read_back();
    }
    let tg = shape.group_units;
    let input = TensorType::u32(&[tg, cfg.context]);
    let (inputs, bias) = x.batch_args(mode, input, TensorType::u32(&[tg]));
    for (r, &(ctx, tgt)) in inputs.iter().enumerate() {
        let at = |what: &str| format!("r{r} {what}");
        x.b.set_active(shape.split.active(r));
        let emb = x.k(&at("embed"), EmbedGather, &[ctx, x.params[EMBED]]);
        // Relus are their matmuls' epilogues: the backward needs only their outputs.
        let (relu, w1, w2) = (Epilogue::relu(), x.params[W1], x.params[W2]);
        let h1 = x.mm_then(&at("w1 matmul"), emb, w1, false, false, relu, &[]);
        let h2 = x.mm_then(&at("w2 matmul"), h1, w2, false, false, relu, &[]);
        let logits = x.mm(&at("w3 matmul"), h2, x.params[W3], false, false);
        let d_logits = x.loss(&at, mode, logits, tgt, &[]);
        if mode == Mode::Forward {
            continue;
        }
        // Each relu's backward is the epilogue of the input gradient's matmul above it.
        let relu_backward = Epilogue::backward_of(Activation::Relu);
        let d_pre2 =
            x.linear_backward_then(false, &at, "w3", W3, h2, d_logits, relu_backward, &[h2]);
        let d_pre1 = x.linear_backward_then(false, &at, "w2", W2, h1, d_pre2, relu_backward, &[h1]);
        let d_x = x.linear_backward(&at, "w1", W1, emb, d_pre1);
        let ge = x.k(&at("embed grad"), EmbedGrad::one(VOCAB), &[ctx, d_x]);
        x.grad(EMBED, &at("accumulate embed grad"), ge);
    }
    x.end(mode, bias, None)
}

/// The plain-Rust reference: the mean cross-entropy (nats, in f64) of `params` on a batch
/// routed as `groups` groups (the loss is the mean over groups of each group's mean, which for
/// groups of equal size is the mean over every token).
pub fn reference_loss(params: &MlpLmParams, contexts: &[u32], targets: &[u32]) -> Result<f64> {
    let cfg = params.config;
    params.check()?;
    cfg.check_batch(contexts, targets, 1)?;
    let (c, de, d) = (cfg.context, cfg.embed, cfg.hidden);
    let [e, w1, w2, w3] = [0, 1, 2, 3].map(|i| params.get(i));
    let linear = |x: &[f64], w: &[f32], n_in: usize, n_out: usize, relu: bool| -> Vec<f64> {
        (0..n_out)
            .map(|j| {
                let v: f64 = (0..n_in).map(|i| x[i] * f64::from(w[i * n_out + j])).sum();
                if relu { v.max(0.0) } else { v }
            })
            .collect()
    };
    let mut total = 0.0;
    for (t, &y) in targets.iter().enumerate() {
        let x: Vec<f64> = contexts[t * c..(t + 1) * c]
            .iter()
            .flat_map(|&b| e[b as usize * de..(b as usize + 1) * de].iter())
            .map(|&v| f64::from(v))
            .collect();
        let h1 = linear(&x, w1, c * de, d, true);
        let h2 = linear(&h1, w2, d, d, true);
        let logits = linear(&h2, w3, d, VOCAB, false);
        let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let lse = max + logits.iter().map(|l| (l - max).exp()).sum::<f64>().ln();
        total += lse - logits[y as usize];
    }
    Ok(total / targets.len() as f64)
}
