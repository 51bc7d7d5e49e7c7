//! `C = op(A) · op(B)` in five implementations, plain and grouped (one weight matrix per expert):
//! [`Matmul`], the kernel (a program node, or run now by [`super::eager`]), its launcher, and the
//! plain-Rust reference.
//!
//! No implementation's choice or summation order depends on M: each output sums over k in an
//! order fixed by K and the transposes, so rows split over devices give the bits one device gives.
//!
//! Layouts (row-major): A is `[M, K]`, or `[K, M]` with `trans_a`; B is `[K, N]` / `[G, K, N]`, or
//! `[N, K]` / `[G, N, K]` with `trans_b`; C is `[M, N]`. In the grouped form, rows
//! `offsets[g]..offsets[g+1]` of A and C use `B[g / blocks]` (offsets may name `blocks` row
//! groups per weight matrix: an expert's slot blocks, one per source device), and no group has
//! more than `max_group_rows` rows (a static bound, e.g. the expert capacity, that sizes the
//! dispatch grid).
//!
//! Sums are f32 for f16 operands too, unless the call asks for f16 sums
//! ([`MatmulShape::f16_accumulate`], vec4's kernels only). f16 operands are read as packed u32
//! pairs where a kernel loads four at once (the shader prelude's `Elem4`), half the loads of
//! `vec4<f16>` on a CPU driver.
//!
//! [`Limits`] let a grouped matmul skip empty expert slots: a device-side count per row group (the
//! router's kept tokens), past which the group's rows of op(A) are zero. Tiles wholly past it
//! store zeros without reading, so the output is the unlimited one's, bit for bit.
//!
//! An [`Epilogue`] applies a relu or GELU, adds an array shaped like C, or takes a relu's or
//! GELU's backward, to each output as it is stored: the launches of the elementwise kernels that
//! would follow, saved, with their bits. The keeping ones also store the value before their last
//! stage as a second output (a relu's output beside the residual sum, a sum beside its relu's
//! backward, GELU's input beside GELU), where the caller needs both.

use super::{Kernel, Prepared, TensorType, check, sharding_rules};
use super::{Shader, autotune};
use crate::device::Recorder;
use crate::named_sharding::NamedSharding;
use crate::{DType, Device, Error, Result, Tensor};
use serde::{Deserialize, Serialize};

mod epilogue;
mod shaders;
pub use epilogue::Epilogue;
pub use shaders::*;

/// The matmul implementations. Which is fastest depends on the adapter; see [`autotune`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum MatmulVariant {
    /// One invocation per output; the baseline.
    Naive,
    /// 64×64 tiles in workgroup memory, 4×4 outputs per invocation.
    Tiled,
    /// Register blocks (8×8 outputs, 4×4 for `Aᵀ·Bᵀ`) with vec4 loads along each operand's
    /// contiguous dimension, no workgroup memory, one shader per transpose (`matmul_vec4*.wgsl`).
    Vec4,
    /// `A·B` only: `Vec4`'s blocks and sums, with each row of A loaded by one lane of a subgroup
    /// and broadcast to the rest. Only on adapters whose subgroups have at least 8 lanes at their
    /// smallest; correct at any size from 8 up, whatever the adapter picks in its range (lanes 0–7
    /// of every subgroup load; the 32-invocation workgroup is a whole number of subgroups of 8,
    /// 16 or 32, and one partly filled subgroup of 64). Tested on lavapipe at 8 and 16 lanes
    /// (`LP_NATIVE_VECTOR_WIDTH` 256 and 512); at 4 (128) it is refused.
    Subgroup,
    /// `Aᵀ·B` and `Aᵀ·Bᵀ` in two passes: A copied out transposed into a scratch buffer, then the
    /// `A·B` (or `A·Bᵀ`) kernel on it, subgroup where the adapter has them, else vec4 (the same
    /// bits). So its sums are those of `A·B` on Aᵀ, not the direct `Aᵀ` kernels'.
    Transpose,
}

impl MatmulVariant {
    pub const ALL: [MatmulVariant; 5] = [
        Self::Naive,
        Self::Tiled,
        Self::Vec4,
        Self::Subgroup,
        Self::Transpose,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Naive => "naive",
            Self::Tiled => "tiled",
            Self::Vec4 => "vec4",
            Self::Subgroup => "subgroup",
            Self::Transpose => "transpose",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.name() == name)
    }

    /// The shader and entry point that run `shape`, and the output rows and columns (in
    /// elements) one workgroup covers. `Transpose` comes here only for its second pass, whose
    /// shape has A untransposed ([`MatmulVariant::second_pass`]).
    fn kernel(self, shape: &MatmulShape) -> (Shader, &'static str, (usize, usize)) {
        if shape.f16_accumulate {
            // `unsupported` lets only vec4 (and transpose's vec4 second pass) through.
            let shader = match (shape.trans_a, shape.trans_b) {
                (false, false) => MATMUL_VEC4_F16_SUMS,
                (false, true) => MATMUL_VEC4_NT_F16_SUMS,
                _ => MATMUL_VEC4_TN_F16_SUMS,
            };
            return (shader, "main", (32, 128));
        }
        match (self, shape.trans_a, shape.trans_b) {
            (Self::Naive, ..) => (MATMUL_NAIVE, "main", (8, 8)),
            (Self::Tiled, ..) => (MATMUL_TILED, "main", (64, 64)),
            (Self::Vec4 | Self::Transpose, false, false) => (MATMUL_VEC4, "main", (32, 128)),
            (Self::Vec4 | Self::Transpose, false, true) => (MATMUL_VEC4_NT, "main", (32, 128)),
            (Self::Vec4 | Self::Transpose, true, false) => (MATMUL_VEC4_TN, "main", (32, 128)),
            (Self::Vec4 | Self::Transpose, true, true) => (MATMUL_VEC4_TT, "main", (16, 64)),
            // One row of 32 invocations (see the shader); other transposes never get here.
            (Self::Subgroup, true, _) => (MATMUL_SUBGROUP_TN, "main", (8, 256)),
            (Self::Subgroup, false, true) => (MATMUL_SUBGROUP_NT, "main", (8, 256)),
            (Self::Subgroup, ..) => (MATMUL_SUBGROUP, "main", (8, 256)),
        }
    }

    /// Why this variant cannot compute `shape` on `device`, or `None` when it can. The vec4
    /// kernels load whole vec4s along each operand's contiguous dimension: `A·B` needs N and K
    /// multiples of 4, `A·Bᵀ` and `Aᵀ·Bᵀ` need K a multiple of 4, and `Aᵀ·B` needs N a multiple
    /// of 4. The subgroup kernels (`A·B`, `A·Bᵀ`, `Aᵀ·B`) need the adapter's subgroups, and
    /// `transpose` takes only a transposed A, with its second pass's needs. None of these
    /// depends on M, so however the rows of C are split over devices, every device runs the
    /// same kernel.
    pub fn unsupported(self, device: &Device, shape: &MatmulShape) -> Option<&'static str> {
        let four = |v: usize| v.is_multiple_of(4);
        let info = device.info();
        if shape.f16_accumulate {
            if shape.dtype != DType::F16 {
                return Some("f16 accumulation needs f16 operands");
            }
            match self {
                Self::Vec4 if shape.trans_a && shape.trans_b => {
                    return Some("f16 accumulation has no Aᵀ·Bᵀ kernel (transpose has)");
                }
                Self::Vec4 | Self::Transpose => {}
                _ => return Some("only vec4's kernels (and transpose's) sum in f16"),
            }
        }
        match self {
            Self::Naive | Self::Tiled => None,
            Self::Vec4 => match (shape.trans_a, shape.trans_b) {
                (false, false) if !(four(shape.n) && four(shape.k)) => {
                    Some("A·B needs N and K multiples of 4")
                }
                (false, true) if !four(shape.k) => Some("A·Bᵀ needs K a multiple of 4"),
                (true, false) if !four(shape.n) => Some("Aᵀ·B needs N a multiple of 4"),
                (true, true) if !four(shape.k) => Some("Aᵀ·Bᵀ needs K a multiple of 4"),
                _ => None,
            },
            Self::Subgroup if !info.features.subgroups => Some("the adapter has no subgroups"),
            // Lane j < 8 of each subgroup loads row j of the block.
            Self::Subgroup if info.subgroup_min_size < 8 => {
                Some("the adapter's subgroups may have fewer than 8 lanes")
            }
            Self::Subgroup => match (shape.trans_a, shape.trans_b) {
                (true, true) => Some("the subgroup kernels compute A·B, A·Bᵀ and Aᵀ·B"),
                (false, true) if !four(shape.k) => Some("A·Bᵀ needs K a multiple of 4"),
                (false, false) if !(four(shape.n) && four(shape.k)) => {
                    Some("A·B needs N and K multiples of 4")
                }
                (true, false) if !four(shape.n) => Some("Aᵀ·B needs N a multiple of 4"),
                _ => None,
            },
            Self::Transpose => match (shape.trans_a, shape.trans_b) {
                (false, _) => Some("the transpose variant computes Aᵀ·B and Aᵀ·Bᵀ"),
                (true, false) if !(four(shape.n) && four(shape.k)) => {
                    Some("Aᵀ·B through a transpose needs N and K multiples of 4")
                }
                (true, true) if !four(shape.k) => {
                    Some("Aᵀ·Bᵀ through a transpose needs K a multiple of 4")
                }
                _ => None,
            },
        }
    }

    /// The variant and shape of `Transpose`'s second pass on `device` (A untransposed:
    /// subgroup where the adapter has it, else vec4, which sum alike); any other variant is
    /// itself, on `shape`.
    fn second_pass(self, device: &Device, shape: &MatmulShape) -> (MatmulVariant, MatmulShape) {
        if self != Self::Transpose {
            return (self, *shape);
        }
        let shape = MatmulShape {
            trans_a: false,
            ..*shape
        };
        let inner = if Self::Subgroup.supports(device, &shape) {
            Self::Subgroup
        } else {
            Self::Vec4
        };
        (inner, shape)
    }

    /// The variants that compute every output with exactly this variant's sums, in order of
    /// preference when nothing is measured: subgroup only moves vec4's loads of A between lanes
    /// (`tests/matmul.rs` checks the bits).
    pub fn same_sums(self) -> &'static [MatmulVariant] {
        match self {
            Self::Naive => &[Self::Naive],
            Self::Tiled => &[Self::Tiled],
            Self::Vec4 => &[Self::Vec4, Self::Subgroup],
            Self::Subgroup => &[Self::Subgroup, Self::Vec4],
            Self::Transpose => &[Self::Transpose],
        }
    }

    /// Whether this variant can compute `shape` on `device` (see
    /// [`MatmulVariant::unsupported`]).
    pub fn supports(self, device: &Device, shape: &MatmulShape) -> bool {
        self.unsupported(device, shape).is_none()
    }
}

/// Everything that decides a matmul's cost and which variant may run it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MatmulShape {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// Weight matrices in B (1 for a plain B).
    pub groups: usize,
    /// Row groups per weight matrix: the grid covers `groups · blocks` groups.
    #[serde(default = "one")]
    pub blocks: usize,
    pub max_group_rows: usize,
    pub trans_a: bool,
    pub trans_b: bool,
    pub dtype: DType,
    /// f16 operands summed in f16, not f32: an option, for adapters whose f16 arithmetic is
    /// native (twice the rate on most GPUs) and callers that accept its error (about
    /// `K · 2⁻¹¹` relative). Only the vec4 kernels take it; CPU drivers emulate f16 arithmetic.
    #[serde(default)]
    pub f16_accumulate: bool,
}

impl MatmulShape {
    /// A plain (one group) matmul.
    pub fn plain(m: usize, n: usize, k: usize, dtype: DType) -> Self {
        Self {
            m,
            n,
            k,
            groups: 1,
            blocks: 1,
            max_group_rows: m,
            trans_a: false,
            trans_b: false,
            dtype,
            f16_accumulate: false,
        }
    }

    /// Floating-point operations of the useful work, at most 2·M·N·K.
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64
    }

    /// Row groups (offsets minus one).
    pub fn row_groups(&self) -> usize {
        self.groups * self.blocks
    }

    pub fn a_shape(&self) -> [usize; 2] {
        if self.trans_a {
            [self.k, self.m]
        } else {
            [self.m, self.k]
        }
    }

    pub fn b_shape(&self) -> Vec<usize> {
        let mat = if self.trans_b {
            [self.n, self.k]
        } else {
            [self.k, self.n]
        };
        if self.groups == 1 {
            mat.to_vec()
        } else {
            vec![self.groups, mat[0], mat[1]]
        }
    }
}

/// How to pick the implementation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum VariantChoice {
    /// The fastest of all that take the shape, measured once per adapter and shape bucket, then
    /// reused (see [`autotune`]). Variants sum in different orders, so two devices may differ in
    /// the last bits.
    #[default]
    Auto,
    /// The fastest of the variants that sum exactly as this one does
    /// ([`MatmulVariant::same_sums`]), or the tiled kernel where none takes the shape: what
    /// programs use, so that every device of a split gives the same bits.
    SameSums(MatmulVariant),
    /// Exactly this variant (tests and benchmarks of one kernel); an error where it cannot take
    /// the shape.
    Fixed(MatmulVariant),
}

impl VariantChoice {
    /// The variant this choice runs for `shape` on `device`.
    fn resolve(self, device: &Device, shape: &MatmulShape) -> Result<MatmulVariant> {
        match self {
            Self::Fixed(v) => Ok(v),
            Self::Auto => autotune::choose(device, shape),
            Self::SameSums(v) => match autotune::choose_among(device, shape, v.same_sums()) {
                Ok(v) => Ok(v),
                // Measuring only picks the faster of kernels with the same bits: where its
                // second set of operands would pass the device's limits, take the first that fits.
                Err(Error::LimitExceeded { .. }) => {
                    Ok(autotune::first_able(device, shape, v.same_sums()))
                }
                Err(e) => Err(e),
            },
        }
    }
}

/// Transposes, implementation and summation type of one matmul call.
#[derive(Debug, Clone, Copy, Default)]
pub struct MatmulOptions {
    pub trans_a: bool,
    pub trans_b: bool,
    pub variant: VariantChoice,
    /// Sum in f16 ([`MatmulShape::f16_accumulate`]); f16 operands only.
    pub f16_accumulate: bool,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    m: u32,
    n: u32,
    k: u32,
    groups: u32,
    trans_a: u32,
    trans_b: u32,
    max_group_rows: u32,
    blocks: u32,
    limit_stride: u32,
    _pad: [u32; 3],
}

fn one() -> usize {
    1
}

/// Live rows per row group, on the device: group `g` has `counts[g · stride]` rows that may be
/// nonzero in op(A) (a stride of 4 reads the `kept` field of the router's per-expert records).
/// The caller promises the group's later rows of op(A) are zero.
#[derive(Debug, Clone, Copy)]
pub struct Limits<'a> {
    pub counts: &'a Tensor,
    pub stride: usize,
}

impl Limits<'_> {
    /// Checks that the counts are u32 on `device`, with a stride of at least 1, and hold a count
    /// for each of `entries` groups or blocks.
    pub fn check(&self, what: &'static str, device: &Device, entries: usize) -> Result<()> {
        self.counts.expect_device(what, device)?;
        self.counts.expect_dtype(what, DType::U32)?;
        let need = (entries.max(1) - 1) * self.stride + 1;
        if self.stride == 0 || self.counts.len() < need {
            return Err(Error::InvalidArgument {
                what,
                reason: format!(
                    "live-row counts for {entries} groups at stride {} need {need} words, got {} \
                     (stride at least 1)",
                    self.stride,
                    self.counts.len()
                ),
            });
        }
        Ok(())
    }
}

/// Pre-allocated operands of one matmul, for callers that encode many kernels up front.
#[derive(Debug)]
pub struct MatmulArgs<'a> {
    pub a: &'a Tensor,
    pub b: &'a Tensor,
    pub c: &'a Tensor,
    /// `[groups · blocks + 1]` u32 row offsets: `blocks` row groups per weight matrix.
    pub offsets: &'a Tensor,
    pub max_group_rows: usize,
    pub limits: Option<Limits<'a>>,
    pub options: MatmulOptions,
    /// What happens to each output as it is stored; `addend` is the array an adding epilogue
    /// adds, and `saved` the array an activation's backward reads (a relu's output, GELU's
    /// input), each shaped like C.
    pub epilogue: Epilogue,
    /// Where a keeping epilogue writes its second output, shaped like C.
    pub kept: Option<&'a Tensor>,
    pub addend: Option<&'a Tensor>,
    pub saved: Option<&'a Tensor>,
}

/// Checks the operands and returns the shape they describe.
pub fn check_args(args: &MatmulArgs<'_>) -> Result<MatmulShape> {
    const WHAT: &str = "matmul";
    let (a, b, c) = (args.a, args.b, args.c);
    let device = a.device();
    for t in [b, c, args.offsets] {
        t.expect_device(WHAT, device)?;
    }
    let dtype = a.dtype();
    if !matches!(dtype, DType::F32 | DType::F16) {
        return Err(Error::DTypeMismatch {
            what: WHAT,
            expected: DType::F32,
            got: dtype,
        });
    }
    device.require(WHAT, dtype)?;
    b.expect_dtype(WHAT, dtype)?;
    c.expect_dtype(WHAT, dtype)?;
    args.offsets.expect_dtype(WHAT, DType::U32)?;
    let [a0, a1] = two_d("matmul A", a.shape())?;
    let (m, k) = if args.options.trans_a {
        (a1, a0)
    } else {
        (a0, a1)
    };
    let (groups, b0, b1) = match *b.shape() {
        [r, c] => (1, r, c),
        [g, r, c] => (g, r, c),
        _ => {
            return Err(Error::ShapeMismatch {
                what: "matmul B",
                expected: "[K, N] or [groups, K, N]".into(),
                got: format!("{:?}", b.shape()),
            });
        }
    };
    let (kb, n) = if args.options.trans_b {
        (b1, b0)
    } else {
        (b0, b1)
    };
    if kb != k {
        return Err(Error::ShapeMismatch {
            what: "matmul inner dimension (K of op(A) vs op(B))",
            expected: k.to_string(),
            got: kb.to_string(),
        });
    }
    if groups == 0 {
        return Err(Error::InvalidArgument {
            what: WHAT,
            reason: "B has zero groups".into(),
        });
    }
    c.expect_shape("matmul C", &[m, n])?;
    let row_groups = match *args.offsets.shape() {
        [len] if len > groups && (len - 1).is_multiple_of(groups) => len - 1,
        _ => {
            return Err(Error::ShapeMismatch {
                what: "matmul group offsets",
                expected: format!("[{groups}·blocks + 1] for B's {groups} groups"),
                got: format!("{:?}", args.offsets.shape()),
            });
        }
    };
    if let Some(limits) = args.limits {
        limits.check("matmul limits", device, row_groups)?;
    }
    let operands = [
        ("matmul addend", args.epilogue.adds(), args.addend),
        (
            "matmul activation's saved array",
            args.epilogue.reads_saved(),
            args.saved,
        ),
        ("matmul kept output", args.epilogue.keeps(), args.kept),
    ];
    for (what, wanted, given) in operands {
        match (wanted, given) {
            (true, Some(t)) => check::expect(what, t, device, dtype, c.shape())?,
            (false, None) => {}
            _ => {
                return Err(Error::InvalidArgument {
                    what: WHAT,
                    reason: format!(
                        "epilogue {:?} {} a {what}",
                        args.epilogue,
                        if wanted { "needs" } else { "takes no" }
                    ),
                });
            }
        }
    }
    let shape = MatmulShape {
        m,
        n,
        k,
        groups,
        blocks: row_groups / groups,
        max_group_rows: args.max_group_rows.min(m),
        trans_a: args.options.trans_a,
        trans_b: args.options.trans_b,
        dtype,
        f16_accumulate: args.options.f16_accumulate,
    };
    if shape.f16_accumulate && dtype != DType::F16 {
        return Err(Error::InvalidArgument {
            what: WHAT,
            reason: format!("f16 accumulation needs f16 operands, got {}", dtype.name()),
        });
    }
    for v in [m, n, k, groups] {
        check::to_u32(WHAT, v)?;
    }
    Ok(shape)
}

fn two_d(what: &'static str, shape: &[usize]) -> Result<[usize; 2]> {
    match *shape {
        [r, c] => Ok([r, c]),
        _ => Err(Error::ShapeMismatch {
            what,
            expected: "a 2-d tensor".into(),
            got: format!("{shape:?}"),
        }),
    }
}

/// Records the matmul into `encoder` and returns the variant used.
pub(crate) fn encode(encoder: &mut impl Recorder, args: &MatmulArgs<'_>) -> Result<MatmulVariant> {
    let shape = check_args(args)?;
    let device = args.a.device();
    let variant = args.options.variant.resolve(device, &shape)?;
    encode_variant(encoder, device, args, &shape, variant)?;
    Ok(variant)
}

fn encode_variant(
    encoder: &mut impl Recorder,
    device: &Device,
    args: &MatmulArgs<'_>,
    shape: &MatmulShape,
    variant: MatmulVariant,
) -> Result<()> {
    // A fixed variant may not fit the shape, and a node's choice among none that fit (f16 sums of
    // `Aᵀ·Bᵀ` asked of vec4's sums) falls back to tiled, which cannot sum in f16.
    if let Some(why) = variant.unsupported(device, shape) {
        return Err(Error::InvalidArgument {
            what: "matmul",
            reason: format!("variant {}: {why}; got {shape:?}", variant.name()),
        });
    }
    let (pass, pass_shape) = variant.second_pass(device, shape);
    if pass == variant {
        return encode_pass(encoder, device, args, args.a.buffer(), shape, variant);
    }
    // Aᵀ as [M, K] in a buffer of the kernel's own (kept alive by the recorded bind groups).
    let bytes = (shape.m * shape.k * shape.dtype.size()) as u64;
    let transposed = device.storage_buffer("matmul Aᵀ", bytes)?;
    let uniform = device.uniform_buffer("matmul params", &params(shape, None));
    let pipeline = MATMUL_TRANSPOSE_A.pipeline(device, shape.dtype, "main")?;
    let grid = [
        check::to_u32("matmul transpose grid", shape.m.div_ceil(8))?,
        check::to_u32("matmul transpose grid", shape.k.div_ceil(32))?,
        1,
    ];
    device.encode_dispatch(
        encoder,
        "matmul transpose A",
        &pipeline,
        &[(0, &uniform), (1, args.a.buffer()), (2, &transposed)],
        grid,
    )?;
    encode_pass(encoder, device, args, &transposed, &pass_shape, pass)
}

fn params(shape: &MatmulShape, limits: Option<Limits<'_>>) -> Params {
    Params {
        m: shape.m as u32,
        n: shape.n as u32,
        k: shape.k as u32,
        groups: shape.groups as u32,
        trans_a: shape.trans_a.into(),
        trans_b: shape.trans_b.into(),
        max_group_rows: shape.max_group_rows as u32,
        blocks: shape.blocks as u32,
        limit_stride: limits.map_or(0, |l| l.stride as u32),
        _pad: [0; 3],
    }
}

/// Records one matmul kernel of `variant` on `shape`, reading A from `a`.
fn encode_pass(
    encoder: &mut impl Recorder,
    device: &Device,
    args: &MatmulArgs<'_>,
    a: &wgpu::Buffer,
    shape: &MatmulShape,
    variant: MatmulVariant,
) -> Result<()> {
    let (shader, entry, (tile_m, tile_n)) = variant.kernel(shape);
    let grid = [
        check::to_u32("matmul grid", shape.n.div_ceil(tile_n))?,
        check::to_u32("matmul grid", shape.max_group_rows.div_ceil(tile_m))?,
        check::to_u32("matmul grid", shape.row_groups())?,
    ];
    // Without limits the shader never reads binding 5, nor binding 6 without an addend, nor 7
    // without an activation's backward; any buffer fills them.
    let limits = args.limits.map_or(args.offsets, |l| l.counts);
    let addend = args.addend.unwrap_or(args.offsets);
    let saved = args.saved.unwrap_or(args.offsets);
    // The kept output is written, so it may not alias another binding: the device's unused
    // writable buffer stands in when there is none.
    let unused;
    let kept = match args.kept {
        Some(t) => t.buffer(),
        None => {
            unused = device.unused_storage()?;
            &unused
        }
    };
    // The epilogue is a constant of the pipeline, not a uniform: compiled in only where used.
    let pipeline = match args.epilogue {
        Epilogue::None => shader.pipeline(device, shape.dtype, entry)?,
        e => shader.pipeline_specialised(device, shape.dtype, entry, &[("EPILOGUE", e.bits())])?,
    };
    let uniform = device.uniform_buffer("matmul params", &params(shape, args.limits));
    device.encode_dispatch(
        encoder,
        variant.name(),
        &pipeline,
        &[
            (0, &uniform),
            (1, a),
            (2, args.b.buffer()),
            (3, args.c.buffer()),
            (4, args.offsets.buffer()),
            (5, limits.buffer()),
            (6, addend.buffer()),
            (7, saved.buffer()),
            (8, kept),
        ],
        grid,
    )
}

/// Validates host row offsets for `groups` groups over `m` rows; returns the largest group.
pub fn check_offsets(offsets: &[u32], groups: usize, m: usize) -> Result<usize> {
    let bad = |reason: String| Error::InvalidArgument {
        what: "grouped matmul offsets",
        reason,
    };
    if offsets.len() != groups + 1 {
        return Err(bad(format!(
            "need {} offsets for {groups} groups, got {}",
            groups + 1,
            offsets.len()
        )));
    }
    if offsets.windows(2).any(|w| w[1] < w[0]) {
        return Err(bad(format!("offsets must not decrease: {offsets:?}")));
    }
    let last = *offsets.last().unwrap_or(&0) as usize;
    if last > m {
        return Err(bad(format!("last offset {last} is past the {m} rows of A")));
    }
    Ok(offsets
        .windows(2)
        .map(|w| (w[1] - w[0]) as usize)
        .max()
        .unwrap_or(0))
}

/// Plain-Rust reference of the grouped matmul (f64 accumulation), `shape.blocks` row groups per
/// weight matrix. Rows outside every group are 0.
pub fn reference(a: &[f32], b: &[f32], offsets: &[u32], shape: &MatmulShape) -> Vec<f32> {
    let MatmulShape { m, n, k, .. } = *shape;
    let mut c = vec![0.0f32; m * n];
    for g in 0..offsets.len().saturating_sub(1) {
        let b_base = g / shape.blocks.max(1) * k * n;
        for row in offsets[g] as usize..offsets[g + 1] as usize {
            for col in 0..n {
                let mut acc = 0.0f64;
                for kk in 0..k {
                    let av = if shape.trans_a {
                        a[kk * m + row]
                    } else {
                        a[row * k + kk]
                    };
                    let bv = if shape.trans_b {
                        b[b_base + col * k + kk]
                    } else {
                        b[b_base + kk * n + col]
                    };
                    acc += f64::from(av) * f64::from(bv);
                }
                c[row * n + col] = acc as f32;
            }
        }
    }
    c
}

/// `op(a) · op(b)` as a program node; with `offsets`, grouped: rows `offsets[g]..offsets[g+1]`
/// times `b[g / blocks]` (`blocks`: the row groups over b's groups). With `limits` (a stride), a
/// third input holds each row group's live rows ([`Limits`]). Programs choose
/// [`VariantChoice::SameSums`]: the variant's sums where it can take the shape, else the tiled
/// kernel's, a choice fixed by N, K and the transposes alone, so every device of a split sums in
/// the same order; of the variants with those sums (vec4 and subgroup) the autotuner picks the
/// fastest on each device, which changes no bit. An [`Epilogue`]'s operands are the last inputs.
#[derive(Debug, Clone)]
pub struct Matmul {
    pub trans_a: bool,
    pub trans_b: bool,
    pub offsets: Option<Vec<u32>>,
    /// The stride of the live-row counts in a third input, if the node has one.
    pub limits: Option<usize>,
    /// Which kernel runs: programs take [`VariantChoice::SameSums`].
    pub choice: VariantChoice,
    /// Sum in f16 ([`MatmulShape::f16_accumulate`]).
    pub f16_accumulate: bool,
    /// What happens to each output as it is stored.
    pub epilogue: Epilogue,
}

impl Matmul {
    /// The inputs before the addend: the factors, and the live-row counts if any.
    fn factors_and_limits(&self) -> usize {
        2 + usize::from(self.limits.is_some())
    }
}

impl Kernel for Matmul {
    fn kind(&self) -> &'static str {
        if self.offsets.is_none() {
            "matmul"
        } else {
            "grouped_matmul"
        }
    }

    fn transposed(&self) -> bool {
        self.trans_a || self.trans_b
    }

    /// The factors' rule; the live-row counts are each device's own, whatever their layout. An
    /// epilogue is nonlinear (a relu, its backward) or adds a whole value to each shard (an
    /// addend), so the product may not be a partial sum, and its operands lie as the product does.
    fn shardings(&self, inputs: &[NamedSharding], _: &[TensorType]) -> sharding_rules::Rule {
        let at = self.factors_and_limits();
        let factors = if inputs.len() == at + self.epilogue.operands() {
            &inputs[..2]
        } else {
            inputs
        };
        let out = sharding_rules::matmul(factors, self.trans_a, self.trans_b)?;
        if self.epilogue == Epilogue::None {
            return Ok(out);
        }
        let product = &out[0];
        if !product.partial().is_empty() {
            return Err(format!(
                "a matmul{} epilogue over partial sums ({product}); all-reduce them first",
                self.epilogue.suffix()
            ));
        }
        if let Some(operand) = inputs
            .get(at..)
            .into_iter()
            .flatten()
            .find(|s| *s != product)
        {
            return Err(format!(
                "an epilogue's operand lies as {operand}, the product as {product}"
            ));
        }
        // A kept second output lies as the product does.
        if self.epilogue.keeps() {
            return Ok(vec![product.clone(), product.clone()]);
        }
        Ok(out)
    }

    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        let what = self.kind();
        check::arity(
            what,
            inputs,
            self.factors_and_limits() + self.epilogue.operands(),
        )?;
        if self.limits.is_some() && inputs[2].dtype != DType::U32 {
            return Err(check::invalid(
                what,
                format!("live-row counts must be u32, got {}", inputs[2]),
            ));
        }
        let (r, c) = check::rows_cols(what, &inputs[0])?;
        let (m, k) = if self.trans_a { (c, r) } else { (r, c) };
        let (kb, n) = match (inputs[1].shape.as_slice(), self.trans_b) {
            ([k, n], false) | ([_, k, n], false) | ([n, k], true) | ([_, n, k], true) => (*k, *n),
            _ => {
                return Err(Error::ShapeMismatch {
                    what,
                    expected: "b of [K, N] or [groups, K, N]".into(),
                    got: format!("{}", inputs[1]),
                });
            }
        };
        if k != kb {
            return Err(Error::ShapeMismatch {
                what,
                expected: format!("b with inner dimension {k}, as a's {}", inputs[0]),
                got: format!("{}", inputs[1]),
            });
        }
        // f32, or f16 where the adapter has it (checked at prepare).
        let dtype = inputs[0].dtype;
        if dtype != inputs[1].dtype || dtype == DType::U32 {
            return Err(check::invalid(
                what,
                format!(
                    "needs two f32 or two f16 operands: {} · {}",
                    inputs[0], inputs[1]
                ),
            ));
        }
        let out = TensorType::new(dtype, &[m, n]);
        for operand in &inputs[self.factors_and_limits()..] {
            check::expect_type("matmul epilogue operand", operand, &out)?;
        }
        if self.epilogue.keeps() {
            return Ok(vec![out.clone(), out]);
        }
        Ok(vec![out])
    }

    fn prepare(&self, x: &[Tensor], y: &[Tensor], rec: &mut Prepared) -> Result<()> {
        let c = check::output(y, 0)?;
        let m = c.shape().first().copied().unwrap_or(0);
        let offsets = self.offsets.clone().unwrap_or_else(|| vec![0, m as u32]);
        let groups = offsets.len().saturating_sub(1);
        let max_group_rows = check_offsets(&offsets, groups, m)?;
        if (self.epilogue.operands() > 0 || self.epilogue.keeps())
            && (offsets.first() != Some(&0) || offsets.last() != Some(&(m as u32)))
        {
            return Err(check::invalid(
                self.kind(),
                format!(
                    "an epilogue reading an array needs row groups covering all {m} rows (rows \
                     outside them are not written), got offsets {offsets:?}"
                ),
            ));
        }
        let offsets_t = Tensor::from_u32(c.device(), &[offsets.len()], &offsets)?;
        // The epilogue's `i`-th operand, where it takes it.
        let operand = |takes: bool, i: usize| -> Result<Option<&Tensor>> {
            if !takes {
                return Ok(None);
            }
            let at = self.factors_and_limits() + i;
            x.get(at).map(Some).ok_or_else(|| {
                check::invalid(self.kind(), format!("no epilogue operand at input {at}"))
            })
        };
        let args = MatmulArgs {
            a: &x[0],
            b: &x[1],
            c,
            offsets: &offsets_t,
            max_group_rows,
            limits: self.limits.map(|stride| Limits {
                counts: &x[2],
                stride,
            }),
            options: MatmulOptions {
                trans_a: self.trans_a,
                trans_b: self.trans_b,
                variant: self.choice,
                f16_accumulate: self.f16_accumulate,
            },
            epilogue: self.epilogue,
            addend: operand(self.epilogue.adds(), 0)?,
            saved: operand(
                self.epilogue.reads_saved(),
                usize::from(self.epilogue.adds()),
            )?,
            kept: if self.epilogue.keeps() {
                Some(check::output(y, 1)?)
            } else {
                None
            },
        };
        encode(rec, &args).map(drop)
    }
}
