//! Training kernels of the MoE language model ([`crate::moe`]), `shaders/lm_train.wgsl`: what its
//! forward and backward need beside matmul (with transposes), grouped matmul, relu,
//! [`super::mlp::relu_backward`], add and [`super::moe_dispatch`]'s dispatch/combine.
//!
//! - [`embed_gather`] / [`embed_grad`]: byte embeddings of context windows, and their gradient;
//! - [`cross_entropy`]: per-row loss and `(softmax − onehot) / T`; [`row_logsumexp`] for the z-loss;
//! - [`gate_grad`], [`combine_backward_slots`], [`dispatch_backward`]: combine/dispatch backward;
//! - [`router_backward`]: gates, aux loss and z-loss back to the router logits;
//! - [`expert_weight_grad`]: `A_gᵀ·B_g` over each expert's row group, given by the same offsets as
//!   the grouped matmul (which groups rows of its output; a weight gradient sums over them);
//! - [`adam`]: one bias-corrected Adam step in place.
//!
//! One file per concept, the backward beside its forward where both are here: [`embedding`],
//! [`loss`], [`combine_backward`], [`router_backward`], [`expert_grad`], [`adam`].
//!
//! Each kernel has an `encode_*` form that records into a caller's encoder (outputs allocated by
//! the caller), a blocking form that allocates and waits, a `*_reference` in plain Rust, and a
//! [`Kernel`] type for program nodes.
//! Everything is f32; ids and targets are u32.

use super::LM_TRAIN;
use super::matmul::{self, MatmulShape};
use super::moe_dispatch::{gather_reference, scatter_reference};
use super::moe_dispatch::{slots_of, tokens_of};
use super::node::expect;
use super::router::{ExpertStat, ReferenceRouting, Route, RouterConfig, Routing};
use super::router::{routed_tokens, routing_of};
use super::{Kernel, Prepared, TensorType, node, sharding_rules};
use crate::device::Recorder;
use crate::named_sharding::NamedSharding;
use crate::{DType, Device, Error, Result, Tensor};

#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    cols: u32,
    context: u32,
    k: u32,
    capacity: u32,
    experts: u32,
    normalize: u32,
    inner: u32,
    alpha: f32,
    z_loss: f32,
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    bias1: f32,
    bias2: f32,
}

impl Params {
    fn zeroed() -> Self {
        bytemuck::Zeroable::zeroed()
    }
}

fn to_u32(what: &'static str, v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::InvalidArgument {
        what,
        reason: format!("{v} does not fit in u32"),
    })
}

fn bad(what: &'static str, reason: String) -> Error {
    Error::InvalidArgument { what, reason }
}

/// Records `entry` over `threads` threads with `bindings` (binding 0, the parameters, added here).
fn encode(
    encoder: &mut impl Recorder,
    device: &Device,
    entry: &'static str,
    params: &Params,
    bindings: &[(u32, &wgpu::Buffer)],
    threads: usize,
) -> Result<()> {
    let grid = super::grid_1d(device, entry, threads)?;
    LM_TRAIN.encode(encoder, device, entry, params, bindings, grid)
}

/// [`encode`] with the parameters in `uniform`.
fn encode_with(
    encoder: &mut impl Recorder,
    device: &Device,
    entry: &'static str,
    uniform: &wgpu::Buffer,
    bindings: &[(u32, &wgpu::Buffer)],
    threads: usize,
) -> Result<()> {
    let pipeline = LM_TRAIN.pipeline(device, DType::F32, entry)?;
    let mut all = vec![(0, uniform)];
    all.extend_from_slice(bindings);
    device.encode_dispatch(
        encoder,
        entry,
        &pipeline,
        &all,
        super::grid_1d(device, entry, threads)?,
    )
}

/// Runs `record` in a fresh encoder on `device` and blocks until the GPU is done.
fn run(
    device: &Device,
    what: &'static str,
    record: impl FnOnce(&mut wgpu::CommandEncoder) -> Result<()>,
) -> Result<()> {
    super::eager::submit_and_wait(device, what, record)
}

fn dims2(what: &'static str, t: &Tensor) -> Result<(usize, usize)> {
    match *t.shape() {
        [r, c] => Ok((r, c)),
        _ => Err(Error::ShapeMismatch {
            what,
            expected: "a 2-d tensor".into(),
            got: format!("{:?}", t.shape()),
        }),
    }
}

/// Checks a routing's buffers against its sizes and `device`; returns `(tokens, k, capacity)`.
fn routing_dims(what: &'static str, routing: &Routing, device: &Device) -> Result<[usize; 3]> {
    if routing.device() != device {
        return Err(Error::DeviceMismatch {
            what,
            a: device.label(),
            b: routing.device().label(),
        });
    }
    routing.config.validate()?;
    let k = routing.config.k;
    let need = (routing.tokens * k * std::mem::size_of::<Route>()) as u64;
    if routing.routes.size() < need {
        return Err(bad(
            what,
            format!("routes hold {} bytes, need {need}", routing.routes.size()),
        ));
    }
    let stats = (routing.config.experts * std::mem::size_of::<ExpertStat>()) as u64;
    if routing.stats.size() < stats {
        return Err(bad(
            what,
            format!("stats hold {} bytes, need {stats}", routing.stats.size()),
        ));
    }
    to_u32(what, routing.tokens * k)?;
    to_u32(what, routing.config.experts * routing.capacity)?;
    Ok([routing.tokens, k, routing.capacity])
}

/// A [`Routing`] on `device` holding a reference routing's probabilities, routes and stats: lets
/// kernels be checked against (and trainers compared with) the plain-Rust router.
pub fn upload_routing(
    device: &Device,
    reference: &ReferenceRouting,
    tokens: usize,
    config: RouterConfig,
) -> Result<Routing> {
    const WHAT: &str = "upload_routing";
    config.validate()?;
    if reference.routes.len() != tokens * config.k
        || reference.probs.len() != tokens * config.experts
        || reference.stats.len() != config.experts
    {
        return Err(bad(
            WHAT,
            format!("routing does not describe {tokens} tokens for {config:?}"),
        ));
    }
    Ok(Routing {
        tokens,
        config,
        capacity: reference.capacity,
        probs: Tensor::from_f32(
            device,
            &[tokens, config.experts],
            DType::F32,
            &reference.probs,
        )?,
        routes: device.storage_buffer_init("routes", bytemuck::cast_slice(&reference.routes))?,
        stats: device.storage_buffer_init("stats", bytemuck::cast_slice(&reference.stats))?,
    })
}

mod adam;
mod combine_backward;
mod embedding;
mod expert_grad;
mod loss;
mod router_backward;

pub use adam::*;
pub use combine_backward::*;
use embedding::check_ids;
pub use embedding::*;
pub use expert_grad::*;
use loss::max_and_sum;
pub use loss::*;
pub use router_backward::*;
