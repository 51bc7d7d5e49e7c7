//! The matmul kernels' WGSL: each implementation's shader, built from the shared parts in
//! `shaders/` (parameters and group offsets, stores, row loads, and what the vec4 kernels sum
//! in).

use crate::DType;
use crate::kernels::Shader;

// GELU's derivative first: the epilogue taking its backward calls it.
const COMMON: &str = concat!(
    include_str!("../../../shaders/gelu_common.wgsl"),
    include_str!("../../../shaders/matmul_common.wgsl")
);
const STORE: &str = include_str!("../../../shaders/matmul_store.wgsl");
const ROWS_OWN: &str = include_str!("../../../shaders/matmul_rows_own.wgsl");
const ROWS_SUBGROUP: &str = include_str!("../../../shaders/matmul_rows_subgroup.wgsl");
const VEC4_NN: &str = include_str!("../../../shaders/matmul_vec4.wgsl");
const VEC4_NT: &str = include_str!("../../../shaders/matmul_vec4_nt.wgsl");
const VEC4_TN: &str = include_str!("../../../shaders/matmul_vec4_tn.wgsl");
// What the vec4 kernels sum in (`Acc`) and how they read their operands into it: f32, or (an
// option for f16 operands) the element type itself.
const ACC_F32: &str = "alias Acc = f32;\n\
    fn acc4(v: Elem4) -> vec4<f32> { return load4(v); }\n\
    fn acc1(v: Elem) -> f32 { return f32(v); }\n";
const ACC_ELEM: &str = "alias Acc = Elem;\n\
    fn acc4(v: Elem4) -> vec4<Elem> { return vec4<Elem>(load4(v)); }\n\
    fn acc1(v: Elem) -> Elem { return v; }\n";

/// A matmul shader: `source` after the parameters and group offsets (`matmul_common.wgsl`) and
/// `common`, f32 or f16.
const fn matmul_shader(
    name: &'static str,
    source: &'static str,
    common: &'static [&'static str],
) -> Shader {
    Shader {
        name,
        source,
        dtypes: crate::kernels::FLOATS,
        common,
        ..crate::kernels::SHADER
    }
}

pub const MATMUL_NAIVE: Shader = matmul_shader(
    "matmul_naive",
    include_str!("../../../shaders/matmul_naive.wgsl"),
    &[COMMON],
);
pub const MATMUL_TILED: Shader = matmul_shader(
    "matmul_tiled",
    include_str!("../../../shaders/matmul_tiled.wgsl"),
    &[COMMON],
);
// The vec4 kernels, each with its entry point and loads of A from matmul_rows_own.wgsl; C as
// scalars (matmul_store.wgsl) where its rows need not be vec4-aligned.
pub const MATMUL_VEC4: Shader = matmul_shader("matmul_vec4", VEC4_NN, &[COMMON, ACC_F32, ROWS_OWN]);
pub const MATMUL_VEC4_NT: Shader = matmul_shader(
    "matmul_vec4_nt",
    VEC4_NT,
    &[COMMON, STORE, ACC_F32, ROWS_OWN],
);
pub const MATMUL_VEC4_TN: Shader = matmul_shader(
    "matmul_vec4_tn",
    VEC4_TN,
    &[COMMON, STORE, ACC_F32, ROWS_OWN],
);
pub const MATMUL_VEC4_TT: Shader = matmul_shader(
    "matmul_vec4_tt",
    include_str!("../../../shaders/matmul_vec4_tt.wgsl"),
    &[COMMON, STORE],
);
// The same kernels with A's rows loaded once per subgroup (matmul_rows_subgroup.wgsl).
pub const MATMUL_SUBGROUP: Shader = matmul_shader(
    "matmul_subgroup",
    VEC4_NN,
    &[COMMON, ACC_F32, ROWS_SUBGROUP],
);
pub const MATMUL_SUBGROUP_NT: Shader = matmul_shader(
    "matmul_subgroup_nt",
    VEC4_NT,
    &[COMMON, STORE, ACC_F32, ROWS_SUBGROUP],
);
pub const MATMUL_SUBGROUP_TN: Shader = matmul_shader(
    "matmul_subgroup_tn",
    VEC4_TN,
    &[COMMON, STORE, ACC_F32, ROWS_SUBGROUP],
);
// The vec4 kernels summing in f16 (`MatmulShape::f16_accumulate`), for f16 operands only. The
// subgroup loads stay f32-only: broadcasting f16 values needs WGSL's `subgroups_f16`.
const fn f16_sums(
    name: &'static str,
    source: &'static str,
    common: &'static [&'static str],
) -> Shader {
    Shader {
        dtypes: &[DType::F16],
        ..matmul_shader(name, source, common)
    }
}
pub const MATMUL_VEC4_F16_SUMS: Shader = f16_sums(
    "matmul_vec4_f16_sums",
    VEC4_NN,
    &[COMMON, ACC_ELEM, ROWS_OWN],
);
pub const MATMUL_VEC4_NT_F16_SUMS: Shader = f16_sums(
    "matmul_vec4_nt_f16_sums",
    VEC4_NT,
    &[COMMON, STORE, ACC_ELEM, ROWS_OWN],
);
pub const MATMUL_VEC4_TN_F16_SUMS: Shader = f16_sums(
    "matmul_vec4_tn_f16_sums",
    VEC4_TN,
    &[COMMON, STORE, ACC_ELEM, ROWS_OWN],
);
// The `transpose` variant's first pass: Aᵀ into a scratch buffer.
pub const MATMUL_TRANSPOSE_A: Shader = matmul_shader(
    "matmul_transpose_a",
    include_str!("../../../shaders/matmul_transpose_a.wgsl"),
    &[COMMON],
);
