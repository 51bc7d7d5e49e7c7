//! The dataflow IR: one node per *sharded* computation, edges are sharded values. Data movement
//! is nodes too: transfers (whole, or as send and receive halves), and collectives within the
//! groups of a gang axis ([`Collective`]), an all-to-all's rows regrouped on the way by the host
//! where its consumer wants another order, or only each block's live rows moved, counted by a
//! second input ([`Regroup`] and its ragged form, in `regroup.rs`).

use super::gang::Gang;
use crate::kernels::{Kernel, TensorType};
use crate::named_sharding::NamedSharding;
use crate::{DType, Error, Result};
use std::sync::Arc;

use super::regroup::Regroup;

/// A sharded value: one array of the same type (dtype, per-shard shape) on every device of its
/// gang. Values are the edges of the graph; at run time each is a future that resolves when its
/// producer ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Value(pub(crate) usize);

impl Value {
    pub fn index(self) -> usize {
        self.0
    }
}

/// What a value is: where its shards live, their type, and who makes it.
#[derive(Debug, Clone, PartialEq)]
pub struct ValueInfo {
    /// Logical devices of the slice the program runs on, one per shard, and their axes.
    pub gang: Gang,
    /// Elements per shard.
    pub shard_len: usize,
    /// Element type and shape of every shard.
    pub ty: TensorType,
    /// How the shards make up the whole value: which gang axes split which dimension, or hold
    /// copies, or partial sums.
    pub sharding: NamedSharding,
    /// The node that produces it, and which of its outputs it is.
    pub producer: usize,
    pub output: usize,
}

impl ValueInfo {
    pub fn dtype(&self) -> DType {
        self.ty.dtype
    }

    /// Bytes of one shard.
    pub fn shard_bytes(&self) -> u64 {
        self.ty.bytes()
    }
}

/// A kernel node's kernel, compared by identity.
#[derive(Debug, Clone)]
pub struct KernelNode(pub Arc<dyn Kernel>);

impl PartialEq for KernelNode {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// The host data of one argument of a run.
#[derive(Debug, Clone, PartialEq)]
pub enum HostData {
    F32(Vec<f32>),
    U32(Vec<u32>),
}

impl HostData {
    pub fn dtype(&self) -> DType {
        match self {
            Self::F32(_) => DType::F32,
            Self::U32(_) => DType::U32,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Self::F32(v) => v.len(),
            Self::U32(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn bytes(&self) -> &[u8] {
        match self {
            Self::F32(v) => bytemuck::cast_slice(v),
            Self::U32(v) => bytemuck::cast_slice(v),
        }
    }
}

impl From<Vec<f32>> for HostData {
    fn from(v: Vec<f32>) -> Self {
        Self::F32(v)
    }
}

impl From<Vec<u32>> for HostData {
    fn from(v: Vec<u32>) -> Self {
        Self::U32(v)
    }
}

/// The groups a collective exchanges within: the shards that differ only along one axis of the
/// gang (every shard, for a collective over the whole gang). A group has `size` members, `stride`
/// apart in shard order, since gang axes are row-major.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collective {
    /// The gang axis, or `None` for the whole gang.
    pub axis: Option<String>,
    pub size: usize,
    pub stride: usize,
}

impl Collective {
    /// One group of every shard of a gang of `devices`.
    pub fn whole(devices: usize) -> Self {
        Self {
            axis: None,
            size: devices,
            stride: 1,
        }
    }

    /// `shard`'s place in its group.
    pub fn position(&self, shard: usize) -> usize {
        (shard / self.stride) % self.size
    }

    /// The shards of `shard`'s group, in member order.
    pub fn members(&self, shard: usize) -> impl Iterator<Item = usize> + use<> {
        let base = shard - self.position(shard) * self.stride;
        let stride = self.stride;
        (0..self.size).map(move |k| base + k * stride)
    }
}

/// What one node computes.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// The `index`-th argument, uploaded from the host at every run (shard i = rows i of the host array).
    Arg { index: usize },
    /// Data uploaded once, when the program is compiled. Shard-major.
    Constant { data: Vec<f32> },
    /// State that outlives runs (weights, optimizer moments): the named entry of the
    /// [`super::Variables`] the program is compiled against, one tensor per shard. Kernels update
    /// it in place; several programs compiled against the same variables share it.
    Variable { name: String },
    /// Any kernel (matmul, router, Adam, relu, add, ...) on every device of the gang, shard by
    /// shard.
    Kernel(KernelNode),
    /// Send/recv between gangs: shard i of the input moves to device i of this node's gang.
    Transfer,
    /// The sending half of a transfer, on the input's gang: reads each shard back to the host.
    /// Apart from [`Op::Recv`] so each half can sit at its own place in its device's order
    /// (pipeline schedules send as soon as an op ends and receive just before the op needing it).
    Send,
    /// The receiving half: shard i of the [`Op::Send`] node's value, written on device i of this
    /// node's gang.
    Recv,
    /// Within each group of the collective, shard j of the output is chunk j of every member's
    /// input shard, in member order; with its rows regrouped on the way as the [`Regroup`] says.
    /// A ragged one ([`crate::program::Ragged`]) has a second input, its counts, and writes only
    /// each block's counted rows: the rest of its output keeps what it held.
    AllToAll(Collective, Arc<Regroup>),
    /// Every output shard is the elementwise sum of its group's input shards, in member order.
    AllReduce(Collective),
    /// The `index`-th result, read back to the host after every run.
    Result { index: usize },
}

impl Op {
    pub fn kind(&self) -> &'static str {
        match self {
            Op::Arg { .. } => "arg",
            Op::Constant { .. } => "constant",
            Op::Variable { .. } => "variable",
            Op::Kernel(k) => k.0.kind(),
            Op::Transfer => "transfer",
            Op::Send => "send",
            Op::Recv => "recv",
            Op::AllToAll(..) => "all_to_all",
            Op::AllReduce(_) => "all_reduce",
            Op::Result { .. } => "result",
        }
    }
}

/// One sharded computation: `op` on every device of `gang`.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub name: String,
    pub op: Op,
    /// Where the node's output lives (for a transfer: the destination gang).
    pub gang: Gang,
    pub inputs: Vec<Value>,
    /// What the node makes (a result: nothing; most nodes: one value; kernels: any number).
    pub outputs: Vec<Value>,
    /// Kernel nodes only: the shards that run, one flag per device of the gang (`None`: every
    /// shard). An idle shard leaves its outputs as they are: an in-place output keeps its input,
    /// a fresh one stays zero (buffers start zeroed, and only this node writes them). This is how
    /// a step gives a slow device fewer token groups than a fast one while every device still
    /// serves its experts: the idle device's slots are zero rows, which add exact zeros.
    pub active: Option<Vec<bool>>,
}

impl Node {
    /// Whether shard `shard` of the node runs.
    pub fn runs_on(&self, shard: usize) -> bool {
        self.active
            .as_ref()
            .is_none_or(|a| a.get(shard).copied().unwrap_or(false))
    }

    /// The node's first output.
    pub fn output(&self) -> Option<Value> {
        self.outputs.first().copied()
    }
}

/// A program: nodes in a topological order, as the builder appended them.
#[derive(Debug, Clone, PartialEq)]
pub struct Program {
    pub(crate) name: String,
    pub(crate) nodes: Vec<Node>,
    pub(crate) values: Vec<ValueInfo>,
    pub(crate) args: Vec<Value>,
    pub(crate) results: Vec<Value>,
    /// `result_nodes[i]`: the node that reads back result `i`.
    pub(crate) result_nodes: Vec<usize>,
    /// Devices run the nodes strictly in this order ([`super::ProgramBuilder::keep_order`]).
    pub(crate) in_order: bool,
    /// `overlap[node]`: the node's overlap group in a program that keeps its order (0: none),
    /// within which nodes may still run ahead of one another
    /// ([`super::ProgramBuilder::set_overlap_group`]).
    pub(crate) overlap: Vec<u32>,
}

impl Program {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A hash of the program's structure (name, and every node's name, kind, gang, inputs and
    /// output types): ranks running one program across a job check they run the same one.
    pub fn fingerprint(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |bytes: &[u8]| {
            for &b in bytes {
                h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
            }
        };
        eat(self.name.as_bytes());
        for (i, n) in self.nodes.iter().enumerate() {
            eat(n.name.as_bytes());
            eat(n.op.kind().as_bytes());
            for &d in n.gang.iter() {
                eat(&(d as u64).to_le_bytes());
            }
            if let Some(&group) = self.overlap.get(i) {
                eat(&group.to_le_bytes());
            }
            if let Some(active) = &n.active {
                eat(b"active");
                eat(&active.iter().map(|&a| u8::from(a)).collect::<Vec<u8>>());
            }
            for v in n.inputs.iter() {
                eat(&(v.0 as u64).to_le_bytes());
            }
            for v in &n.outputs {
                eat(format!("{}", self.values[v.0].ty).as_bytes());
            }
        }
        h
    }

    /// Whether every device must run the nodes strictly in program order, never a later node
    /// while an earlier one waits for other devices.
    pub fn in_order(&self) -> bool {
        self.in_order
    }

    /// Whether node `later` may run while the earlier node `earlier` (of the same run) waits:
    /// always, unless the program keeps its order; then only inside one overlap group.
    pub fn may_pass(&self, earlier: usize, later: usize) -> bool {
        if !self.in_order {
            return true;
        }
        let group = |n: usize| self.overlap.get(n).copied().unwrap_or(0);
        group(later) != 0 && group(later) == group(earlier)
    }
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }
    pub fn value(&self, v: Value) -> &ValueInfo {
        &self.values[v.0]
    }

    /// Checks run arguments against the program's: count, dtype and length.
    pub fn check_args(&self, args: &[HostData]) -> Result<()> {
        if args.len() != self.args.len() {
            return Err(Error::Program {
                program: self.name.clone(),
                reason: format!(
                    "{} arguments given, it takes {}",
                    args.len(),
                    self.args.len()
                ),
            });
        }
        for (i, (a, &v)) in args.iter().zip(&self.args).enumerate() {
            let info = self.value(v);
            let want = info.shard_len * info.gang.len();
            if a.len() != want || a.dtype() != info.dtype() {
                return Err(Error::ShapeMismatch {
                    what: "program argument",
                    expected: format!("argument {i}: {want} {} values", info.dtype().name()),
                    got: format!("{} {} values", a.len(), a.dtype().name()),
                });
            }
        }
        Ok(())
    }
    pub fn args(&self) -> &[Value] {
        &self.args
    }
    pub fn results(&self) -> &[Value] {
        &self.results
    }
    /// The node reading back each result, in result order.
    pub fn result_nodes(&self) -> &[usize] {
        &self.result_nodes
    }

    /// Every logical device a node touches: for a transfer, its sources and its destinations.
    pub fn node_devices(&self, node: usize) -> Vec<usize> {
        let n = &self.nodes[node];
        let mut devices = n.gang.to_vec();
        if matches!(n.op, Op::Transfer | Op::Recv) {
            for v in &n.inputs {
                devices.extend(self.values[v.0].gang.iter());
            }
        }
        devices.sort_unstable();
        devices.dedup();
        devices
    }

    /// Logical devices the program uses: a slice must have at least this many.
    pub fn devices_needed(&self) -> usize {
        self.values
            .iter()
            .flat_map(|v| v.gang.iter())
            .map(|&d| d + 1)
            .max()
            .unwrap_or(0)
    }

    /// Nodes that run a kernel on the GPU, times their shards: the computations of one run.
    pub fn computations(&self) -> usize {
        self.nodes
            .iter()
            .map(|n| match &n.op {
                Op::Kernel(k) => {
                    (0..n.gang.len()).filter(|&i| n.runs_on(i)).count() * k.0.computations()
                }
                _ => 0,
            })
            .sum()
    }
}
