//! The MoE LM's training step as one compiled [`Program`]: every round's forward, the all-to-alls
//! there and back, the backward, the all-reduce of the replicated parameters' gradients and Adam,
//! as kernel, collective and in-place update nodes over the mesh's gang. The runtime runs it with
//! parallel asynchronous dispatch; the trainer only submits batches and reads back statistics.
//!
//! Expert parallelism is capacity-padded: each device sends every other device its
//! `[E/D · capacity, d]` block of slots, kept or not (empty slots are zero rows, which contribute
//! exact zeros to every sum), so every shape is static and the grouped matmuls run over fixed
//! groups of `D · capacity` rows per local expert ([`super::super::exchange`], shared with the
//! demo layer). D devices compute the bits one device computes with D groups: every matmul sums in
//! an order independent of M, and the expert weight gradient sums one slot block at a time.
//!
//! With an uneven [`GroupSplit`] a device runs only the rounds it holds groups for: in the others
//! its token side is idle shards of their nodes (`ProgramBuilder::only_where`), while its experts
//! serve every round and its accumulators of expert gradients take every round's part.
//!
//! Node order hides communication: a device runs later nodes while one waits on other devices,
//! up to the first that needs the awaited data. So the backward puts each linear layer's weight
//! gradient after the next expert layer's send ([`Builder::linear_backward_put_off`]), the expert
//! layer orders its own backward the same way ([`MoeFfn::backward_rest`]), the replicated
//! gradients that are final before the stem's and the embedding's backward start their
//! all-reduce there (a bucket, as DDP's: [`StepEnd::start_reduce`]), and the step's end applies
//! Adam to the expert tensors while the rest of the dense sums travel ([`StepEnd::finish`]).
//! None of this changes a bit: the same products, each added to its accumulator in the same order.
//!
//! The expert layer's nodes are [`super::super::ffn_program`]'s. The pieces any model's step
//! program over a gang needs are here and shared with the Transformer's: `Builder` (kernels,
//! matmuls, gradient accumulation, a linear layer's backward), `declare_params`, `StepEnd` (the
//! all-reduces, `1/G` and Adam), the axis names and the step modes.

use super::super::ffn_program::{ExpertActivation, MATMUL, MoeFfn, MoeFfnSaved, MoeFfnWeights};
use super::super::params::{BlockIndex, EMBED, W_IN};
use super::super::{MoeLmConfig, VOCAB};
use super::split::GroupSplit;
use crate::kernels::optim::AdamConfig;
use crate::kernels::{
    Accumulate, Adam, CrossEntropy, ElementwiseOp, EmbedGather, EmbedGrad, Kernel, Matmul, Pack,
    RowLogsumexp, TensorType, Unpack,
};
use crate::program::{Program, ProgramBuilder, Value};
use crate::{DType, Result};
use std::sync::Arc;

/// What a compiled step computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Mode {
    /// Forward, backward, all-reduce and Adam; results: per round, the statistics pack.
    Train,
    /// Forward and backward, no update; result: every final gradient, packed.
    Grads,
    /// Forward only; results: per round, each token's loss.
    Forward,
    /// No step: every parameter's variable of this kind read back (result p: every shard of
    /// parameter p, one after another).
    Read(Kind),
}

/// The variables kept per parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    Param,
    /// Adam's first moment.
    M,
    /// Adam's second moment.
    V,
}

impl Kind {
    pub fn var(self, p: usize) -> String {
        match self {
            Kind::Param => param_var(p),
            Kind::M => m_var(p),
            Kind::V => v_var(p),
        }
    }
}

/// The shapes a step program is built for.
#[derive(Debug, Clone)]
pub(super) struct StepShape {
    pub config: MoeLmConfig,
    pub adam: AdamConfig,
    /// The routing groups per device (the gang is one device per count).
    pub split: GroupSplit,
    /// Tokens per routing group.
    pub group_tokens: usize,
}

impl StepShape {
    pub fn devices(&self) -> usize {
        self.split.devices()
    }
}

/// The variable names of parameter `p`, its first and its second moment.
/// The step program's one gang axis (the expert axis of a `{data, expert}` mesh).
pub const EXPERT_AXIS: &str = "expert";
/// The data axis of a `{data, expert}` mesh (GShard, DeepSpeed-MoE): replicas of every expert.
pub const DATA_AXIS: &str = "data";

pub(crate) fn param_var(p: usize) -> String {
    format!("param {p}")
}
pub(crate) fn m_var(p: usize) -> String {
    format!("adam m {p}")
}
pub(crate) fn v_var(p: usize) -> String {
    format!("adam v {p}")
}

/// Per-device shape of every parameter: expert tensors hold `E/D` experts.
pub(super) fn shard_shapes(cfg: &MoeLmConfig, expert: &[bool], devices: usize) -> Vec<Vec<usize>> {
    cfg.param_specs()
        .iter()
        .zip(expert)
        .map(|(spec, &is_expert)| {
            let mut shape = spec.shape.clone();
            if is_expert {
                shape[0] = cfg.experts / devices;
            }
            shape
        })
        .collect()
}

/// Saved activations of one block on every device.
struct BlockAct {
    input: Value,
    dense: Value,
    /// The expert layer's, whose input is the block's `mid`.
    moe: MoeFfnSaved,
}

/// A step program under construction over one gang, for a model whose step shape is `S`: the
/// nodes every model's step makes (kernels, matmuls, gradient accumulation, a linear layer's
/// backward); each model adds its own in an `impl Builder<'_, ItsShape>`.
pub(crate) struct Builder<'a, S> {
    pub b: ProgramBuilder,
    pub shape: &'a S,
    pub gang: Vec<usize>,
    pub params: Vec<Value>,
    /// Gradient accumulators: made by the first contribution, added to in place after.
    pub grads: Vec<Option<Value>>,
    /// Weight gradients put off by [`Builder::linear_backward_put_off`], not yet in the program.
    pub later: Vec<LaterGrad>,
}

/// A linear layer's weight gradient `xᵀ · dy` for parameter `p`, to be added to the program
/// later: nodes `<weight> weight grad` and `accumulate <weight> grad` (the round's prefix in
/// `at`).
pub(crate) struct LaterGrad {
    p: usize,
    names: [String; 2],
    x: Value,
    dy: Value,
}

impl<S> Builder<'_, S> {
    pub fn k(&mut self, name: &str, op: impl Kernel + 'static, inputs: &[Value]) -> Value {
        // A put-off weight gradient must read its inputs before a kernel updates them in place.
        for (_, i) in op.in_place() {
            if let Some(&v) = inputs.get(i) {
                self.weight_grads_reading(v);
            }
        }
        let [v] = self
            .b
            .kernel(name, &self.gang.clone(), Arc::new(op), inputs);
        v
    }

    pub fn mm(&mut self, name: &str, a: Value, b: Value, trans_a: bool, trans_b: bool) -> Value {
        let op = Matmul {
            limits: None,
            trans_a,
            trans_b,
            offsets: None,
            variant: MATMUL,
            f16_accumulate: false,
        };
        self.k(name, op, &[a, b])
    }

    pub fn relu(&mut self, name: &str, x: Value) -> Value {
        let gang = self.gang.clone();
        self.b.relu(name, &gang, x)
    }

    pub fn add(&mut self, name: &str, x: Value, z: Value) -> Value {
        let gang = self.gang.clone();
        self.b.add(name, &gang, x, z)
    }

    pub fn accumulate(&mut self, name: &str, acc: Value, x: Value) -> Value {
        self.k(name, Accumulate, &[acc, x])
    }

    pub fn grad(&mut self, p: usize, name: &str, g: Value) {
        let next = match self.grads[p] {
            None => g,
            Some(acc) => self.accumulate(name, acc, g),
        };
        self.grads[p] = Some(next);
    }

    /// The backward of `y = x · W[p]` given `dy`: returns `dy · W[p]ᵀ` and adds `xᵀ · dy` to
    /// W[p]'s gradient, in that order (the input gradient is what the layer below waits on),
    /// after any weight gradients put off before it. Nodes are named `at("<what> input grad")`,
    /// `at("<what> weight grad")` and `at("accumulate <what> grad")`.
    pub fn linear_backward(
        &mut self,
        at: &dyn Fn(&str) -> String,
        what: &str,
        p: usize,
        x: Value,
        dy: Value,
    ) -> Value {
        self.linear_backward_put_off(false, at, what, p, x, dy)
    }

    /// [`Self::linear_backward`]; with `put_off`, the weight gradient waits for
    /// [`Self::weight_grads_now`] (or for a kernel that would update its inputs in place): a step
    /// that sends data next (an expert layer's all-to-all) adds it after the send, so that
    /// devices compute it while the data travels. Nothing else changes: each gradient is the same
    /// product, added to its accumulator in the same order.
    pub fn linear_backward_put_off(
        &mut self,
        put_off: bool,
        at: &dyn Fn(&str) -> String,
        what: &str,
        p: usize,
        x: Value,
        dy: Value,
    ) -> Value {
        let w = self.params[p];
        let dx = self.mm(&at(&format!("{what} input grad")), dy, w, false, true);
        self.later.push(LaterGrad {
            p,
            names: [
                at(&format!("{what} weight grad")),
                at(&format!("accumulate {what} grad")),
            ],
            x,
            dy,
        });
        if !put_off {
            self.weight_grads_now();
        }
        dx
    }

    /// In the last round of a step that sums gradients, once the backward has passed every
    /// layer but those of `not_yet`: starts the all-reduce of the replicated gradients that are
    /// final (all but `not_yet`'s; the put-off ones are added first), so that it travels while the
    /// rest of the backward runs (DDP's gradient buckets). [`StepEnd::finish`] takes the sums.
    pub fn reduce_final_grads(
        &mut self,
        mode: Mode,
        expert: &[bool],
        not_yet: &[usize],
    ) -> Result<Option<Reducing>> {
        if !matches!(mode, Mode::Train | Mode::Grads) {
            return Ok(None);
        }
        self.weight_grads_now();
        let bucket: Vec<usize> = (0..expert.len())
            .filter(|&p| !expert[p] && !not_yet.contains(&p))
            .collect();
        let token_side = self.b.set_active(None);
        let gang = self.gang.clone();
        let early = StepEnd::start_reduce(&mut self.b, &gang, &self.grads, &bucket, "early");
        self.b.set_active(token_side);
        early
    }

    /// Adds every put-off weight gradient to the program, in the order they were put off.
    pub fn weight_grads_now(&mut self) {
        let now = std::mem::take(&mut self.later);
        self.add_weight_grads(now);
    }

    /// Adds the put-off weight gradients that read `v` to the program now.
    fn weight_grads_reading(&mut self, v: Value) {
        let (now, later) = std::mem::take(&mut self.later)
            .into_iter()
            .partition(|g| g.x == v || g.dy == v);
        self.later = later;
        self.add_weight_grads(now);
    }

    fn add_weight_grads(&mut self, grads: Vec<LaterGrad>) {
        for g in grads {
            let [product, accumulate] = &g.names;
            let v = self.mm(product, g.x, g.dy, true, false);
            self.grad(g.p, accumulate, v);
        }
    }
}

impl Builder<'_, StepShape> {
    /// Every block's expert layer (ReLU experts).
    fn ffn(&self) -> MoeFfn {
        let (cfg, s) = (&self.shape.config, self.shape);
        let (router, loss) = (cfg.router(), cfg.router_loss());
        MoeFfn::new(
            router,
            loss,
            (s.devices(), None),
            s.group_tokens,
            cfg.model,
            ExpertActivation::Relu,
        )
    }

    fn moe_weights(&self, ix: &BlockIndex) -> MoeFfnWeights {
        MoeFfnWeights {
            router: self.params[ix.router],
            w1: self.params[ix.w1],
            w2: self.params[ix.w2],
        }
    }
}

/// Builds the step program for `shape` in `mode`. Arguments, per round: contexts (u32
/// `[group tokens, context]` per device), targets (u32 `[group tokens]`); then for training the
/// step's Adam bias corrections (f32 `[2]` per device).
pub(super) fn build(shape: &StepShape, expert: &[bool], mode: Mode) -> Result<Program> {
    let cfg = shape.config;
    let gang: Vec<usize> = (0..shape.devices()).collect();
    let name = match mode {
        Mode::Train => "moe train step",
        Mode::Grads => "moe gradients",
        Mode::Forward => "moe forward",
        Mode::Read(_) => "moe read variables",
    };
    let mut x = Builder {
        b: ProgramBuilder::new(name),
        shape,
        gang: gang.clone(),
        params: Vec::new(),
        grads: vec![None; expert.len()],
        later: Vec::new(),
    };
    // One axis carries both the token groups and the experts (GShard): device i routes group i
    // and holds experts [i·E/D, (i+1)·E/D).
    x.b.mesh(&gang, &[(EXPERT_AXIS, shape.devices())]);
    let shapes = shard_shapes(&cfg, expert, shape.devices());
    let kind = match mode {
        Mode::Read(kind) => kind,
        _ => Kind::Param,
    };
    x.params = declare_params(&mut x.b, &gang, &shapes, expert, kind);
    if let Mode::Read(_) = mode {
        for &v in &x.params.clone() {
            x.b.result(v);
        }
        return x.b.build();
    }
    let (tg, c) = (shape.group_tokens, cfg.context);
    let w_out = cfg.w_out_index();
    let inputs: Vec<(Value, Value)> = (0..shape.split.rounds())
        .map(|_| {
            let ctx = x.b.typed_arg(&gang, TensorType::u32(&[tg, c]));
            let tgt = x.b.typed_arg(&gang, TensorType::u32(&[tg]));
            (ctx, tgt)
        })
        .collect();
    let bias = (mode == Mode::Train).then(|| {
        let every = x.b.spec(&gang, &[&[]], &[]);
        x.b.sharded_arg(&gang, TensorType::f32(&[2]), every)
    });
    let mut early = None;
    for (r, &(ctx, tgt)) in inputs.iter().enumerate() {
        let at = |what: &str| format!("r{r} {what}");
        // The token side of a round runs on the devices holding a group in it (all of them with
        // an even split); the expert layers serve every device.
        x.b.set_active(shape.split.active(r));
        // ---- forward
        let emb = x.k(&at("embed"), EmbedGather, &[ctx, x.params[EMBED]]);
        let pre = x.mm(&at("stem matmul"), emb, x.params[W_IN], false, false);
        let stem = x.relu(&at("stem relu"), pre);
        let mut h = stem;
        let mut acts = Vec::with_capacity(cfg.blocks);
        for l in 0..cfg.blocks {
            let ix = cfg.block_index(l);
            let at = |what: &str| format!("r{r} b{l} {what}");
            let input = h;
            let pre = x.mm(&at("dense matmul"), h, x.params[ix.dense], false, false);
            let dense = x.relu(&at("dense relu"), pre);
            let mid = x.add(&at("residual"), h, dense);
            let ffn = x.ffn();
            let weights = x.moe_weights(&ix);
            let gang = x.gang.clone();
            let (combined, moe) = ffn.forward(&mut x.b, &gang, &at, mid, &weights);
            h = x.add(&at("combine residual"), mid, combined);
            acts.push(BlockAct { input, dense, moe });
        }
        let last = h;
        let logits = x.mm(&at("output matmul"), last, x.params[w_out], false, false);
        let [row_loss, d_logits] = x.b.kernel(
            &at("cross-entropy"),
            &gang,
            Arc::new(CrossEntropy),
            &[logits, tgt],
        );
        match mode {
            Mode::Forward => {
                x.b.result(row_loss);
                continue;
            }
            Mode::Train => {
                let mut pack = vec![row_loss];
                for (l, a) in acts.iter().enumerate() {
                    let lse = x.k(
                        &format!("r{r} b{l} logsumexp"),
                        RowLogsumexp,
                        &[a.moe.logits],
                    );
                    pack.extend([a.moe.routing[2], lse]);
                }
                let stats = x.k(&at("stats"), Pack { dtype: DType::U32 }, &pack);
                x.b.result(stats);
            }
            Mode::Grads | Mode::Read(_) => {}
        }
        // ---- backward
        // Each layer's weight gradient waits until the next expert layer's slots are sent
        // (linear_backward_put_off), so devices compute it while they travel.
        let mut dh = x.linear_backward_put_off(true, &at, "output", w_out, last, d_logits);
        for l in (0..cfg.blocks).rev() {
            let ix = cfg.block_index(l);
            let at = |what: &str| format!("r{r} b{l} {what}");
            let a = &acts[l];
            let (input, dense, moe) = (a.input, a.dense, a.moe);
            let ffn = x.ffn();
            let weights = x.moe_weights(&ix);
            let gang = x.gang.clone();
            let sent = ffn.backward_send(&mut x.b, &gang, &at, &moe, dh);
            x.weight_grads_now();
            let (d_mid, g) =
                ffn.backward_rest(&mut x.b, &gang, &at, &moe, &weights, dh, sent, Some(dh));
            // Every device computed its experts' gradients this round.
            let token_side = x.b.set_active(None);
            x.grad(ix.w2, &at("accumulate w2 grad"), g.w2);
            x.grad(ix.w1, &at("accumulate w1 grad"), g.w1);
            x.b.set_active(token_side);
            x.grad(ix.router, &at("accumulate router grad"), g.router);
            let d_pre = x.k(
                &at("dense relu backward"),
                ElementwiseOp::ReluBackward,
                &[dense, d_mid],
            );
            let back = x.linear_backward_put_off(true, &at, "dense", ix.dense, input, d_pre);
            dh = x.accumulate(&at("accumulate dense input grad"), d_mid, back);
        }
        if r + 1 == inputs.len() {
            // Every replicated gradient but the stem's and the embedding's is final here.
            early = x.reduce_final_grads(mode, expert, &[W_IN, EMBED])?;
        }
        let d_pre = x.k(
            &at("stem relu backward"),
            ElementwiseOp::ReluBackward,
            &[stem, dh],
        );
        let d_x = x.linear_backward(&at, "stem", W_IN, emb, d_pre);
        let ge = x.k(&at("embed grad"), EmbedGrad { vocab: VOCAB }, &[ctx, d_x]);
        x.grad(EMBED, &at("accumulate embed grad"), ge);
    }
    x.b.set_active(None);
    if mode == Mode::Forward {
        return x.b.build();
    }
    let names: Vec<String> = cfg.param_specs().into_iter().map(|s| s.name).collect();
    let step = StepEnd {
        gang: &gang,
        params: &x.params,
        expert,
        shapes: &shapes,
        names: &names,
        groups: shape.split.groups(),
        adam: shape.adam,
        bias,
        data_axis: None,
    };
    step.finish(&mut x.b, &x.grads, mode, early)?;
    x.b.build()
}

/// Every parameter's variable of `kind` on `gang`: expert tensors split by their first axis over
/// [`EXPERT_AXIS`], the rest replicated.
pub(crate) fn declare_params(
    b: &mut ProgramBuilder,
    gang: &[usize],
    shapes: &[Vec<usize>],
    expert: &[bool],
    kind: Kind,
) -> Vec<Value> {
    shapes
        .iter()
        .enumerate()
        .map(|(p, s)| {
            let ty = TensorType::f32(s);
            if expert[p] {
                let mut dims: Vec<&[&str]> = vec![&[]; s.len()];
                dims[0] = &[EXPERT_AXIS];
                let split = b.spec(gang, &dims, &[]);
                b.sharded_variable(&kind.var(p), gang, ty, split)
            } else {
                b.variable(&kind.var(p), gang, ty)
            }
        })
        .collect()
}

/// The end of a step over a gang, the same for every model: the replicated parameters'
/// gradients summed over devices in device order (packed all-reduces: a bucket the step may have
/// started early, [`StepEnd::start_reduce`], and the rest), every gradient scaled by `1/G`, then
/// either packed as the result ([`Mode::Grads`]) or applied by Adam with moments laid out as
/// their parameters ([`Mode::Train`]).
pub(crate) struct StepEnd<'a> {
    pub gang: &'a [usize],
    pub params: &'a [Value],
    pub expert: &'a [bool],
    /// Per-device shapes.
    pub shapes: &'a [Vec<usize>],
    /// The parameters' names, for the Adam nodes.
    pub names: &'a [String],
    pub groups: usize,
    pub adam: AdamConfig,
    /// The step's bias corrections (training only).
    pub bias: Option<Value>,
    /// The data axis of a `{data, expert}` mesh, over which the expert tensors' replicas are
    /// summed; `None` with one axis (every expert is on one device).
    pub data_axis: Option<&'a str>,
}

fn no_gradient() -> crate::Error {
    crate::Error::InvalidArgument {
        what: "step program",
        reason: "a parameter gets no gradient (no rounds)".into(),
    }
}

/// A bucket of replicated gradients whose all-reduce a step started before its end
/// ([`StepEnd::start_reduce`]): the sums, and the parameters they are of.
pub(crate) struct Reducing {
    summed: Value,
    which: Vec<usize>,
}

impl StepEnd<'_> {
    /// Starts summing `grads[p]` for every `p` in `which` over `gang`, packed into one all-reduce
    /// summed in device order (the bits of summing each alone); [`Self::finish`] takes the sums
    /// apart. `None` on one device or with nothing to sum. Nodes are named after `bucket`
    /// (`pack dense grads <bucket>`, `all-reduce <bucket>`).
    pub fn start_reduce(
        b: &mut ProgramBuilder,
        gang: &[usize],
        grads: &[Option<Value>],
        which: &[usize],
        bucket: &str,
    ) -> Result<Option<Reducing>> {
        if gang.len() < 2 || which.is_empty() {
            return Ok(None);
        }
        let parts = which
            .iter()
            .map(|&p| grads[p].ok_or_else(no_gradient))
            .collect::<Result<Vec<Value>>>()?;
        let pack = Arc::new(Pack { dtype: DType::F32 });
        let named = |what: &str| format!("{what} {bucket}").trim_end().to_string();
        let [packed] = b.kernel(&named("pack dense grads"), gang, pack, &parts);
        let summed = b.all_reduce(&named("all-reduce"), packed);
        Ok(Some(Reducing {
            summed,
            which: which.to_vec(),
        }))
    }

    /// Puts [`Self::start_reduce`]'s sums in place of their gradients.
    fn unpack(&self, b: &mut ProgramBuilder, grads: &mut [Value], reducing: &Reducing) {
        let which = &reducing.which;
        let types: Vec<TensorType> = which.iter().map(|&p| b.ty(grads[p])).collect();
        let unpack = Arc::new(Unpack { types });
        let unpacked = b.kernels("unpack dense grads", self.gang, unpack, &[reducing.summed]);
        for (&p, v) in which.iter().zip(unpacked) {
            grads[p] = v;
        }
    }

    /// The end of the step for the parameters in `which`, whose gradients are final: `1/G`, then
    /// Adam when training. Adam reads the gradient times `1/G` itself (the bits a scaling kernel
    /// would store, without its launch and its pass over every gradient on every device); the
    /// packed gradients of [`Mode::Grads`] are scaled by a kernel.
    fn apply(&self, b: &mut ProgramBuilder, grads: &mut [Value], which: &[usize], mode: Mode) {
        let gang = self.gang;
        let scale = 1.0 / self.groups.max(1) as f32;
        for &p in which {
            if self.groups > 1 && mode != Mode::Train {
                grads[p] = b.affine("scale grad", gang, grads[p], scale, 0.0);
            }
            if let (Mode::Train, Some(bias)) = (mode, self.bias) {
                // The moments lie as their parameter does.
                let ty = TensorType::f32(&self.shapes[p]);
                let laid = b.sharding(self.params[p]);
                let m = b.sharded_variable(&m_var(p), gang, ty.clone(), laid.clone());
                let v = b.sharded_variable(&v_var(p), gang, ty, laid);
                let [_, _, _] = b.kernel(
                    &format!("adam {}", self.names[p]),
                    gang,
                    Arc::new(Adam {
                        config: self.adam,
                        grad_scale: scale,
                    }),
                    &[self.params[p], m, v, grads[p], bias],
                );
            }
        }
    }

    /// The all-reduces, `1/G` and Adam (training), or the packed gradients (`Mode::Grads`). The
    /// expert tensors' end comes between the dense all-reduce and its unpacking: their
    /// gradients are final on a one-axis mesh, so devices apply them while the dense sums
    /// travel. `early`: a bucket whose all-reduce the step started before its end; the rest of
    /// the replicated gradients go in one more.
    pub fn finish(
        &self,
        b: &mut ProgramBuilder,
        accumulated: &[Option<Value>],
        mode: Mode,
        early: Option<Reducing>,
    ) -> Result<()> {
        let mut grads: Vec<Value> = accumulated
            .iter()
            .map(|g| g.ok_or_else(no_gradient))
            .collect::<Result<_>>()?;
        if matches!(mode, Mode::Forward | Mode::Read(_)) {
            return Ok(());
        }
        let (expert, dense): (Vec<usize>, Vec<usize>) =
            (0..grads.len()).partition(|&p| self.expert[p]);
        let started = early.as_ref().map_or(&[][..], |r| &r.which[..]);
        let rest: Vec<usize> = dense
            .iter()
            .copied()
            .filter(|p| !started.contains(p))
            .collect();
        let late = Self::start_reduce(b, self.gang, accumulated, &rest, "")?;
        if let Some(axis) = self.data_axis {
            // Each data row holds every expert once: its replicas' gradients add up over rows.
            // One all-reduce per tensor: a pack of expert shards is pieces, not a value unpack
            // can cut.
            for &p in &expert {
                let name = format!("all-reduce {} over {axis}", self.names[p]);
                grads[p] = b.all_reduce_over(&name, grads[p], axis);
            }
        }
        self.apply(b, &mut grads, &expert, mode);
        for reducing in early.iter().chain(&late) {
            self.unpack(b, &mut grads, reducing);
            self.apply(b, &mut grads, &reducing.which, mode);
        }
        if late.is_none() {
            // Nothing of the rest was summed: one device, or every replicated gradient went
            // early (then the rest is empty).
            self.apply(b, &mut grads, &rest, mode);
        }
        if mode == Mode::Grads {
            let [packed] = b.kernel(
                "pack grads",
                self.gang,
                Arc::new(Pack { dtype: DType::F32 }),
                &grads,
            );
            b.result(packed);
        }
        Ok(())
    }
}
