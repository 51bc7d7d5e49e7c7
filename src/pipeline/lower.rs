//! Lowering a [`Schedule`] to one [`Program`]: the checked inputs of a run ([`Plan`]), and the
//! nodes each op becomes on its stage's gang.
//!
//! The plan lays its devices out as a `{stage, expert}` mesh. Stage `s` runs on a gang of
//! `gang` devices (one for the MLP; a stage's microbatch rows are split over its gang), row `s`
//! of that mesh, or with a [`Fold`] row `fold(s)` beside other stages, and holds the virtual stages its chunks map to ([`Schedule::virtual_stage`]); each
//! virtual stage holds a contiguous block of the model's layers ([`StageModel`]), and with
//! DualPipe's two parameter copies each block lives on two stages. The lowering walks the stages'
//! op lists in a causal order (each stage's ops in its own order; a receive only after its send;
//! with stages sharing a device, the order of the simulation at F = B = W, so a device takes its
//! stages' ops as the simulator has it) and appends, for each op, nodes on its stage's gang:
//!
//! - **F**: each layer's forward ([`StageModel::forward`]), keeping what its backward needs;
//! - **B**: each layer's backward, with the weight gradients too unless the schedule splits the
//!   backward (then what they need is kept for **W**);
//! - **W**: the weight gradients, accumulated in place;
//! - a send is an [`Op::Send`](crate::program::Op::Send) node (the readback, right after the op
//!   that made the tensor), a receive an [`Op::Recv`](crate::program::Op::Recv) node (the upload,
//!   where the schedule receives), shard for shard between gangs, so every device runs its nodes
//!   in its stage's op order; a hand-off between two chunks of one stage (one stage, or a V's
//!   turn), or between two stages of one device, moves nothing.
//!
//! The program keeps its order (a device never runs a later op while an earlier one waits), but
//! with `overlap`, an F&B pair of the schedule (an overlapped F and the B after it) forms one
//! overlap group ([`ProgramBuilder::set_overlap_group`]): while the F waits for its all-to-all, its
//! gang runs the B's nodes, as DualPipe overlaps one chunk's communication with the other's
//! compute. Without it the pair runs as its F and then its B.
//!
//! After the op lists each stage applies `W −= lr · (Σ dW) / m` in place to every parameter; a
//! replicated parameter's gradient is first all-reduced over its gang, and with two parameter
//! copies each copy first adds the other's gradient, so both take the same step.

use std::collections::HashMap;
use std::ops::Range;

use super::fold::{Fold, op_name};
use super::schedule::Schedule;
use super::schedule_kind::OpKind;
use super::simulate::{Costs, simulate_folded};
use super::stage_model::Microbatch;
use super::stage_model::{Grads, Param, StageModel};
use super::validate::validate;
use crate::device::MeshDevice;
use crate::kernels::TensorType;
use crate::kernels::{Accumulate, Kernel, MseGrad, Sgd};
use crate::mesh::{EXPERT_AXIS, Mesh, STAGE_AXIS};
use crate::program::Gang;
use crate::program::{DEFAULT_AXIS, Program, ProgramBuilder, Value};
use crate::trace::PipelineOp;
use crate::{Error, Result};

/// The program variable of parameter `param` of `layer` in parameter copy `copy` (DualPipe
/// holds two).
pub(super) fn weight_var(layer: usize, param: &Param, copy: usize) -> String {
    let mut name = format!("weight {layer}");
    if !param.name.is_empty() {
        name = format!("{name} {}", param.name);
    }
    if copy > 0 {
        name = format!("{name} copy {copy}");
    }
    name
}

/// Checked inputs of a run.
pub(super) struct Plan<'a, M: StageModel> {
    pub(super) schedule: &'a Schedule,
    /// The devices as `{stage, expert}`: a row of `gang` devices ([`Self::stage_mesh`]) per
    /// gang the stages fold onto (per stage unless folded).
    pub(super) mesh: Mesh,
    /// Devices per stage ([`StageModel::gang`]).
    pub(super) gang: usize,
    pub(super) fold: Fold,
    /// Each stage's gang index (its gang is `mesh.sub(STAGE_AXIS, g)`).
    pub(super) device_of: Vec<usize>,
    pub(super) model: &'a M,
    pub(super) batch: &'a [Microbatch],
    pub(super) rows: Vec<usize>,
    /// Layers of each virtual stage.
    pub(super) split: Vec<Range<usize>>,
    pub(super) lr: f32,
    /// Whether an F&B pair may overlap (see the module docs).
    pub(super) overlap: bool,
}

impl<'a, M: StageModel> Plan<'a, M> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        schedule: &'a Schedule,
        devices: &[MeshDevice],
        model: &'a M,
        batch: &'a [Microbatch],
        lr: f32,
        fold: Fold,
        overlap: bool,
    ) -> Result<Self> {
        const WHAT: &str = "pipeline run";
        validate(schedule)?;
        let bad = |reason: String| Error::InvalidArgument { what: WHAT, reason };
        let gang = model.gang();
        let device_of = fold.devices_of(schedule.stages)?;
        let d = fold.device_count(schedule.stages);
        if gang == 0 || devices.len() != d * gang {
            let on = if gang == 1 {
                format!("{d} devices")
            } else {
                format!("{d} gangs of {gang} devices")
            };
            return Err(bad(format!(
                "the schedule's {} stages run on {on} ({}) but {} were given",
                schedule.stages,
                fold.placement_name(),
                devices.len()
            )));
        }
        if batch.is_empty() {
            return Err(bad("the batch has no microbatches".into()));
        }
        if batch.len() != schedule.microbatches {
            return Err(bad(format!(
                "the schedule has {} microbatches but the batch has {}",
                schedule.microbatches,
                batch.len()
            )));
        }
        if !lr.is_finite() {
            return Err(bad(format!("learning rate must be finite, got {lr}")));
        }
        let rows = batch
            .iter()
            .map(|mb| model.rows(mb))
            .collect::<Result<Vec<_>>>()?;
        let split =
            super::stage_model::split_layers(WHAT, model.layers(), schedule.virtual_stages())?;
        let mesh = Mesh::new(devices, &[(STAGE_AXIS, d), (EXPERT_AXIS, gang)])?;
        Ok(Plan {
            schedule,
            mesh,
            gang,
            fold,
            device_of,
            model,
            batch,
            rows,
            split,
            lr,
            overlap,
        })
    }

    pub(super) fn last_vs(&self) -> usize {
        self.schedule.virtual_stages() - 1
    }

    /// Stage `stage`'s gang index.
    pub(super) fn dev(&self, stage: usize) -> usize {
        self.device_of[stage]
    }

    /// The devices of gang `g`, as one axis of experts.
    pub(super) fn stage_mesh(&self, g: usize) -> Result<Mesh> {
        self.mesh.sub(STAGE_AXIS, g)
    }

    /// The program devices of gang `g` (row `g` of the mesh).
    pub(super) fn gang_of(&self, g: usize) -> Gang {
        Gang::line((g * self.gang..(g + 1) * self.gang).collect::<Vec<_>>())
    }

    /// Stage `stage`'s program devices.
    pub(super) fn gang(&self, stage: usize) -> Gang {
        self.gang_of(self.dev(stage))
    }

    /// The stage holding each copy of `layer` (copy 0 first).
    pub(super) fn holders_of_layer(&self, layer: usize) -> Vec<usize> {
        let vs = self
            .split
            .iter()
            .position(|r| r.contains(&layer))
            .unwrap_or(0);
        self.schedule
            .holders(vs)
            .into_iter()
            .map(|(s, _)| s)
            .collect()
    }

    /// Which parameter copy `chunk` of a stage uses: its chunk under DualPipe's two copies.
    fn copy_of_chunk(&self, chunk: usize) -> usize {
        if self.schedule.kind.parameter_copies() > 1 {
            chunk
        } else {
            0
        }
    }
}

/// Activation (forward) or gradient (backward) data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Flowing {
    Activation,
    Gradient,
}

impl Flowing {
    pub(super) fn name(self) -> &'static str {
        match self {
            Flowing::Activation => "act",
            Flowing::Gradient => "grad",
        }
    }
}

/// What a node belongs to, for the pipeline's view of the trace.
#[derive(Debug, Clone)]
pub(super) enum Tag {
    /// F, B or W of `(microbatch, chunk)` on `stage`.
    Compute {
        stage: usize,
        name: String,
        mb: usize,
        op: Option<PipelineOp>,
    },
    Send {
        stage: usize,
        what: Flowing,
        mb: usize,
    },
    Recv {
        stage: usize,
        what: Flowing,
        mb: usize,
    },
    Sgd {
        stage: usize,
    },
}

/// The schedule as a program, and what each node is.
pub(super) struct Lowered {
    pub(super) program: Program,
    /// Each stage's gang index (the plan's), for the trace.
    pub(super) device_of: Vec<usize>,
    /// `[node]`.
    pub(super) tags: Vec<Option<Tag>>,
    /// Where each parameter's result is, in order: `(copy, layer, param)`.
    pub(super) weights: Vec<(usize, usize, Param)>,
}

/// What F keeps for B of one (microbatch, chunk): each layer's saved values, and the model's
/// output on the last virtual stage.
struct Forwarded<S> {
    layers: Vec<S>,
    output: Option<Value>,
}

/// (stage, microbatch, chunk).
type OpKey = (usize, usize, usize);

struct Lowering<'p, 'a, M: StageModel> {
    plan: &'p Plan<'a, M>,
    b: ProgramBuilder,
    tags: Vec<Option<Tag>>,
    /// `[copy][layer][param]`.
    weights: Vec<Vec<Vec<Value>>>,
    grads: Vec<Vec<Option<Vec<Value>>>>,
    inputs: Vec<Value>,
    targets: Vec<Value>,
    /// Arrived inputs (activations) and output gradients, by (what, microbatch, chunk), per stage.
    arrived: HashMap<(usize, Flowing, usize, usize), Value>,
    /// Outputs waiting for their send op, by (what, microbatch, chunk), per stage.
    outgoing: HashMap<(usize, Flowing, usize, usize), Value>,
    /// Sent values waiting for their receive, by (what, microbatch, receiving virtual stage),
    /// with whether both stages share a device (then the value itself: nothing is sent).
    sent: HashMap<(Flowing, usize, usize), (Value, bool)>,
    /// By (stage, microbatch, chunk).
    forwarded: HashMap<OpKey, Forwarded<M::Saved>>,
    /// A split backward's kept values per layer of the chunk, for W.
    kept: HashMap<OpKey, Vec<Option<M::Kept>>>,
    outputs: Vec<Option<Value>>,
    /// Per stage, the overlap group of an overlapped F whose B is still to come.
    pairing: Vec<Option<u32>>,
}

fn missing(stage: usize, what: &str, mb: usize, c: usize) -> Error {
    Error::InvalidArgument {
        what: "pipeline run",
        reason: format!(
            "stage {stage}: {what} of microbatch {mb}, chunk {c} is not there when needed"
        ),
    }
}

impl<M: StageModel> Lowering<'_, '_, M> {
    fn k(
        &mut self,
        stage: usize,
        name: &str,
        op: impl Kernel + 'static,
        inputs: &[Value],
    ) -> Value {
        self.b.kernel1(name, self.plan.gang(stage), op, inputs)
    }

    /// `grads[copy][layer] += layer's gradients` (the first contribution makes the accumulator).
    fn accumulate(&mut self, stage: usize, copy: usize, layer: usize, got: Vec<Value>) {
        let next = match self.grads[copy][layer].take() {
            None => got,
            Some(acc) => {
                let params = self.plan.model.params(layer);
                acc.into_iter()
                    .zip(got)
                    .zip(&params)
                    .map(|((acc, g), p)| {
                        let name = format!("accumulate d{}{layer}", param_label(p));
                        self.k(stage, &name, Accumulate, &[acc, g])
                    })
                    .collect()
            }
        };
        self.grads[copy][layer] = Some(next);
    }

    fn chunk_layers(&self, stage: usize, c: usize) -> (usize, Range<usize>) {
        let vs = self.plan.schedule.virtual_stage(stage, c);
        (vs, self.plan.split[vs].clone())
    }

    /// Hands a chunk's output to its send op, or straight to the chunk that reads it when that
    /// is on the same stage (one stage, or the turn of a V: no transfer).
    fn pass_on(&mut self, stage: usize, what: Flowing, mb: usize, c: usize, v: Value) {
        let schedule = self.plan.schedule;
        let vs = schedule.virtual_stage(stage, c);
        let to_vs = match what {
            Flowing::Activation => vs + 1,
            Flowing::Gradient => vs.wrapping_sub(1),
        };
        let (at, chunk) = schedule.placement(mb, to_vs);
        if at == stage {
            self.arrived.insert((stage, what, mb, chunk), v);
        } else {
            self.outgoing.insert((stage, what, mb, c), v);
        }
    }

    fn forward(&mut self, s: usize, mb: usize, c: usize) -> Result<()> {
        let (vs, layers) = self.chunk_layers(s, c);
        let w = self.plan.copy_of_chunk(c);
        let gang = self.plan.gang(s);
        let mut h = if vs == 0 {
            self.inputs.get(mb).copied()
        } else {
            self.arrived.remove(&(s, Flowing::Activation, mb, c))
        }
        .ok_or_else(|| missing(s, "the input activation", mb, c))?;
        let mut saved = Vec::with_capacity(layers.len());
        for layer in layers {
            let weights = self.weights[w][layer].clone();
            let (out, keep) = self
                .plan
                .model
                .forward(&mut self.b, &gang, layer, &weights, h);
            saved.push(keep);
            h = out;
        }
        let output = if vs == self.plan.last_vs() {
            self.outputs[mb] = Some(h);
            Some(h)
        } else {
            self.pass_on(s, Flowing::Activation, mb, c, h);
            None
        };
        let f = Forwarded {
            layers: saved,
            output,
        };
        self.forwarded.insert((s, mb, c), f);
        Ok(())
    }

    fn backward(&mut self, s: usize, mb: usize, c: usize) -> Result<()> {
        let split = self.plan.schedule.split_backward;
        let copy = self.plan.copy_of_chunk(c);
        let gang = self.plan.gang(s);
        let (vs, layers) = self.chunk_layers(s, c);
        let saved = self
            .forwarded
            .remove(&(s, mb, c))
            .ok_or_else(|| missing(s, "the forward's saved activations", mb, c))?;
        let mut dy = if vs == self.plan.last_vs() {
            let y = saved
                .output
                .ok_or_else(|| missing(s, "the output", mb, c))?;
            let t = *self
                .targets
                .get(mb)
                .ok_or_else(|| missing(s, "the target", mb, c))?;
            Some(self.k(s, "mse_grad", MseGrad, &[y, t]))
        } else {
            self.arrived.remove(&(s, Flowing::Gradient, mb, c))
        };
        let mut kept: Vec<Option<M::Kept>> = Vec::new();
        kept.resize_with(layers.len(), || None);
        for (j, (layer, keep)) in layers.clone().zip(saved.layers).enumerate().rev() {
            let g = dy.ok_or_else(|| missing(s, "the output gradient", mb, c))?;
            let weights = self.weights[copy][layer].clone();
            let (dx, grads) =
                self.plan
                    .model
                    .backward(&mut self.b, &gang, layer, &weights, keep, g, split);
            match grads {
                Grads::Now(g) => self.accumulate(s, copy, layer, g),
                Grads::Later(k) => kept[j] = Some(k),
            }
            dy = dx;
        }
        if vs > 0 {
            let dx = dy.ok_or_else(|| missing(s, "the input gradient", mb, c))?;
            self.pass_on(s, Flowing::Gradient, mb, c, dx);
        }
        if split {
            self.kept.insert((s, mb, c), kept);
        }
        Ok(())
    }

    fn weight_grads(&mut self, s: usize, mb: usize, c: usize) -> Result<()> {
        let (_, layers) = self.chunk_layers(s, c);
        let copy = self.plan.copy_of_chunk(c);
        let gang = self.plan.gang(s);
        let kept = self
            .kept
            .remove(&(s, mb, c))
            .ok_or_else(|| missing(s, "the backward's saved gradients", mb, c))?;
        for (layer, keep) in layers.zip(kept) {
            let keep = keep.ok_or_else(|| missing(s, "a layer's output gradient", mb, c))?;
            let g = self
                .plan
                .model
                .weight_grads(&mut self.b, &gang, layer, keep);
            self.accumulate(s, copy, layer, g);
        }
        Ok(())
    }

    fn send(
        &mut self,
        s: usize,
        what: Flowing,
        mb: usize,
        c: usize,
        peer: Option<usize>,
    ) -> Result<()> {
        let plan = self.plan;
        let vs = plan.schedule.virtual_stage(s, c);
        let to_vs = match what {
            Flowing::Activation => vs + 1,
            Flowing::Gradient => vs.wrapping_sub(1),
        };
        let peer = peer.ok_or_else(|| missing(s, "the send's peer", mb, c))?;
        if peer >= plan.schedule.stages
            || to_vs > plan.last_vs()
            || plan.schedule.placement(mb, to_vs).0 != peer
        {
            return Err(missing(s, "a valid peer for the send", mb, c));
        }
        let v = self
            .outgoing
            .remove(&(s, what, mb, c))
            .ok_or_else(|| missing(s, "the tensor to send", mb, c))?;
        let local = plan.dev(peer) == plan.dev(s);
        let sent = if local {
            v
        } else {
            self.b.send(&format!("send {}", what.name()), v)
        };
        self.sent.insert((what, mb, to_vs), (sent, local));
        Ok(())
    }

    /// Whether the send a receive waits for is already lowered.
    fn can_recv(&self, s: usize, what: Flowing, mb: usize, c: usize) -> bool {
        let vs = self.plan.schedule.virtual_stage(s, c);
        self.sent.contains_key(&(what, mb, vs))
    }

    fn recv(&mut self, s: usize, what: Flowing, mb: usize, c: usize) -> Result<()> {
        let vs = self.plan.schedule.virtual_stage(s, c);
        let sent = self
            .sent
            .remove(&(what, mb, vs))
            .ok_or_else(|| missing(s, "the sent tensor", mb, c))?;
        let (sent, local) = sent;
        let v = if local {
            sent
        } else {
            let here = self.plan.gang(s);
            self.b.recv(&format!("recv {}", what.name()), sent, &here)
        };
        self.arrived.insert((s, what, mb, c), v);
        Ok(())
    }

    /// Appends op `index` of stage `s`'s list; `Ok(false)`, appending nothing, for a receive
    /// whose send is not in yet.
    fn lower_op(&mut self, s: usize, index: usize) -> Result<bool> {
        let plan = self.plan;
        let schedule = plan.schedule;
        let op = schedule.ops[s][index];
        let (mb, c) = (op.microbatch, op.chunk);
        let at = self.b.node_count();
        let letter = op.kind.letter().unwrap_or('?');
        let name = op_name(
            letter.encode_utf8(&mut [0; 4]),
            &plan.device_of,
            schedule.chunks,
            s,
            c,
        );
        let compute = Tag::Compute {
            stage: s,
            name,
            mb,
            op: op.kind.pipeline_op(),
        };
        match op.kind {
            OpKind::Forward | OpKind::Backward => {
                // An overlapped F and the B after it share an overlap group (module docs).
                let group = if op.kind == OpKind::Backward {
                    self.pairing[s].take().unwrap_or(0)
                } else if op.overlapped && plan.overlap {
                    let g = self.b.overlap_group();
                    self.pairing[s] = Some(g);
                    g
                } else {
                    0
                };
                let outer = self.b.set_overlap_group(group);
                let done = if op.kind == OpKind::Forward {
                    self.forward(s, mb, c)
                } else {
                    self.backward(s, mb, c)
                };
                self.b.set_overlap_group(outer);
                done?;
                self.tag_from(at, compute);
            }
            OpKind::WeightGrad => {
                self.weight_grads(s, mb, c)?;
                self.tag_from(at, compute);
            }
            OpKind::SendActivation | OpKind::SendGradient => {
                let what = if op.kind == OpKind::SendActivation {
                    Flowing::Activation
                } else {
                    Flowing::Gradient
                };
                self.send(s, what, mb, c, op.peer)?;
                self.tag_from(at, Tag::Send { stage: s, what, mb });
            }
            OpKind::RecvActivation | OpKind::RecvGradient => {
                let what = if op.kind == OpKind::RecvActivation {
                    Flowing::Activation
                } else {
                    Flowing::Gradient
                };
                if !self.can_recv(s, what, mb, c) {
                    return Ok(false);
                }
                self.recv(s, what, mb, c)?;
                self.tag_from(at, Tag::Recv { stage: s, what, mb });
            }
        }
        Ok(true)
    }

    fn tag_from(&mut self, first: usize, tag: Tag) {
        let end = self.b.node_count();
        self.tags.resize(end, None);
        for t in &mut self.tags[first..end] {
            *t = Some(tag.clone());
        }
    }
}

/// How a parameter shows in node names: `W` for a layer's only one.
fn param_label(p: &Param) -> &'static str {
    if p.name.is_empty() { "W" } else { p.name }
}

/// Declares `param` of `layer` (copy `copy`) on `gang`: replicated, or its first axis split over
/// the gang.
fn declare(b: &mut ProgramBuilder, gang: &Gang, layer: usize, param: &Param, copy: usize) -> Value {
    let name = weight_var(layer, param, copy);
    let ty = TensorType::f32(&param.shard_shape(gang.len()));
    if param.experts {
        let mut dims: Vec<&[&str]> = vec![&[]; ty.shape.len()];
        dims[0] = &[DEFAULT_AXIS];
        let split = b.spec(gang, &dims, &[]);
        b.sharded_variable(&name, gang, ty, split)
    } else {
        b.variable(&name, gang, ty)
    }
}

/// Lowers the plan's schedule to a program.
pub(super) fn lower<M: StageModel>(plan: &Plan<'_, M>) -> Result<Lowered> {
    let schedule = plan.schedule;
    let model = plan.model;
    let p = schedule.stages;
    let mut b = ProgramBuilder::new(format!("pipeline {}", schedule.kind));
    // The schedule is the order: no device runs a later op while an earlier one waits (but
    // within an overlapped F&B pair, with `overlap`).
    b.keep_order();
    let copies = schedule.kind.parameter_copies();
    let layers = model.layers();
    let mut weights: Vec<Vec<Vec<Value>>> = vec![Vec::new(); copies];
    for l in 0..layers {
        for (copy, stage) in plan.holders_of_layer(l).into_iter().enumerate() {
            let gang = plan.gang(stage);
            let w = model
                .params(l)
                .iter()
                .map(|param| declare(&mut b, &gang, l, param, copy))
                .collect();
            weights[copy].push(w);
        }
    }
    let (input, out) = (model.width(0), model.width(layers));
    let (mut inputs, mut targets) = (Vec::new(), Vec::new());
    for (mb, &rows) in plan.rows.iter().enumerate() {
        let first = plan.gang(schedule.placement(mb, 0).0);
        let last = plan.gang(schedule.placement(mb, plan.last_vs()).0);
        inputs.push(b.typed_arg(&first, TensorType::f32(&[rows / plan.gang, input])));
        targets.push(b.typed_arg(&last, TensorType::f32(&[rows / plan.gang, out])));
    }
    let mut x = Lowering {
        plan,
        b,
        tags: Vec::new(),
        grads: vec![vec![None; layers]; copies],
        weights,
        inputs,
        targets,
        arrived: HashMap::new(),
        outgoing: HashMap::new(),
        sent: HashMap::new(),
        forwarded: HashMap::new(),
        kept: HashMap::new(),
        outputs: vec![None; plan.batch.len()],
        pairing: vec![None; p],
    };
    if plan.fold.shares(p) {
        // Stages share devices, and a device runs its nodes in program order: issue the ops in
        // the simulator's order (at F = B = W), so each device takes its stages' ops as the
        // simulation does. That order is an issue order: no receive comes before its send.
        let sim = simulate_folded(schedule, &Costs::compute_only(1, 1, 1), &[], plan.fold)?;
        for at in &sim.order {
            if !x.lower_op(at.stage, at.index)? {
                return Err(Error::InvalidArgument {
                    what: "pipeline run",
                    reason: format!(
                        "stage {}: op #{} receives before its send in the simulated order",
                        at.stage, at.index
                    ),
                });
            }
        }
    } else {
        // A causal order: each stage's ops in its own order, a receive only once its send is in.
        let mut next = vec![0usize; p];
        loop {
            let mut progressed = false;
            for (s, next) in next.iter_mut().enumerate() {
                while *next < schedule.ops[s].len() && x.lower_op(s, *next)? {
                    *next += 1;
                    progressed = true;
                }
            }
            if (0..p).all(|s| next[s] == schedule.ops[s].len()) {
                break;
            }
            if !progressed {
                return Err(Error::InvalidArgument {
                    what: "pipeline run",
                    reason: "the schedule's receives wait on sends that never come".into(),
                });
            }
        }
    }
    // The SGD step per stage. With two parameter copies each copy's gradient first goes to the
    // other copy's stage (all sends before any sum: the sum accumulates in place), and each
    // adds the other's, so both copies take the same step; a replicated parameter's partial
    // gradients are then summed over the gang. Then the weights and outputs back.
    let scale = plan.lr / schedule.microbatches as f32;
    let mut received: HashMap<(usize, usize, usize), Vec<(Value, bool)>> = HashMap::new();
    for from_copy in 0..copies {
        for l in 0..layers {
            let holders = plan.holders_of_layer(l);
            let gs = x.grads[from_copy][l]
                .clone()
                .ok_or_else(|| missing(holders[from_copy], "the weight gradient", 0, 0))?;
            for (to_copy, &to) in holders.iter().enumerate().filter(|&(c, _)| c != from_copy) {
                for (pi, g) in gs.iter().copied().enumerate() {
                    let at = x.b.node_count();
                    let local = plan.dev(to) == plan.dev(holders[from_copy]);
                    let got = if local {
                        g
                    } else {
                        let sent = x.b.send("send dW", g);
                        x.b.recv("recv dW", sent, plan.gang(to))
                    };
                    x.tag_from(at, Tag::Sgd { stage: to });
                    received
                        .entry((to_copy, l, pi))
                        .or_default()
                        .push((got, local));
                }
            }
        }
    }
    let mut updated = Vec::with_capacity(copies * layers);
    let mut results = Vec::new();
    for copy in 0..copies {
        for l in 0..layers {
            let s = plan.holders_of_layer(l)[copy];
            let gang = plan.gang(s);
            let params = model.params(l);
            let gs = x.grads[copy][l]
                .clone()
                .ok_or_else(|| missing(s, "the weight gradient", 0, 0))?;
            for (pi, (mut g, param)) in gs.into_iter().zip(params).enumerate() {
                let at = x.b.node_count();
                let label = param_label(&param);
                for (got, local) in received.remove(&(copy, l, pi)).unwrap_or_default() {
                    let name = format!("sum d{label}{l}");
                    g = if local {
                        // The other copy's own gradient, which its sum updates in place: add
                        // out of place, so neither sum reads the other's result.
                        x.b.add(&name, &gang, g, got)
                    } else {
                        x.k(s, &name, Accumulate, &[g, got])
                    };
                }
                if gang.len() > 1 && !param.experts {
                    g = x.b.all_reduce(&format!("all-reduce d{label}{l}"), g);
                }
                let w = x.k(
                    s,
                    &format!("sgd {label}{l}"),
                    Sgd { lr: scale },
                    &[x.weights[copy][l][pi], g],
                );
                x.tag_from(at, Tag::Sgd { stage: s });
                updated.push(w);
                results.push((copy, l, param));
            }
        }
    }
    for w in updated {
        x.b.result(w);
    }
    for (mb, y) in x.outputs.clone().into_iter().enumerate() {
        let last = schedule.placement(mb, plan.last_vs()).0;
        let y = y.ok_or_else(|| missing(last, "the output", mb, 0))?;
        x.b.result(y);
    }
    let program = x.b.build()?;
    let mut tags = x.tags;
    tags.resize(program.nodes().len(), None);
    Ok(Lowered {
        program,
        device_of: plan.device_of.clone(),
        tags,
        weights: results,
    })
}
