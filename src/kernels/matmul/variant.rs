//! Which kernel computes a matmul: the implementations ([`MatmulVariant`]), what each can take
//! ([`MatmulShape`], everything that decides a call's cost and its variant), and how a call asks
//! for one ([`VariantChoice`]; `autotune.rs` resolves it).

use super::super::Shader;
use super::shaders::*;
use crate::{DType, Device};
use serde::{Deserialize, Serialize};

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
    pub(super) fn kernel(self, shape: &MatmulShape) -> (Shader, &'static str, (usize, usize)) {
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
    pub(super) fn second_pass(
        self,
        device: &Device,
        shape: &MatmulShape,
    ) -> (MatmulVariant, MatmulShape) {
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

fn one() -> usize {
    1
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
