//! Real pipelined training runs: a [`Schedule`] lowered to one [`Program`] and run by the
//! gang-scheduling runtime, as one run of the caller's [`Client`], like every other workload.
//!
//! Stage `s` runs on `devices[s]` and holds virtual stages `c · p + s` for its chunks `c`; each
//! virtual stage holds a contiguous block of the [`Mlp`]'s layers ([`Mlp::split`]). The
//! lowering walks the stages' op lists in a causal order (each stage's ops in its own order; a
//! receive only after its send) and appends, for each op, nodes on its stage's device:
//!
//! - **F**: each layer's matmul and relu, keeping each layer's input for backward;
//! - **B**: the input gradient, and the weight gradients too unless the schedule splits the
//!   backward (then each layer's output gradient is kept for **W**);
//! - **W**: the weight gradients, accumulated in place;
//! - a send is an [`Op::Send`](crate::program::Op::Send) node (the readback, right after the op
//!   that made the tensor), a receive an [`Op::Recv`](crate::program::Op::Recv) node (the upload,
//!   where the schedule receives), so every device runs its nodes in its stage's op order.
//!
//! Weights are program variables; after the op lists each stage applies `W −= lr · (Σ dW) / m` in
//! place and the weights are read back: one pipelined step equals [`Mlp::reference_step`] over
//! the same microbatches. Dispatch is parallel: every command buffer is recorded before the run
//! starts, and each device's worker submits its stage's work as its inputs arrive.
//!
//! **Trace.** The runtime traces every kernel (GPU-timestamped where the adapter can) and
//! transfer; the report turns them into the pipeline's view, with the *stage index* as `device`
//! (not [`Device::id`]), so [`super::timeline`] and the simulator's events line up
//! ([`RunReport::device_names`] names each stage's process after its device). An op is one
//! compute-lane kernel event named `F`, `B`, `W` (with `.c<chunk>` when `v > 1`, as the
//! simulator names them) spanning its kernels, with its microbatch. A send is a transfer-lane
//! event (the readback, from when the op that made its tensor ended) carrying the flow's `Out` end; the matching receive is a transfer-lane
//! event on the peer (the upload) carrying its `In` end; time a receive waited for its data is a
//! wait event. The final update is a compute-lane kernel named `sgd`, outside the measured
//! makespan.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use super::mlp::{Microbatch, Mlp};
use super::schedule::{OpKind, Schedule};
use super::simulate::{Costs, Simulation, simulate};
use super::validate::validate;
use crate::device::{DeviceList, MeshDevice};
use crate::kernels::TensorType;
use crate::kernels::matmul::MatmulVariant;
use crate::kernels::ops::KernelOp;
use crate::program::{CompileOptions, HostData, Program, ProgramBuilder, Value, Variables};
use crate::sched::{Client, RunOptions};
use crate::trace::{Event, EventKind, EventMeta, FlowRole, Lane};
use crate::{DType, Error, Result, Tensor};

/// What one pipelined training step did and how long it took.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// Weights after the SGD step, per layer (row-major `[in, out]`).
    pub weights: Vec<Vec<f32>>,
    /// Mean over microbatches of each one's mean squared error, before the step.
    pub loss: f32,
    /// Every event of the run, by start time; `device` is the stage index (see the module docs).
    pub events: Vec<Event>,
    /// `(stage, "stage s: <device label>")`, for [`crate::trace::chrome::to_json`].
    pub device_names: Vec<(usize, String)>,
    /// From the first F/B/W start to the last F/B/W end, over all stages.
    pub makespan_ns: u64,
    /// Mean measured F, B and W per op (per chunk); without split backward, `backward_ns` is the
    /// whole B (weight gradient included) and `weight_grad_ns` is 0, as [`Costs`] expects. The
    /// latency is the mean transfer (the send's readback + the receive's upload; waits are
    /// excluded) with infinite bandwidth; `activation_bytes` is the largest stage-boundary
    /// activation.
    pub measured: Costs,
    /// Idle compute time over `p × makespan`, from the compute-lane F/B/W events.
    pub measured_bubble: f64,
    /// [`simulate`] of the same schedule under [`RunReport::measured`].
    pub simulated: Simulation,
}

/// Runs one pipelined training step of `model` over `batch` (one [`Microbatch`] per schedule
/// microbatch) with learning rate `lr`, as one run of `client`: `devices[s]` (a device of the
/// client's runtime's mesh) runs stage `s` (with all its chunks). The report holds the run's
/// events in the pipeline's view; the runtime's own tracer, when on, also gets them as they
/// happen, in the runtime's view (device ids).
///
/// In a job of several ranks the stages may be on different ranks: every rank calls this with
/// the same arguments, each runs its stages, and every rank's report has every stage's events
/// (gathered, on rank 0's clock).
pub fn execute(
    client: &Client,
    schedule: &Schedule,
    devices: &(impl DeviceList + ?Sized),
    model: &Mlp,
    batch: &[Microbatch],
    lr: f32,
) -> Result<RunReport> {
    let devices = devices.mesh_devices();
    let plan = Plan::new(schedule, &devices, model, batch, lr)?;
    let lowered = lower(&plan)?;
    let mut variables = Variables::new();
    for (l, w) in model.weights.iter().enumerate() {
        // This rank's stages' weights (each copy's); other ranks upload theirs.
        for (copy, stage) in plan.holders_of_layer(l).into_iter().enumerate() {
            let t = devices[stage]
                .local()
                .map(|d| Tensor::from_f32(d, &model.layer_shape(l), DType::F32, w))
                .transpose()?;
            variables.insert_shards(weight_var(l, copy), vec![t]);
        }
    }
    let exec = Arc::new(lowered.program.compile_with(
        &devices,
        CompileOptions {
            in_flight: 1,
            ..CompileOptions::default()
        },
        &variables,
    )?);
    let mut args: Vec<HostData> = Vec::new();
    for mb in batch {
        args.push(mb.input.clone().into());
        args.push(mb.target.clone().into());
    }
    let opts = RunOptions {
        trace: true,
        ..RunOptions::default()
    };
    let (results, events) = client.submit(&exec, args, opts)?.wait_traced()?;
    let results: Vec<Vec<f32>> = results
        .iter()
        .map(|b| bytemuck::pod_collect_to_vec::<u8, f32>(b))
        .collect();
    let mut events = stage_events(&lowered, exec.id(), events);
    let job = client.job();
    if job.size() > 1 {
        // Every rank's stages, on rank 0's clock.
        let offsets = job.clock_offsets(3)?;
        let shift = offsets.get(job.rank()).map_or(0, |o| o.to_root_ns);
        for e in &mut events {
            let at = |t: u64| (i128::from(t) + i128::from(shift)).max(0) as u64;
            (e.start_ns, e.end_ns) = (at(e.start_ns), at(e.end_ns));
        }
        events = job.all_gather(&events)?.into_iter().flatten().collect();
        events.sort_by_key(|e| (e.start_ns, e.end_ns));
    }
    let layers = model.layers();
    let copies = schedule.kind.parameter_copies();
    let weights = results.get(..layers).unwrap_or_default().to_vec();
    for copy in 1..copies {
        let other = results
            .get(copy * layers..(copy + 1) * layers)
            .unwrap_or_default();
        if other != weights.as_slice() {
            return Err(Error::InvalidArgument {
                what: "pipeline run",
                reason: format!("parameter copy {copy} differs from copy 0 after the update"),
            });
        }
    }
    let mut losses = Vec::with_capacity(batch.len());
    for (y, mb) in results
        .get(copies * layers..)
        .unwrap_or_default()
        .iter()
        .zip(batch)
    {
        let sum: f64 = y
            .iter()
            .zip(&mb.target)
            .map(|(&y, &t)| f64::from(y - t).powi(2))
            .sum();
        losses.push((sum / y.len().max(1) as f64) as f32);
    }
    report(&plan, weights, losses, events)
}

/// The program variable of `layer`'s weights in parameter copy `copy` (DualPipe holds two).
fn weight_var(layer: usize, copy: usize) -> String {
    if copy == 0 {
        format!("weight {layer}")
    } else {
        format!("weight {layer} copy {copy}")
    }
}

/// Checked inputs of a run.
struct Plan<'a> {
    schedule: &'a Schedule,
    devices: &'a [MeshDevice],
    model: &'a Mlp,
    batch: &'a [Microbatch],
    rows: Vec<usize>,
    /// Layers of each virtual stage.
    split: Vec<Range<usize>>,
    lr: f32,
}

impl<'a> Plan<'a> {
    fn new(
        schedule: &'a Schedule,
        devices: &'a [MeshDevice],
        model: &'a Mlp,
        batch: &'a [Microbatch],
        lr: f32,
    ) -> Result<Self> {
        const WHAT: &str = "pipeline run";
        validate(schedule)?;
        let bad = |reason: String| Error::InvalidArgument { what: WHAT, reason };
        if devices.len() != schedule.stages {
            return Err(bad(format!(
                "the schedule has {} stages but {} devices were given; devices[s] runs stage s",
                schedule.stages,
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
            model,
            batch,
            rows,
            split,
            lr,
        })
    }

    fn last_vs(&self) -> usize {
        self.schedule.virtual_stages() - 1
    }

    /// The stage holding each copy of `layer` (copy 0 first).
    fn holders_of_layer(&self, layer: usize) -> Vec<usize> {
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
enum Flowing {
    Activation,
    Gradient,
}

impl Flowing {
    fn name(self) -> &'static str {
        match self {
            Flowing::Activation => "act",
            Flowing::Gradient => "grad",
        }
    }
}

/// What a node belongs to, for the pipeline's view of the trace.
#[derive(Debug, Clone)]
enum Tag {
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
struct Lowered {
    program: Program,
    /// `[node]`.
    tags: Vec<Option<Tag>>,
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
    /// Sent values waiting for their receive, by (what, microbatch, receiving virtual stage).
    sent: HashMap<(Flowing, usize, usize), Value>,
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
    fn k(&mut self, stage: usize, name: &str, op: KernelOp, inputs: &[Value]) -> Value {
        let [v] = self.b.kernel(name, &[stage], Arc::new(op), inputs);
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
        let op = KernelOp::Matmul {
            trans_a: ta,
            trans_b: tb,
            offsets: None,
            variant: NAIVE,
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
                KernelOp::Accumulate,
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
                self.b.relu(&format!("relu{layer}"), &[s], z)
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
            self.k(s, "mse_grad", KernelOp::MseGrad, &[y, t])
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
                    KernelOp::ReluBackward,
                    &[dh, h],
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
        let sent = self.b.send(&format!("send {}", what.name()), v);
        self.sent.insert((what, mb, to_vs), sent);
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
        let v = self.b.recv(&format!("recv {}", what.name()), sent, &[s]);
        self.arrived.insert((s, what, mb, c), v);
        Ok(())
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
fn lower(plan: &Plan<'_>) -> Result<Lowered> {
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
            weights[copy].push(b.variable(&weight_var(l, copy), &[stage], ty));
        }
    }
    let out = widths[widths.len() - 1];
    let (mut inputs, mut targets) = (Vec::new(), Vec::new());
    for (mb, &rows) in plan.rows.iter().enumerate() {
        let first = schedule.placement(mb, 0).0;
        let last = schedule.placement(mb, plan.last_vs()).0;
        inputs.push(b.typed_arg(&[first], TensorType::f32(&[rows, widths[0]])));
        targets.push(b.typed_arg(&[last], TensorType::f32(&[rows, out])));
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
    // A causal order: each stage's ops in its own order, a receive only once its send is in.
    let mut next = vec![0usize; p];
    loop {
        let mut progressed = false;
        for (s, next) in next.iter_mut().enumerate() {
            while let Some(op) = schedule.ops[s].get(*next) {
                let (mb, c) = (op.microbatch, op.chunk);
                let at = x.b.node_count();
                let letter = op.kind.letter().unwrap_or('?');
                let name = if schedule.chunks > 1 {
                    format!("{letter}.c{c}")
                } else {
                    letter.to_string()
                };
                let compute = Tag::Compute { stage: s, name, mb };
                match op.kind {
                    OpKind::Forward => {
                        x.forward(s, mb, c)?;
                        x.tag_from(at, compute);
                    }
                    OpKind::Backward => {
                        x.backward(s, mb, c)?;
                        x.tag_from(at, compute);
                    }
                    OpKind::WeightGrad => {
                        x.weight_grads(s, mb, c)?;
                        x.tag_from(at, compute);
                    }
                    OpKind::SendActivation | OpKind::SendGradient => {
                        let what = if op.kind == OpKind::SendActivation {
                            Flowing::Activation
                        } else {
                            Flowing::Gradient
                        };
                        x.send(s, what, mb, c, op.peer)?;
                        x.tag_from(at, Tag::Send { stage: s, what, mb });
                    }
                    OpKind::RecvActivation | OpKind::RecvGradient => {
                        let what = if op.kind == OpKind::RecvActivation {
                            Flowing::Activation
                        } else {
                            Flowing::Gradient
                        };
                        if !x.can_recv(s, what, mb, c) {
                            break;
                        }
                        x.recv(s, what, mb, c)?;
                        x.tag_from(at, Tag::Recv { stage: s, what, mb });
                    }
                }
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
    // The SGD step per stage. With two parameter copies each copy's gradient first goes to the
    // other copy's stage (all sends before any sum: the sum accumulates in place), and each
    // adds the other's, so both copies take the same step. Then the weights and outputs back.
    let scale = plan.lr / schedule.microbatches as f32;
    let layers = plan.model.layers();
    let mut received: HashMap<(usize, usize), Vec<Value>> = HashMap::new();
    for from_copy in 0..copies {
        for l in 0..layers {
            let holders = plan.holders_of_layer(l);
            let g = x.grads[from_copy][l]
                .ok_or_else(|| missing(holders[from_copy], "the weight gradient", 0, 0))?;
            for (to_copy, &to) in holders.iter().enumerate().filter(|&(c, _)| c != from_copy) {
                let at = x.b.node_count();
                let sent = x.b.send("send dW", g);
                let got = x.b.recv("recv dW", sent, &[to]);
                x.tag_from(at, Tag::Sgd { stage: to });
                received.entry((to_copy, l)).or_default().push(got);
            }
        }
    }
    let mut updated = Vec::with_capacity(copies * layers);
    for copy in 0..copies {
        for l in 0..layers {
            let s = plan.holders_of_layer(l)[copy];
            let at = x.b.node_count();
            let mut g = x.grads[copy][l].ok_or_else(|| missing(s, "the weight gradient", 0, 0))?;
            for got in received.remove(&(copy, l)).unwrap_or_default() {
                g = x.k(s, &format!("sum dW{l}"), KernelOp::Accumulate, &[g, got]);
            }
            let w = x.k(
                s,
                &format!("sgd{l}"),
                KernelOp::Sgd { lr: scale },
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
    Ok(Lowered { program, tags })
}

/// The runtime's events of program `program` as the pipeline's view (see the module docs).
fn stage_events(lowered: &Lowered, program: u64, raw: Vec<Event>) -> Vec<Event> {
    // One compute event per op (and per stage's update), spanning its kernels.
    let mut spans: HashMap<(usize, String, Option<usize>), (u64, u64)> = HashMap::new();
    let mut out = Vec::new();
    for e in raw {
        if e.program != Some(program) {
            continue;
        }
        let Some(tag) = e
            .node
            .and_then(|n| lowered.tags.get(n as usize))
            .and_then(Option::as_ref)
        else {
            continue;
        };
        match (tag, e.kind) {
            (Tag::Compute { stage, name, mb }, EventKind::Kernel) => {
                let span = spans
                    .entry((*stage, name.clone(), Some(*mb)))
                    .or_insert((u64::MAX, 0));
                *span = (span.0.min(e.start_ns), span.1.max(e.end_ns));
            }
            (Tag::Sgd { stage }, EventKind::Kernel) => {
                let span = spans
                    .entry((*stage, "sgd".into(), None))
                    .or_insert((u64::MAX, 0));
                *span = (span.0.min(e.start_ns), span.1.max(e.end_ns));
            }
            (
                Tag::Send { stage, what, mb } | Tag::Recv { stage, what, mb },
                EventKind::Transfer,
            ) => {
                // Only the flow ends are the pipeline's transfers (not uploads of arguments).
                let Some(f) = e.flow else { continue };
                let verb = if f.role == FlowRole::Out {
                    "send"
                } else {
                    "recv"
                };
                let meta = EventMeta::transfer(*stage)
                    .microbatch(*mb as u32)
                    .flow(f.id, f.role);
                out.push(meta.event(format!("{verb} {}", what.name()), e.start_ns, e.end_ns));
            }
            (Tag::Recv { stage, what, mb }, EventKind::Wait) => {
                let meta = EventMeta::wait(*stage).microbatch(*mb as u32);
                out.push(meta.event(format!("wait {}", what.name()), e.start_ns, e.end_ns));
            }
            _ => {}
        }
    }
    let mut compute = Vec::new();
    for ((stage, name, mb), (start, end)) in spans {
        let mut meta = EventMeta::kernel(stage);
        if let Some(mb) = mb {
            meta = meta.microbatch(mb as u32);
        }
        compute.push(meta.event(name, start, end));
    }
    // A send's readback is queued behind the op that makes its tensor (parallel dispatch submits
    // both at once): it starts, as a transfer, when that op's kernels end on its stage.
    for e in out
        .iter_mut()
        .filter(|e| e.flow.is_some_and(|f| f.role == FlowRole::Out))
    {
        let ready = compute
            .iter()
            .filter(|c| c.device == e.device && c.end_ns <= e.end_ns)
            .map(|c| c.end_ns)
            .max();
        if let Some(ready) = ready {
            e.start_ns = e.start_ns.max(ready);
        }
    }
    out.extend(compute);
    out.sort_by_key(|e| (e.start_ns, e.end_ns));
    out
}

/// Measures the run from its pipeline events.
fn report(
    plan: &Plan<'_>,
    weights: Vec<Vec<f32>>,
    losses: Vec<f32>,
    mut events: Vec<Event>,
) -> Result<RunReport> {
    let schedule = plan.schedule;
    events.sort_by_key(|e| (e.start_ns, e.end_ns));
    let loss = losses.iter().map(|&l| f64::from(l)).sum::<f64>() / losses.len().max(1) as f64;

    let is_op = |e: &&Event, letter: char| {
        e.lane == Lane::Compute
            && e.kind == EventKind::Kernel
            && (e.name == letter.to_string() || e.name.starts_with(&format!("{letter}.c")))
    };
    let mean = |letter: char| {
        let (n, sum) = events
            .iter()
            .filter(|e| is_op(e, letter))
            .fold((0u64, 0u64), |(n, s), e| (n + 1, s + e.duration_ns()));
        sum.checked_div(n).unwrap_or(0)
    };
    let transfers = events.iter().filter(|e| e.lane == Lane::Transfer);
    let (sends, transfer_ns) = transfers.fold((0u64, 0u64), |(n, s), e| {
        let out = e.flow.is_some_and(|f| f.role == FlowRole::Out);
        (n + u64::from(out), s + e.duration_ns())
    });
    let widths = &plan.model.widths;
    let max_rows = plan.rows.iter().copied().max().unwrap_or(0);
    let activation_bytes = plan.split[..plan.split.len() - 1]
        .iter()
        .map(|r| (max_rows * widths[r.end] * 4) as u64)
        .max()
        .unwrap_or(0);
    let measured = Costs {
        all_to_all_ns: 0,
        blocking_sends: false,
        forward_ns: mean('F'),
        backward_ns: mean('B'),
        weight_grad_ns: if schedule.split_backward {
            mean('W')
        } else {
            0
        },
        latency_ns: transfer_ns.checked_div(sends).unwrap_or(0),
        bytes_per_ns: f64::INFINITY,
        activation_bytes,
    };

    let ops: Vec<&Event> = events
        .iter()
        .filter(|e| ['F', 'B', 'W'].iter().any(|&l| is_op(e, l)))
        .collect();
    let first = ops.iter().map(|e| e.start_ns).min().unwrap_or(0);
    let last = ops.iter().map(|e| e.end_ns).max().unwrap_or(0);
    let makespan_ns = last.saturating_sub(first);
    let busy: u64 = ops.iter().map(|e| e.duration_ns()).sum();
    let capacity = schedule.stages as f64 * makespan_ns as f64;
    let measured_bubble = if capacity > 0.0 {
        1.0 - busy as f64 / capacity
    } else {
        0.0
    };
    let simulated = simulate(schedule, &measured)?;
    let device_names = plan
        .devices
        .iter()
        .enumerate()
        .map(|(s, d)| (s, format!("stage {s}: {}", d.label())))
        .collect();
    Ok(RunReport {
        weights,
        loss: loss as f32,
        events,
        device_names,
        makespan_ns,
        measured,
        measured_bubble,
        simulated,
    })
}
