//! Recording one matmul whose variant is chosen: its operands ([`MatmulArgs`], checked by
//! [`check_args`]), the live-row [`Limits`], the epilogue's specialised pipeline, and the
//! transpose pass a variant may need first. Choosing the variant is above this
//! ([`super::encode`]), so the autotuner times variants through the same path.

use super::super::check;
use super::epilogue::Epilogue;
use super::shaders::*;
use super::variant::{MatmulShape, MatmulVariant, VariantChoice};
use crate::device::Recorder;
use crate::{DType, Device, Error, Result, Tensor};

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
    if let Some(why) = args.epilogue.unsupported() {
        return Err(check::invalid(WHAT, why.to_string()));
    }
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

pub(super) fn encode_variant(
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
        Epilogue::NONE => shader.pipeline(device, shape.dtype, entry)?,
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
