//! The client API: build a program in a few lines. Errors are kept until [`ProgramBuilder::build`]
//! so a chain of calls reads like the computation it describes.
//!
//! A kernel that updates an input in place (an accumulation, Adam) hands back the updated value
//! as its output; a later node or result that reads the input it updated is a build error, since
//! it would read the update under the old name. Collectives are checked as they are added: an
//! all-to-all's shards must cut into equal chunks, of whole rows where it regroups them, and a
//! ragged one's ([`ProgramBuilder::all_to_all_ragged`]) into whole blocks, with counts (u32)
//! from a plain all-to-all over the same group, so that they are on the host first.
//!
//! Every node runs on a [`Gang`]: a plain list of devices (`&[0, 1]`) is one axis; a gang with
//! named axes ([`ProgramBuilder::mesh`], [`Gang::new`]) lets collectives run over one axis and
//! shardings name them. Values carry their gang, so reading one on the same devices laid out
//! otherwise is a build error.
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

use super::gang::{DEFAULT_AXIS, Gang};
use super::ir::{Collective, KernelNode, Node, Op, Program, Value, ValueInfo};
use super::regroup::Regroup;
use crate::kernels::elementwise::ElementwiseOp;
use crate::kernels::{Kernel, TensorType};
use crate::mesh::MeshShape;
use crate::named_sharding::NamedSharding;
use crate::{Error, Result};
use std::collections::HashMap;
use std::sync::Arc;

/// Builds a [`Program`]; see the module docs.
#[derive(Debug)]
pub struct ProgramBuilder {
    program: Program,
    /// The shards kernel nodes added now run on ([`Self::only_where`]); `None`: every shard.
    active: Option<Vec<bool>>,
    /// Values a kernel updated in place, by that node's name: their storage holds the update, so
    /// reading them again would read the new contents under the old name.
    updated: HashMap<usize, String>,
    error: Option<String>,
    /// The overlap group of nodes added now (0: none), and how many groups were made.
    overlap_group: u32,
    overlap_groups: u32,
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
                in_order: false,
                overlap: Vec::new(),
            },
            overlap_group: 0,
            overlap_groups: 0,
            active: None,
            updated: HashMap::new(),
            error: None,
        }
    }

    /// Builds with `f` where every kernel node added runs only on the shards of its gang whose
    /// flag in `active` is set (`None`: on every shard; see [`Node::active`] for what an idle
    /// shard leaves). Data movement, collectives, arguments and results run on every shard
    /// whatever the flags. Scopes nest: the outer flags come back when `f` returns.
    pub fn only_where<R>(&mut self, active: Option<&[bool]>, f: impl FnOnce(&mut Self) -> R) -> R {
        let outer = self.set_active(active.map(<[bool]>::to_vec));
        let out = f(self);
        self.set_active(outer);
        out
    }

    /// [`Self::only_where`] without a scope: the flags for every kernel node added from now on;
    /// returns the ones they replace.
    pub fn set_active(&mut self, active: Option<Vec<bool>>) -> Option<Vec<bool>> {
        std::mem::replace(&mut self.active, active)
    }

    /// Every device runs this program's nodes strictly in the order they were added. By default
    /// a device waiting on other devices for one node runs later independent nodes of the run
    /// meanwhile (sends go early, receives wait late); a program whose order is the point, a
    /// pipeline schedule's, keeps it.
    pub fn keep_order(&mut self) {
        self.program.in_order = true;
    }

    /// A new overlap group for [`Self::set_overlap_group`].
    pub fn overlap_group(&mut self) -> u32 {
        self.overlap_groups += 1;
        self.overlap_groups
    }

    /// Nodes added from now on join overlap `group` (0: none); returns the group it replaces.
    /// In a program that keeps its order, nodes of one overlap group may run ahead of one
    /// another: a device waiting on other devices for one of them runs a later one of the group
    /// meanwhile (when it touches no storage the waiting one still needs), while nothing outside
    /// the group passes or is passed. A group may be filled in several spells, with other nodes
    /// between them. This is a schedule's overlapped pair: DualPipe's F&B chunk, one
    /// microbatch's backward computing while another's forward all-to-all travels.
    pub fn set_overlap_group(&mut self, group: u32) -> u32 {
        std::mem::replace(&mut self.overlap_group, group)
    }

    /// Defers an error to [`Self::build`] (the first one is kept): for a client's own checks of
    /// what it is building.
    pub(crate) fn fail(&mut self, reason: String) {
        self.error.get_or_insert(reason);
    }

    fn check_gang(&mut self, what: &str, gang: &Gang) {
        let mut sorted = gang.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        if gang.is_empty() {
            self.fail(format!("{what}: an empty gang"));
        } else if sorted.len() != gang.len() {
            self.fail(format!("{what}: gang {gang:?} names a device twice"));
        }
    }

    /// Records an error when `name` reads a value that a kernel updated in place before it:
    /// the reader would see the update (use the updating node's output instead).
    fn check_not_updated(&mut self, name: &str, inputs: &[Value]) {
        let stale = inputs
            .iter()
            .find_map(|v| self.updated.get(&v.0).map(|by| (v.0, by.clone())));
        if let Some((v, by)) = stale {
            self.fail(format!(
                "{name}: reads value {v} after {by} updated it in place (read its output instead)"
            ));
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

    /// A node of one output laid out as `sharding`.
    fn push(
        &mut self,
        name: &str,
        op: Op,
        gang: &Gang,
        inputs: Vec<Value>,
        len: usize,
        sharding: NamedSharding,
    ) -> Value {
        let ty = match inputs.first().and_then(|&v| self.info(v)) {
            // Data movement keeps the input's type.
            Some(i)
                if matches!(
                    op,
                    Op::Transfer | Op::Send | Op::Recv | Op::AllToAll(..) | Op::AllReduce(_)
                ) =>
            {
                i.ty.clone()
            }
            _ => TensorType::f32(&[len]),
        };
        self.push_typed(name, op, gang, inputs, vec![(ty, sharding)])
            .first()
            .copied()
            .unwrap_or(Value(usize::MAX))
    }

    fn push_typed(
        &mut self,
        name: &str,
        op: Op,
        gang: &Gang,
        inputs: Vec<Value>,
        outputs_of: Vec<(TensorType, NamedSharding)>,
    ) -> Vec<Value> {
        self.check_gang(name, gang);
        self.check_not_updated(name, &inputs);
        let active = match (&op, &self.active) {
            (Op::Kernel(_), Some(a)) if a.len() != gang.len() => {
                self.fail(format!(
                    "{name}: {} shard flags for a gang of {}",
                    a.len(),
                    gang.len()
                ));
                None
            }
            (Op::Kernel(_), Some(a)) if a.iter().all(|&x| x) => None,
            (Op::Kernel(_), Some(a)) => Some(a.clone()),
            _ => None,
        };
        let node = self.program.nodes.len();
        let mut outputs = Vec::with_capacity(outputs_of.len());
        for (output, (ty, sharding)) in outputs_of.into_iter().enumerate() {
            outputs.push(Value(self.program.values.len()));
            self.program.values.push(ValueInfo {
                gang: gang.clone(),
                shard_len: ty.len(),
                ty,
                sharding,
                producer: node,
                output,
            });
        }
        self.program.overlap.push(self.overlap_group);
        self.program.nodes.push(Node {
            name: name.to_string(),
            op,
            gang: gang.clone(),
            inputs,
            outputs: outputs.clone(),
            active,
        });
        outputs
    }

    /// The type of `x`'s shards (f32 `[0]` for a value of another builder, which is an error).
    pub fn ty(&self, x: Value) -> TensorType {
        self.info(x)
            .map(|i| i.ty.clone())
            .unwrap_or_else(|| TensorType::f32(&[0]))
    }

    /// How `x` lies over its gang (replicated on one axis for a value of another builder).
    pub fn sharding(&self, x: Value) -> NamedSharding {
        self.info(x)
            .map(|i| i.sharding.clone())
            .unwrap_or_else(|| NamedSharding::replicated(&MeshShape::line(DEFAULT_AXIS, 1), 1))
    }

    /// `gang` over named `axes` (sizes multiplying to its device count, row-major: device `i`
    /// of the gang sits at the coordinates of `i`): [`Gang::new`] whose error waits for
    /// [`Self::build`] (the gang is then one axis). Collectives over that gang's values can run
    /// over one axis, and shardings name them.
    pub fn mesh(&mut self, gang: &[usize], axes: &[(&str, usize)]) -> Gang {
        Gang::new(gang, axes).unwrap_or_else(|e| {
            self.fail(format!("gang {gang:?}: {e}"));
            Gang::line(gang)
        })
    }

    /// A sharding on `gang`'s axes (see [`NamedSharding::new`]); a bad spec is a build error.
    pub fn spec(
        &mut self,
        gang: impl Into<Gang>,
        dims: &[&[&str]],
        partial: &[&str],
    ) -> NamedSharding {
        let gang: &Gang = &gang.into();
        let axes = gang.shape().clone();
        NamedSharding::new(&axes, dims, partial).unwrap_or_else(|e| {
            self.fail(format!("gang {gang:?}: {e}"));
            NamedSharding::replicated(&axes, dims.len())
        })
    }

    /// Checks that `sharding` describes a `ty` value on `gang`.
    fn check_sharding(&mut self, what: &str, gang: &Gang, ty: &TensorType, s: &NamedSharding) {
        if s.mesh() != gang.shape() || s.rank() != ty.shape.len() {
            self.fail(format!(
                "{what}: sharding {s} does not fit a {ty} value on gang {gang:?} with axes {}",
                gang.shape()
            ));
        }
    }

    /// An argument of `ty` per device of `gang`, given at every run (shard-major), whose rows are
    /// split over the gang's axes: the host array is the global value.
    pub fn typed_arg(&mut self, gang: impl Into<Gang>, ty: TensorType) -> Value {
        let gang: &Gang = &gang.into();
        let sharding = NamedSharding::rows(gang.shape(), ty.shape.len());
        self.sharded_arg(gang, ty, sharding)
    }

    /// [`Self::typed_arg`] laid out as `sharding`. The host data is still given shard by shard
    /// (a replicated argument repeats the value for every device).
    pub fn sharded_arg(
        &mut self,
        gang: impl Into<Gang>,
        ty: TensorType,
        sharding: NamedSharding,
    ) -> Value {
        let gang: &Gang = &gang.into();
        self.check_sharding("argument", gang, &ty, &sharding);
        if ty.is_empty() {
            self.fail("an argument with empty shards".into());
        }
        let index = self.program.args.len();
        let v = self.push_typed(
            &format!("arg{index}"),
            Op::Arg { index },
            gang,
            vec![],
            vec![(ty, sharding)],
        );
        let v = v.first().copied().unwrap_or(Value(usize::MAX));
        self.program.args.push(v);
        v
    }

    /// State named `name` of the [`super::Variables`] the program will be compiled against: one
    /// `ty` tensor per device of `gang`, replicated (the same on every device, as dense weights).
    pub fn variable(&mut self, name: &str, gang: impl Into<Gang>, ty: TensorType) -> Value {
        let gang: &Gang = &gang.into();
        let sharding = NamedSharding::replicated(gang.shape(), ty.shape.len());
        self.sharded_variable(name, gang, ty, sharding)
    }

    /// [`Self::variable`] laid out as `sharding` (expert weights split over the expert axis).
    pub fn sharded_variable(
        &mut self,
        name: &str,
        gang: impl Into<Gang>,
        ty: TensorType,
        sharding: NamedSharding,
    ) -> Value {
        let gang: &Gang = &gang.into();
        self.check_sharding(name, gang, &ty, &sharding);
        let op = Op::Variable {
            name: name.to_string(),
        };
        let v = self.push_typed(name, op, gang, vec![], vec![(ty, sharding)]);
        v.first().copied().unwrap_or(Value(usize::MAX))
    }

    /// The outputs' shardings by `kernel`'s rule, or a recorded error naming the node.
    fn kernel_shardings(
        &mut self,
        name: &str,
        kernel: &dyn Kernel,
        inputs: &[Value],
        outputs: &[TensorType],
    ) -> Option<Vec<NamedSharding>> {
        let shardings: Vec<NamedSharding> = inputs.iter().map(|&v| self.sharding(v)).collect();
        match kernel.shardings(&shardings, outputs) {
            Ok(s) if s.len() == outputs.len() => Some(s),
            Ok(s) => {
                self.fail(format!(
                    "{name}: {} shardings for {} outputs",
                    s.len(),
                    outputs.len()
                ));
                None
            }
            Err(e) => {
                self.fail(format!("{name}: {e}"));
                None
            }
        }
    }

    /// [`Self::kernel`] of a kernel with one output.
    pub fn kernel1(
        &mut self,
        name: &str,
        gang: impl Into<Gang>,
        kernel: impl Kernel + 'static,
        inputs: &[Value],
    ) -> Value {
        let gang: &Gang = &gang.into();
        let [v] = self.kernel(name, gang, Arc::new(kernel), inputs);
        v
    }

    /// `kernel` on every device of `gang` over `inputs` (moved there when they live elsewhere):
    /// its `N` outputs. In-place outputs alias their inputs' buffers.
    pub fn kernel<const N: usize>(
        &mut self,
        name: &str,
        gang: impl Into<Gang>,
        kernel: Arc<dyn Kernel>,
        inputs: &[Value],
    ) -> [Value; N] {
        let gang: &Gang = &gang.into();
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
        let Some(shardings) = self.kernel_shardings(name, kernel.as_ref(), &inputs, &outputs)
        else {
            return bad;
        };
        let outputs = outputs.into_iter().zip(shardings).collect();
        let values = self.push_kernel(name, gang, kernel, inputs, outputs);
        values.try_into().unwrap_or(bad)
    }

    /// Adds a kernel node, and marks the inputs it updates in place as read no more.
    fn push_kernel(
        &mut self,
        name: &str,
        gang: &Gang,
        kernel: Arc<dyn Kernel>,
        inputs: Vec<Value>,
        outputs: Vec<(TensorType, NamedSharding)>,
    ) -> Vec<Value> {
        let updates: Vec<Value> = kernel
            .in_place()
            .iter()
            .filter_map(|&(_, i)| inputs.get(i).copied())
            .collect();
        let values = self.push_typed(name, Op::Kernel(KernelNode(kernel)), gang, inputs, outputs);
        for v in updates {
            self.updated.insert(v.0, name.to_string());
        }
        values
    }

    /// [`Self::kernel`] for a kernel whose output count is known only at run time of the builder.
    pub fn kernels(
        &mut self,
        name: &str,
        gang: impl Into<Gang>,
        kernel: Arc<dyn Kernel>,
        inputs: &[Value],
    ) -> Vec<Value> {
        let gang: &Gang = &gang.into();
        let inputs: Vec<Value> = inputs.iter().map(|&x| self.on(gang, x)).collect();
        let types: Vec<TensorType> = inputs.iter().map(|&v| self.ty(v)).collect();
        match kernel.outputs(&types) {
            Ok(outputs) => {
                let Some(shardings) =
                    self.kernel_shardings(name, kernel.as_ref(), &inputs, &outputs)
                else {
                    return Vec::new();
                };
                let outputs = outputs.into_iter().zip(shardings).collect();
                self.push_kernel(name, gang, kernel, inputs, outputs)
            }
            Err(e) => {
                self.fail(format!("{name}: {e}"));
                Vec::new()
            }
        }
    }

    /// An argument of `shard_len` f32 values per device of `gang`, given at every run.
    pub fn arg(&mut self, gang: impl Into<Gang>, shard_len: usize) -> Value {
        let gang: &Gang = &gang.into();
        self.typed_arg(gang, TensorType::f32(&[shard_len]))
    }

    /// Data fixed at compile time: `data` holds every shard, one after the other (rows split
    /// over the gang's axes).
    pub fn constant(&mut self, name: &str, gang: impl Into<Gang>, data: Vec<f32>) -> Value {
        let gang: &Gang = &gang.into();
        let len = data.len() / gang.len().max(1);
        if data.is_empty() || len * gang.len() != data.len() {
            self.fail(format!(
                "{name}: {} values cannot be split into {} equal shards",
                data.len(),
                gang.len()
            ));
        }
        let sharding = NamedSharding::rows(gang.shape(), 1);
        self.push(name, Op::Constant { data }, gang, vec![], len, sharding)
    }

    /// `x` on `gang`: itself when it lives there, else a transfer node (same shard count).
    pub fn on(&mut self, gang: impl Into<Gang>, x: Value) -> Value {
        let gang: &Gang = &gang.into();
        let Some(info) = self.known(x) else {
            return x;
        };
        if info.gang.devices() != gang.devices() {
            return self.transfer(x, gang);
        }
        if info.gang.shape() != gang.shape() {
            self.fail(format!(
                "value {} lives on gang {:?} as {}, not {}: one gang, two layouts",
                x.0,
                gang.devices(),
                info.gang.shape(),
                gang.shape()
            ));
        }
        x
    }

    /// Sends shard i of `x` to device i of `to`.
    pub fn transfer(&mut self, x: Value, to: impl Into<Gang>) -> Value {
        let to: &Gang = &to.into();
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
        let sharding = self.moved(&name, &info, to);
        self.push(&name, Op::Transfer, to, vec![x], info.shard_len, sharding)
    }

    /// The sending half of a transfer of `x` (see [`Op::Send`]): a value only [`Self::recv`]
    /// reads.
    pub fn send(&mut self, name: &str, x: Value) -> Value {
        let Some(info) = self.known(x) else {
            return x;
        };
        let sharding = info.sharding.clone();
        self.push(
            name,
            Op::Send,
            &info.gang,
            vec![x],
            info.shard_len,
            sharding,
        )
    }

    /// The receiving half: shard i of what `sent` sent, on device i of `to`.
    pub fn recv(&mut self, name: &str, sent: Value, to: impl Into<Gang>) -> Value {
        let to: &Gang = &to.into();
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
        let sharding = self.moved(name, &info, to);
        self.push(name, Op::Recv, to, vec![sent], info.shard_len, sharding)
    }

    /// The sharding of `info`'s value moved shard for shard onto `to`, whose axes must match.
    fn moved(&mut self, name: &str, info: &ValueInfo, to: &Gang) -> NamedSharding {
        let axes = to.shape().clone();
        info.sharding.on(&axes).unwrap_or_else(|e| {
            self.fail(format!("{name}: {e}"));
            info.sharding.clone()
        })
    }

    /// Nodes so far: the index the next node gets.
    pub fn node_count(&self) -> usize {
        self.program.nodes.len()
    }

    fn elementwise(&mut self, name: &str, gang: &Gang, op: ElementwiseOp, xs: &[Value]) -> Value {
        let [y] = self.kernel(name, gang, Arc::new(op), xs);
        y
    }

    /// `x * scale + shift` on every device of `gang`.
    pub fn affine(
        &mut self,
        name: &str,
        gang: impl Into<Gang>,
        x: Value,
        scale: f32,
        shift: f32,
    ) -> Value {
        let gang: &Gang = &gang.into();
        self.fused_affine(name, gang, x, scale, shift, 1)
    }

    /// `repeat` affine computations fused into one kernel launch.
    pub fn fused_affine(
        &mut self,
        name: &str,
        gang: impl Into<Gang>,
        x: Value,
        scale: f32,
        shift: f32,
        repeat: u32,
    ) -> Value {
        let gang: &Gang = &gang.into();
        let op = ElementwiseOp::Affine {
            scale,
            shift,
            repeat,
        };
        self.elementwise(name, gang, op, &[x])
    }

    pub fn relu(&mut self, name: &str, gang: impl Into<Gang>, x: Value) -> Value {
        let gang: &Gang = &gang.into();
        self.elementwise(name, gang, ElementwiseOp::Relu, &[x])
    }

    pub fn add(&mut self, name: &str, gang: impl Into<Gang>, x: Value, z: Value) -> Value {
        let gang: &Gang = &gang.into();
        self.elementwise(name, gang, ElementwiseOp::Add, &[x, z])
    }

    /// The groups of a collective over `axis` of `info`'s gang (`None`: the whole gang).
    fn collective(&mut self, name: &str, info: &ValueInfo, axis: Option<&str>) -> Collective {
        let Some(axis) = axis else {
            return Collective::whole(info.gang.len());
        };
        match info.sharding.mesh().group(axis) {
            Ok((size, stride)) => Collective {
                axis: Some(axis.to_string()),
                size,
                stride,
            },
            Err(e) => {
                self.fail(format!("{name}: {e}"));
                Collective::whole(info.gang.len())
            }
        }
    }

    /// All-to-all over `x`'s whole gang: each shard is cut into one chunk per device. The layout
    /// is unchanged: rows move between shards, as the caller's routing says.
    pub fn all_to_all(&mut self, name: &str, x: Value) -> Value {
        self.all_to_all_regrouped(name, x, None, Regroup::default())
    }

    /// [`Self::all_to_all`] within each group of shards along `axis` of `x`'s gang (the expert
    /// axis of a data × expert mesh).
    pub fn all_to_all_over(&mut self, name: &str, x: Value, axis: &str) -> Value {
        self.all_to_all_regrouped(name, x, Some(axis), Regroup::default())
    }

    /// [`Self::all_to_all`] (within groups along `axis`, if given) whose rows also change order
    /// on the way, as `regroup` says: the host places them while it gathers, so neither side
    /// runs a permute kernel. Its maps must cover a shard's rows, and a chunk must be whole rows.
    pub fn all_to_all_regrouped(
        &mut self,
        name: &str,
        x: Value,
        axis: Option<&str>,
        regroup: Regroup,
    ) -> Value {
        self.all_to_all_with(name, (x, None), axis, regroup)
    }

    /// [`Self::all_to_all_regrouped`] moving only the live rows of each block of `x`, as
    /// `regroup`'s [`crate::program::Ragged`] says and `counts` counts: the rows that hold routed
    /// tokens, not the empty slots. `counts` (u32 records) is the output of a plain all-to-all
    /// over the same group, which went first: each member reads its shard's records on the
    /// side of that exchange the ragged one names. Rows past a block's count are not written on
    /// the receiving side.
    pub fn all_to_all_ragged(
        &mut self,
        name: &str,
        (x, counts): (Value, Value),
        axis: Option<&str>,
        regroup: Regroup,
    ) -> Value {
        self.all_to_all_with(name, (x, Some(counts)), axis, regroup)
    }

    fn all_to_all_with(
        &mut self,
        name: &str,
        (x, counts): (Value, Option<Value>),
        axis: Option<&str>,
        regroup: Regroup,
    ) -> Value {
        let Some(info) = self.known(x) else {
            return x;
        };
        let group = self.collective(name, &info, axis);
        if !info.shard_len.is_multiple_of(group.size) {
            self.fail(format!(
                "{name}: shards of {} values cannot be cut into {} equal chunks",
                info.shard_len, group.size
            ));
        }
        let bytes = info.shard_len * info.ty.dtype.size();
        let rows = bytes / regroup.row_bytes.max(1);
        if !regroup.is_plain() {
            let sides_fit = [&regroup.send, &regroup.recv]
                .iter()
                .all(|m| m.is_empty() || m.len() == rows);
            if regroup.row_bytes == 0
                || rows * regroup.row_bytes != bytes
                || !rows.is_multiple_of(group.size)
                || !sides_fit
            {
                self.fail(format!(
                    "{name}: a regroup of {}-byte rows does not fit shards of {bytes} bytes \
                     cut into {} chunks of whole rows (maps of {} and {} rows)",
                    regroup.row_bytes,
                    group.size,
                    regroup.send.len(),
                    regroup.recv.len()
                ));
            }
        }
        if regroup.ragged.is_some() != counts.is_some() {
            self.fail(format!(
                "{name}: a ragged regroup and its counts go together \
                 (ProgramBuilder::all_to_all_ragged)"
            ));
        }
        let mut inputs = vec![x];
        if let Some(counts) = counts {
            let Some(c) = self.known(counts) else {
                return x;
            };
            let words = (c.ty.dtype == crate::DType::U32).then_some(c.shard_len);
            // The counts must be on the host before the rows are copied out: the output of their
            // own plain exchange over the same group, whose mail the runtime reads.
            let first = matches!(
                &self.program.nodes[c.producer].op,
                Op::AllToAll(g, r) if *g == group && r.ragged.is_none()
            );
            let wrong = match words {
                None => Some("its counts are not u32".to_string()),
                Some(_) if c.gang != info.gang => {
                    Some("its counts live on another gang".to_string())
                }
                Some(_) if !first => Some(
                    "its counts are not the output of a plain all-to-all over the same group"
                        .to_string(),
                ),
                Some(w) => regroup.check_ragged(rows, group.size, w),
            };
            if let Some(reason) = wrong {
                self.fail(format!("{name}: {reason}"));
            }
            inputs.push(counts);
        }
        let sharding = info.sharding.clone();
        let op = Op::AllToAll(group, Arc::new(regroup));
        self.push(name, op, &info.gang, inputs, info.shard_len, sharding)
    }

    /// Sum of all shards of `x`, on every device of its gang: partial sums become whole.
    pub fn all_reduce(&mut self, name: &str, x: Value) -> Value {
        self.all_reduce_among(name, x, None)
    }

    /// Sum of the shards of each group along `axis` of `x`'s gang, on every member (the data axis
    /// of a data × expert mesh): no longer partial over `axis`.
    pub fn all_reduce_over(&mut self, name: &str, x: Value, axis: &str) -> Value {
        self.all_reduce_among(name, x, Some(axis))
    }

    fn all_reduce_among(&mut self, name: &str, x: Value, axis: Option<&str>) -> Value {
        let Some(info) = self.known(x) else {
            return x;
        };
        let group = self.collective(name, &info, axis);
        let mesh = info.sharding.mesh().clone();
        let reduced: Vec<&str> = match axis {
            Some(a) => vec![a],
            None => mesh.axes().iter().map(|(n, _)| n.as_str()).collect(),
        };
        let sharding = info.sharding.clone().reduced(&reduced);
        let op = Op::AllReduce(group);
        self.push(name, op, &info.gang, vec![x], info.shard_len, sharding)
    }

    /// Marks `x` as a result, read back after every run (shards concatenated).
    pub fn result(&mut self, x: Value) {
        let Some(info) = self.known(x) else {
            return;
        };
        let index = self.program.results.len();
        self.check_not_updated(&format!("result{index}"), &[x]);
        self.program.result_nodes.push(self.program.nodes.len());
        self.program.overlap.push(0);
        self.program.nodes.push(Node {
            name: format!("result{index}"),
            op: Op::Result { index },
            gang: info.gang,
            inputs: vec![x],
            outputs: Vec::new(),
            active: None,
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
mod tests;
