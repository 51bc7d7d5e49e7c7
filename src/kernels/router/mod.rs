//! The Switch/GShard router: softmax, top-k, capacity, Switch-priority positions, dropped tokens,
//! per-expert counts and the two vectors of the load-balancing loss, and each token's logsumexp
//! of its logits (the z-loss's). [`Router`] is the kernel a program node holds, and
//! [`RouterLinear`] the same with the logits computed in its first launch from the tokens' rows
//! and the router's weights (the summation of the vec4 matmul it replaces); the three routing
//! outputs (`probs`, `routes`, `stats`) are the last inputs of every routed kernel, which rebuild
//! the `Routing` their launchers read and check it. [`Route`] and
//! [`ExpertStat`] read the words of `routes` and `stats` back. Its backward is in [`backward`];
//! [`upload_routing`] puts a reference routing on a device as those three inputs.

use crate::device::Recorder;
use crate::kernels::Shader;
use crate::kernels::check::{self, to_u32};
use crate::kernels::{Kernel, Prepared, TensorType};
use crate::{DType, Device, Error, Result, Tensor};

pub const ROUTER: Shader = Shader {
    name: "router",
    source: include_str!("../../../shaders/router.wgsl"),
    ..crate::kernels::SHADER
};

/// Router settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RouterConfig {
    pub experts: usize,
    /// 1 (Switch) or 2 (GShard).
    pub k: usize,
    pub capacity_factor: f32,
    /// Renormalise top-2 gates to sum to 1 (GShard); Switch (k = 1) uses the raw probability.
    pub normalize_gates: bool,
}

/// The capacity factor at which nothing is dropped, `E / K`: every expert's slots then hold a
/// whole group (see [`RouterConfig::capacity`]).
pub fn dropless_factor(experts: usize, k: usize) -> f32 {
    experts as f32 / k.max(1) as f32
}

impl RouterConfig {
    /// `ceil(k × tokens / experts × capacity_factor)`, the most (token, choice) pairs one expert
    /// takes. Each token makes k choices, so (as in GShard and fairseq) the capacity scales with
    /// k: at factor 1.0 and perfect balance nothing is dropped, for top-1 and top-2 alike.
    /// Never more than `tokens`: a token picks an expert at most once, so from a factor of `E/k`
    /// on (dropless) more slots could never fill.
    pub fn capacity(&self, tokens: usize) -> usize {
        // Use the factor as the user wrote it (1.1, not f32's 1.10000002), so that
        // 100 tokens / 10 experts × 1.1 is 11 and not 12.
        let factor: f64 = self
            .capacity_factor
            .to_string()
            .parse()
            .unwrap_or(f64::from(self.capacity_factor));
        let exact = (self.k * tokens) as f64 * factor / self.experts as f64;
        ((exact - 1e-9).ceil().max(0.0) as usize).min(tokens)
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |reason: String| Error::InvalidArgument {
            what: "router",
            reason,
        };
        if self.experts == 0 {
            return Err(bad("experts must be at least 1".into()));
        }
        if !(1..=2).contains(&self.k) {
            return Err(bad(format!("k must be 1 or 2, got {}", self.k)));
        }
        if self.k > self.experts {
            return Err(bad(format!(
                "k = {} exceeds the {} experts",
                self.k, self.experts
            )));
        }
        if !(self.capacity_factor.is_finite() && self.capacity_factor > 0.0) {
            return Err(bad(format!(
                "capacity factor must be positive, got {}",
                self.capacity_factor
            )));
        }
        Ok(())
    }
}

/// Where one (token, choice) goes. Layout matches the WGSL `Route` struct.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Route {
    pub expert: u32,
    /// Slot inside the expert, in Switch priority order; may exceed the capacity.
    pub position: u32,
    pub gate: f32,
    /// 1 if `position < capacity`, else the choice is dropped.
    pub kept: u32,
}

impl Route {
    /// The routes in the router's `routes` output (u32 words, as read back from the device).
    pub fn from_words(words: &[u32]) -> Vec<Route> {
        bytemuck::pod_collect_to_vec(&words[..words.len() / ROUTE_WORDS * ROUTE_WORDS])
    }

    /// Its row in the expert-major `[experts × capacity, d]` dispatch layout.
    pub fn slot(&self, capacity: usize) -> usize {
        self.expert as usize * capacity + self.position as usize
    }
}

/// Per-expert statistics. Layout matches the WGSL `ExpertStat` struct.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ExpertStat {
    /// Tokens this expert processes: `min(demand, capacity)`.
    pub kept: u32,
    /// Choices that picked this expert.
    pub demand: u32,
    /// f_i: fraction of tokens whose first choice is this expert.
    pub fraction: f32,
    /// P_i: mean router probability of this expert.
    pub mean_prob: f32,
}

impl ExpertStat {
    /// The statistics in the router's `stats` output (u32 words, as read back).
    pub fn from_words(words: &[u32]) -> Vec<ExpertStat> {
        bytemuck::pod_collect_to_vec(&words[..words.len() / STAT_WORDS * STAT_WORDS])
    }
}

#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    tokens: u32,
    experts: u32,
    k: u32,
    capacity: u32,
    normalize: u32,
    model: u32,
    _pad: [u32; 2],
}

/// The router's outputs on the device, as the routed kernels' launchers read them (a node's last
/// three inputs, [`routing_of`]).
#[derive(Debug)]
pub(crate) struct Routing {
    pub tokens: usize,
    pub config: RouterConfig,
    pub capacity: usize,
    /// `[tokens, experts]` softmax probabilities.
    pub probs: Tensor,
    /// `[tokens * k]` [`Route`]s, token-major.
    pub routes: wgpu::Buffer,
    /// `[experts]` [`ExpertStat`]s.
    pub stats: wgpu::Buffer,
}

impl Routing {
    pub(crate) fn device(&self) -> &Device {
        self.probs.device()
    }
}

/// Records both passes of the router over `logits` into `routing`'s buffers and each token's
/// logsumexp into `lse` (`[T]`). With `linear` (`x [T, d]`, `w [d, E]`), the first pass writes
/// `logits = x · w` before it routes them.
fn encode_into(
    encoder: &mut impl Recorder,
    logits: &Tensor,
    linear: Option<(&Tensor, &Tensor)>,
    routing: &Routing,
    lse: &Tensor,
) -> Result<()> {
    const WHAT: &str = "router";
    // The settings were validated by `Router::outputs`.
    let config = routing.config;
    logits.expect_dtype("router logits", DType::F32)?;
    let device = logits.device();
    let tokens = match *logits.shape() {
        [t, e] if e == config.experts && t == routing.tokens => t,
        _ => {
            return Err(Error::ShapeMismatch {
                what: "router logits",
                expected: format!("[{}, {}]", routing.tokens, config.experts),
                got: format!("{:?}", logits.shape()),
            });
        }
    };
    check::expect("router logsumexp", lse, device, DType::F32, &[tokens])?;
    let capacity = routing.capacity;
    let params = Params {
        tokens: to_u32(WHAT, tokens)?,
        experts: to_u32(WHAT, config.experts)?,
        k: config.k as u32,
        capacity: to_u32(WHAT, capacity)?,
        normalize: u32::from(config.normalize_gates && config.k == 2),
        model: 0,
        _pad: [0; 2],
    };
    let (probs, routes, stats) = (&routing.probs, &routing.routes, &routing.stats);
    let mut bindings = vec![
        (1, logits.buffer()),
        (2, probs.buffer()),
        (3, routes),
        (5, lse.buffer()),
    ];
    let (entry, params) = match linear {
        None => ("topk", params),
        Some((x, w)) => {
            let d = x.shape().get(1).copied().unwrap_or(0);
            check::expect("router input", x, device, DType::F32, &[tokens, d])?;
            check::expect(
                "router weights",
                w,
                device,
                DType::F32,
                &[d, config.experts],
            )?;
            bindings.extend([(6, x.buffer()), (7, w.buffer())]);
            let model = to_u32(WHAT, d)?;
            ("topk_linear", Params { model, ..params })
        }
    };
    let uniform = device.uniform_buffer("router params", &params);
    bindings.push((0, &uniform));
    let topk = ROUTER.pipeline(device, DType::F32, entry)?;
    let positions = ROUTER.pipeline(device, DType::F32, "positions")?;
    device.encode_dispatch(
        encoder,
        "router topk",
        &topk,
        &bindings,
        [to_u32(WHAT, tokens.div_ceil(64))?, 1, 1],
    )?;
    device.encode_dispatch(
        encoder,
        "router positions",
        &positions,
        &[(0, &uniform), (2, probs.buffer()), (3, routes), (4, stats)],
        [params.experts, 1, 1],
    )
}

/// What the plain-Rust reference router computes.
#[derive(Debug, Clone, PartialEq)]
pub struct ReferenceRouting {
    pub capacity: usize,
    pub probs: Vec<f32>,
    pub routes: Vec<Route>,
    pub stats: Vec<ExpertStat>,
}

impl ReferenceRouting {
    /// Choices dropped because their expert was full.
    pub fn dropped(&self) -> usize {
        self.routes.iter().filter(|r| r.kept == 0).count()
    }
}

/// Plain-Rust reference of [`Router`], same tie-breaking and priority rules.
pub fn reference(logits: &[f32], tokens: usize, config: RouterConfig) -> Result<ReferenceRouting> {
    config.validate()?;
    let e_n = config.experts;
    if logits.len() != tokens * e_n {
        return Err(Error::ShapeMismatch {
            what: "router reference logits",
            expected: format!("{} values", tokens * e_n),
            got: format!("{} values", logits.len()),
        });
    }
    let capacity = config.capacity(tokens);
    let mut probs = vec![0.0f32; tokens * e_n];
    let mut routes = Vec::with_capacity(tokens * config.k);
    for t in 0..tokens {
        let row = &logits[t * e_n..(t + 1) * e_n];
        let argmax = |skip: Option<usize>| {
            let mut best: Option<usize> = None;
            for (e, &l) in row.iter().enumerate() {
                if Some(e) != skip && best.is_none_or(|b| l > row[b]) {
                    best = Some(e);
                }
            }
            best.unwrap_or(0)
        };
        let first = argmax(None);
        let max = row[first];
        let sum: f32 = row.iter().map(|&l| (l - max).exp()).sum();
        for (e, &l) in row.iter().enumerate() {
            probs[t * e_n + e] = (l - max).exp() / sum;
        }
        let mut chosen = vec![first];
        if config.k == 2 {
            chosen.push(argmax(Some(first)));
        }
        let gates: Vec<f32> = chosen.iter().map(|&e| probs[t * e_n + e]).collect();
        let scale = if config.k == 2 && config.normalize_gates {
            1.0 / gates.iter().sum::<f32>()
        } else {
            1.0
        };
        for (&e, &g) in chosen.iter().zip(&gates) {
            routes.push(Route {
                expert: e as u32,
                position: 0,
                gate: g * scale,
                kept: 0,
            });
        }
    }
    let mut demand = vec![0usize; e_n];
    let mut first_choices = vec![0usize; e_n];
    for c in 0..config.k {
        for t in 0..tokens {
            let r = &mut routes[t * config.k + c];
            let e = r.expert as usize;
            r.position = demand[e] as u32;
            r.kept = u32::from(demand[e] < capacity);
            demand[e] += 1;
            if c == 0 {
                first_choices[e] += 1;
            }
        }
    }
    let n = tokens.max(1) as f32;
    let stats = (0..e_n)
        .map(|e| ExpertStat {
            kept: demand[e].min(capacity) as u32,
            demand: demand[e] as u32,
            fraction: first_choices[e] as f32 / n,
            mean_prob: (0..tokens).map(|t| probs[t * e_n + e]).sum::<f32>() / n,
        })
        .collect();
    Ok(ReferenceRouting {
        capacity,
        probs,
        routes,
        stats,
    })
}

/// Switch Transformer's load-balancing loss `α · N · Σ f_i · P_i` (1.0·α when perfectly balanced).
pub fn load_balancing_loss(stats: &[ExpertStat], alpha: f32) -> f32 {
    alpha * stats.len() as f32 * stats.iter().map(|s| s.fraction * s.mean_prob).sum::<f32>()
}

/// Words of one [`Route`] and of one [`ExpertStat`].
/// What one expert layer's router did over a batch's routing groups.
#[derive(Debug, Clone, PartialEq)]
pub struct RoutingStats {
    /// Capacity of each expert (per routing group).
    pub capacity: usize,
    /// Kept (token, choice) pairs per expert.
    pub tokens_per_expert: Vec<usize>,
    /// Dropped (token, choice) pairs.
    pub dropped: usize,
    /// Dropped choices over all `T · K` choices.
    pub dropped_fraction: f64,
    /// This block's load-balancing loss.
    pub aux_loss: f32,
    /// This block's z-loss.
    pub z_loss: f32,
}

pub const ROUTE_WORDS: usize = std::mem::size_of::<Route>() / 4;
pub const STAT_WORDS: usize = std::mem::size_of::<ExpertStat>() / 4;

/// The [`Routing`] whose three buffers a routing kernel node takes as inputs (`probs`, `routes`,
/// `stats`, the router node's outputs).
pub(crate) fn routing_of(
    config: RouterConfig,
    probs: &Tensor,
    routes: &Tensor,
    stats: &Tensor,
) -> Routing {
    let tokens = probs.shape().first().copied().unwrap_or(0);
    Routing {
        tokens,
        config,
        capacity: config.capacity(tokens),
        probs: probs.clone(),
        routes: routes.buffer().clone(),
        stats: stats.buffer().clone(),
    }
}

/// The tokens of the routing given as node inputs `at..at + 3`, checked against the router.
pub(crate) fn routed_tokens(
    what: &'static str,
    config: &RouterConfig,
    inputs: &[TensorType],
    at: usize,
) -> Result<usize> {
    let (t, e) = check::rows_cols(what, &inputs[at])?;
    if e != config.experts
        || inputs[at + 1] != TensorType::u32(&[t * config.k * ROUTE_WORDS])
        || inputs[at + 2] != TensorType::u32(&[e * STAT_WORDS])
    {
        return Err(check::invalid(
            what,
            "the routing inputs do not match the router".into(),
        ));
    }
    Ok(t)
}

/// `logits [T, E] → (probs [T, E], routes u32, stats u32, lse [T])` as a program node; the kernels
/// that consume a routing take the first three as their last inputs. `lse` is each token's
/// logsumexp of its logits, with [`super::RowLogsumexp`]'s bits (the z-loss's statistic, which
/// then needs no launch of its own).
#[derive(Debug, Clone)]
pub struct Router(pub RouterConfig);

impl Kernel for Router {
    fn kind(&self) -> &'static str {
        "router"
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        check::arity(self.kind(), inputs, 1)?;
        self.0.validate()?;
        let (t, e) = check::rows_cols(self.kind(), &inputs[0])?;
        if e != self.0.experts {
            return Err(check::invalid(
                self.kind(),
                format!("{e} logits for {} experts", self.0.experts),
            ));
        }
        Ok(vec![
            TensorType::f32(&[t, e]),
            TensorType::u32(&[t * self.0.k * ROUTE_WORDS]),
            TensorType::u32(&[e * STAT_WORDS]),
            TensorType::f32(&[t]),
        ])
    }
    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        let r = routing_of(
            self.0,
            check::output(y, 0)?,
            check::output(y, 1)?,
            check::output(y, 2)?,
        );
        encode_into(rec, &x[0], None, &r, check::output(y, 3)?)
    }
}

/// `(x [T, d], w [d, E]) → (logits [T, E], probs, routes, stats, lse)`: the router linear layer
/// `x · w` and [`Router`] over its logits, in the router's two launches (the first computes a
/// token's logits, each summed as the vec4 matmul sums an output of `x · w`, then routes them).
/// The logits come out too: the router's backward reads them.
#[derive(Debug, Clone)]
pub struct RouterLinear(pub RouterConfig);

impl Kernel for RouterLinear {
    fn kind(&self) -> &'static str {
        "router"
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        check::arity(self.kind(), inputs, 2)?;
        let (t, d) = check::rows_cols(self.kind(), &inputs[0])?;
        let (dw, e) = check::rows_cols(self.kind(), &inputs[1])?;
        if dw != d {
            return Err(Error::ShapeMismatch {
                what: "router weights",
                expected: format!("[{d}, {e}]"),
                got: format!("[{dw}, {e}]"),
            });
        }
        let mut out = vec![TensorType::f32(&[t, e])];
        out.extend(Router(self.0).outputs(&[TensorType::f32(&[t, e])])?);
        Ok(out)
    }
    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        let r = routing_of(
            self.0,
            check::output(y, 1)?,
            check::output(y, 2)?,
            check::output(y, 3)?,
        );
        let logits = check::output(y, 0)?;
        let linear = Some((&x[0], &x[1]));
        encode_into(rec, logits, linear, &r, check::output(y, 4)?)
    }
}

/// A reference routing on `device` as the routed kernels' last three inputs, `[probs, routes,
/// stats]`: lets kernels be checked against (and trainers compared with) the plain-Rust router.
pub fn upload_routing(
    device: &Device,
    reference: &ReferenceRouting,
    tokens: usize,
    config: RouterConfig,
) -> Result<[Tensor; 3]> {
    const WHAT: &str = "upload_routing";
    config.validate()?;
    if reference.routes.len() != tokens * config.k
        || reference.probs.len() != tokens * config.experts
        || reference.stats.len() != config.experts
    {
        return Err(Error::InvalidArgument {
            what: WHAT,
            reason: format!("routing does not describe {tokens} tokens for {config:?}"),
        });
    }
    let words = |bytes: &[u8]| -> Vec<u32> { bytemuck::pod_collect_to_vec(bytes) };
    let routes = words(bytemuck::cast_slice(&reference.routes));
    let stats = words(bytemuck::cast_slice(&reference.stats));
    Ok([
        Tensor::from_f32(
            device,
            &[tokens, config.experts],
            DType::F32,
            &reference.probs,
        )?,
        Tensor::from_u32(device, &[routes.len()], &routes)?,
        Tensor::from_u32(device, &[stats.len()], &stats)?,
    ])
}

/// Checks a routing's buffers against its sizes and `device`; returns `(tokens, k, capacity)`.
pub(crate) fn routing_dims(
    what: &'static str,
    routing: &Routing,
    device: &Device,
) -> Result<[usize; 3]> {
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
        return Err(check::invalid(
            what,
            format!("routes hold {} bytes, need {need}", routing.routes.size()),
        ));
    }
    let stats = (routing.config.experts * std::mem::size_of::<ExpertStat>()) as u64;
    if routing.stats.size() < stats {
        return Err(check::invalid(
            what,
            format!("stats hold {} bytes, need {stats}", routing.stats.size()),
        ));
    }
    to_u32(what, routing.tokens * k)?;
    to_u32(what, routing.config.experts * routing.capacity)?;
    Ok([routing.tokens, k, routing.capacity])
}

pub mod backward;
pub use backward::*;
