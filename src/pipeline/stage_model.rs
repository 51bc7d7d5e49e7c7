//! What a pipeline stage computes, as program nodes: [`StageModel`], the one interface the
//! lowering ([`super::lower`]) drives. Each model implements it beside itself: the MLP in
//! [`super::mlp`], the MoE stack in [`super::moe_stack`].
//!
//! A model is a stack of layers with one activation between consecutive ones; each virtual stage
//! holds a contiguous block of layers. A stage runs on a gang of devices with each microbatch's
//! rows split over it (a gang of one for the MLP). A parameter is either replicated over the gang
//! (then each device's gradient is a partial sum over its rows, all-reduced before the update)
//! or split over the gang by its first axis (experts, whose gradients are whole where they live).

use crate::program::Gang;
use crate::program::{ProgramBuilder, Value};
use crate::{Error, Result};

/// One microbatch, what every stage model trains on: `rows × widths[0]` inputs and
/// `rows × widths.last()` targets, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Microbatch {
    pub input: Vec<f32>,
    pub target: Vec<f32>,
}

/// One parameter tensor of a layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    /// Appended to the layer's variable name; empty for a layer's only parameter.
    pub name: &'static str,
    /// The whole tensor's shape.
    pub shape: Vec<usize>,
    /// Split over the gang by the first axis (each device holds `shape[0] / gang` experts).
    pub experts: bool,
}

impl Param {
    /// One device's tensor shape on a gang of `gang`.
    pub fn shard_shape(&self, gang: usize) -> Vec<usize> {
        let mut shape = self.shape.clone();
        if self.experts {
            shape[0] /= gang;
        }
        shape
    }

    /// Device `i`'s part of the whole value `host` on a gang of `gang`.
    pub fn shard<'a>(&self, host: &'a [f32], i: usize, gang: usize) -> &'a [f32] {
        if self.experts {
            let part = host.len() / gang;
            &host[i * part..(i + 1) * part]
        } else {
            host
        }
    }
}

/// A layer's weight gradients now, or what a later W needs to compute them (split backward).
#[derive(Debug)]
pub enum Grads<K> {
    Now(Vec<Value>),
    Later(K),
}

/// A model a schedule trains, as nodes (see the module docs): [`super::execute`] runs any of
/// them. Public so that `execute` can name it, but sealed: this module is private, so models are
/// the crate's own (the MLP, the MoE stack).
pub trait StageModel {
    /// What a layer's forward keeps for its backward.
    type Saved;
    /// What a split backward keeps for the layer's W.
    type Kept;

    fn layers(&self) -> usize;
    /// Devices per stage. The model promises that its rows per microbatch and its parameters'
    /// expert axes split evenly over them.
    fn gang(&self) -> usize;
    /// Values per row of the activation entering layer `l` (`layers()`: the output).
    fn width(&self, l: usize) -> usize;
    /// Checks the microbatch against the model and returns its row count.
    fn rows(&self, mb: &Microbatch) -> Result<usize>;
    /// The layer's parameters, in the order of [`Self::initial`] and of its gradients.
    fn params(&self, layer: usize) -> Vec<Param>;
    /// The layer's parameters' values before the step, whole.
    fn initial(&self, layer: usize) -> Vec<&[f32]>;
    /// The layer's output for its input `h`, on `gang`.
    fn forward(
        &self,
        b: &mut ProgramBuilder,
        gang: &Gang,
        layer: usize,
        w: &[Value],
        h: Value,
    ) -> (Value, Self::Saved);
    /// The gradient of the layer's input from its output's `dy` (`None` where nothing reads it:
    /// the model's first layer), and its weight gradients now, or with `split` later.
    #[allow(clippy::too_many_arguments)]
    fn backward(
        &self,
        b: &mut ProgramBuilder,
        gang: &Gang,
        layer: usize,
        w: &[Value],
        saved: Self::Saved,
        dy: Value,
        split: bool,
    ) -> (Option<Value>, Grads<Self::Kept>);
    /// The weight gradients a split backward deferred.
    fn weight_grads(
        &self,
        b: &mut ProgramBuilder,
        gang: &Gang,
        layer: usize,
        kept: Self::Kept,
    ) -> Vec<Value>;
    /// The loss of a microbatch's output `y` against its target, on the host: what a run
    /// reports. The default, the mean squared error, is the MLP's and the MoE stack's.
    fn loss(&self, y: &[f32], target: &[f32]) -> f32 {
        crate::kernels::loss::mse_reference(y, target)
    }
    /// The gradient of [`Self::loss`] with respect to the output, as a node on the last stage's
    /// `gang`: where the lowering turns the last forward into the first backward.
    fn loss_grad(&self, b: &mut ProgramBuilder, gang: &Gang, y: Value, target: Value) -> Value {
        b.kernel1("mse_grad", gang, crate::kernels::MseGrad, &[y, target])
    }
}

/// Layers of each of `virtual_stages` consecutive model slices of a `layers`-layer model:
/// contiguous blocks, as even as possible (the first `layers % virtual_stages` get one more).
pub(super) fn split_layers(
    what: &'static str,
    layers: usize,
    virtual_stages: usize,
) -> Result<Vec<std::ops::Range<usize>>> {
    if virtual_stages == 0 || layers < virtual_stages {
        return Err(Error::InvalidArgument {
            what,
            reason: format!(
                "{layers} layers cannot fill {virtual_stages} virtual stages (stages × chunks): \
                 every virtual stage needs at least one layer"
            ),
        });
    }
    let (base, extra) = (layers / virtual_stages, layers % virtual_stages);
    let mut start = 0;
    Ok((0..virtual_stages)
        .map(|vs| {
            let len = base + usize::from(vs < extra);
            let range = start..start + len;
            start += len;
            range
        })
        .collect())
}
