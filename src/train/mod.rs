//! Training on a gang of devices, for every model: one [`Trainer`] generic over a
//! [`StepModel`].
//!
//! A model supplies what is its own: its parameters' names and shapes and how they start, which
//! of them are expert tensors (split over the devices by their first axis, the rest replicated),
//! how it routes ([`ExpertRouting`], none for a dense model), how a batch unit is drawn from a
//! corpus, checked and laid out for the devices (its [`Batcher`]), and its step as one compiled
//! program (built with [`step_program`]'s builder, whose step end is the same for
//! every model). The trainer owns the rest: the devices as a list or a [`crate::Mesh`]
//! (`{data, expert}`), the parameters and Adam's moments as program variables on them (`layout`),
//! the compiled programs per mode, batch and split, how the routing groups are dealt to the
//! devices ([`GroupSplit`], measured or given), submitting steps and reading their statistics
//! back ([`StepStats`]), checkpoints in one format, safetensors ([`Checkpoint`]), and the training
//! loop ([`run`]: [`train`], [`resume`], [`evaluate`]). The MoE LM ([`crate::moe`]), the
//! Transformer ([`crate::transformer`]) and the MLP LM ([`crate::mlp_lm`]) are the models here; a
//! new model is a `StepModel` (with its `Batcher`) and nothing else.
//!
//! Batches are *units* the model names (the MoE LM's are tokens with their context windows, the
//! Transformer's whole sequences), each of a fixed number of token rows; a batch of `U` units is
//! `G` routing groups of `U / G` consecutive units, and device `i` runs its groups one per
//! round.

pub mod checkpoint;
pub(crate) mod layout;
mod params;
pub mod run;
mod split;
mod stats;
pub mod step_program;
mod trainer;

pub use checkpoint::{Checkpoint, LegacyFormats, TrainState};
pub use params::{ParamSpec, Params};
pub use run::{
    Evaluation, Progress, TrainOptions, TrainReport, TrainingRun, evaluate, resume, train,
};
pub use split::{Balance, Balanced, GroupSplit};
pub use stats::{ForwardPass, StepStats, coefficient_of_variation};
pub use step_program::StepShape;
pub use trainer::{PendingStep, Trainer};

use crate::Result;
use crate::data::{Corpus, Window};
use crate::kernels::router::{RouterConfig, RouterLoss};
use crate::program::Program;
use step_program::Mode;

/// How a model draws its batches from a corpus, after burn's `Batcher`: the unit a batch counts
/// (a window predicting the byte after it, or a whole sequence), the rows and input words of
/// one, how a batch is made from the units' windows and checked, and which windows an
/// evaluation scores. A part of every [`StepModel`].
pub trait Batcher {
    /// Token rows of one batch unit.
    fn unit_rows(&self) -> usize;

    /// Input words of one token row (the MoE LM's context window; 1 for a token).
    fn row_inputs(&self) -> usize;

    /// Bytes of context each batch unit draws from a corpus: a unit is a window of this many
    /// bytes and the byte after it ([`crate::data::Batches`]).
    fn window(&self) -> usize;

    /// A batch's inputs and targets from its units' windows (`window()` bytes each, one after
    /// another) and the byte after each. By default a window is one token row that predicts the
    /// byte after it.
    fn batch_from(&self, windows: Vec<u32>, next: Vec<u32>) -> (Vec<u32>, Vec<u32>) {
        (windows, next)
    }

    /// The windows (with the byte after each) an evaluation scores on `valid`: about `n`,
    /// spread over it, and how many windows `valid` holds to pick from. By default windows `W/n`
    /// apart among the `W` windows of stride 1, so that every part of every document is seen.
    fn eval_windows(&self, valid: &Corpus, n: usize) -> Result<(Vec<Window>, usize)> {
        let w = self.window();
        let all = valid.window_count(w);
        let stride = (all / n.max(1)).max(1);
        Ok((valid.windows(w, stride)?.collect(), all))
    }

    /// Checks a batch (`inputs`: `row_inputs` words per row, `targets`: one per row) for
    /// `groups` routing groups; returns its units.
    fn check_batch(&self, inputs: &[u32], targets: &[u32], groups: usize) -> Result<usize>;
}

/// A model the [`Trainer`] trains: implemented by its config type, whose values name one model's
/// sizes.
pub trait StepModel:
    Batcher
    + LegacyFormats
    + Copy
    + Default
    + std::fmt::Debug
    + PartialEq
    + Send
    + Sync
    + serde::Serialize
    + serde::de::DeserializeOwned
    + 'static
{
    /// What files and errors call the model (`moe-lm`, `transformer`).
    const NAME: &'static str;

    /// Errors unless the sizes make a model.
    fn validate(&self) -> Result<()>;

    /// Every parameter tensor, in order.
    fn param_specs(&self) -> Vec<ParamSpec>;

    /// Every parameter's first values, in [`Self::param_specs`] order (drawn from the config's
    /// own seed).
    fn init(&self) -> Result<Vec<Vec<f32>>>;

    /// Per parameter: whether it is an expert tensor, split over the expert axis by its first
    /// axis (which counts [`Self::experts`]).
    fn expert_tensors(&self) -> Vec<bool>;

    /// How the model routes tokens to its experts; `None` for a dense model (no expert layer).
    fn routing(&self) -> Option<ExpertRouting>;

    /// The same model with its expert layers' capacity factor set to `factor` (what evaluation
    /// may route with: [`Trainer::set_eval_capacity`]). A dense model is itself.
    fn with_capacity_factor(&self, factor: f32) -> Self {
        let _ = factor;
        *self
    }

    /// The step program of `mode` for `shape`. Its arguments: [`Self::leading_args`]' values,
    /// then per round the devices' inputs and targets, then for training the step's Adam bias
    /// corrections (f32 `[2]` per device).
    fn build_step(shape: &StepShape<Self>, mode: Mode) -> Result<Program>;

    /// Arguments every step program of this model takes before the rounds' batches, for
    /// `devices` devices of `rows` token rows each (the Transformer's positions).
    fn leading_args(&self, _devices: usize, _rows: usize) -> Vec<crate::program::HostData> {
        Vec::new()
    }
}

/// How a model routes tokens to experts: what the trainer needs to split its expert tensors and
/// read its routers' statistics. Every expert layer has the same router.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExpertRouting {
    /// Expert layers: at least one.
    pub layers: usize,
    /// The router (its expert count, top-k and capacity factor).
    pub router: RouterConfig,
    /// The weights of the router's losses.
    pub loss: RouterLoss,
}

impl ExpertRouting {
    /// The routing of `layers` expert layers of `router`, or `None` for no expert layer.
    pub fn of(layers: usize, router: RouterConfig, loss: RouterLoss) -> Option<Self> {
        (layers > 0).then_some(ExpertRouting {
            layers,
            router,
            loss,
        })
    }
}

/// The batch check of a model whose batch unit is one token row predicting the byte after a
/// window of `context` byte ids (the MoE LM, the MLP LM): `T ≥ 1` targets, `T × context` ids,
/// every id a byte, and `T` split evenly into `groups` routing groups. Returns `T`.
pub fn check_window_batch(
    what: &'static str,
    context: usize,
    contexts: &[u32],
    targets: &[u32],
    groups: usize,
) -> Result<usize> {
    let t = targets.len();
    if t == 0 || contexts.len() != t * context {
        return Err(crate::Error::ShapeMismatch {
            what,
            expected: format!("T >= 1 targets and T × {context} context bytes"),
            got: format!("{t} targets, {} context bytes", contexts.len()),
        });
    }
    let invalid = |reason: String| crate::Error::InvalidArgument { what, reason };
    if let Some(bad) = contexts
        .iter()
        .chain(targets)
        .find(|&&v| v > u32::from(u8::MAX))
    {
        return Err(invalid(format!("byte id {bad} is not below 256")));
    }
    if groups == 0 || !t.is_multiple_of(groups) {
        return Err(invalid(format!(
            "{t} tokens cannot be split into {groups} equal routing groups"
        )));
    }
    Ok(t)
}
