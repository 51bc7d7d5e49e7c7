//! `C = op(A) · op(B)` in five implementations, plain and grouped (one weight matrix per expert):
//! [`Matmul`], the kernel (a program node, or run now by [`super::eager`]), and `encode`, which
//! resolves a call's [`VariantChoice`] and records it. Beneath them, one way: the variants and
//! shapes (`variant.rs`), their shaders (`shaders.rs`), the [`Epilogue`] (`epilogue.rs`),
//! recording a chosen variant (`encode.rs`), the plain-Rust reference (`reference.rs`), and the
//! [`autotune`]r, which times variants through that same recording and resolves choices.
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
use crate::device::Recorder;
use crate::named_sharding::NamedSharding;
use crate::{DType, Error, Result, Tensor};

pub mod autotune;
mod encode;
mod epilogue;
mod reference;
mod shaders;
mod variant;
pub use encode::{Limits, MatmulArgs, MatmulOptions, check_args};
pub use epilogue::{Activation, Epilogue};
pub use reference::{check_offsets, reference};
pub use shaders::*;
pub use variant::{MatmulShape, MatmulVariant, VariantChoice};

/// Records the matmul into `encoder` and returns the variant used.
pub(crate) fn encode(encoder: &mut impl Recorder, args: &MatmulArgs<'_>) -> Result<MatmulVariant> {
    let shape = check_args(args)?;
    let device = args.a.device();
    let variant = args.options.variant.resolve(device, &shape)?;
    encode::encode_variant(encoder, device, args, &shape, variant)?;
    Ok(variant)
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
        if self.epilogue == Epilogue::NONE {
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
        if let Some(why) = self.epilogue.unsupported() {
            return Err(check::invalid(what, why.to_string()));
        }
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
