//! Real pipelined training runs: a [`Schedule`] executed on devices, one host thread per stage.
//!
//! Stage `s` runs on `devices[s]` and holds virtual stages `c · p + s` for its chunks `c`; each
//! virtual stage holds a contiguous block of the [`Mlp`]'s layers ([`Mlp::split`]). The thread
//! walks `schedule.ops[s]` in order:
//!
//! - **F** runs its layers' forward (matmul, relu) and keeps each layer's input for backward;
//! - **B** computes the input gradient, and the weight gradients too unless the schedule splits
//!   the backward, in which case it keeps each layer's output gradient for **W**;
//! - **W** computes the weight gradients; weight gradients are accumulated on the device;
//! - a send hands the tensor to its stage's *sender thread* and returns at once; that thread
//!   reads it back to the host and hands it to the peer stage's thread over a channel (the
//!   runtime's cross-device transfers are host-staged too), while the stage goes on with its next
//!   op; receives block on that channel, up to the device's wait timeout ([`Error::Timeout`]
//!   names what was awaited), and upload.
//!
//! Every compute op waits for its GPU work, so its host-timed start and end are real. After the
//! op lists (its sends still draining on the sender thread), each device applies `W −= lr · (Σ dW) / m` and the weights are read back: one
//! pipelined step equals [`Mlp::reference_step`] over the same microbatches.
//!
//! **Trace.** Events use the *stage index* as `device` (not [`Device::id`]), so
//! [`super::timeline`] and the simulator's events line up; [`RunReport::device_names`] names
//! each stage's process after its device. Compute ops are kernels on [`Lane::Compute`] named
//! `F`, `B`, `W` (with `.c<chunk>` when `v > 1`, as the simulator names them), with their
//! microbatch, on [`crate::trace::Clock::Host`]. A send is a transfer-lane event (the readback) carrying the
//! flow's `Out` end; the matching receive is a transfer-lane event on the peer (the upload, which
//! starts after the send ended) carrying its `In` end. Time a receive spends blocked on the
//! channel is an [`EventMeta::wait`] event on the host lane. The final update is a compute-lane
//! kernel named `sgd`, outside the measured makespan.
//!
//! **Model vs. run.** As in the simulator, sends run beside compute: the sent tensor moves into the
//! sender thread's message, so it stays alive (and nothing writes it: every op writes fresh
//! tensors) until its readback is done. The readback waits only for its own copy's submission,
//! which the device's queue orders after the op that produced the tensor. A failed readback sets
//! the run's failure flag like a failed stage, and its error is the stage's. The receiver's
//! upload still blocks its stage, as it does in the simulator (the op waits for its input).

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use super::mlp::{Microbatch, Mlp};
use super::schedule::{OpKind, Schedule};
use super::simulate::{Costs, Simulation, simulate};
use super::validate::validate;
use crate::kernels::elementwise::{self, ElementwiseOp};
use crate::kernels::matmul::{MatmulOptions, MatmulVariant, VariantChoice, matmul};
use crate::kernels::{ELEMENTWISE, MATMUL_NAIVE, MLP, mlp};
use crate::trace::{Event, EventKind, EventMeta, FlowRole, Lane, Tracer};
use crate::{DType, Device, Error, Result, Tensor};

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
    /// latency is the mean transfer (the sender thread's readback + the receiver's upload; time a
    /// send queues behind the previous one and channel waits are excluded) with infinite
    /// bandwidth; `activation_bytes` is the largest stage-boundary activation.
    pub measured: Costs,
    /// Idle compute time over `p × makespan`, from the compute-lane F/B/W events.
    pub measured_bubble: f64,
    /// [`simulate`] of the same schedule under [`RunReport::measured`].
    pub simulated: Simulation,
}

/// Runs one pipelined training step of `model` over `batch` (one [`Microbatch`] per schedule
/// microbatch) with learning rate `lr`: `devices[s]` runs stage `s` (with all its chunks). Events
/// go to `tracer` as they happen and into the report whether or not it is on.
pub fn execute(
    schedule: &Schedule,
    devices: &[Device],
    model: &Mlp,
    batch: &[Microbatch],
    lr: f32,
    tracer: &Tracer,
) -> Result<RunReport> {
    let plan = Plan::new(schedule, devices, model, batch, lr)?;
    let p = schedule.stages;
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..p).map(|_| mpsc::channel::<Msg>()).unzip();
    let shared = Shared {
        plan,
        tracer,
        epoch: tracer.epoch().unwrap_or_else(Instant::now),
        senders,
        failed: AtomicBool::new(false),
        barrier: Barrier::new(p),
        local_flow: AtomicU64::new(0),
    };
    let results: Vec<std::result::Result<StageOutput, Fail>> = std::thread::scope(|scope| {
        let handles: Vec<_> = receivers
            .into_iter()
            .enumerate()
            .map(|(stage, rx)| {
                let shared = &shared;
                scope.spawn(move || {
                    let _guard = FailOnPanic(&shared.failed);
                    let out = run_stage(shared, stage, rx);
                    if matches!(out, Err(Fail::Own(_))) {
                        shared.failed.store(true, Ordering::SeqCst);
                    }
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(stage, h)| {
                h.join().unwrap_or_else(|p| {
                    Err(Fail::Own(Error::panicked(
                        format!("pipeline stage {stage}"),
                        &*p,
                    )))
                })
            })
            .collect()
    });
    let mut outputs = Vec::with_capacity(p);
    let mut peer_gone = false;
    for r in results {
        match r {
            Ok(o) => outputs.push(o),
            Err(Fail::Own(e)) => return Err(e),
            Err(Fail::PeerGone) => peer_gone = true,
        }
    }
    if peer_gone {
        return Err(Error::InvalidArgument {
            what: "pipeline run",
            reason: "a stage stopped because a peer failed, but no stage reported why".into(),
        });
    }
    report(&shared.plan, outputs)
}

/// Checked inputs of a run.
struct Plan<'a> {
    schedule: &'a Schedule,
    devices: &'a [Device],
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
        devices: &'a [Device],
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
}

/// What the stage threads share.
struct Shared<'a> {
    plan: Plan<'a>,
    tracer: &'a Tracer,
    epoch: Instant,
    senders: Vec<Sender<Msg>>,
    /// Set when a stage fails, so its peers stop waiting for data that will never come.
    failed: AtomicBool,
    /// All stages start their op lists together, after uploads and shader compilation.
    barrier: Barrier,
    /// Flow ids when the tracer is off (it then hands out only 0).
    local_flow: AtomicU64,
}

impl Shared<'_> {
    fn ns(&self) -> u64 {
        let ns = Instant::now()
            .saturating_duration_since(self.epoch)
            .as_nanos();
        u64::try_from(ns).unwrap_or(u64::MAX)
    }

    fn flow_id(&self) -> u64 {
        if self.tracer.is_on() {
            self.tracer.next_flow_id()
        } else {
            self.local_flow.fetch_add(1, Ordering::Relaxed)
        }
    }
}

/// Sets the shared failure flag if its thread unwinds, so peers stop waiting at once.
struct FailOnPanic<'a>(&'a AtomicBool);

impl Drop for FailOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::SeqCst);
        }
    }
}

/// Why a stage thread stopped.
enum Fail {
    Own(Error),
    /// Another stage failed first; its error is the one to report.
    PeerGone,
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail::Own(e)
    }
}

type StageResult<T> = std::result::Result<T, Fail>;

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

/// (what, microbatch, receiving virtual stage).
type Key = (Flowing, usize, usize);

/// A tensor on its way between stages.
struct Msg {
    key: Key,
    data: Vec<f32>,
    shape: [usize; 2],
    flow: u64,
}

/// A send handed to a stage's sender thread. Owning the tensor keeps its buffer alive until the
/// readback is done; no op writes a tensor after producing it.
struct Outbound {
    what: Flowing,
    mb: usize,
    to_vs: usize,
    peer: usize,
    shape: [usize; 2],
    tensor: Tensor,
}

/// One model chunk on a stage.
struct Chunk {
    vs: usize,
    layers: Range<usize>,
    weights: Vec<Tensor>,
    grads: Vec<Tensor>,
}

/// What F keeps for B (and B for W) of one (microbatch, chunk).
struct Saved {
    /// The input of each of the chunk's layers.
    inputs: Vec<Tensor>,
    /// The model's output, on the last virtual stage.
    output: Option<Tensor>,
    /// Split backward: each layer's output gradient (pre-activation), for W.
    dz: Vec<Option<Tensor>>,
}

struct StageOutput {
    weights: Vec<(usize, Vec<f32>)>,
    losses: Vec<f32>,
    events: Vec<Event>,
}

struct Stage<'a, 's> {
    shared: &'s Shared<'a>,
    stage: usize,
    device: &'a Device,
    rx: Receiver<Msg>,
    /// To this stage's sender thread.
    outbox: Sender<Outbound>,
    stash: HashMap<Key, Msg>,
    chunks: Vec<Chunk>,
    inputs: HashMap<usize, Tensor>,
    targets: HashMap<usize, Tensor>,
    /// Arrived inputs (activations) and output gradients, by (microbatch, chunk).
    arrived: HashMap<(Flowing, usize, usize), Tensor>,
    /// Outputs waiting for their send op, by (microbatch, chunk).
    outgoing: HashMap<(Flowing, usize, usize), Tensor>,
    saved: HashMap<(usize, usize), Saved>,
    outputs: Vec<(usize, Tensor)>,
    events: Vec<Event>,
}

const MATMUL: MatmulOptions = MatmulOptions {
    trans_a: false,
    trans_b: false,
    variant: VariantChoice::Fixed(MatmulVariant::Naive),
};

/// Runs stage `stage`'s op list with its sender thread beside it; a failure of either is the
/// stage's, and the sender's events join the stage's.
fn run_stage(shared: &Shared<'_>, stage: usize, rx: Receiver<Msg>) -> StageResult<StageOutput> {
    let (outbox, jobs) = mpsc::channel::<Outbound>();
    std::thread::scope(|scope| {
        let sender = scope.spawn(move || {
            let _guard = FailOnPanic(&shared.failed);
            let out = run_sender(shared, stage, jobs);
            if matches!(out, Err(Fail::Own(_))) {
                shared.failed.store(true, Ordering::SeqCst);
            }
            out
        });
        // Returning drops the outbox, so the sender drains its queue and ends.
        let out = run_ops(shared, stage, rx, outbox);
        if matches!(out, Err(Fail::Own(_))) {
            shared.failed.store(true, Ordering::SeqCst);
        }
        let sent = sender.join().unwrap_or_else(|p| {
            Err(Fail::Own(Error::panicked(
                format!("pipeline stage {stage} sender"),
                &*p,
            )))
        });
        match (out, sent) {
            (Err(Fail::Own(e)), _) | (_, Err(Fail::Own(e))) => Err(Fail::Own(e)),
            (Err(Fail::PeerGone), _) | (_, Err(Fail::PeerGone)) => Err(Fail::PeerGone),
            (Ok(mut o), Ok(events)) => {
                o.events.extend(events);
                Ok(o)
            }
        }
    })
}

/// The sender thread of `stage`: reads each handed-over tensor back, records the transfer-lane
/// event carrying the flow's `Out` end, and sends the data to the peer stage. It waits for work
/// until the stage drops its outbox (every stage wait is bounded) or a stage fails.
fn run_sender(
    shared: &Shared<'_>,
    stage: usize,
    jobs: Receiver<Outbound>,
) -> StageResult<Vec<Event>> {
    let mut events = Vec::new();
    loop {
        if shared.failed.load(Ordering::SeqCst) {
            return Err(Fail::PeerGone);
        }
        let job = match jobs.recv_timeout(Duration::from_millis(50)) {
            Ok(job) => job,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return Ok(events),
        };
        let tx = shared.senders.get(job.peer).ok_or_else(|| {
            Fail::Own(Error::InvalidArgument {
                what: "pipeline run",
                reason: format!("stage {stage}: no stage {} to send to", job.peer),
            })
        })?;
        let start = shared.ns();
        // `to_f32` waits only for its own copy, not for the work the stage keeps queueing.
        let data = job.tensor.to_f32()?;
        let end = shared.ns();
        let flow = shared.flow_id();
        let meta = EventMeta::transfer(stage)
            .microbatch(job.mb as u32)
            .flow(flow, FlowRole::Out);
        let e = meta.event(format!("send {}", job.what.name()), start, end);
        shared.tracer.emit_with(|| e.clone());
        events.push(e);
        let msg = Msg {
            key: (job.what, job.mb, job.to_vs),
            data,
            shape: job.shape,
            flow,
        };
        tx.send(msg).map_err(|_| Fail::PeerGone)?;
    }
}

fn run_ops(
    shared: &Shared<'_>,
    stage: usize,
    rx: Receiver<Msg>,
    outbox: Sender<Outbound>,
) -> StageResult<StageOutput> {
    let setup = Stage::new(shared, stage, rx, outbox);
    // Every thread reaches the barrier exactly once, failed setup or not.
    shared.barrier.wait();
    let mut st = setup?;
    let plan = &shared.plan;
    for op in &plan.schedule.ops[stage] {
        if shared.failed.load(Ordering::SeqCst) {
            return Err(Fail::PeerGone);
        }
        let (mb, c) = (op.microbatch, op.chunk);
        match op.kind {
            OpKind::Forward => st.compute(op.kind, mb, c, Stage::forward)?,
            OpKind::Backward => st.compute(op.kind, mb, c, Stage::backward)?,
            OpKind::WeightGrad => st.compute(op.kind, mb, c, Stage::weight_grad)?,
            OpKind::SendActivation => st.send(Flowing::Activation, mb, c, op.peer)?,
            OpKind::SendGradient => st.send(Flowing::Gradient, mb, c, op.peer)?,
            OpKind::RecvActivation => st.recv(Flowing::Activation, mb, c, op.peer)?,
            OpKind::RecvGradient => st.recv(Flowing::Gradient, mb, c, op.peer)?,
        }
    }
    st.finish()
}

impl<'a, 's> Stage<'a, 's> {
    /// Uploads this stage's weights, inputs and targets and compiles its kernels, so the timed
    /// op list measures only the work.
    fn new(
        shared: &'s Shared<'a>,
        stage: usize,
        rx: Receiver<Msg>,
        outbox: Sender<Outbound>,
    ) -> Result<Self> {
        let plan = &shared.plan;
        let device = &plan.devices[stage];
        let mut chunks = Vec::new();
        for c in 0..plan.schedule.chunks {
            let vs = plan.schedule.virtual_stage(stage, c);
            let layers = plan.split[vs].clone();
            let mut weights = Vec::new();
            let mut grads = Vec::new();
            for l in layers.clone() {
                let shape = plan.model.layer_shape(l);
                weights.push(Tensor::from_f32(
                    device,
                    &shape,
                    DType::F32,
                    &plan.model.weights[l],
                )?);
                grads.push(Tensor::zeros(device, &shape, DType::F32)?);
            }
            chunks.push(Chunk {
                vs,
                layers,
                weights,
                grads,
            });
        }
        let widths = &plan.model.widths;
        let (mut inputs, mut targets) = (HashMap::new(), HashMap::new());
        for (mb, data) in plan.batch.iter().enumerate() {
            let rows = plan.rows[mb];
            if chunks.iter().any(|c| c.vs == 0) {
                let t = Tensor::from_f32(device, &[rows, widths[0]], DType::F32, &data.input)?;
                inputs.insert(mb, t);
            }
            if chunks.iter().any(|c| c.vs == plan.last_vs()) {
                let out = widths[widths.len() - 1];
                let t = Tensor::from_f32(device, &[rows, out], DType::F32, &data.target)?;
                targets.insert(mb, t);
            }
        }
        MATMUL_NAIVE.pipeline(device, DType::F32, "main")?;
        ELEMENTWISE.pipeline(device, DType::F32, "relu")?;
        for entry in ["relu_backward", "mse_grad", "accumulate", "sgd"] {
            MLP.pipeline(device, DType::F32, entry)?;
        }
        // Queued uploads run with the next submission: make it now, outside the timed ops.
        device.submit(device.encoder("pipeline setup"));
        device.wait()?;
        Ok(Stage {
            shared,
            stage,
            device,
            rx,
            outbox,
            stash: HashMap::new(),
            chunks,
            inputs,
            targets,
            arrived: HashMap::new(),
            outgoing: HashMap::new(),
            saved: HashMap::new(),
            outputs: Vec::new(),
            events: Vec::new(),
        })
    }

    fn push(&mut self, e: Event) {
        self.shared.tracer.emit_with(|| e.clone());
        self.events.push(e);
    }

    fn chunk(&self, c: usize) -> Result<&Chunk> {
        self.chunks.get(c).ok_or_else(|| Error::InvalidArgument {
            what: "pipeline run",
            reason: format!("stage {} has no chunk {c}", self.stage),
        })
    }

    fn missing(&self, what: &str, mb: usize, c: usize) -> Error {
        Error::InvalidArgument {
            what: "pipeline run",
            reason: format!(
                "stage {}: {what} of microbatch {mb}, chunk {c} is not there when needed",
                self.stage
            ),
        }
    }

    /// Runs one compute op, waits for the GPU, and records it.
    fn compute(
        &mut self,
        kind: OpKind,
        mb: usize,
        c: usize,
        f: fn(&mut Self, usize, usize) -> Result<()>,
    ) -> Result<()> {
        let start = self.shared.ns();
        f(self, mb, c)?;
        self.device.wait()?;
        let end = self.shared.ns();
        let letter = kind.letter().unwrap_or('?');
        let name = if self.shared.plan.schedule.chunks > 1 {
            format!("{letter}.c{c}")
        } else {
            letter.to_string()
        };
        let meta = EventMeta::kernel(self.stage).microbatch(mb as u32);
        self.push(meta.event(name, start, end));
        Ok(())
    }

    fn forward(&mut self, mb: usize, c: usize) -> Result<()> {
        let plan = &self.shared.plan;
        let (layers, last_layer) = (self.chunk(c)?.layers.clone(), plan.model.layers() - 1);
        let vs = self.chunk(c)?.vs;
        let mut h = if vs == 0 {
            self.inputs.get(&mb).cloned()
        } else {
            self.arrived.remove(&(Flowing::Activation, mb, c))
        }
        .ok_or_else(|| self.missing("the input activation", mb, c))?;
        let mut inputs = Vec::with_capacity(layers.len());
        for (j, layer) in layers.enumerate() {
            inputs.push(h.clone());
            let z = matmul(&h, &self.chunks[c].weights[j], MATMUL)?;
            h = if layer < last_layer { relu(&z)? } else { z };
        }
        let output = if vs == plan.last_vs() {
            self.outputs.push((mb, h.clone()));
            Some(h)
        } else {
            self.pass_on(Flowing::Activation, mb, c, h);
            None
        };
        let dz = vec![None; inputs.len()];
        self.saved.insert((mb, c), Saved { inputs, output, dz });
        Ok(())
    }

    /// Hands a chunk's output to its send op, or straight to the next chunk when `p == 1` (a
    /// single stage has no transfers).
    fn pass_on(&mut self, what: Flowing, mb: usize, c: usize, t: Tensor) {
        if self.shared.plan.schedule.stages == 1 {
            let next = match what {
                Flowing::Activation => c + 1,
                Flowing::Gradient => c.wrapping_sub(1),
            };
            self.arrived.insert((what, mb, next), t);
        } else {
            self.outgoing.insert((what, mb, c), t);
        }
    }

    fn backward(&mut self, mb: usize, c: usize) -> Result<()> {
        let plan = &self.shared.plan;
        let split = plan.schedule.split_backward;
        let (vs, layers) = (self.chunk(c)?.vs, self.chunk(c)?.layers.clone());
        let mut saved = self
            .saved
            .remove(&(mb, c))
            .ok_or_else(|| self.missing("the forward's saved activations", mb, c))?;
        let mut dz = if vs == plan.last_vs() {
            let target = self.targets.get(&mb);
            match (&saved.output, target) {
                (Some(y), Some(t)) => mlp::mse_grad(y, t)?,
                _ => return Err(self.missing("the output or target", mb, c)),
            }
        } else {
            self.arrived
                .remove(&(Flowing::Gradient, mb, c))
                .ok_or_else(|| self.missing("the output gradient", mb, c))?
        };
        for j in (0..layers.len()).rev() {
            let h = &saved.inputs[j];
            if split {
                saved.dz[j] = Some(dz.clone());
            } else {
                self.weight_grad_of(c, j, h, &dz)?;
            }
            if layers.start + j > 0 {
                let w = &self.chunks[c].weights[j];
                let dh = matmul(
                    &dz,
                    w,
                    MatmulOptions {
                        trans_b: true,
                        ..MATMUL
                    },
                )?;
                dz = mlp::relu_backward(&dh, h)?;
            }
        }
        if vs > 0 {
            self.pass_on(Flowing::Gradient, mb, c, dz);
        }
        if split {
            saved.output = None;
            self.saved.insert((mb, c), saved);
        }
        Ok(())
    }

    /// `grads[j] += hᵀ · dz`.
    fn weight_grad_of(&self, c: usize, j: usize, h: &Tensor, dz: &Tensor) -> Result<()> {
        let dw = matmul(
            h,
            dz,
            MatmulOptions {
                trans_a: true,
                ..MATMUL
            },
        )?;
        mlp::accumulate(&self.chunks[c].grads[j], &dw)
    }

    fn weight_grad(&mut self, mb: usize, c: usize) -> Result<()> {
        let saved = self
            .saved
            .remove(&(mb, c))
            .ok_or_else(|| self.missing("the backward's saved gradients", mb, c))?;
        for (j, (h, dz)) in saved.inputs.iter().zip(&saved.dz).enumerate() {
            let dz = dz
                .as_ref()
                .ok_or_else(|| self.missing("a layer's output gradient", mb, c))?;
            self.weight_grad_of(c, j, h, dz)?;
        }
        Ok(())
    }

    fn send(&mut self, what: Flowing, mb: usize, c: usize, peer: Option<usize>) -> StageResult<()> {
        let plan = &self.shared.plan;
        let vs = self.chunk(c)?.vs;
        let to_vs = match what {
            Flowing::Activation => vs + 1,
            Flowing::Gradient => vs.wrapping_sub(1),
        };
        let peer = peer.ok_or_else(|| self.missing("the send's peer", mb, c))?;
        if peer >= self.shared.senders.len()
            || to_vs > plan.last_vs()
            || plan.schedule.placement(to_vs).0 != peer
        {
            return Err(self.missing("a valid peer for the send", mb, c).into());
        }
        let tensor = self
            .outgoing
            .remove(&(what, mb, c))
            .ok_or_else(|| self.missing("the tensor to send", mb, c))?;
        let &[rows, cols] = tensor.shape() else {
            return Err(self.missing("a matrix to send", mb, c).into());
        };
        let job = Outbound {
            what,
            mb,
            to_vs,
            peer,
            shape: [rows, cols],
            tensor,
        };
        // The sender thread only hangs up when it failed (its error is the stage's) or saw a
        // peer fail.
        self.outbox.send(job).map_err(|_| Fail::PeerGone)
    }

    fn recv(&mut self, what: Flowing, mb: usize, c: usize, peer: Option<usize>) -> StageResult<()> {
        let vs = self.chunk(c)?.vs;
        let key = (what, mb, vs);
        let start = self.shared.ns();
        let msg = self.await_msg(key, peer)?;
        let arrived = self.shared.ns();
        if arrived > start {
            let meta = EventMeta::wait(self.stage).microbatch(mb as u32);
            self.push(meta.event(format!("wait {}", what.name()), start, arrived));
        }
        let t = Tensor::from_f32(self.device, &msg.shape, DType::F32, &msg.data)?;
        // Queued writes run with the next submission: submit one so the wait covers the upload.
        self.device.submit(self.device.encoder("upload"));
        self.device.wait()?;
        let end = self.shared.ns();
        let meta = EventMeta::transfer(self.stage)
            .microbatch(mb as u32)
            .flow(msg.flow, FlowRole::In);
        self.push(meta.event(format!("recv {}", what.name()), arrived, end));
        self.arrived.insert((what, mb, c), t);
        Ok(())
    }

    /// Blocks until `key` arrives (stashing others), a peer fails, or the device's wait timeout.
    fn await_msg(&mut self, key: Key, peer: Option<usize>) -> StageResult<Msg> {
        if let Some(m) = self.stash.remove(&key) {
            return Ok(m);
        }
        let timeout = self.device.wait_timeout();
        let start = Instant::now();
        loop {
            if self.shared.failed.load(Ordering::SeqCst) {
                return Err(Fail::PeerGone);
            }
            match self.rx.recv_timeout(Duration::from_millis(50)) {
                Ok(m) if m.key == key => return Ok(m),
                Ok(m) => {
                    self.stash.insert(m.key, m);
                }
                Err(RecvTimeoutError::Timeout) if start.elapsed() <= timeout => {}
                Err(_) => {
                    let (what, mb, vs) = key;
                    let from = peer.map_or_else(|| "?".to_owned(), |p| p.to_string());
                    return Err(Fail::Own(Error::Timeout {
                        what: format!(
                            "stage {}: the {} of microbatch {mb} for virtual stage {vs} from \
                             stage {from}",
                            self.stage,
                            match what {
                                Flowing::Activation => "activation",
                                Flowing::Gradient => "gradient",
                            }
                        ),
                        waited_ms: start.elapsed().as_millis() as u64,
                    }));
                }
            }
        }
    }

    /// The SGD step on this stage's layers, then its weights and losses back to the host.
    fn finish(mut self) -> StageResult<StageOutput> {
        let plan = &self.shared.plan;
        let scale = plan.lr / plan.schedule.microbatches as f32;
        let start = self.shared.ns();
        for chunk in &self.chunks {
            for (w, g) in chunk.weights.iter().zip(&chunk.grads) {
                mlp::sgd(w, g, scale)?;
            }
        }
        let end = self.shared.ns();
        self.push(EventMeta::kernel(self.stage).event("sgd".into(), start, end));
        let mut weights = Vec::new();
        for chunk in &self.chunks {
            for (l, w) in chunk.layers.clone().zip(&chunk.weights) {
                weights.push((l, w.to_f32()?));
            }
        }
        let mut losses = Vec::new();
        for (mb, y) in &self.outputs {
            let y = y.to_f32()?;
            let t = &plan.batch[*mb].target;
            let sum: f64 = y
                .iter()
                .zip(t)
                .map(|(&y, &t)| f64::from(y - t).powi(2))
                .sum();
            losses.push((sum / y.len().max(1) as f64) as f32);
        }
        Ok(StageOutput {
            weights,
            losses,
            events: self.events,
        })
    }
}

/// `max(z, 0)` into a new tensor of `z`'s shape, blocking.
fn relu(z: &Tensor) -> Result<Tensor> {
    elementwise::run(ElementwiseOp::Relu, z, None)
}

/// Merges the stages' outputs and measures the run.
fn report(plan: &Plan<'_>, outputs: Vec<StageOutput>) -> Result<RunReport> {
    let schedule = plan.schedule;
    let mut weights = vec![Vec::new(); plan.model.layers()];
    let mut losses = Vec::new();
    let mut events = Vec::new();
    for o in outputs {
        for (l, w) in o.weights {
            weights[l] = w;
        }
        losses.extend(o.losses);
        events.extend(o.events);
    }
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
