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
//! Each kernel has an `encode_*` form that records into a caller's encoder (outputs allocated by
//! the caller), a blocking form that allocates and waits, and a `*_reference` in plain Rust.
//! Everything is f32; ids and targets are u32.

use super::LM_TRAIN;
use super::matmul::{self, MatmulShape};
use super::moe_dispatch::{gather_reference, scatter_reference};
use super::router::{ExpertStat, ReferenceRouting, Route, RouterConfig, Routing};
use crate::device::Recorder;
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

/// Weights of the router's auxiliary losses.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RouterLoss {
    /// Load-balancing loss `alpha · E · Σ_i f_i · P_i`.
    pub alpha: f32,
    /// z-loss `z_loss · mean_t logsumexp(r[t])²`.
    pub z_loss: f32,
}

/// Adam hyper-parameters; no weight decay.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AdamConfig {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
}

impl AdamConfig {
    /// β1 0.9, β2 0.999, ε 1e-8.
    pub fn new(lr: f32) -> Self {
        Self {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
        }
    }

    fn validate(&self, step: u32) -> Result<()> {
        let ok = self.lr.is_finite()
            && (0.0..1.0).contains(&self.beta1)
            && (0.0..1.0).contains(&self.beta2)
            && self.eps.is_finite()
            && self.eps > 0.0;
        if !ok || step == 0 {
            return Err(Error::InvalidArgument {
                what: "adam",
                reason: format!(
                    "need a finite lr, betas in [0, 1), eps > 0 and step >= 1; got {self:?}, step {step}"
                ),
            });
        }
        Ok(())
    }

    /// `(1 / (1 − β1^step), 1 / (1 − β2^step))`, computed in f64 once for kernel and reference.
    pub fn bias(&self, step: u32) -> (f32, f32) {
        let c = |b: f32| (1.0 / (1.0 - f64::from(b).powf(f64::from(step)))) as f32;
        (c(self.beta1), c(self.beta2))
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
    let uniform = device.uniform_buffer(entry, params);
    encode_with(encoder, device, entry, &uniform, bindings, threads)
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
    let mut encoder = device.encoder(what);
    record(&mut encoder)?;
    device.submit(encoder);
    device.wait()
}

/// Checks that `t` is on `device`, has `dtype` and the given shape.
fn expect(
    what: &'static str,
    t: &Tensor,
    device: &Device,
    dtype: DType,
    shape: &[usize],
) -> Result<()> {
    t.expect_device(what, device)?;
    t.expect_dtype(what, dtype)?;
    t.expect_shape(what, shape)
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

// ---- embedding ---------------------------------------------------------------------------------

/// Records `out[t, c·d_e + j] = table[contexts[t, c], j]`. `contexts` u32 `[T, C]`, `table`
/// `[V, d_e]`, `out` `[T, C·d_e]`. Ids `>= V` read as zero rows (check them on the host).
pub fn encode_embed_gather(
    encoder: &mut impl Recorder,
    contexts: &Tensor,
    table: &Tensor,
    out: &Tensor,
) -> Result<()> {
    const WHAT: &str = "embed_gather";
    let device = table.device();
    let (t, c) = dims2(WHAT, contexts)?;
    let (v, e) = dims2(WHAT, table)?;
    expect(WHAT, contexts, device, DType::U32, &[t, c])?;
    expect(WHAT, table, device, DType::F32, &[v, e])?;
    expect(WHAT, out, device, DType::F32, &[t, c * e])?;
    let params = Params {
        rows: to_u32(WHAT, t)?,
        cols: to_u32(WHAT, e)?,
        context: to_u32(WHAT, c)?,
        experts: to_u32(WHAT, v)?,
        ..Params::zeroed()
    };
    let bindings = [
        (1, contexts.buffer()),
        (2, table.buffer()),
        (3, out.buffer()),
    ];
    encode(encoder, device, WHAT, &params, &bindings, t * c * e)
}

/// The embeddings of `contexts` (u32 `[T, C]`) from `table` (`[V, d_e]`): `[T, C·d_e]`. Blocks.
pub fn embed_gather(contexts: &Tensor, table: &Tensor) -> Result<Tensor> {
    let (t, c) = dims2("embed_gather", contexts)?;
    let (_, e) = dims2("embed_gather", table)?;
    let out = Tensor::zeros(table.device(), &[t, c * e], DType::F32)?;
    run(table.device(), "embed_gather", |enc| {
        encode_embed_gather(enc, contexts, table, &out)
    })?;
    Ok(out)
}

/// Records `d_table[v, j] = Σ_{(t,c): contexts[t,c] = v} d_x[t, c·d_e + j]` into `d_table`
/// (`[V, d_e]`, overwritten). One thread per table entry looping over every position: no float
/// atomics needed, fine at byte-vocabulary sizes.
pub fn encode_embed_grad(
    encoder: &mut impl Recorder,
    contexts: &Tensor,
    d_x: &Tensor,
    d_table: &Tensor,
) -> Result<()> {
    const WHAT: &str = "embed_grad";
    let device = d_table.device();
    let (t, c) = dims2(WHAT, contexts)?;
    let (v, e) = dims2(WHAT, d_table)?;
    expect(WHAT, contexts, device, DType::U32, &[t, c])?;
    expect(WHAT, d_x, device, DType::F32, &[t, c * e])?;
    expect(WHAT, d_table, device, DType::F32, &[v, e])?;
    let params = Params {
        rows: to_u32(WHAT, t)?,
        cols: to_u32(WHAT, e)?,
        context: to_u32(WHAT, c)?,
        experts: to_u32(WHAT, v)?,
        ..Params::zeroed()
    };
    let bindings = [
        (1, contexts.buffer()),
        (4, d_x.buffer()),
        (5, d_table.buffer()),
    ];
    encode(encoder, device, WHAT, &params, &bindings, v * e)
}

/// The gradient of a `[vocab, d_e]` table from the gradient of [`embed_gather`]'s output. Blocks.
pub fn embed_grad(contexts: &Tensor, d_x: &Tensor, vocab: usize) -> Result<Tensor> {
    let (_, c) = dims2("embed_grad", contexts)?;
    let (_, width) = dims2("embed_grad", d_x)?;
    if c == 0 || !width.is_multiple_of(c) {
        return Err(bad(
            "embed_grad",
            format!("d_x width {width} is not a multiple of the context {c}"),
        ));
    }
    let out = Tensor::zeros(d_x.device(), &[vocab, width / c], DType::F32)?;
    run(d_x.device(), "embed_grad", |enc| {
        encode_embed_grad(enc, contexts, d_x, &out)
    })?;
    Ok(out)
}

fn check_ids(what: &'static str, ids: &[u32], bound: usize) -> Result<()> {
    match ids.iter().find(|&&i| i as usize >= bound) {
        Some(i) => Err(bad(what, format!("id {i} is not below {bound}"))),
        None => Ok(()),
    }
}

/// Reference of [`embed_gather`]: `contexts` flat `[T·C]`, `table` flat `[V, embed]`.
pub fn embed_gather_reference(contexts: &[u32], table: &[f32], embed: usize) -> Result<Vec<f32>> {
    if embed == 0 || !table.len().is_multiple_of(embed) {
        return Err(bad(
            "embed_gather_reference",
            format!("table of {} values is not [V, {embed}]", table.len()),
        ));
    }
    check_ids("embed_gather_reference", contexts, table.len() / embed)?;
    Ok(contexts
        .iter()
        .flat_map(|&id| &table[id as usize * embed..(id as usize + 1) * embed])
        .copied()
        .collect())
}

/// Reference of [`embed_grad`]: `[vocab, embed]`.
pub fn embed_grad_reference(
    contexts: &[u32],
    d_x: &[f32],
    vocab: usize,
    embed: usize,
) -> Result<Vec<f32>> {
    check_ids("embed_grad_reference", contexts, vocab)?;
    if d_x.len() != contexts.len() * embed {
        return Err(Error::ShapeMismatch {
            what: "embed_grad_reference",
            expected: format!("{} values", contexts.len() * embed),
            got: format!("{} values", d_x.len()),
        });
    }
    let mut out = vec![0.0f32; vocab * embed];
    for (q, &id) in contexts.iter().enumerate() {
        let row = &mut out[id as usize * embed..(id as usize + 1) * embed];
        row.iter_mut()
            .zip(&d_x[q * embed..(q + 1) * embed])
            .for_each(|(o, &g)| *o += g);
    }
    Ok(out)
}

// ---- losses ------------------------------------------------------------------------------------

/// Outputs of [`cross_entropy`].
#[derive(Debug)]
pub struct CrossEntropy {
    /// `[T]`: `logsumexp(logits[t]) − logits[t, y[t]]`.
    pub loss: Tensor,
    /// `[T, V]`: `(softmax(logits[t]) − onehot(y[t])) / T`, the gradient of the mean loss.
    pub d_logits: Tensor,
}

/// Records [`cross_entropy`] into caller-allocated `loss` `[T]` and `d_logits` `[T, V]`. Targets
/// `>= V` cannot be reported from a shader: their rows get loss 0 and gradient 0.
pub fn encode_cross_entropy(
    encoder: &mut impl Recorder,
    logits: &Tensor,
    targets: &Tensor,
    loss: &Tensor,
    d_logits: &Tensor,
) -> Result<()> {
    const WHAT: &str = "cross_entropy";
    let device = logits.device();
    let (t, v) = dims2(WHAT, logits)?;
    expect(WHAT, logits, device, DType::F32, &[t, v])?;
    expect(WHAT, targets, device, DType::U32, &[t])?;
    expect(WHAT, loss, device, DType::F32, &[t])?;
    expect(WHAT, d_logits, device, DType::F32, &[t, v])?;
    if v == 0 {
        return Err(bad(WHAT, "logits have no columns".into()));
    }
    let params = Params {
        rows: to_u32(WHAT, t)?,
        cols: to_u32(WHAT, v)?,
        alpha: 1.0 / t.max(1) as f32,
        ..Params::zeroed()
    };
    let bindings = [
        (6, logits.buffer()),
        (7, targets.buffer()),
        (8, loss.buffer()),
        (9, d_logits.buffer()),
    ];
    encode(encoder, device, WHAT, &params, &bindings, t)
}

/// Per-row cross-entropy of `logits` (`[T, V]`) against u32 `targets` (`[T]`) and the gradient
/// of its mean, numerically stable. Blocks.
pub fn cross_entropy(logits: &Tensor, targets: &Tensor) -> Result<CrossEntropy> {
    let (t, v) = dims2("cross_entropy", logits)?;
    let device = logits.device();
    let out = CrossEntropy {
        loss: Tensor::zeros(device, &[t], DType::F32)?,
        d_logits: Tensor::zeros(device, &[t, v], DType::F32)?,
    };
    run(device, "cross_entropy", |enc| {
        encode_cross_entropy(enc, logits, targets, &out.loss, &out.d_logits)
    })?;
    Ok(out)
}

/// Reference of [`cross_entropy`]: `(loss [T], d_logits [T, cols])`. Targets must be `< cols`.
pub fn cross_entropy_reference(
    logits: &[f32],
    targets: &[u32],
    cols: usize,
) -> Result<(Vec<f32>, Vec<f32>)> {
    const WHAT: &str = "cross_entropy_reference";
    if cols == 0 || logits.len() != targets.len() * cols {
        return Err(Error::ShapeMismatch {
            what: WHAT,
            expected: format!("{} logits", targets.len() * cols),
            got: format!("{} logits", logits.len()),
        });
    }
    check_ids(WHAT, targets, cols)?;
    let scale = 1.0 / targets.len().max(1) as f32;
    let mut loss = Vec::with_capacity(targets.len());
    let mut grad = Vec::with_capacity(logits.len());
    for (row, &y) in logits.chunks_exact(cols).zip(targets) {
        let (m, s) = max_and_sum(row);
        loss.push(m + s.ln() - row[y as usize]);
        grad.extend(row.iter().enumerate().map(|(j, &l)| {
            let onehot = if j == y as usize { 1.0 } else { 0.0 };
            scale * ((l - m).exp() / s - onehot)
        }));
    }
    Ok((loss, grad))
}

/// `(max, Σ exp(x − max))` of one row, the stable softmax's two numbers.
fn max_and_sum(row: &[f32]) -> (f32, f32) {
    let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    (m, row.iter().map(|&l| (l - m).exp()).sum())
}

/// Records `out[t] = logsumexp(x[t])` for `x` `[T, N]`, `out` `[T]`.
pub fn encode_row_logsumexp(encoder: &mut impl Recorder, x: &Tensor, out: &Tensor) -> Result<()> {
    const WHAT: &str = "row_logsumexp";
    let device = x.device();
    let (t, n) = dims2(WHAT, x)?;
    expect(WHAT, x, device, DType::F32, &[t, n])?;
    expect(WHAT, out, device, DType::F32, &[t])?;
    if n == 0 {
        return Err(bad(WHAT, "rows are empty".into()));
    }
    let params = Params {
        rows: to_u32(WHAT, t)?,
        cols: to_u32(WHAT, n)?,
        ..Params::zeroed()
    };
    encode(
        encoder,
        device,
        WHAT,
        &params,
        &[(6, x.buffer()), (8, out.buffer())],
        t,
    )
}

/// `logsumexp` of each row of `x` (`[T, N]`): the router z-loss is `β · mean(lse²)`. Blocks.
pub fn row_logsumexp(x: &Tensor) -> Result<Tensor> {
    let (t, _) = dims2("row_logsumexp", x)?;
    let out = Tensor::zeros(x.device(), &[t], DType::F32)?;
    run(x.device(), "row_logsumexp", |enc| {
        encode_row_logsumexp(enc, x, &out)
    })?;
    Ok(out)
}

/// Reference of [`row_logsumexp`].
pub fn row_logsumexp_reference(x: &[f32], cols: usize) -> Vec<f32> {
    x.chunks_exact(cols.max(1))
        .map(|row| {
            let (m, s) = max_and_sum(row);
            m + s.ln()
        })
        .collect()
}

// ---- combine / dispatch backward ---------------------------------------------------------------

/// Records `d_gate[t·K + c] = dy[t] · slots[slot(t, c)]` (0 for dropped choices): `dy` `[T, d]`,
/// `slots` the expert outputs `[E·capacity, d]`, `d_gate` `[T, K]`.
pub fn encode_gate_grad(
    encoder: &mut impl Recorder,
    dy: &Tensor,
    slots: &Tensor,
    routing: &Routing,
    d_gate: &Tensor,
) -> Result<()> {
    const WHAT: &str = "gate_grad";
    let device = dy.device();
    let [t, k, cap] = routing_dims(WHAT, routing, device)?;
    let (_, d) = dims2(WHAT, dy)?;
    expect(WHAT, dy, device, DType::F32, &[t, d])?;
    expect(
        WHAT,
        slots,
        device,
        DType::F32,
        &[routing.config.experts * cap, d],
    )?;
    expect(WHAT, d_gate, device, DType::F32, &[t, k])?;
    let params = Params {
        rows: to_u32(WHAT, t)?,
        cols: to_u32(WHAT, d)?,
        k: to_u32(WHAT, k)?,
        capacity: to_u32(WHAT, cap)?,
        ..Params::zeroed()
    };
    let bindings = [
        (10, &routing.routes),
        (11, dy.buffer()),
        (12, slots.buffer()),
        (13, d_gate.buffer()),
    ];
    encode(encoder, device, WHAT, &params, &bindings, t * k)
}

/// The gradient of the loss with respect to each gate, `[T, K]`. Blocks.
pub fn gate_grad(dy: &Tensor, slots: &Tensor, routing: &Routing) -> Result<Tensor> {
    let out = Tensor::zeros(dy.device(), &[routing.tokens, routing.config.k], DType::F32)?;
    run(dy.device(), "gate_grad", |enc| {
        encode_gate_grad(enc, dy, slots, routing, &out)
    })?;
    Ok(out)
}

/// Records `d_slots[slot(t, c)] = gate · dy[t]` for kept choices into `d_slots`
/// (`[E·capacity, d]`), cleared first so that slots no token filled are zero.
pub fn encode_combine_backward_slots(
    encoder: &mut impl Recorder,
    dy: &Tensor,
    routing: &Routing,
    d_slots: &Tensor,
) -> Result<()> {
    const WHAT: &str = "combine_backward_slots";
    let device = dy.device();
    let [t, k, cap] = routing_dims(WHAT, routing, device)?;
    let (_, d) = dims2(WHAT, dy)?;
    expect(WHAT, dy, device, DType::F32, &[t, d])?;
    expect(
        WHAT,
        d_slots,
        device,
        DType::F32,
        &[routing.config.experts * cap, d],
    )?;
    let params = Params {
        rows: to_u32(WHAT, t)?,
        cols: to_u32(WHAT, d)?,
        k: to_u32(WHAT, k)?,
        capacity: to_u32(WHAT, cap)?,
        ..Params::zeroed()
    };
    encoder.clear_buffer(d_slots.buffer(), 0, None);
    let bindings = [
        (10, &routing.routes),
        (11, dy.buffer()),
        (14, d_slots.buffer()),
    ];
    encode(encoder, device, WHAT, &params, &bindings, t * k * d)
}

/// The gradient of combine's expert-output slots, `[E·capacity, d]`. Blocks.
pub fn combine_backward_slots(dy: &Tensor, routing: &Routing) -> Result<Tensor> {
    let (_, d) = dims2("combine_backward_slots", dy)?;
    let rows = routing.config.experts * routing.capacity;
    let out = Tensor::zeros(dy.device(), &[rows, d], DType::F32)?;
    run(dy.device(), "combine_backward_slots", |enc| {
        encode_combine_backward_slots(enc, dy, routing, &out)
    })?;
    Ok(out)
}

/// Records `d_x[t] = Σ_{kept c} d_slots[slot(t, c)]` (`d_slots` `[E·capacity, d]`, `d_x` `[T, d]`).
pub fn encode_dispatch_backward(
    encoder: &mut impl Recorder,
    d_slots: &Tensor,
    routing: &Routing,
    d_x: &Tensor,
) -> Result<()> {
    const WHAT: &str = "dispatch_backward";
    let device = d_slots.device();
    let [t, k, cap] = routing_dims(WHAT, routing, device)?;
    let (_, d) = dims2(WHAT, d_slots)?;
    expect(
        WHAT,
        d_slots,
        device,
        DType::F32,
        &[routing.config.experts * cap, d],
    )?;
    expect(WHAT, d_x, device, DType::F32, &[t, d])?;
    let params = Params {
        rows: to_u32(WHAT, t)?,
        cols: to_u32(WHAT, d)?,
        k: to_u32(WHAT, k)?,
        capacity: to_u32(WHAT, cap)?,
        ..Params::zeroed()
    };
    let bindings = [
        (10, &routing.routes),
        (15, d_slots.buffer()),
        (16, d_x.buffer()),
    ];
    encode(encoder, device, WHAT, &params, &bindings, t * d)
}

/// The gradient of dispatch's token rows, `[T, d]`. Blocks.
pub fn dispatch_backward(d_slots: &Tensor, routing: &Routing) -> Result<Tensor> {
    let (_, d) = dims2("dispatch_backward", d_slots)?;
    let out = Tensor::zeros(d_slots.device(), &[routing.tokens, d], DType::F32)?;
    run(d_slots.device(), "dispatch_backward", |enc| {
        encode_dispatch_backward(enc, d_slots, routing, &out)
    })?;
    Ok(out)
}

/// Reference of [`gate_grad`]: `[T·K]`.
pub fn gate_grad_reference(
    dy: &[f32],
    slots: &[f32],
    routes: &[Route],
    k: usize,
    capacity: usize,
    d: usize,
) -> Vec<f32> {
    routes
        .iter()
        .enumerate()
        .map(|(tc, r)| {
            if r.kept == 0 {
                return 0.0;
            }
            let (t, s) = (tc / k, r.slot(capacity));
            dy[t * d..(t + 1) * d]
                .iter()
                .zip(&slots[s * d..(s + 1) * d])
                .map(|(a, b)| a * b)
                .sum()
        })
        .collect()
}

/// Reference of [`combine_backward_slots`]: `[experts·capacity, d]`.
pub fn combine_backward_slots_reference(
    dy: &[f32],
    routes: &[Route],
    k: usize,
    experts: usize,
    capacity: usize,
    d: usize,
) -> Vec<f32> {
    scatter_reference(dy, routes, k, experts * capacity, capacity, d, |r| r.gate)
}

/// Reference of [`dispatch_backward`]: `[tokens, d]`.
pub fn dispatch_backward_reference(
    d_slots: &[f32],
    routes: &[Route],
    tokens: usize,
    k: usize,
    capacity: usize,
    d: usize,
) -> Vec<f32> {
    gather_reference(d_slots, routes, tokens, k, capacity, d, |_| 1.0)
}

// ---- router backward ---------------------------------------------------------------------------

/// Records the router-logit gradient `d_logits` (`[T, E]`) from `logits` (`[T, E]`, what the
/// routing was computed from), `d_gate` (`[T, K]`) and the routing's routes and `f_i`.
pub fn encode_router_backward(
    encoder: &mut impl Recorder,
    logits: &Tensor,
    d_gate: &Tensor,
    routing: &Routing,
    loss: RouterLoss,
    d_logits: &Tensor,
) -> Result<()> {
    const WHAT: &str = "router_backward";
    let device = logits.device();
    let [t, k, _] = routing_dims(WHAT, routing, device)?;
    let e = routing.config.experts;
    expect(WHAT, logits, device, DType::F32, &[t, e])?;
    expect(WHAT, d_gate, device, DType::F32, &[t, k])?;
    expect(WHAT, d_logits, device, DType::F32, &[t, e])?;
    if !(loss.alpha.is_finite() && loss.z_loss.is_finite()) {
        return Err(bad(WHAT, format!("loss weights must be finite: {loss:?}")));
    }
    let params = Params {
        rows: to_u32(WHAT, t)?,
        cols: to_u32(WHAT, e)?,
        k: to_u32(WHAT, k)?,
        normalize: u32::from(normalized(routing.config)),
        alpha: loss.alpha,
        z_loss: loss.z_loss,
        ..Params::zeroed()
    };
    let bindings = [
        (6, logits.buffer()),
        (10, &routing.routes),
        (17, d_gate.buffer()),
        (18, &routing.stats),
        (19, d_logits.buffer()),
    ];
    encode(encoder, device, WHAT, &params, &bindings, t)
}

/// The gradient of the router logits from the gates, the aux loss and the z-loss. Blocks.
pub fn router_backward(
    logits: &Tensor,
    d_gate: &Tensor,
    routing: &Routing,
    loss: RouterLoss,
) -> Result<Tensor> {
    let out = Tensor::zeros(
        logits.device(),
        &[routing.tokens, routing.config.experts],
        DType::F32,
    )?;
    run(logits.device(), "router_backward", |enc| {
        encode_router_backward(enc, logits, d_gate, routing, loss, &out)
    })?;
    Ok(out)
}

/// Whether the router renormalised the gates: top-2 only, as `shaders/router.wgsl` does. Gates
/// are normalised over both choices even when one is dropped.
fn normalized(config: RouterConfig) -> bool {
    config.normalize_gates && config.k == 2
}

/// Reference of [`router_backward`]: `[T, E]` from `logits` `[T, E]`, the routes and stats of
/// the routing and `d_gate` `[T·K]`.
pub fn router_backward_reference(
    logits: &[f32],
    routes: &[Route],
    stats: &[ExpertStat],
    d_gate: &[f32],
    config: RouterConfig,
    loss: RouterLoss,
) -> Vec<f32> {
    let (e_n, k) = (config.experts, config.k);
    let tokens = logits.len() / e_n.max(1);
    let n = tokens as f32;
    let aux = loss.alpha * e_n as f32 / n;
    let mut out = Vec::with_capacity(logits.len());
    for (t, row) in logits.chunks_exact(e_n).enumerate() {
        let (m, s) = max_and_sum(row);
        let lse = m + s.ln();
        let prob = |j: usize| (row[j] - m).exp() / s;
        let g = |c: usize| {
            let tc = t * k + c;
            if routes[tc].kept != 0 {
                d_gate[tc]
            } else {
                0.0
            }
        };
        let mut dp: Vec<f32> = stats.iter().map(|st| aux * st.fraction).collect();
        let e1 = routes[t * k].expert as usize;
        if k == 2 {
            let e2 = routes[t * k + 1].expert as usize;
            let (g1, g2) = (g(0), g(1));
            if normalized(config) {
                let (p1, p2) = (prob(e1), prob(e2));
                let sum = p1 + p2;
                dp[e1] += p2 * (g1 - g2) / (sum * sum);
                dp[e2] += p1 * (g2 - g1) / (sum * sum);
            } else {
                dp[e1] += g1;
                dp[e2] += g2;
            }
        } else {
            dp[e1] += g(0);
        }
        let dot: f32 = (0..e_n).map(|j| prob(j) * dp[j]).sum();
        let z = 2.0 * loss.z_loss * lse / n;
        out.extend((0..e_n).map(|j| prob(j) * (dp[j] - dot) + z * prob(j)));
    }
    out
}

// ---- expert weight gradients -------------------------------------------------------------------

/// Records `c[g] = a[g]ᵀ · b[g]` where `a[g]`, `b[g]` are rows `offsets[g]..offsets[g+1]` of `a`
/// `[rows, inner]` and `b` `[rows, N]`, into `c` `[G, inner, N]` (u32 `offsets` `[G + 1]`, the
/// grouped matmul's): each expert's weight gradient from its own rows, whether they are
/// `capacity`-sized slot blocks or the all-to-all's variable groups. Rows past `rows` are never
/// read, whatever the device-side offsets hold.
pub fn encode_expert_weight_grad(
    encoder: &mut impl Recorder,
    a: &Tensor,
    b: &Tensor,
    offsets: &Tensor,
    c: &Tensor,
) -> Result<()> {
    const WHAT: &str = "expert_weight_grad";
    let device = a.device();
    let (rows, inner) = dims2(WHAT, a)?;
    let (_, n) = dims2(WHAT, b)?;
    let groups = match *c.shape() {
        [g, i, nn] if i == inner && nn == n => g,
        _ => {
            return Err(Error::ShapeMismatch {
                what: WHAT,
                expected: format!("[groups, {inner}, {n}]"),
                got: format!("{:?}", c.shape()),
            });
        }
    };
    expect(WHAT, a, device, DType::F32, &[rows, inner])?;
    expect(WHAT, b, device, DType::F32, &[rows, n])?;
    expect(WHAT, offsets, device, DType::U32, &[groups + 1])?;
    expect(WHAT, c, device, DType::F32, &[groups, inner, n])?;
    let params = Params {
        rows: to_u32(WHAT, rows)?,
        cols: to_u32(WHAT, n)?,
        experts: to_u32(WHAT, groups)?,
        inner: to_u32(WHAT, inner)?,
        ..Params::zeroed()
    };
    to_u32(WHAT, groups * inner * n)?;
    let bindings = [
        (20, a.buffer()),
        (21, b.buffer()),
        (22, c.buffer()),
        (27, offsets.buffer()),
    ];
    encode(
        encoder,
        device,
        WHAT,
        &params,
        &bindings,
        groups * inner * n,
    )
}

/// `[G, inner, N]` per-group `aᵀ·b` over the row groups of host `offsets` (`G + 1` values,
/// non-decreasing, the last at most the rows of `a`). Blocks.
pub fn expert_weight_grad(a: &Tensor, b: &Tensor, offsets: &[u32]) -> Result<Tensor> {
    let (rows, inner) = dims2("expert_weight_grad", a)?;
    let (_, n) = dims2("expert_weight_grad", b)?;
    let groups = offsets.len().saturating_sub(1);
    if groups == 0 {
        return Err(bad("expert_weight_grad", "need at least one group".into()));
    }
    matmul::check_offsets(offsets, groups, rows)?;
    let device = a.device();
    let offsets_t = Tensor::from_u32(device, &[offsets.len()], offsets)?;
    let out = Tensor::zeros(device, &[groups, inner, n], DType::F32)?;
    run(device, "expert_weight_grad", |enc| {
        encode_expert_weight_grad(enc, a, b, &offsets_t, &out)
    })?;
    Ok(out)
}

/// Reference of [`expert_weight_grad`]: the matmul reference (`trans_a`) on each row group.
/// Offsets must be valid (see [`matmul::check_offsets`]).
pub fn expert_weight_grad_reference(
    a: &[f32],
    b: &[f32],
    offsets: &[u32],
    inner: usize,
    n: usize,
) -> Vec<f32> {
    offsets
        .windows(2)
        .flat_map(|w| {
            let (start, end) = (w[0] as usize, w[1] as usize);
            let shape = MatmulShape {
                trans_a: true,
                ..MatmulShape::plain(inner, n, end - start, DType::F32)
            };
            matmul::reference(
                &a[start * inner..end * inner],
                &b[start * n..end * n],
                &[0, inner as u32],
                &shape,
            )
        })
        .collect()
}

// ---- Adam --------------------------------------------------------------------------------------

/// Records one Adam step (`step` counts from 1) on `param` with moments `m`, `v`, all in place.
pub fn encode_adam(
    encoder: &mut impl Recorder,
    param: &Tensor,
    m: &Tensor,
    v: &Tensor,
    grad: &Tensor,
    config: AdamConfig,
    step: u32,
) -> Result<()> {
    const WHAT: &str = "adam";
    let device = param.device();
    config.validate(step)?;
    for t in [param, m, v, grad] {
        expect(WHAT, t, device, DType::F32, param.shape())?;
    }
    let buffers = [param.buffer(), m.buffer(), v.buffer(), grad.buffer()];
    for (i, a) in buffers.iter().enumerate() {
        if buffers[i + 1..].contains(a) {
            return Err(bad(WHAT, "param, m, v and grad must be distinct".into()));
        }
    }
    let (bias1, bias2) = config.bias(step);
    let params = Params {
        rows: to_u32(WHAT, param.len())?,
        lr: config.lr,
        beta1: config.beta1,
        beta2: config.beta2,
        eps: config.eps,
        bias1,
        bias2,
        ..Params::zeroed()
    };
    let bindings = [
        (23, param.buffer()),
        (24, m.buffer()),
        (25, v.buffer()),
        (26, grad.buffer()),
    ];
    encode(encoder, device, WHAT, &params, &bindings, param.len())
}

/// Records one Adam step whose bias corrections are read when the commands run, from `bias` (f32
/// `[2]`: [`AdamConfig::bias`] of the step): one recording serves every step of a compiled
/// training program.
pub fn encode_adam_from(
    encoder: &mut impl Recorder,
    param: &Tensor,
    m: &Tensor,
    v: &Tensor,
    grad: &Tensor,
    config: AdamConfig,
    bias: &Tensor,
) -> Result<()> {
    const WHAT: &str = "adam";
    let device = param.device();
    config.validate(1)?;
    for t in [param, m, v, grad] {
        expect(WHAT, t, device, DType::F32, param.shape())?;
    }
    expect(WHAT, bias, device, DType::F32, &[2])?;
    let buffers = [param.buffer(), m.buffer(), v.buffer(), grad.buffer()];
    for (i, a) in buffers.iter().enumerate() {
        if buffers[i + 1..].contains(a) {
            return Err(bad(WHAT, "param, m, v and grad must be distinct".into()));
        }
    }
    let params = Params {
        rows: to_u32(WHAT, param.len())?,
        lr: config.lr,
        beta1: config.beta1,
        beta2: config.beta2,
        eps: config.eps,
        bias1: 1.0,
        bias2: 1.0,
        ..Params::zeroed()
    };
    let uniform = device.uniform_buffer(WHAT, &params);
    let at = std::mem::offset_of!(Params, bias1) as u64;
    encoder.copy_buffer_to_buffer(bias.buffer(), 0, &uniform, at, 8);
    let bindings = [
        (23, param.buffer()),
        (24, m.buffer()),
        (25, v.buffer()),
        (26, grad.buffer()),
    ];
    encode_with(encoder, device, WHAT, &uniform, &bindings, param.len())
}

/// One Adam step in place. Blocks.
pub fn adam(
    param: &Tensor,
    m: &Tensor,
    v: &Tensor,
    grad: &Tensor,
    config: AdamConfig,
    step: u32,
) -> Result<()> {
    run(param.device(), "adam", |enc| {
        encode_adam(enc, param, m, v, grad, config, step)
    })
}

/// Reference of [`adam`], in place.
pub fn adam_reference(
    param: &mut [f32],
    m: &mut [f32],
    v: &mut [f32],
    grad: &[f32],
    config: AdamConfig,
    step: u32,
) -> Result<()> {
    config.validate(step)?;
    let n = param.len();
    if m.len() != n || v.len() != n || grad.len() != n {
        return Err(Error::ShapeMismatch {
            what: "adam_reference",
            expected: format!("{n} values in m, v and grad"),
            got: format!("{}, {}, {}", m.len(), v.len(), grad.len()),
        });
    }
    let (bias1, bias2) = config.bias(step);
    let AdamConfig {
        lr,
        beta1,
        beta2,
        eps,
    } = config;
    for i in 0..n {
        let g = grad[i];
        m[i] = beta1 * m[i] + (1.0 - beta1) * g;
        v[i] = beta2 * v[i] + (1.0 - beta2) * g * g;
        param[i] -= lr * (m[i] * bias1) / ((v[i] * bias2).sqrt() + eps);
    }
    Ok(())
}
