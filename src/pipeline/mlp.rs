//! The model pipelined training runs: a bias-free MLP with ReLU between layers (not after the
//! last) and a mean-squared-error loss, plus its plain-Rust training step, the reference a
//! pipelined run on devices must reproduce, and its stages as program nodes (its
//! [`StageModel`]).
//!
//! Layer `i` maps `widths[i]` to `widths[i + 1]`; its weight is row-major `[widths[i],
//! widths[i + 1]]` and a microbatch of `rows` rows computes `z = h · W`. The loss of one
//! microbatch is `mean((y − t)²)` over its `rows × widths.last()` outputs; a step averages the
//! microbatches' gradients and applies `W −= lr · mean(dW)`.

use std::ops::Range;

use super::stage_model::{Grads, Microbatch, Param, StageModel};
use crate::kernels::matmul::{MatmulVariant, VariantChoice};
use crate::kernels::{ElementwiseOp, Matmul};
use crate::program::Gang;
use crate::program::{ProgramBuilder, Value};
use crate::{Error, Result, Rng};

/// Layer widths and the seed of the initial weights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MlpConfig {
    /// Layer `i` maps `widths[i]` to `widths[i + 1]`: at least two widths, none zero.
    pub widths: Vec<usize>,
    pub seed: u64,
}

/// An MLP's widths and weights (`weights[i]` is layer `i`, `[widths[i], widths[i + 1]]`).
#[derive(Debug, Clone, PartialEq)]
pub struct Mlp {
    pub widths: Vec<usize>,
    pub weights: Vec<Vec<f32>>,
}

/// The outcome of one reference training step.
#[derive(Debug, Clone, PartialEq)]
pub struct StepResult {
    /// Weights after the SGD step, per layer.
    pub weights: Vec<Vec<f32>>,
    /// Mean over microbatches of each microbatch's mean squared error, before the step.
    pub loss: f32,
}

impl Mlp {
    /// Weights uniform in `±1/√fan_in`, drawn from `config.seed`.
    pub fn new(config: &MlpConfig) -> Result<Mlp> {
        let widths = &config.widths;
        if widths.len() < 2 || widths.contains(&0) {
            return Err(Error::InvalidArgument {
                what: "MlpConfig",
                reason: format!(
                    "an MLP needs at least two widths, none zero (one layer maps widths[i] to \
                     widths[i + 1]); got {widths:?}"
                ),
            });
        }
        let mut rng = Rng::new(config.seed);
        let weights = widths
            .windows(2)
            .map(|w| {
                let scale = 1.0 / (w[0] as f32).sqrt();
                (0..w[0] * w[1]).map(|_| rng.symmetric() * scale).collect()
            })
            .collect();
        Ok(Mlp {
            widths: widths.clone(),
            weights,
        })
    }

    /// Number of linear layers.
    pub fn layers(&self) -> usize {
        self.widths.len().saturating_sub(1)
    }

    /// `[in, out]` of layer `i`.
    pub fn layer_shape(&self, i: usize) -> [usize; 2] {
        [self.widths[i], self.widths[i + 1]]
    }

    /// Checks that weights match widths and returns the microbatch's row count.
    pub fn rows(&self, mb: &Microbatch) -> Result<usize> {
        self.check_weights()?;
        let (input_w, output_w) = (self.widths[0], self.widths[self.layers()]);
        let rows = mb.input.len() / input_w;
        if mb.input.is_empty() || rows * input_w != mb.input.len() {
            return Err(Error::ShapeMismatch {
                what: "microbatch input",
                expected: format!("a positive multiple of widths[0] = {input_w} values"),
                got: format!("{} values", mb.input.len()),
            });
        }
        if mb.target.len() != rows * output_w {
            return Err(Error::ShapeMismatch {
                what: "microbatch target",
                expected: format!("{rows} rows × {output_w} = {} values", rows * output_w),
                got: format!("{} values", mb.target.len()),
            });
        }
        Ok(rows)
    }

    fn check_weights(&self) -> Result<()> {
        let ok = self.widths.len() >= 2
            && self.weights.len() == self.layers()
            && (0..self.layers())
                .all(|i| self.weights[i].len() == self.widths[i] * self.widths[i + 1]);
        if ok {
            Ok(())
        } else {
            Err(Error::ShapeMismatch {
                what: "MLP weights",
                expected: format!("one [in, out] matrix per layer of widths {:?}", self.widths),
                got: format!(
                    "{} matrices of {:?} values",
                    self.weights.len(),
                    self.weights.iter().map(Vec::len).collect::<Vec<_>>()
                ),
            })
        }
    }

    /// Layers of each of `virtual_stages` consecutive model slices: contiguous blocks, as even
    /// as possible (the first `layers % virtual_stages` slices get one more).
    pub fn split(&self, virtual_stages: usize) -> Result<Vec<Range<usize>>> {
        super::stage_model::split_layers("MLP split", self.layers(), virtual_stages)
    }

    /// Forward of one microbatch: the input of every layer, then the output `y`.
    pub fn forward(&self, mb: &Microbatch) -> Result<Vec<Vec<f32>>> {
        let rows = self.rows(mb)?;
        let mut acts = vec![mb.input.clone()];
        for i in 0..self.layers() {
            let [k, n] = self.layer_shape(i);
            let mut z = matmul(&acts[i], &self.weights[i], rows, k, n);
            if i + 1 < self.layers() {
                z.iter_mut().for_each(|v| *v = v.max(0.0));
            }
            acts.push(z);
        }
        Ok(acts)
    }

    /// Loss of one microbatch and the gradient of every layer's weight.
    pub fn gradients(&self, mb: &Microbatch) -> Result<(f32, Vec<Vec<f32>>)> {
        let rows = self.rows(mb)?;
        let acts = self.forward(mb)?;
        let layers = self.layers();
        let y = &acts[layers];
        let loss = crate::kernels::loss::mse_reference(y, &mb.target);
        let mut dz = crate::kernels::loss::mse_grad_reference(y, &mb.target);
        let mut grads = vec![Vec::new(); layers];
        for i in (0..layers).rev() {
            let [k, n] = self.layer_shape(i);
            grads[i] = matmul_at_b(&acts[i], &dz, rows, k, n);
            if i > 0 {
                let dh = matmul_a_bt(&dz, &self.weights[i], rows, n, k);
                dz = crate::kernels::elementwise::reference(
                    crate::kernels::ElementwiseOp::ReluBackward,
                    &acts[i],
                    Some(&dh),
                );
            }
        }
        Ok((loss, grads))
    }

    /// One training step over `batch`: gradients accumulated over the microbatches, then
    /// `W −= lr · (Σ dW) / m`. What a pipelined run must reproduce.
    pub fn reference_step(&self, batch: &[Microbatch], lr: f32) -> Result<StepResult> {
        if batch.is_empty() {
            return Err(Error::InvalidArgument {
                what: "training step",
                reason: "the batch has no microbatches".into(),
            });
        }
        let mut acc: Vec<Vec<f32>> = self.weights.iter().map(|w| vec![0.0; w.len()]).collect();
        let mut loss = 0.0f64;
        for mb in batch {
            let (l, grads) = self.gradients(mb)?;
            loss += f64::from(l);
            for (a, g) in acc.iter_mut().zip(&grads) {
                crate::kernels::optim::accumulate_reference(a, g);
            }
        }
        let scale = lr / batch.len() as f32;
        let mut weights = self.weights.clone();
        for (w, g) in weights.iter_mut().zip(&acc) {
            crate::kernels::optim::sgd_reference(w, g, scale);
        }
        Ok(StepResult {
            weights,
            loss: (loss / batch.len() as f64) as f32,
        })
    }
}

/// `[m, k] · [k, n]`, f64 accumulation.
fn matmul(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let acc: f64 = (0..k)
                .map(|l| f64::from(a[i * k + l]) * f64::from(b[l * n + j]))
                .sum();
            c[i * n + j] = acc as f32;
        }
    }
    c
}

/// `Aᵀ · B` for `A: [m, k]`, `B: [m, n]`: `[k, n]`.
fn matmul_at_b(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut c = vec![0.0; k * n];
    for i in 0..k {
        for j in 0..n {
            let acc: f64 = (0..m)
                .map(|r| f64::from(a[r * k + i]) * f64::from(b[r * n + j]))
                .sum();
            c[i * n + j] = acc as f32;
        }
    }
    c
}

/// `A · Bᵀ` for `A: [m, n]`, `B: [k, n]`: `[m, k]`.
fn matmul_a_bt(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
    let mut c = vec![0.0; m * k];
    for i in 0..m {
        for j in 0..k {
            let acc: f64 = (0..n)
                .map(|l| f64::from(a[i * n + l]) * f64::from(b[j * n + l]))
                .sum();
            c[i * k + j] = acc as f32;
        }
    }
    c
}

/// The MLP's matmuls: the naive kernel, whose sums the host reference repeats.
const NAIVE: MatmulVariant = MatmulVariant::Naive;

#[allow(clippy::too_many_arguments)]
fn matmul_node(
    b: &mut ProgramBuilder,
    gang: &Gang,
    name: &str,
    a: Value,
    w: Value,
    ta: bool,
    tb: bool,
) -> Value {
    let op = Matmul {
        limits: None,
        trans_a: ta,
        trans_b: tb,
        offsets: None,
        choice: VariantChoice::SameSums(NAIVE),
        f16_accumulate: false,
        epilogue: crate::kernels::Epilogue::NONE,
    };
    b.kernel1(name, gang, op, &[a, w])
}

/// The MLP: `z = h · W` per layer, ReLU between layers. A layer's backward takes the gradient of
/// its pre-activation `z` and returns its predecessor's (the ReLU's backward is folded in).
impl StageModel for Mlp {
    /// The layer's input.
    type Saved = Value;
    /// The layer's input and its output's gradient.
    type Kept = (Value, Value);

    fn layers(&self) -> usize {
        Mlp::layers(self)
    }

    fn gang(&self) -> usize {
        1
    }

    fn width(&self, l: usize) -> usize {
        self.widths[l]
    }

    fn rows(&self, mb: &Microbatch) -> Result<usize> {
        Mlp::rows(self, mb)
    }

    fn params(&self, layer: usize) -> Vec<Param> {
        vec![Param {
            name: "",
            shape: self.layer_shape(layer).to_vec(),
            experts: false,
        }]
    }

    fn initial(&self, layer: usize) -> Vec<&[f32]> {
        vec![&self.weights[layer]]
    }

    fn forward(
        &self,
        b: &mut ProgramBuilder,
        gang: &Gang,
        layer: usize,
        w: &[Value],
        h: Value,
    ) -> (Value, Value) {
        let z = matmul_node(b, gang, &format!("F{layer}"), h, w[0], false, false);
        let out = if layer + 1 < Mlp::layers(self) {
            b.relu(&format!("relu{layer}"), gang, z)
        } else {
            z
        };
        (out, h)
    }

    fn backward(
        &self,
        b: &mut ProgramBuilder,
        gang: &Gang,
        layer: usize,
        w: &[Value],
        h: Value,
        dz: Value,
        split: bool,
    ) -> (Option<Value>, Grads<(Value, Value)>) {
        let grads = if split {
            Grads::Later((h, dz))
        } else {
            Grads::Now(self.weight_grads(b, gang, layer, (h, dz)))
        };
        let dx = (layer > 0).then(|| {
            let dh = matmul_node(b, gang, &format!("dX{layer}"), dz, w[0], false, true);
            b.kernel1(
                &format!("relu_backward{layer}"),
                gang,
                ElementwiseOp::ReluBackward,
                &[h, dh],
            )
        });
        (dx, grads)
    }

    fn weight_grads(
        &self,
        b: &mut ProgramBuilder,
        gang: &Gang,
        layer: usize,
        (h, dz): (Value, Value),
    ) -> Vec<Value> {
        vec![matmul_node(
            b,
            gang,
            &format!("dW{layer}"),
            h,
            dz,
            true,
            false,
        )]
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn model() -> Mlp {
        Mlp::new(&MlpConfig {
            widths: vec![3, 5, 4, 2],
            seed: 1,
        })
        .unwrap()
    }

    fn batch(m: usize, rows: usize) -> Vec<Microbatch> {
        let mut rng = Rng::new(9);
        (0..m)
            .map(|_| Microbatch {
                input: rng.vec(rows * 3),
                target: rng.vec(rows * 2),
            })
            .collect()
    }

    #[test]
    fn split_is_contiguous_and_even() {
        let mlp = Mlp::new(&MlpConfig {
            widths: vec![2; 8],
            seed: 0,
        })
        .unwrap();
        assert_eq!(mlp.split(3).unwrap(), vec![0..3, 3..5, 5..7]);
        assert_eq!(mlp.split(7).unwrap().len(), 7);
        assert!(mlp.split(8).is_err());
        assert!(mlp.split(0).is_err());
        assert!(
            Mlp::new(&MlpConfig {
                widths: vec![4],
                seed: 0
            })
            .is_err()
        );
    }

    /// Smallest |pre-activation| of a hidden layer: finite differences are only meaningful
    /// away from the ReLU kinks.
    fn kink_margin(mlp: &Mlp, mb: &Microbatch) -> f32 {
        let acts = mlp.forward(mb).unwrap();
        let rows = mlp.rows(mb).unwrap();
        (0..mlp.layers() - 1)
            .flat_map(|i| {
                let [k, n] = mlp.layer_shape(i);
                matmul(&acts[i], &mlp.weights[i], rows, k, n)
            })
            .fold(f32::INFINITY, |m, z| m.min(z.abs()))
    }

    /// The analytic gradient matches central finite differences of the loss.
    #[test]
    fn gradients_match_finite_differences() {
        let mb = &batch(1, 4)[0];
        let mlp = (0..100)
            .map(|seed| {
                Mlp::new(&MlpConfig {
                    widths: vec![3, 5, 4, 2],
                    seed,
                })
                .unwrap()
            })
            .find(|m| kink_margin(m, mb) > 1e-2)
            .unwrap();
        let (_, grads) = mlp.gradients(mb).unwrap();
        let eps = 1e-3f32;
        for (layer, grad) in grads.iter().enumerate() {
            for (idx, &analytic) in grad.iter().enumerate() {
                let mut plus = mlp.clone();
                plus.weights[layer][idx] += eps;
                let mut minus = mlp.clone();
                minus.weights[layer][idx] -= eps;
                let numeric =
                    (plus.gradients(mb).unwrap().0 - minus.gradients(mb).unwrap().0) / (2.0 * eps);
                assert!(
                    (numeric - analytic).abs() < 1e-4 + 1e-2 * analytic.abs(),
                    "layer {layer} [{idx}]: {numeric} vs {analytic}"
                );
            }
        }
    }

    #[test]
    fn a_step_lowers_the_loss_and_rejects_bad_input() {
        let mlp = model();
        let b = batch(4, 3);
        let step = mlp.reference_step(&b, 0.1).unwrap();
        let after = Mlp {
            widths: mlp.widths.clone(),
            weights: step.weights,
        };
        assert!(after.reference_step(&b, 0.1).unwrap().loss < step.loss);
        assert!(mlp.reference_step(&[], 0.1).is_err());
        let mut bad = b.clone();
        bad[1].target.pop();
        assert!(matches!(
            mlp.reference_step(&bad, 0.1),
            Err(Error::ShapeMismatch { .. })
        ));
    }
}
