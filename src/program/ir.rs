//! The dataflow IR: one node per *sharded* computation, edges are sharded values.

use crate::kernels::elementwise::ElementwiseOp;

/// A sharded value: one f32 array of `shard_len` elements on every device of its gang. Values are
/// the edges of the graph; at run time each is a future that resolves when its producer ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Value(pub(crate) usize);

impl Value {
    pub fn index(self) -> usize {
        self.0
    }
}

/// What a value is: where its shards live and how long each is.
#[derive(Debug, Clone, PartialEq)]
pub struct ValueInfo {
    /// Logical devices of the slice the program runs on, one per shard.
    pub gang: Vec<usize>,
    pub shard_len: usize,
    /// The node that produces it.
    pub producer: usize,
}

/// What one node computes.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// The `index`-th argument, uploaded from the host at every run (shard i = rows i of the host array).
    Arg { index: usize },
    /// Data uploaded once, when the program is compiled (weights). Shard-major.
    Constant { data: Vec<f32> },
    /// A kernel run on every device of the gang, shard by shard.
    Elementwise(ElementwiseOp),
    /// Send/recv between gangs: shard i of the input moves to device i of this node's gang.
    Transfer,
    /// Shard j of the output is chunk j of every input shard, in shard order.
    AllToAll,
    /// Every output shard is the elementwise sum of all input shards.
    AllReduce,
    /// The `index`-th result, read back to the host after every run.
    Result { index: usize },
}

impl Op {
    pub fn kind(&self) -> &'static str {
        match self {
            Op::Arg { .. } => "arg",
            Op::Constant { .. } => "constant",
            Op::Elementwise(e) => e.entry(),
            Op::Transfer => "transfer",
            Op::AllToAll => "all_to_all",
            Op::AllReduce => "all_reduce",
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
    pub gang: Vec<usize>,
    pub inputs: Vec<Value>,
    pub output: Option<Value>,
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
}

impl Program {
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }
    pub fn value(&self, v: Value) -> &ValueInfo {
        &self.values[v.0]
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
        let mut devices = n.gang.clone();
        if n.op == Op::Transfer {
            for v in &n.inputs {
                devices.extend(&self.values[v.0].gang);
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
            .map(|n| match n.op {
                Op::Elementwise(ElementwiseOp::Affine { repeat, .. }) => {
                    n.gang.len() * repeat as usize
                }
                Op::Elementwise(_) => n.gang.len(),
                _ => 0,
            })
            .sum()
    }
}
