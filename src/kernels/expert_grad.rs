//! The expert weight gradient (`shaders/expert_grad.wgsl`): per row group `A_gᵀ·B_g`, the weight
//! backward of the grouped matmul, summed in slot blocks so that a split over devices sums alike;
//! paired, two such products over the same row groups in one launch (an expert layer's two weight
//! gradients). [`ExpertWeightGrad`] is the kernel (with its own uniform `Params`); the reference
//! is the matmul's on each group.

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
    inner2: u32,
    cols2: u32,
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
///
/// With `second` (`a2`, `b2`, `c2`, rows like `a`'s), the same launch computes `c2[g] = a2[g]ᵀ ·
/// b2[g]` over the same groups, blocks and live rows, each output summed as alone.
#[allow(clippy::too_many_arguments)]
fn encode_expert_weight_grad(
    encoder: &mut impl Recorder,
    a: &Tensor,
    b: &Tensor,
    offsets: &Tensor,
    block: usize,
    limits: Option<Limits<'_>>,
    c: &Tensor,
    second: Option<[&Tensor; 3]>,
) -> Result<()> {
    const WHAT: &str = "expert_weight_grad";
    let device = a.device();
    // `[rows, inner]`, `[rows, n]` and `[groups, inner, n]` (or `[inner, n]`: one group),
    // checked: `(rows, inner, n, groups)`.
    let product = |a: &Tensor, b: &Tensor, c: &Tensor| -> Result<[usize; 4]> {
        let (rows, inner) = dims2(WHAT, a)?;
        let (_, n) = dims2(WHAT, b)?;
        let groups = match *c.shape() {
            [g, i, nn] if i == inner && nn == n => g,
            [i, nn] if i == inner && nn == n => 1,
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
        expect(WHAT, c, device, DType::F32, c.shape())?;
        to_u32(WHAT, groups * inner * n)?;
        Ok([rows, inner, n, groups])
    };
    let [rows, inner, n, groups] = product(a, b, c)?;
    let [inner2, n2] = match second {
        None => [0, 0],
        Some([a2, b2, c2]) => match product(a2, b2, c2)? {
            [r, i, nn, g] if r == rows && g == groups => [i, nn],
            [r, _, _, g] => {
                return Err(Error::ShapeMismatch {
                    what: WHAT,
                    expected: format!("a second product of {rows} rows in {groups} groups"),
                    got: format!("{r} rows in {g} groups"),
                });
            }
        },
    };
    expect(WHAT, offsets, device, DType::U32, &[groups + 1])?;
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
        inner2: to_u32(WHAT, inner2)?,
        cols2: to_u32(WHAT, n2)?,
    };
    // One invocation per 8 × 8 block of a group's outputs (the shader says why); a second
    // product is the grid's second z layer.
    let tiles = |inner: usize, n: usize| groups * inner.div_ceil(8) * n.div_ceil(8);
    let mut grid = super::grid_1d(device, WHAT, tiles(inner, n).max(tiles(inner2, n2)))?;
    // A single product binds its own operands in the second's places (never read) and the
    // device's unused buffer as the second output (never written).
    let unused;
    let [a2, b2, c2] = match second {
        Some([a2, b2, c2]) => {
            grid[2] = 2;
            [a2.buffer(), b2.buffer(), c2.buffer()]
        }
        None => {
            unused = device.unused_storage()?;
            [a.buffer(), b.buffer(), &unused]
        }
    };
    let bindings = [
        (20, a.buffer()),
        (21, b.buffer()),
        (22, c.buffer()),
        (23, a2),
        (24, b2),
        (25, c2),
        (27, offsets.buffer()),
        (28, limits.map_or(offsets, |l| l.counts).buffer()),
    ];
    let paired = u32::from(second.is_some());
    EXPERT_GRAD.encode_specialised(
        encoder,
        device,
        DType::F32,
        WHAT,
        &[("PAIRED", paired)],
        &params,
        &bindings,
        grid,
    )
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

/// The rows `R` of `operands` (pairs `a [R, I]`, `b [R, N]`, at least one) and each product's
/// `[I, N]`; operands of other row counts than the first's are a shape error.
fn products(kind: &'static str, operands: &[TensorType]) -> Result<(usize, Vec<[usize; 2]>)> {
    let first = operands
        .first()
        .ok_or_else(|| invalid(kind, "no operands".into()))?;
    let (rows, _) = check::rows_cols(kind, first)?;
    let mut out = Vec::new();
    for pair in operands.chunks_exact(2) {
        let (r, i) = check::rows_cols(kind, &pair[0])?;
        let (rb, n) = check::rows_cols(kind, &pair[1])?;
        if r != rows || rb != rows {
            return Err(Error::ShapeMismatch {
                what: kind,
                expected: format!("operands of {rows} rows, as the first"),
                got: format!("{r} and {rb} rows"),
            });
        }
        out.push([i, n]);
    }
    Ok((rows, out))
}

/// `(a [R, I], b [R, N]) → [G, I, N]`: per row group of static `offsets` (`G + 1` values,
/// non-decreasing, the last at most `R`) `aᵀ·b`, summed `block` rows at a time (0: a group at
/// once; see `encode_expert_weight_grad`). [`Self::paired`]: `(a, b, a2 [R, I2], b2 [R, N2]) →
/// ([G, I, N], [G, I2, N2])`, both products in one launch, each output's bits as alone.
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
    /// Two products over the same groups (inputs `a, b, a2, b2`, then the live-row counts),
    /// one launch: an expert layer's two weight gradients.
    pub paired: bool,
}

impl ExpertWeightGrad {
    /// Operand inputs: 2, or 4 when paired.
    fn operands(&self) -> usize {
        if self.paired { 4 } else { 2 }
    }
}

impl Kernel for ExpertWeightGrad {
    fn kind(&self) -> &'static str {
        "expert_weight_grad"
    }
    fn shardings(&self, inputs: &[NamedSharding], outputs: &[TensorType]) -> sharding_rules::Rule {
        // Each product is laid out as alone: its operands, then the counts (if any).
        let counts = inputs.get(self.operands()..).unwrap_or_default();
        let mut rules = Vec::new();
        for (k, out) in outputs.iter().enumerate() {
            let Some(operands) = inputs.get(2 * k..2 * k + 2) else {
                return Err(format!(
                    "{} inputs for {} products",
                    inputs.len(),
                    outputs.len()
                ));
            };
            let mut own = operands.to_vec();
            own.extend_from_slice(counts);
            rules.extend(match self.axis {
                Some(axis) => sharding_rules::grouped_sums(&own, axis)?,
                None => sharding_rules::rows(&own, std::slice::from_ref(out))?,
            });
        }
        Ok(rules)
    }
    /// A transposed product too (aᵀ·b per group).
    fn transposed(&self) -> bool {
        true
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        check::arity(
            self.kind(),
            inputs,
            self.operands() + usize::from(self.limits.is_some()),
        )?;
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
        let groups = self.offsets.len().saturating_sub(1);
        if groups == 0 {
            return Err(invalid(self.kind(), "needs at least one group".into()));
        }
        let (rows, products) = products(self.kind(), &inputs[..self.operands()])?;
        matmul::check_offsets(&self.offsets, groups, rows)?;
        Ok(products
            .into_iter()
            .map(|[i, n]| TensorType::f32(&[groups, i, n]))
            .collect())
    }
    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        let c = check::output(y, 0)?;
        let offsets = Tensor::from_u32(c.device(), &[self.offsets.len()], &self.offsets)?;
        let limits = self.limits.map(|stride| Limits {
            counts: &x[self.operands()],
            stride,
        });
        let second = match self.paired {
            true => Some([&x[2], &x[3], check::output(y, 1)?]),
            false => None,
        };
        encode_expert_weight_grad(rec, &x[0], &x[1], &offsets, self.block, limits, c, second)
    }
}

/// `(a [R, I], b [R, N], a2 [R, I2], b2 [R, N2]) → (aᵀ·b [I, N], a2ᵀ·b2 [I2, N2])`: two linear
/// layers' weight gradients over the same rows in one launch, the paired expert weight gradient
/// over one group of every row. Each output sums its rows in ascending order into one
/// accumulator, as the vec4 and subgroup `Aᵀ·B` kernels do (`tests/training_kernels.rs` checks
/// the bits where it runs), so a step may put it in place of two of their launches.
#[derive(Debug, Clone)]
pub struct WeightGradPair;

impl Kernel for WeightGradPair {
    fn kind(&self) -> &'static str {
        "weight_grad_pair"
    }
    /// Each product as the matmul `Aᵀ·B` lays it out: partial sums over the axes splitting rows.
    fn shardings(&self, inputs: &[NamedSharding], _: &[TensorType]) -> sharding_rules::Rule {
        let [a, b, a2, b2] = inputs else {
            return Err(format!(
                "{} inputs, a pair of products takes 4",
                inputs.len()
            ));
        };
        let mut out = sharding_rules::matmul(&[a.clone(), b.clone()], true, false)?;
        out.extend(sharding_rules::matmul(
            &[a2.clone(), b2.clone()],
            true,
            false,
        )?);
        Ok(out)
    }
    fn transposed(&self) -> bool {
        true
    }
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        check::arity(self.kind(), inputs, 4)?;
        let (_, products) = products(self.kind(), inputs)?;
        Ok(products.iter().map(|s| TensorType::f32(s)).collect())
    }
    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        let c = check::output(y, 0)?;
        let rows = to_u32(self.kind(), x[0].shape().first().copied().unwrap_or(0))?;
        let offsets = Tensor::from_u32(c.device(), &[2], &[0, rows])?;
        let second = Some([&x[2], &x[3], check::output(y, 1)?]);
        encode_expert_weight_grad(rec, &x[0], &x[1], &offsets, 0, None, c, second)
    }
}
