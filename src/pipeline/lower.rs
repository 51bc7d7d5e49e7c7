//! Lowering a [`Schedule`] to one [`Program`]: the checked inputs of a run ([`Plan`]), and the
//! nodes each op becomes on its stage's device.
//!
//! Stage `s` runs on `devices[s]`, or with a [`Fold`] on `devices[fold(s)]` beside other stages,
//! and holds the virtual stages its chunks map to
//! ([`Schedule::virtual_stage`]); each virtual stage holds a contiguous block of the [`Mlp`]'s
//! layers ([`Mlp::split`]), and with DualPipe's two parameter copies each block lives on two
//! stages. The lowering walks the stages' op lists in a causal order (each stage's ops in its own
//! order; a receive only after its send; with stages sharing a device, the order of the
//! simulation at F = B = W, so a device takes its stages' ops as the simulator has it) and
//! appends, for each op, nodes on its stage's device:
//!
//! - **F**: each layer's matmul and relu, keeping each layer's input for backward;
//! - **B**: the input gradient, and the weight gradients too unless the schedule splits the
//!   backward (then each layer's output gradient is kept for **W**);
//! - **W**: the weight gradients, accumulated in place;
//! - a send is an [`Op::Send`](crate::program::Op::Send) node (the readback, right after the op
//!   that made the tensor), a receive an [`Op::Recv`](crate::program::Op::Recv) node (the upload,
//!   where the schedule receives), so every device runs its nodes in its stage's op order; a
//!   hand-off between two chunks of one stage (one stage, or a V's turn), or between two stages
//!   of one device, moves nothing.
//!
//! After the op lists each stage applies `W −= lr · (Σ dW) / m` in place; with two parameter
//! copies each copy first adds the other's gradient, so both take the same step. An F&B pair of
//! the schedule runs here as its F and then its B (the simulator's overlap is a cost model).

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use super::fold::{Fold, op_name};
use super::mlp::{Microbatch, Mlp};
use super::schedule::{OpKind, Schedule};
use super::simulate::{Costs, simulate_folded};
use super::validate::validate;
use crate::device::MeshDevice;
use crate::kernels::TensorType;
use crate::kernels::matmul::MatmulVariant;
use crate::kernels::{Accumulate, ElementwiseOp, Kernel, Matmul, MseGrad, Sgd};
use crate::program::{Program, ProgramBuilder, Value};
use crate::{Error, Result};

/// The program variable of `layer`'s weights in parameter copy `copy` (DualPipe holds two).
pub(super) fn weight_var(layer: usize, copy: usize) -> String {
    if copy == 0 {
        format!("weight {layer}")
    } else {
        format!("weight {layer} copy {copy}")
    }
}

/// Checked inputs of a run.
pub(super) struct Plan<'a> {
    pub(super) schedule: &'a Schedule,
    /// One per device the stages fold onto (one per stage unless folded).
    pub(super) devices: &'a [MeshDevice],
    pub(super) fold: Fold,
    /// Each stage's index into `devices` (its program device).
    pub(super) device_of: Vec<usize>,
    pub(super) model: &'a Mlp,
    pub(super) batch: &'a [Microbatch],
    pub(super) rows: Vec<usize>,
    /// Layers of each virtual stage.
    pub(super) split: Vec<Range<usize>>,
    pub(super) lr: f32,
}

impl<'a> Plan<'a> {
    pub(super) fn new(
        schedule: &'a Schedule,
        devices: &'a [MeshDevice],
        model: &'a Mlp,
        batch: &'a [Microbatch],
        lr: f32,
        fold: Fold,
    ) -> Result<Self> {
        const WHAT: &str = "pipeline run";
        validate(schedule)?;
        let bad = |reason: String| Error::InvalidArgument { what: WHAT, reason };
        let device_of = fold.devices_of(schedule.stages)?;
        let d = fold.device_count(schedule.stages);
        if devices.len() != d {
            return Err(bad(format!(
                "the schedule's {} stages run on {d} devices ({}) but {} were given",
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
        let split = model.split(schedule.virtual_stages())?;
        Ok(Plan {
            schedule,
            devices,
            fold,
            device_of,
            model,
            batch,
            rows,
            split,
            lr,
        })
    }

    pub(super) fn last_vs(&self) -> usize {
        self.schedule.virtual_stages() - 1
    }

    /// Stage `stage`'s program device.
    pub(super) fn dev(&self, stage: usize) -> usize {
        self.device_of[stage]
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
    /// Each stage's program device (the plan's), for the trace.
    pub(super) device_of: Vec<usize>,
    /// `[node]`.
    pub(super) tags: Vec<Option<Tag>>,
}

/// What F keeps for B (and B for W) of one (microbatch, chunk).
#[derive(Default)]
struct Saved {
    /// The input of each of the chunk's layers.
    inputs: Vec<Value>,
    /// The model's output, on the last virtual stage.
    output: Option<Value>,
    /// Split backward: each layer's output gradient (pre-activation), for W.
    dz: Vec<Option<Value>>,
}

struct Lowering<'p, 'a> {
    plan: &'p Plan<'a>,
    b: ProgramBuilder,
    tags: Vec<Option<Tag>>,
    /// `[copy][layer]`.
    weights: Vec<Vec<Value>>,
    grads: Vec<Vec<Option<Value>>>,
    inputs: Vec<Value>,
    targets: Vec<Value>,
    /// Arrived inputs (activations) and output gradients, by (what, microbatch, chunk), per stage.
    arrived: HashMap<(usize, Flowing, usize, usize), Value>,
    /// Outputs waiting for their send op, by (what, microbatch, chunk), per stage.
    outgoing: HashMap<(usize, Flowing, usize, usize), Value>,
    /// Sent values waiting for their receive, by (what, microbatch, receiving virtual stage),
    /// with whether both stages share a device (then the value itself: nothing is sent).
    sent: HashMap<(Flowing, usize, usize), (Value, bool)>,
    saved: HashMap<(usize, usize, usize), Saved>,
    outputs: Vec<Option<Value>>,
}

const NAIVE: MatmulVariant = MatmulVariant::Naive;

fn missing(stage: usize, what: &str, mb: usize, c: usize) -> Error {
    Error::InvalidArgument {
        what: "pipeline run",
        reason: format!(
            "stage {stage}: {what} of microbatch {mb}, chunk {c} is not there when needed"
        ),
    }
}

impl Lowering<'_, '_> {
    fn k(
        &mut self,
        stage: usize,
        name: &str,
        op: impl Kernel + 'static,
        inputs: &[Value],
    ) -> Value {
        let [v] = self
            .b
            .kernel(name, &[self.plan.dev(stage)], Arc::new(op), inputs);
        v
    }

    fn matmul(
        &mut self,
        stage: usize,
        name: &str,
        a: Value,
        b: Value,
        ta: bool,
        tb: bool,
    ) -> Value {
        let op = Matmul {
            limits: None,
            trans_a: ta,
            trans_b: tb,
            offsets: None,
            variant: NAIVE,
            f16_accumulate: false,
        };
        self.k(stage, name, op, &[a, b])
    }

    /// `grads[copy][layer] += hᵀ · dz` (the first contribution makes the accumulator).
    fn weight_grad(&mut self, stage: usize, copy: usize, layer: usize, h: Value, dz: Value) {
        let dw = self.matmul(stage, &format!("dW{layer}"), h, dz, true, false);
        let next = match self.grads[copy][layer] {
            None => dw,
            Some(acc) => self.k(
                stage,
                &format!("accumulate dW{layer}"),
                Accumulate,
                &[acc, dw],
            ),
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
        let last_layer = self.plan.model.layers() - 1;
        let w = self.plan.copy_of_chunk(c);
        let mut h = if vs == 0 {
            self.inputs.get(mb).copied()
        } else {
            self.arrived.remove(&(s, Flowing::Activation, mb, c))
        }
        .ok_or_else(|| missing(s, "the input activation", mb, c))?;
        let mut inputs = Vec::with_capacity(layers.len());
        for layer in layers {
            inputs.push(h);
            let z = self.matmul(
                s,
                &format!("F{layer}"),
                h,
                self.weights[w][layer],
                false,
                false,
            );
            h = if layer < last_layer {
                self.b.relu(&format!("relu{layer}"), &[self.plan.dev(s)], z)
            } else {
                z
            };
        }
        let output = if vs == self.plan.last_vs() {
            self.outputs[mb] = Some(h);
            Some(h)
        } else {
            self.pass_on(s, Flowing::Activation, mb, c, h);
            None
        };
        let dz = vec![None; inputs.len()];
        self.saved.insert((s, mb, c), Saved { inputs, output, dz });
        Ok(())
    }

    fn backward(&mut self, s: usize, mb: usize, c: usize) -> Result<()> {
        let split = self.plan.schedule.split_backward;
        let copy = self.plan.copy_of_chunk(c);
        let (vs, layers) = self.chunk_layers(s, c);
        let mut saved = self
            .saved
            .remove(&(s, mb, c))
            .ok_or_else(|| missing(s, "the forward's saved activations", mb, c))?;
        let mut dz = if vs == self.plan.last_vs() {
            let y = saved
                .output
                .ok_or_else(|| missing(s, "the output", mb, c))?;
            let t = *self
                .targets
                .get(mb)
                .ok_or_else(|| missing(s, "the target", mb, c))?;
            self.k(s, "mse_grad", MseGrad, &[y, t])
        } else {
            self.arrived
                .remove(&(s, Flowing::Gradient, mb, c))
                .ok_or_else(|| missing(s, "the output gradient", mb, c))?
        };
        for (j, layer) in layers.clone().enumerate().rev() {
            let h = saved.inputs[j];
            if split {
                saved.dz[j] = Some(dz);
            } else {
                self.weight_grad(s, copy, layer, h, dz);
            }
            if layer > 0 {
                let dh = self.matmul(
                    s,
                    &format!("dX{layer}"),
                    dz,
                    self.weights[copy][layer],
                    false,
                    true,
                );
                dz = self.k(
                    s,
                    &format!("relu_backward{layer}"),
                    ElementwiseOp::ReluBackward,
                    &[h, dh],
                );
            }
        }
        if vs > 0 {
            self.pass_on(s, Flowing::Gradient, mb, c, dz);
        }
        if split {
            saved.output = None;
            self.saved.insert((s, mb, c), saved);
        }
        Ok(())
    }

    fn weight_grads(&mut self, s: usize, mb: usize, c: usize) -> Result<()> {
        let (_, layers) = self.chunk_layers(s, c);
        let copy = self.plan.copy_of_chunk(c);
        let saved = self
            .saved
            .remove(&(s, mb, c))
            .ok_or_else(|| missing(s, "the backward's saved gradients", mb, c))?;
        for (j, layer) in layers.enumerate() {
            let dz = saved.dz[j].ok_or_else(|| missing(s, "a layer's output gradient", mb, c))?;
            self.weight_grad(s, copy, layer, saved.inputs[j], dz);
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
            let here = self.plan.dev(s);
            self.b.recv(&format!("recv {}", what.name()), sent, &[here])
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
        let compute = Tag::Compute { stage: s, name, mb };
        match op.kind {
            OpKind::Forward => {
                self.forward(s, mb, c)?;
                self.tag_from(at, compute);
            }
            OpKind::Backward => {
                self.backward(s, mb, c)?;
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

/// Lowers the plan's schedule to a program.
pub(super) fn lower(plan: &Plan<'_>) -> Result<Lowered> {
    let schedule = plan.schedule;
    let p = schedule.stages;
    let mut b = ProgramBuilder::new(format!("pipeline {}", schedule.kind));
    // The schedule is the order: no device runs a later op while an earlier one waits.
    b.keep_order();
    let widths = &plan.model.widths;
    let copies = schedule.kind.parameter_copies();
    let mut weights: Vec<Vec<Value>> = vec![Vec::new(); copies];
    for l in 0..plan.model.layers() {
        for (copy, stage) in plan.holders_of_layer(l).into_iter().enumerate() {
            let ty = TensorType::f32(&plan.model.layer_shape(l));
            weights[copy].push(b.variable(&weight_var(l, copy), &[plan.dev(stage)], ty));
        }
    }
    let out = widths[widths.len() - 1];
    let (mut inputs, mut targets) = (Vec::new(), Vec::new());
    for (mb, &rows) in plan.rows.iter().enumerate() {
        let first = schedule.placement(mb, 0).0;
        let last = schedule.placement(mb, plan.last_vs()).0;
        inputs.push(b.typed_arg(&[plan.dev(first)], TensorType::f32(&[rows, widths[0]])));
        targets.push(b.typed_arg(&[plan.dev(last)], TensorType::f32(&[rows, out])));
    }
    let mut x = Lowering {
        plan,
        b,
        tags: Vec::new(),
        grads: vec![vec![None; plan.model.layers()]; copies],
        weights,
        inputs,
        targets,
        arrived: HashMap::new(),
        outgoing: HashMap::new(),
        sent: HashMap::new(),
        saved: HashMap::new(),
        outputs: vec![None; plan.batch.len()],
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
    // adds the other's, so both copies take the same step. Then the weights and outputs back.
    let scale = plan.lr / schedule.microbatches as f32;
    let layers = plan.model.layers();
    let mut received: HashMap<(usize, usize), Vec<(Value, bool)>> = HashMap::new();
    for from_copy in 0..copies {
        for l in 0..layers {
            let holders = plan.holders_of_layer(l);
            let g = x.grads[from_copy][l]
                .ok_or_else(|| missing(holders[from_copy], "the weight gradient", 0, 0))?;
            for (to_copy, &to) in holders.iter().enumerate().filter(|&(c, _)| c != from_copy) {
                let at = x.b.node_count();
                let local = plan.dev(to) == plan.dev(holders[from_copy]);
                let got = if local {
                    g
                } else {
                    let sent = x.b.send("send dW", g);
                    x.b.recv("recv dW", sent, &[plan.dev(to)])
                };
                x.tag_from(at, Tag::Sgd { stage: to });
                received.entry((to_copy, l)).or_default().push((got, local));
            }
        }
    }
    let mut updated = Vec::with_capacity(copies * layers);
    for copy in 0..copies {
        for l in 0..layers {
            let s = plan.holders_of_layer(l)[copy];
            let at = x.b.node_count();
            let mut g = x.grads[copy][l].ok_or_else(|| missing(s, "the weight gradient", 0, 0))?;
            for (got, local) in received.remove(&(copy, l)).unwrap_or_default() {
                let name = format!("sum dW{l}");
                g = if local {
                    // The other copy's own gradient, which its sum updates in place: add out of
                    // place, so neither sum reads the other's result.
                    x.b.add(&name, &[plan.dev(s)], g, got)
                } else {
                    x.k(s, &name, Accumulate, &[g, got])
                };
            }
            let w = x.k(
                s,
                &format!("sgd{l}"),
                Sgd { lr: scale },
                &[x.weights[copy][l], g],
            );
            x.tag_from(at, Tag::Sgd { stage: s });
            updated.push(w);
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
    })
}
