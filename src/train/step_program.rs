//! The pieces every model's step program over a gang is built from: the step's modes and its
//! shape ([`StepShape`]), the variables' names, `Builder` (kernels, matmuls with their epilogues,
//! one of them keeping a second output, gradient accumulation, a linear layer's backward whose
//! weight gradient may wait for the next send, and put-off weight gradients computed two at a
//! time in one launch with the bits of the step's `Aᵀ·B` matmul),
//! `declare_params` (parameters and moments as variables, expert tensors split over the expert
//! axis) and `StepEnd` (the all-reduces of the replicated gradients, started early as a bucket
//! or at the end, `1/G` and Adam, the same for every model).
//!
//! Node order hides communication: a device runs later nodes while one waits on other devices,
//! up to the first that needs the awaited data. So a model's backward puts a linear layer's
//! weight gradient after the next expert layer's send ([`Builder::linear_backward_put_off`]), the
//! replicated gradients that are final before the embeddings' backward start their all-reduce
//! there ([`Builder::reduce_final_grads`], a bucket as DDP's), and the step's end applies Adam to
//! the expert tensors while the rest of the dense sums travel ([`StepEnd::finish`]; on one device,
//! with nothing to sum, one Adam node steps every tensor). None of this
//! changes a bit: the same products, each added to its accumulator in the same order.
//!
//! `Builder::begin` lays the step's gang out as its [`StepShape`]'s mesh, a
//! [`crate::program::Gang`] of axes `{expert}` or `{data, expert}` (the trainer's), which every
//! node of the step then runs on.
//!
//! The models' own steps: [`crate::moe`]'s (`moe/step_program.rs`), [`crate::transformer`]'s
//! (`transformer/step_program.rs`, and its cached decoding in `transformer/decoder.rs`) and
//! [`crate::mlp_lm`]'s (`mlp_lm.rs`).

use super::{GroupSplit, StepModel};
use crate::kernels::matmul::{Epilogue, MatmulVariant, VariantChoice};
use crate::kernels::optim::AdamConfig;
use crate::kernels::{
    Accumulate, Adam, CrossEntropy, CrossEntropyPack, Kernel, Matmul, Pack, TensorType, Unpack,
    WeightGradPair,
};
use crate::mesh::MeshShape;
use crate::program::Gang;
use crate::program::{Program, ProgramBuilder, Value};
use crate::{DType, Result};
use std::sync::Arc;

/// Every matmul of the step runs the vec4 kernels, forward (`A·B`) and backward (`A·Bᵀ`, `Aᵀ·B`),
/// or their subgroup twins where the adapter has them and the autotuner measures them faster
/// (the same sums: [`MatmulVariant::same_sums`]), or the tiled kernel where a shape's N or K is
/// not a multiple of 4. No choice changes a sum's order with M, and the expert weight gradient
/// sums its slot blocks one at a time, so D devices compute the bits 1 device computes over D
/// groups.
pub(crate) const MATMUL: MatmulVariant = MatmulVariant::Vec4;

/// What a compiled step computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
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
pub enum Kind {
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

/// The shapes a step program is built for: the model, Adam, the gang as a `{data, expert}` mesh
/// and how the routing groups are dealt.
#[derive(Debug, Clone)]
pub struct StepShape<M> {
    pub config: M,
    pub adam: AdamConfig,
    /// The gang's axes: `{expert}`, or `{data, expert}` (row-major) with data parallelism.
    pub mesh: MeshShape,
    /// The routing groups per device.
    pub split: GroupSplit,
    /// Batch units per routing group.
    pub group_units: usize,
}

impl<M: StepModel> StepShape<M> {
    pub fn new(
        config: M,
        adam: AdamConfig,
        mesh: &MeshShape,
        split: GroupSplit,
        group_units: usize,
    ) -> Self {
        Self {
            config,
            adam,
            mesh: mesh.clone(),
            split,
            group_units,
        }
    }

    /// The gang's device count.
    pub fn devices(&self) -> usize {
        self.mesh.devices()
    }

    /// The data axis's size (1 without one).
    pub fn data(&self) -> usize {
        self.mesh.size(DATA_AXIS).unwrap_or(1)
    }

    /// Devices along the expert axis, and the axis the expert all-to-all runs over (`None`: the
    /// gang's one axis).
    pub fn expert_mesh(&self) -> (usize, Option<&'static str>) {
        let two_d = self.mesh.axes().len() > 1;
        (expert_along(&self.mesh), two_d.then_some(EXPERT_AXIS))
    }

    pub fn rounds(&self) -> usize {
        self.split.rounds()
    }

    /// Token rows of one group.
    pub fn rows(&self) -> usize {
        self.group_units * self.config.unit_rows()
    }

    /// Per-device shape of every parameter: expert tensors hold `E / (devices along the expert
    /// axis)` experts.
    pub fn shard_shapes(&self) -> Vec<Vec<usize>> {
        let along = self.expert_mesh().0.max(1);
        self.config
            .param_specs()
            .into_iter()
            .zip(self.config.expert_tensors())
            .map(|(spec, is_expert)| {
                let mut shape = spec.shape;
                if let (true, Some(r)) = (is_expert, self.config.routing()) {
                    shape[0] = r.router.experts / along;
                }
                shape
            })
            .collect()
    }
}

/// The devices along a step mesh's expert axis (all of them on a mesh of one axis).
pub(crate) fn expert_along(mesh: &MeshShape) -> usize {
    mesh.size(EXPERT_AXIS).unwrap_or(mesh.devices())
}

pub use crate::mesh::{DATA_AXIS, EXPERT_AXIS};

pub(crate) fn param_var(p: usize) -> String {
    format!("param {p}")
}
pub(crate) fn m_var(p: usize) -> String {
    format!("adam m {p}")
}
pub(crate) fn v_var(p: usize) -> String {
    format!("adam v {p}")
}

/// A step program under construction over one gang, for a model whose step shape is `S`: the
/// nodes every model's step makes (kernels, matmuls, gradient accumulation, a linear layer's
/// backward); each model adds its own in an `impl Builder<'_, ItsShape>`.
pub(crate) struct Builder<'a, S> {
    pub b: ProgramBuilder,
    pub shape: &'a S,
    pub gang: Gang,
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

impl<'a, M: StepModel> Builder<'a, StepShape<M>> {
    /// A step program of `mode` for `shape`, named `<model> <what the mode does>`: the gang laid
    /// out as the shape's mesh (one expert axis, or `{data, expert}` when `data` > 1: experts
    /// split along `expert`, repeated along `data`), and every parameter's variable declared (of
    /// the kind a [`Mode::Read`] reads).
    pub fn begin(model: &str, shape: &'a StepShape<M>, mode: Mode) -> Self {
        let what = match mode {
            Mode::Train => "train step",
            Mode::Grads => "gradients",
            Mode::Forward => "forward",
            Mode::Read(_) => "read variables",
        };
        let axes: Vec<(&str, usize)> = (shape.mesh.axes().iter())
            .map(|(name, size)| (name.as_str(), *size))
            .collect();
        let devices: Vec<usize> = (0..shape.devices()).collect();
        let mut b = ProgramBuilder::new(format!("{model} {what}"));
        let gang = b.mesh(&devices, &axes);
        let expert = shape.config.expert_tensors();
        let mut x = Builder {
            b,
            shape,
            gang: gang.clone(),
            params: Vec::new(),
            grads: vec![None; expert.len()],
            later: Vec::new(),
        };
        let kind = match mode {
            Mode::Read(kind) => kind,
            _ => Kind::Param,
        };
        x.params = declare_params(&mut x.b, &gang, &shape.shard_shapes(), &expert, kind);
        x
    }

    /// The whole program of a [`Mode::Read`]: every declared variable as a result.
    pub fn read_back(mut self) -> Result<Program> {
        for v in self.params.clone() {
            self.b.result(v);
        }
        self.b.build()
    }

    /// Every round's batch arguments (`input` and `target` per device), then for training the
    /// step's Adam bias corrections (f32 `[2]` per device).
    pub fn batch_args(
        &mut self,
        mode: Mode,
        input: TensorType,
        target: TensorType,
    ) -> (Vec<(Value, Value)>, Option<Value>) {
        let gang = self.gang.clone();
        let rounds = (0..self.shape.rounds())
            .map(|_| {
                let i = self.b.typed_arg(&gang, input.clone());
                let t = self.b.typed_arg(&gang, target.clone());
                (i, t)
            })
            .collect();
        let bias = (mode == Mode::Train).then(|| {
            let every = self.b.spec(&gang, &[&[]], &[]);
            self.b.sharded_arg(&gang, TensorType::f32(&[2]), every)
        });
        (rounds, bias)
    }

    /// The program, once every round is in: for a forward pass as it is, else with the step
    /// end every model shares ([`StepEnd`]; `early`: a bucket of replicated gradients whose
    /// all-reduce already started).
    pub fn end(
        mut self,
        mode: Mode,
        bias: Option<Value>,
        early: Option<Reducing>,
    ) -> Result<Program> {
        self.b.set_active(None);
        if mode == Mode::Forward {
            return self.b.build();
        }
        let shape = self.shape;
        let cfg = shape.config;
        let names: Vec<String> = cfg.param_specs().into_iter().map(|s| s.name).collect();
        let expert = cfg.expert_tensors();
        let shapes = shape.shard_shapes();
        let end = StepEnd {
            gang: &self.gang,
            params: &self.params,
            expert: &expert,
            shapes: &shapes,
            names: &names,
            groups: shape.split.groups(),
            adam: shape.adam,
            bias,
            data_axis: shape.mesh.size(DATA_AXIS).map(|_| DATA_AXIS),
        };
        end.finish(&mut self.b, &self.grads, mode, early)?;
        self.b.build()
    }
}

impl<S> Builder<'_, S> {
    pub fn k(&mut self, name: &str, op: impl Kernel + 'static, inputs: &[Value]) -> Value {
        // A put-off weight gradient must read its inputs before a kernel updates them in place.
        for (_, i) in op.in_place() {
            if let Some(&v) = inputs.get(i) {
                self.weight_grads_reading(v);
            }
        }
        let [v] = self.b.kernel(name, self.gang.clone(), Arc::new(op), inputs);
        v
    }

    /// A round's loss: the cross-entropy of `logits` against `targets` (node `at("cross-entropy")`);
    /// returns the logits' gradient. Its results, in a forward pass and a training step alike: a
    /// statistics pack (written by the loss kernel itself, [`CrossEntropyPack`], with a pack node
    /// `at("stats")` only for the inputs past its limit), what [`super::layout::StatsLayout`] reads: the row losses, then per
    /// expert layer its router's expert statistics (so evaluation reports what capacity
    /// dropped) and, in a training step, the row logsumexps of its router logits for the z-loss
    /// (`routers`: each layer's router statistics and logsumexps, both router outputs). A model
    /// without expert layers packs nothing: its result is the row losses, the pack's bytes.
    pub fn loss(
        &mut self,
        at: &dyn Fn(&str) -> String,
        mode: Mode,
        logits: Value,
        targets: Value,
        routers: &[(Value, Value)],
    ) -> Value {
        let gang = self.gang.clone();
        let mut extras = Vec::new();
        for &(stats, lse) in routers {
            extras.push(stats);
            if mode == Mode::Train {
                extras.push(lse);
            }
        }
        match mode {
            // Nothing to pack with the row losses: they are the pack's bytes as they are.
            Mode::Forward | Mode::Train if routers.is_empty() => {
                let [row_loss, d_logits] = self.b.kernel(
                    &at("cross-entropy"),
                    &gang,
                    Arc::new(CrossEntropy),
                    &[logits, targets],
                );
                self.b.result(row_loss);
                d_logits
            }
            // The loss kernel writes the pack; past its inputs' limit a pack node adds the rest.
            Mode::Forward | Mode::Train => {
                let (first, rest) = extras.split_at(extras.len().min(CrossEntropyPack::MAX_EXTRAS));
                let mut inputs = vec![logits, targets];
                inputs.extend_from_slice(first);
                let [mut pack, d_logits] = self.b.kernel(
                    &at("cross-entropy"),
                    &gang,
                    Arc::new(CrossEntropyPack),
                    &inputs,
                );
                if !rest.is_empty() {
                    let mut more = vec![pack];
                    more.extend_from_slice(rest);
                    pack = self.k(&at("stats"), Pack { dtype: DType::U32 }, &more);
                }
                self.b.result(pack);
                d_logits
            }
            Mode::Grads | Mode::Read(_) => {
                let [_, d_logits] = self.b.kernel(
                    &at("cross-entropy"),
                    &gang,
                    Arc::new(CrossEntropy),
                    &[logits, targets],
                );
                d_logits
            }
        }
    }

    pub fn mm(&mut self, name: &str, a: Value, b: Value, trans_a: bool, trans_b: bool) -> Value {
        self.mm_then(name, a, b, trans_a, trans_b, Epilogue::NONE, &[])
    }

    /// `op(a) · op(b)`, then `epilogue` as the kernel stores it, given its `operands` (the
    /// addend, then the relu output, each where it takes one): the launches of the relu, its
    /// backward and the add or accumulate it replaces, saved, with their bits.
    #[allow(clippy::too_many_arguments)]
    pub fn mm_then(
        &mut self,
        name: &str,
        a: Value,
        b: Value,
        trans_a: bool,
        trans_b: bool,
        epilogue: Epilogue,
        operands: &[Value],
    ) -> Value {
        let op = Matmul {
            epilogue,
            ..Self::matmul(trans_a, trans_b)
        };
        let mut inputs = vec![a, b];
        inputs.extend_from_slice(operands);
        self.k(name, op, &inputs)
    }

    /// The trainer's dense matmul, without an epilogue.
    fn matmul(trans_a: bool, trans_b: bool) -> Matmul {
        Matmul {
            limits: None,
            trans_a,
            trans_b,
            offsets: None,
            choice: VariantChoice::SameSums(MATMUL),
            f16_accumulate: false,
            epilogue: Epilogue::NONE,
        }
    }

    /// A matmul whose epilogue keeps a second output ([`Epilogue::keeps`]): `[C, kept]`.
    pub fn mm_keeping(
        &mut self,
        name: &str,
        a: Value,
        b: Value,
        epilogue: Epilogue,
        operands: &[Value],
    ) -> [Value; 2] {
        let op = Matmul {
            epilogue,
            ..Self::matmul(false, false)
        };
        let mut inputs = vec![a, b];
        inputs.extend_from_slice(operands);
        let gang = self.gang.clone();
        self.b.kernel(name, &gang, Arc::new(op), &inputs)
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
        self.linear_backward_then(put_off, at, what, p, x, dy, Epilogue::NONE, &[])
    }

    /// [`Self::linear_backward_put_off`], with the input gradient's matmul given `epilogue` and
    /// its `operands` ([`Self::mm_then`]): a gradient that also flows around the layer (a
    /// residual) added as it stores, the backward of the relu below taken there, or both (node
    /// `at("<what> input grad")`).
    #[allow(clippy::too_many_arguments)]
    pub fn linear_backward_then(
        &mut self,
        put_off: bool,
        at: &dyn Fn(&str) -> String,
        what: &str,
        p: usize,
        x: Value,
        dy: Value,
        epilogue: Epilogue,
        operands: &[Value],
    ) -> Value {
        let w = self.params[p];
        let name = at(&format!("{what} input grad"));
        let dx = self.mm_then(&name, dy, w, false, true, epilogue, operands);
        self.put_off_weight_grad(at, what, p, x, dy);
        if !put_off {
            self.weight_grads_now();
        }
        dx
    }

    /// Puts off parameter `p`'s weight gradient `xᵀ · dy` until [`Self::weight_grads_now`] (nodes
    /// `at("<what> weight grad")` and `at("accumulate <what> grad")`).
    pub fn put_off_weight_grad(
        &mut self,
        at: &dyn Fn(&str) -> String,
        what: &str,
        p: usize,
        x: Value,
        dy: Value,
    ) {
        self.later.push(LaterGrad {
            p,
            names: [
                at(&format!("{what} weight grad")),
                at(&format!("accumulate {what} grad")),
            ],
            x,
            dy,
        });
    }

    /// In the last round of a step that sums gradients, once the backward has passed every
    /// layer but those of `not_yet`: starts the all-reduce of the replicated gradients that are
    /// final (all but `not_yet`'s; the put-off ones are added first), so that it travels while the
    /// rest of the backward runs (DDP's gradient buckets). [`StepEnd::finish`] takes the sums. On
    /// one device nothing is summed, so nothing is added: the put-off gradients wait for the next
    /// [`Self::weight_grads_now`], where they can pair with the later ones.
    pub fn reduce_final_grads(
        &mut self,
        mode: Mode,
        expert: &[bool],
        not_yet: &[usize],
    ) -> Result<Option<Reducing>> {
        if !matches!(mode, Mode::Train | Mode::Grads) || self.gang.len() < 2 {
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

    /// The products two at a time in one launch ([`WeightGradPair`], node `"<first> + <second>"`)
    /// where both sum as the step's `Aᵀ·B` matmul does (their columns a multiple of 4, so vec4's
    /// kernel takes them, and the rows alike); each then added to its accumulator in the order
    /// they were put off.
    fn add_weight_grads(&mut self, grads: Vec<LaterGrad>) {
        let pairs_as_matmul =
            |b: &ProgramBuilder, g: &LaterGrad| b.ty(g.dy).shape.get(1).is_some_and(|n| n % 4 == 0);
        let mut products = Vec::new();
        let mut rest = grads.into_iter().peekable();
        while let Some(g) = rest.next() {
            let rows = |g: &LaterGrad| self.b.ty(g.x).shape.first().copied();
            let pair = match rest.peek() {
                Some(h)
                    if pairs_as_matmul(&self.b, &g)
                        && pairs_as_matmul(&self.b, h)
                        && rows(&g) == rows(h) =>
                {
                    rest.next()
                }
                _ => None,
            };
            match pair {
                Some(h) => {
                    let name = format!("{} + {}", g.names[0], h.names[0]);
                    let gang = self.gang.clone();
                    let [a, b] = self.b.kernel(
                        &name,
                        &gang,
                        Arc::new(WeightGradPair),
                        &[g.x, g.dy, h.x, h.dy],
                    );
                    products.push((g, a));
                    products.push((h, b));
                }
                None => {
                    let v = self.mm(&g.names[0], g.x, g.dy, true, false);
                    products.push((g, v));
                }
            }
        }
        for (g, v) in products {
            self.grad(g.p, &g.names[1], v);
        }
    }
}

/// Every parameter's variable of `kind` on `gang`: expert tensors split by their first axis over
/// [`EXPERT_AXIS`], the rest replicated.
pub(crate) fn declare_params(
    b: &mut ProgramBuilder,
    gang: &Gang,
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
    pub gang: &'a Gang,
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
        gang: &Gang,
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
    /// Adam when training, one node for all of them. Adam reads the gradient times `1/G` itself (the bits a scaling kernel
    /// would store, without its launch and its pass over every gradient on every device); the
    /// packed gradients of [`Mode::Grads`] are scaled by a kernel.
    fn apply(&self, b: &mut ProgramBuilder, grads: &mut [Value], which: &[usize], mode: Mode) {
        let gang = self.gang;
        let scale = 1.0 / self.groups.max(1) as f32;
        let mut adam = Vec::with_capacity(4 * which.len() + 1);
        for &p in which {
            if self.groups > 1 && mode != Mode::Train {
                grads[p] = b.affine("scale grad", gang, grads[p], scale, 0.0);
            }
            if let (Mode::Train, Some(_)) = (mode, self.bias) {
                // The moments lie as their parameter does.
                let ty = TensorType::f32(&self.shapes[p]);
                let laid = b.sharding(self.params[p]);
                let m = b.sharded_variable(&m_var(p), gang, ty.clone(), laid.clone());
                let v = b.sharded_variable(&v_var(p), gang, ty, laid);
                adam.extend([self.params[p], m, v, grads[p]]);
            }
        }
        // One node for them all: as few launches as each device allows (one on most).
        if let (Mode::Train, Some(bias), false) = (mode, self.bias, adam.is_empty()) {
            adam.push(bias);
            let names: Vec<&str> = which.iter().map(|&p| self.names[p].as_str()).collect();
            let step = Adam {
                config: self.adam,
                grad_scale: scale,
                tensors: which.len(),
            };
            b.kernels(
                &format!("adam {}", names.join(", ")),
                gang,
                Arc::new(step),
                &adam,
            );
        }
    }

    /// The all-reduces, `1/G` and Adam (training), or the packed gradients (`Mode::Grads`). The
    /// expert tensors' end comes between the dense all-reduce and its unpacking: their
    /// gradients are final on a one-axis mesh, so devices apply them while the dense sums
    /// travel. With nothing to sum (one device), one Adam node takes every tensor. `early`: a bucket whose all-reduce the step started before its end; the rest of
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
        if early.is_none() && late.is_none() {
            // Nothing is summed (one device): every tensor's Adam in one node, as few launches
            // as the device allows.
            let all: Vec<usize> = expert.iter().chain(&rest).copied().collect();
            self.apply(b, &mut grads, &all, mode);
        } else {
            self.apply(b, &mut grads, &expert, mode);
            for reducing in early.iter().chain(&late) {
                self.unpack(b, &mut grads, reducing);
                self.apply(b, &mut grads, &reducing.which, mode);
            }
            if late.is_none() {
                // Nothing of the rest was summed: every replicated gradient went early (the rest
                // is empty).
                self.apply(b, &mut grads, &rest, mode);
            }
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
