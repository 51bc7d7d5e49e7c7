//! The expert weight gradient (`shaders/expert_grad.wgsl`): per row group `A_gᵀ·B_g`, the weight
//! backward of the grouped matmul, summed in slot blocks so that a split over devices sums alike.
//! [`ExpertWeightGrad`] is the kernel (with its own uniform `Params`); the reference is the
//! matmul's on each group.

use crate::device::Recorder;
use crate::kernels::Shader;
use crate::kernels::check::{self, dims2, expect, invalid, to_u32};
use crate::kernels::matmul::{self, Limits, MatmulShape};
use crate::kernels::{Kernel, Prepared, TensorType, sharding_rules};
use crate::named_sharding::NamedSharding;
use crate::{DType, Error, Result, Tensor};

/// `Params` of `expert_grad.wgsl`, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    inner: u32,
    cols: u32,
    groups: u32,
    block: u32,
    limit_stride: u32,
    _pad: [u32; 2],
}

pub const EXPERT_GRAD: Shader = Shader {
    name: "expert_grad",
    source: include_str!("../../shaders/expert_grad.wgsl"),
    common: crate::kernels::FLAT_COMMON,
    ..crate::kernels::SHADER
};

/// Records `c[g] = a[g]ᵀ · b[g]` where `a[g]`, `b[g]` are rows `offsets[g]..offsets[g+1]` of `a`
/// `[rows, inner]` and `b` `[rows, N]`, into `c` `[G, inner, N]` (u32 `offsets` `[G + 1]`, the
/// grouped matmul's): each expert's weight gradient from its own rows, whether they are
/// `capacity`-sized slot blocks or the all-to-all's variable groups. Rows past `rows` are never
/// read, whatever the device-side offsets hold.
///
/// A group's rows are summed `block` rows at a time (0: all at once), and the blocks' partial sums
/// are then added in order. With `block` = the expert capacity, D devices' slot blocks in one
/// group sum exactly as one device that computes each block in its own step and accumulates the
/// steps: the MoE step's N-device = 1-device equality rests on this.
///
/// With `limits`, block `j` (rows `j·block ..`, so offsets must be multiples of `block`) has
/// `limits.counts[j · stride]` live rows and the rest are zero rows of both `a` and `b` (empty
/// expert slots): they are skipped, which changes no bit of the sums.
fn encode_expert_weight_grad(
    encoder: &mut impl Recorder,
    a: &Tensor,
    b: &Tensor,
    offsets: &Tensor,
    block: usize,
    limits: Option<Limits<'_>>,
    c: &Tensor,
) -> Result<()> {
    const WHAT: &str = "expert_weight_grad";
    let device = a.device();
    let (rows, inner) = dims2(WHAT, a)?;
    let (_, n) = dims2(WHAT, b)?;
    let groups = match *c.shape() {
        [g, i, nn] if i == inner && nn == n => g,
        _ => {
            return Err(Error::ShapeMismatch {
                what: WHAT,
                expected: format!("[groups, {inner}, {n}]"),
                got: format!("{:?}", c.shape()),
            });
        }
    };
    expect(WHAT, a, device, DType::F32, &[rows, inner])?;
    expect(WHAT, b, device, DType::F32, &[rows, n])?;
    expect(WHAT, offsets, device, DType::U32, &[groups + 1])?;
    expect(WHAT, c, device, DType::F32, &[groups, inner, n])?;
    if let Some(l) = limits {
        if block == 0 {
            return Err(invalid(
                WHAT,
                "live-row counts are per block of at least 1 row".into(),
            ));
        }
        l.check(WHAT, device, rows.div_ceil(block))?;
    }
    let params = Params {
        rows: to_u32(WHAT, rows)?,
        inner: to_u32(WHAT, inner)?,
        cols: to_u32(WHAT, n)?,
        groups: to_u32(WHAT, groups)?,
        block: to_u32(WHAT, block)?,
        limit_stride: to_u32(WHAT, limits.map_or(0, |l| l.stride))?,
        _pad: [0; 2],
    };
    to_u32(WHAT, groups * inner * n)?;
    // One invocation per 8 × 8 block of a group's outputs (the shader says why).
    let invocations = groups * inner.div_ceil(8) * n.div_ceil(8);
    let bindings = [
        (20, a.buffer()),
        (21, b.buffer()),
        (22, c.buffer()),
        (27, offsets.buffer()),
        (28, limits.map_or(offsets, |l| l.counts).buffer()),
    ];
    EXPERT_GRAD.encode_threads(encoder, device, WHAT, &params, &bindings, invocations)
}

/// Reference of [`ExpertWeightGrad`]: the matmul reference (`trans_a`) on each row group.
/// Offsets must be valid (see [`matmul::check_offsets`]).
pub fn expert_weight_grad_reference(
    a: &[f32],
    b: &[f32],
    offsets: &[u32],
    inner: usize,
    n: usize,
) -> Vec<f32> {
    offsets
        .windows(2)
        .flat_map(|w| {
            let (start, end) = (w[0] as usize, w[1] as usize);
            let shape = MatmulShape {
                trans_a: true,
                ..MatmulShape::plain(inner, n, end - start, DType::F32)
            };
            matmul::reference(
                &a[start * inner..end * inner],
                &b[start * n..end * n],
                &[0, inner as u32],
                &shape,
            )
        })
        .collect()
}

/// `(a [R, I], b [R, N]) → [G, I, N]`: per row group of static `offsets` (`G + 1` values,
/// non-decreasing, the last at most `R`) `aᵀ·b`, summed `block` rows at a time (0: a group at
/// once; see `encode_expert_weight_grad`).
#[derive(Debug, Clone)]
pub struct ExpertWeightGrad {
    pub offsets: Vec<u32>,
    pub block: usize,
    /// The stride of the live-row counts per block in a third input, if the node has one
    /// (`encode_expert_weight_grad`).
    pub limits: Option<usize>,
    /// The gang axis the experts split along when the rows are split along others too (a
    /// `{data, expert}` mesh): the gradient is then partial over those others. `None`: the groups
    /// split like the rows.
    pub axis: Option<&'static str>,
}

impl Kernel for ExpertWeightGrad {
    fn kind(&self) -> &'static str {
        "expert_weight_grad"
    }
    fn shardings(&self, inputs: &[NamedSharding], outputs: &[TensorType]) -> sharding_rules::Rule {
        match self.axis {
            Some(axis) => sharding_rules::grouped_sums(inputs, axis),
            None => sharding_rules::rows(inputs, outputs),
        }
    }
    /// A transposed product too (aᵀ·b per group).
    fn transposed(&self) -> bool {
        true
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        check::arity(self.kind(), inputs, 2 + usize::from(self.limits.is_some()))?;
        if self.limits.is_some()
            && (self.block == 0
                || self
                    .offsets
                    .iter()
                    .any(|&o| !(o as usize).is_multiple_of(self.block)))
        {
            return Err(check::invalid(
                self.kind(),
                format!(
                    "live-row counts are per block: offsets {:?} must be multiples of block {}",
                    self.offsets, self.block
                ),
            ));
        }
        let (rows, i) = check::rows_cols(self.kind(), &inputs[0])?;
        let (_, n) = check::rows_cols(self.kind(), &inputs[1])?;
        let groups = self.offsets.len().saturating_sub(1);
        if groups == 0 {
            return Err(invalid(self.kind(), "needs at least one group".into()));
        }
        matmul::check_offsets(&self.offsets, groups, rows)?;
        Ok(vec![TensorType::f32(&[groups, i, n])])
    }
    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        let c = check::output(y, 0)?;
        let offsets = Tensor::from_u32(c.device(), &[self.offsets.len()], &self.offsets)?;
        let limits = self.limits.map(|stride| Limits {
            counts: &x[2],
            stride,
        });
        encode_expert_weight_grad(rec, &x[0], &x[1], &offsets, self.block, limits, c)
    }
}
