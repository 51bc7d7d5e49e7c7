//! The client API: build a program in a few lines. Errors are kept until [`ProgramBuilder::build`]
//! so a chain of calls reads like the computation it describes.
//!
//! ```no_run
//! # use gangway::program::ProgramBuilder;
//! // Pathways Fig. 4: A on device 0, then B on device 1, then C on device 2.
//! let mut p = ProgramBuilder::new("fig4");
//! let x = p.arg(&[0], 1024);
//! let a = p.affine("A", &[0], x, 2.0, 1.0);
//! let b = p.affine("B", &[1], a, 0.5, 0.0); // the transfer 0 → 1 is inserted for you
//! let c = p.relu("C", &[2], b);
//! p.result(c);
//! let program = p.build()?;
//! # Ok::<(), gangway::Error>(())
//! ```

use super::ir::{KernelNode, Node, Op, Program, Value, ValueInfo};
use crate::kernels::elementwise::ElementwiseOp;
use crate::kernels::{Kernel, TensorType};
use crate::{DType, Error, Result};
use std::sync::Arc;

/// Builds a [`Program`]; see the module docs.
#[derive(Debug)]
pub struct ProgramBuilder {
    program: Program,
    error: Option<String>,
}

impl ProgramBuilder {
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            program: Program {
                name: name.into(),
                nodes: Vec::new(),
                values: Vec::new(),
                args: Vec::new(),
                results: Vec::new(),
                result_nodes: Vec::new(),
            },
            error: None,
        }
    }

    fn fail(&mut self, reason: String) {
        self.error.get_or_insert(reason);
    }

    fn check_gang(&mut self, what: &str, gang: &[usize]) {
        let mut sorted = gang.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        if gang.is_empty() {
            self.fail(format!("{what}: an empty gang"));
        } else if sorted.len() != gang.len() {
            self.fail(format!("{what}: gang {gang:?} names a device twice"));
        }
    }

    fn info(&self, v: Value) -> Option<&ValueInfo> {
        self.program.values.get(v.0)
    }

    /// `x`'s info, or a recorded error when `x` came from another builder.
    fn known(&mut self, x: Value) -> Option<ValueInfo> {
        let info = self.info(x).cloned();
        if info.is_none() {
            self.fail(format!("value {} is not from this builder", x.0));
        }
        info
    }

    fn push(
        &mut self,
        name: &str,
        op: Op,
        gang: &[usize],
        inputs: Vec<Value>,
        len: usize,
    ) -> Value {
        let ty = match inputs.first().and_then(|&v| self.info(v)) {
            // Data movement keeps the input's type; elementwise kernels are f32.
            Some(i)
                if matches!(
                    op,
                    Op::Transfer | Op::Send | Op::Recv | Op::AllToAll | Op::AllReduce
                ) =>
            {
                i.ty.clone()
            }
            // An elementwise kernel keeps its input's shape (a row sum is flat).
            Some(i) if matches!(op, Op::Elementwise(_)) && i.shard_len == len => {
                TensorType::f32(&i.ty.shape)
            }
            _ => TensorType::f32(&[len]),
        };
        self.push_typed(name, op, gang, inputs, vec![ty])
            .first()
            .copied()
            .unwrap_or(Value(usize::MAX))
    }

    fn push_typed(
        &mut self,
        name: &str,
        op: Op,
        gang: &[usize],
        inputs: Vec<Value>,
        types: Vec<TensorType>,
    ) -> Vec<Value> {
        self.check_gang(name, gang);
        let node = self.program.nodes.len();
        let mut outputs = Vec::with_capacity(types.len());
        for (output, ty) in types.into_iter().enumerate() {
            outputs.push(Value(self.program.values.len()));
            self.program.values.push(ValueInfo {
                gang: gang.to_vec(),
                shard_len: ty.len(),
                ty,
                producer: node,
                output,
            });
        }
        self.program.nodes.push(Node {
            name: name.to_string(),
            op,
            gang: gang.to_vec(),
            inputs,
            outputs: outputs.clone(),
        });
        outputs
    }

    /// The type of `x`'s shards (f32 `[0]` for a value of another builder, which is an error).
    pub fn ty(&self, x: Value) -> TensorType {
        self.info(x)
            .map(|i| i.ty.clone())
            .unwrap_or_else(|| TensorType::f32(&[0]))
    }

    /// An argument of `ty` per device of `gang`, given at every run (shard-major).
    pub fn typed_arg(&mut self, gang: &[usize], ty: TensorType) -> Value {
        if ty.is_empty() {
            self.fail("an argument with empty shards".into());
        }
        let index = self.program.args.len();
        let v = self.push_typed(
            &format!("arg{index}"),
            Op::Arg { index },
            gang,
            vec![],
            vec![ty],
        );
        let v = v.first().copied().unwrap_or(Value(usize::MAX));
        self.program.args.push(v);
        v
    }

    /// State named `name` of the [`super::Variables`] the program will be compiled against: one
    /// `ty` tensor per device of `gang`.
    pub fn variable(&mut self, name: &str, gang: &[usize], ty: TensorType) -> Value {
        let op = Op::Variable {
            name: name.to_string(),
        };
        let v = self.push_typed(name, op, gang, vec![], vec![ty]);
        v.first().copied().unwrap_or(Value(usize::MAX))
    }

    /// `kernel` on every device of `gang` over `inputs` (moved there when they live elsewhere):
    /// its `N` outputs. In-place outputs alias their inputs' buffers.
    pub fn kernel<const N: usize>(
        &mut self,
        name: &str,
        gang: &[usize],
        kernel: Arc<dyn Kernel>,
        inputs: &[Value],
    ) -> [Value; N] {
        let bad = [Value(usize::MAX); N];
        let inputs: Vec<Value> = inputs.iter().map(|&x| self.on(gang, x)).collect();
        let types: Vec<TensorType> = inputs.iter().map(|&v| self.ty(v)).collect();
        let outputs = match kernel.outputs(&types) {
            Ok(o) if o.len() == N => o,
            Ok(o) => {
                self.fail(format!(
                    "{name}: {} outputs, the caller expects {N}",
                    o.len()
                ));
                return bad;
            }
            Err(e) => {
                self.fail(format!("{name}: {e}"));
                return bad;
            }
        };
        for (out, inp) in kernel.in_place() {
            if outputs.get(out) != types.get(inp) {
                self.fail(format!(
                    "{name}: in-place output {out} does not have input {inp}'s type"
                ));
            }
        }
        let values = self.push_typed(name, Op::Kernel(KernelNode(kernel)), gang, inputs, outputs);
        values.try_into().unwrap_or(bad)
    }

    /// [`Self::kernel`] for a kernel whose output count is known only at run time of the builder.
    pub fn kernels(
        &mut self,
        name: &str,
        gang: &[usize],
        kernel: Arc<dyn Kernel>,
        inputs: &[Value],
    ) -> Vec<Value> {
        let inputs: Vec<Value> = inputs.iter().map(|&x| self.on(gang, x)).collect();
        let types: Vec<TensorType> = inputs.iter().map(|&v| self.ty(v)).collect();
        match kernel.outputs(&types) {
            Ok(outputs) => {
                self.push_typed(name, Op::Kernel(KernelNode(kernel)), gang, inputs, outputs)
            }
            Err(e) => {
                self.fail(format!("{name}: {e}"));
                Vec::new()
            }
        }
    }

    /// An argument of `shard_len` f32 values per device of `gang`, given at every run.
    pub fn arg(&mut self, gang: &[usize], shard_len: usize) -> Value {
        self.typed_arg(gang, TensorType::f32(&[shard_len]))
    }

    /// Data fixed at compile time: `data` holds every shard, one after the other.
    pub fn constant(&mut self, name: &str, gang: &[usize], data: Vec<f32>) -> Value {
        let len = data.len() / gang.len().max(1);
        if data.is_empty() || len * gang.len() != data.len() {
            self.fail(format!(
                "{name}: {} values cannot be split into {} equal shards",
                data.len(),
                gang.len()
            ));
        }
        self.push(name, Op::Constant { data }, gang, vec![], len)
    }

    /// `x` on `gang`: itself when it lives there, else a transfer node (same shard count).
    pub fn on(&mut self, gang: &[usize], x: Value) -> Value {
        let Some(info) = self.known(x) else {
            return x;
        };
        if info.gang == gang {
            return x;
        }
        self.transfer(x, gang)
    }

    /// Sends shard i of `x` to device i of `to`.
    pub fn transfer(&mut self, x: Value, to: &[usize]) -> Value {
        let Some(info) = self.known(x) else {
            return x;
        };
        if info.gang.len() != to.len() {
            self.fail(format!(
                "cannot send {} shards to a gang of {}",
                info.gang.len(),
                to.len()
            ));
        }
        let name = format!("send {:?}→{:?}", info.gang, to);
        self.push(&name, Op::Transfer, to, vec![x], info.shard_len)
    }

    /// The sending half of a transfer of `x` (see [`Op::Send`]): a value only [`Self::recv`]
    /// reads.
    pub fn send(&mut self, name: &str, x: Value) -> Value {
        let Some(info) = self.known(x) else {
            return x;
        };
        self.push(name, Op::Send, &info.gang, vec![x], info.shard_len)
    }

    /// The receiving half: shard i of what `sent` sent, on device i of `to`.
    pub fn recv(&mut self, name: &str, sent: Value, to: &[usize]) -> Value {
        let Some(info) = self.known(sent) else {
            return sent;
        };
        let from_send = self
            .program
            .nodes
            .get(info.producer)
            .is_some_and(|n| n.op == Op::Send);
        if !from_send {
            self.fail(format!("{name}: receives a value that no send node sent"));
        }
        if info.gang.len() != to.len() {
            self.fail(format!(
                "{name}: cannot receive {} shards on a gang of {}",
                info.gang.len(),
                to.len()
            ));
        }
        self.push(name, Op::Recv, to, vec![sent], info.shard_len)
    }

    /// Nodes so far: the index the next node gets.
    pub fn node_count(&self) -> usize {
        self.program.nodes.len()
    }

    fn elementwise(
        &mut self,
        name: &str,
        gang: &[usize],
        op: ElementwiseOp,
        xs: &[Value],
    ) -> Value {
        let inputs: Vec<Value> = xs.iter().map(|&x| self.on(gang, x)).collect();
        let lens: Vec<usize> = inputs
            .iter()
            .filter_map(|&v| self.info(v).map(|i| i.shard_len))
            .collect();
        if lens.windows(2).any(|w| w[0] != w[1]) {
            self.fail(format!("{name}: inputs of different lengths {lens:?}"));
        }
        if inputs
            .iter()
            .any(|&v| self.info(v).is_some_and(|i| i.dtype() != DType::F32))
        {
            self.fail(format!("{name}: elementwise kernels take f32 values"));
        }
        let len = lens.first().copied().unwrap_or(0);
        self.push(name, Op::Elementwise(op), gang, inputs, len)
    }

    /// `x * scale + shift` on every device of `gang`.
    pub fn affine(
        &mut self,
        name: &str,
        gang: &[usize],
        x: Value,
        scale: f32,
        shift: f32,
    ) -> Value {
        self.fused_affine(name, gang, x, scale, shift, 1)
    }

    /// `repeat` affine computations fused into one kernel launch.
    pub fn fused_affine(
        &mut self,
        name: &str,
        gang: &[usize],
        x: Value,
        scale: f32,
        shift: f32,
        repeat: u32,
    ) -> Value {
        let op = ElementwiseOp::Affine {
            scale,
            shift,
            repeat,
        };
        self.elementwise(name, gang, op, &[x])
    }

    pub fn relu(&mut self, name: &str, gang: &[usize], x: Value) -> Value {
        self.elementwise(name, gang, ElementwiseOp::Relu, &[x])
    }

    pub fn add(&mut self, name: &str, gang: &[usize], x: Value, z: Value) -> Value {
        self.elementwise(name, gang, ElementwiseOp::Add, &[x, z])
    }

    /// All-to-all over `x`'s gang: each shard is cut into one chunk per device.
    pub fn all_to_all(&mut self, name: &str, x: Value) -> Value {
        let Some(info) = self.known(x) else {
            return x;
        };
        if !info.shard_len.is_multiple_of(info.gang.len()) {
            self.fail(format!(
                "{name}: shards of {} values cannot be cut into {} equal chunks",
                info.shard_len,
                info.gang.len()
            ));
        }
        self.push(name, Op::AllToAll, &info.gang, vec![x], info.shard_len)
    }

    /// Sum of all shards of `x`, on every device of its gang.
    pub fn all_reduce(&mut self, name: &str, x: Value) -> Value {
        let Some(info) = self.known(x) else {
            return x;
        };
        self.push(name, Op::AllReduce, &info.gang, vec![x], info.shard_len)
    }

    /// Marks `x` as a result, read back after every run (shards concatenated).
    pub fn result(&mut self, x: Value) {
        let Some(info) = self.known(x) else {
            return;
        };
        let index = self.program.results.len();
        self.program.result_nodes.push(self.program.nodes.len());
        self.program.nodes.push(Node {
            name: format!("result{index}"),
            op: Op::Result { index },
            gang: info.gang,
            inputs: vec![x],
            outputs: Vec::new(),
        });
        self.program.results.push(x);
    }

    pub fn build(self) -> Result<Program> {
        let fail = |reason: String| Error::Program {
            program: self.program.name.clone(),
            reason,
        };
        if let Some(reason) = self.error.clone() {
            return Err(fail(reason));
        }
        if self.program.results.is_empty() {
            return Err(fail("no results: nothing would ever be read back".into()));
        }
        Ok(self.program)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn one_node_per_sharded_computation_whatever_the_shard_count() {
        for shards in [1usize, 2, 8] {
            let gang: Vec<usize> = (0..shards).collect();
            let mut p = ProgramBuilder::new("chain");
            let x = p.arg(&gang, 16);
            let a = p.affine("A", &gang, x, 2.0, 0.0);
            let b = p.relu("B", &gang, a);
            p.result(b);
            assert_eq!(p.build().unwrap().nodes().len(), 4);
        }
    }

    #[test]
    fn crossing_gangs_inserts_a_transfer() {
        let mut p = ProgramBuilder::new("fig4");
        let x = p.arg(&[0], 8);
        let a = p.affine("A", &[0], x, 1.0, 1.0);
        let b = p.affine("B", &[1], a, 1.0, 1.0);
        p.result(b);
        let prog = p.build().unwrap();
        let kinds: Vec<_> = prog.nodes().iter().map(|n| n.op.kind()).collect();
        assert_eq!(kinds, ["arg", "affine", "transfer", "affine", "result"]);
        assert_eq!(prog.node_devices(2), vec![0, 1]);
        assert_eq!(prog.devices_needed(), 2);
    }

    #[test]
    fn bad_programs_are_errors() {
        let mut p = ProgramBuilder::new("bad");
        let x = p.arg(&[0, 1], 5);
        let y = p.all_to_all("a2a", x);
        p.result(y);
        assert!(p.build().unwrap_err().to_string().contains("equal chunks"));

        let mut p = ProgramBuilder::new("bad");
        let x = p.arg(&[0, 1], 4);
        let _ = p.transfer(x, &[2]);
        p.result(x);
        assert!(p.build().is_err());

        let mut p = ProgramBuilder::new("dup");
        let x = p.arg(&[1, 1], 4);
        p.result(x);
        assert!(p.build().unwrap_err().to_string().contains("twice"));

        let mut p = ProgramBuilder::new("none");
        let _ = p.arg(&[0], 4);
        assert!(p.build().unwrap_err().to_string().contains("no results"));
    }

    #[test]
    fn kernel_nodes_are_typed_and_bad_shapes_are_build_errors() {
        use crate::kernels::matmul::MatmulVariant;
        use crate::kernels::ops::KernelOp;
        let matmul = || {
            Arc::new(KernelOp::Matmul {
                trans_a: false,
                trans_b: true,
                offsets: None,
                variant: MatmulVariant::Tiled,
            })
        };
        let mut p = ProgramBuilder::new("typed");
        let a = p.typed_arg(&[0], TensorType::f32(&[3, 5]));
        let w = p.variable("w", &[0], TensorType::f32(&[7, 5]));
        let [c] = p.kernel("a·wᵀ", &[0], matmul(), &[a, w]);
        assert_eq!(p.ty(c), TensorType::f32(&[3, 7]));
        // An in-place update keeps its input's type.
        let [acc] = p.kernel("acc", &[0], Arc::new(KernelOp::Accumulate), &[c, c]);
        assert_eq!(p.ty(acc), p.ty(c));
        p.result(acc);
        let prog = p.build().unwrap();
        assert_eq!(prog.value(c).shard_bytes(), 3 * 7 * 4);

        let mut p = ProgramBuilder::new("bad");
        let a = p.typed_arg(&[0], TensorType::f32(&[3, 5]));
        let w = p.typed_arg(&[0], TensorType::f32(&[7, 4]));
        let [c] = p.kernel("a·wᵀ", &[0], matmul(), &[a, w]);
        p.result(c);
        let e = p.build().unwrap_err().to_string();
        assert!(e.contains("a·wᵀ"), "{e}");

        let mut p = ProgramBuilder::new("outputs");
        let a = p.typed_arg(&[0], TensorType::f32(&[3, 5]));
        let [_, _] = p.kernel("two of one", &[0], Arc::new(KernelOp::RowLogsumexp), &[a]);
        p.result(a);
        assert!(p.build().unwrap_err().to_string().contains("1 outputs"));
    }

    #[test]
    fn a_recv_takes_only_what_a_send_sent() {
        let mut p = ProgramBuilder::new("split transfer");
        let x = p.arg(&[0], 8);
        let sent = p.send("send", x);
        let got = p.recv("recv", sent, &[1]);
        p.result(got);
        let prog = p.build().unwrap();
        let kinds: Vec<_> = prog.nodes().iter().map(|n| n.op.kind()).collect();
        assert_eq!(kinds, ["arg", "send", "recv", "result"]);
        assert_eq!(prog.node_devices(2), vec![0, 1]);

        let mut p = ProgramBuilder::new("no send");
        let x = p.arg(&[0], 8);
        let got = p.recv("recv", x, &[1]);
        p.result(got);
        assert!(p.build().unwrap_err().to_string().contains("no send node"));
    }
}
