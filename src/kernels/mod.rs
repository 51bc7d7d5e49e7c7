//! WGSL kernels. A kernel has one face, its type implementing [`Kernel`] (output types from input
//! types, sharding rule, in-place updates, preparing into given buffers): a program node holds it,
//! and [`eager`] runs the same object now, which is how tests, benches and the autotuner run
//! kernels. Each shader file under `shaders/` has, in its module here, its [`Shader`] entry, its
//! own uniform struct (field for field the shader's `Params`), the kernel types, a private
//! launcher behind their `prepare`, and a plain-Rust reference. The types are re-exported below.
//!
//! Launchers check shapes, dtypes, devices and limits with `check` before anything is recorded,
//! and record through [`Shader::encode`] (parameters as a uniform, the device's cached pipeline)
//! into a [`crate::device::Recorder`]: a compiled program's [`Prepared`] commands, which every run
//! replays. A shader may be specialised by its `const NAME: u32` lines
//! ([`Shader::encode_specialised`]: attention per head width), and one that writes its workgroup
//! memory before reading it may skip the driver's zeroing ([`Shader::zero_workgroup_memory`]).
//!
//! Adding a kernel: its shader, a module with its [`Shader`] entry, uniform struct, [`Kernel`]
//! type and reference, and one line in the registry below (`kernel_modules!`), which declares the
//! module and lists its shaders in [`ALL_SHADERS`]. Re-exporting the type here is a convenience,
//! not a requirement.

mod check;
pub mod eager;
pub mod pack;
mod prepared;
pub mod sharding_rules;
mod tensor_type;

/// The registry: each kernel module, with the shaders it owns (each a [`Shader`] beside its
/// launchers). One line here is all a new kernel module adds to this file; it declares the
/// module and puts its shaders in [`ALL_SHADERS`]. `cargo fmt` does not see modules declared in
/// a macro: format them with `rustfmt --edition 2024` (`.ci/run` checks every tracked file).
macro_rules! kernel_modules {
    ($($module:ident: [$($shader:ident),*],)*) => {
        $(pub mod $module;)*
        /// Every shader gangway ships, for validation and translation tests.
        pub const ALL_SHADERS: &[Shader] = &[$($($module::$shader,)*)*];
    };
}

kernel_modules! {
    matmul: [MATMUL_NAIVE, MATMUL_TILED, MATMUL_VEC4, MATMUL_VEC4_NT, MATMUL_VEC4_TN, MATMUL_VEC4_TT, MATMUL_SUBGROUP,
        MATMUL_SUBGROUP_NT, MATMUL_SUBGROUP_TN, MATMUL_TRANSPOSE_A, MATMUL_VEC4_F16_SUMS,
        MATMUL_VEC4_NT_F16_SUMS, MATMUL_VEC4_TN_F16_SUMS],
    router: [ROUTER, ROUTER_BACKWARD],
    moe_dispatch: [MOE_DISPATCH, MOE_DISPATCH_BACKWARD],
    elementwise: [ELEMENTWISE],
    embedding: [EMBEDDING],
    loss: [LOSS],
    optim: [OPTIM, ADAM_1, ADAM_2, ADAM_3, ADAM_4, ADAM_5, ADAM_6, ADAM_7, ADAM_8],
    expert_grad: [EXPERT_GRAD],
    attention: [ATTENTION],
    cached_attention: [CACHED_ATTENTION],
    layer_norm: [LAYER_NORM],
}

pub use prepared::{Kernel, Prepared};
pub use tensor_type::TensorType;

// Every kernel a program node can hold, each a type beside its shader's launcher.
pub use attention::{Attention, AttentionBackward, AttentionNaive};
pub use cached_attention::CachedAttention;
pub use elementwise::ElementwiseOp;
pub use embedding::{EmbedGather, EmbedGrad};
pub use expert_grad::{ExpertWeightGrad, WeightGradPair};
pub use layer_norm::{LayerNorm, LayerNormBackward};
pub use loss::{CrossEntropy, CrossEntropyPack, MseGrad, RowLogsumexp};
pub use matmul::{Epilogue, Matmul, autotune};
pub use moe_dispatch::{Combine, CombineBackwardSlots, Dispatch, DispatchBackward, GateGrad};
pub use optim::{Accumulate, Adam, Sgd};
pub use pack::{Pack, Unpack};
pub use router::{Router, RouterBackward, RouterLinear};

use crate::DType;

/// One WGSL source file and the element types it is instantiated for.
#[derive(Debug, Clone, Copy)]
pub struct Shader {
    pub name: &'static str,
    pub source: &'static str,
    /// WGSL shared with other shaders, put between the prelude and `source` in order (WGSL has no
    /// includes).
    pub common: &'static [&'static str],
    /// `Elem` types this shader is compiled with (the prelude declares `Elem`).
    pub dtypes: &'static [DType],
    /// Whether the driver must zero the shader's workgroup memory before each workgroup runs
    /// (WebGPU's default). Off only for shaders that write every workgroup element before they
    /// read it: GL zeroes each workgroup array with one constructor of all its elements, and
    /// for 2048-element tiles llvmpipe then compiles for minutes.
    pub zero_workgroup_memory: bool,
    /// Where the shader needs more than WebGPU's guaranteed limits: how its launcher chooses it
    /// only on devices whose limits allow, and a variant that fits elsewhere. `None` for a
    /// shader that fits WebGPU's defaults (`tests/shaders.rs` checks both ways).
    pub chosen_by_limits: Option<&'static str>,
}

const FLOATS: &[DType] = &[DType::F32, DType::F16];
const F32_ONLY: &[DType] = &[DType::F32];

/// What a [`Shader`] entry leaves out: f32 only, nothing shared, workgroup memory zeroed. The
/// modules' entries start from it (`..crate::kernels::SHADER`).
const SHADER: Shader = Shader {
    name: "",
    source: "",
    common: &[],
    dtypes: F32_ONLY,
    zero_workgroup_memory: true,
    chosen_by_limits: None,
};

/// GELU and its derivative in WGSL (`shaders/gelu_common.wgsl`): elementwise's GELU kernels and
/// the matmul epilogue taking GELU's backward share it, and so their bits.
const GELU_COMMON: &str = include_str!("../../shaders/gelu_common.wgsl");

/// Threads per workgroup of the flat kernels: elementwise, and those whose shaders follow
/// `FLAT_COMMON`.
pub const WORKGROUP: usize = 256;

/// The WGSL the flat f32 kernels put before their own (`shaders/flat_common.wgsl`): the
/// routing's records, the grid of [`WORKGROUP`]-thread workgroups folded into one index, and the
/// logits' row maximum. Each of those shaders declares its own parameters. They are
/// [`embedding`], [`loss`], [`optim`], [`expert_grad`], and the backwards of [`moe_dispatch`]
/// and [`router`].
const FLAT_COMMON: &[&str] = &[include_str!("../../shaders/flat_common.wgsl")];

/// A 2-D grid of [`WORKGROUP`]-thread workgroups covering `threads` threads within the adapter's
/// per-dimension limit (the shaders fold `y` back into one index). Too large is an error.
pub fn grid_1d(device: &crate::Device, what: &str, threads: usize) -> crate::Result<[u32; 3]> {
    let groups = threads.div_ceil(WORKGROUP);
    let max = device.info().limits.max_compute_workgroups_per_dimension as usize;
    let y = groups.div_ceil(max.max(1)).max(1);
    let x = groups.div_ceil(y);
    let grid = [
        check::to_u32("kernel grid", x)?,
        check::to_u32("kernel grid", y)?,
        1,
    ];
    device.check_workgroups(what, grid)?;
    Ok(grid)
}

impl Shader {
    /// The full WGSL text for one element type: a prelude declaring `Elem`, then the file.
    /// The prelude also says how to read four `Elem`s at once as f32: `array<Elem4>` and
    /// `load4`. For f16 an `Elem4` is two u32 words unpacked in the shader, where `vec4<f16>`
    /// would be four 16-bit loads: a CPU driver gathers each load across its SIMD lanes, so
    /// the packed form halves the gathers (f32 is the identity, and u32 converts).
    pub fn instantiate(&self, dtype: DType) -> String {
        let prelude = match dtype {
            DType::F32 => {
                "alias Elem = f32;\nalias Elem4 = vec4<f32>;\n\
                 fn load4(v: Elem4) -> vec4<f32> { return v; }\n"
            }
            DType::F16 => {
                "enable f16;\nalias Elem = f16;\nalias Elem4 = vec2<u32>;\n\
                 fn load4(v: Elem4) -> vec4<f32> {\n\
                 \x20   return vec4<f32>(unpack2x16float(v.x), unpack2x16float(v.y));\n}\n"
            }
            DType::U32 => {
                "alias Elem = u32;\nalias Elem4 = vec4<u32>;\n\
                 fn load4(v: Elem4) -> vec4<f32> { return vec4<f32>(v); }\n"
            }
        };
        format!("{prelude}{}{}", self.common.concat(), self.source)
    }

    /// What each entry point of this shader needs of a device's limits ([`KernelNeeds`]), in
    /// f32 at the constants as written (launchers that specialise them keep within these: see
    /// each shader's constants). In the order the entry points are declared.
    pub fn needs(&self) -> crate::Result<Vec<(String, crate::device::KernelNeeds)>> {
        crate::device::KernelNeeds::of_all(&self.instantiate(DType::F32))
    }

    /// Cache key of one instantiation.
    pub fn key(&self, dtype: DType) -> String {
        format!("{}<{}>", self.name, dtype.name())
    }

    /// Records `entry` (f32) over `grid` with `params` as a uniform at binding 0 and `bindings`.
    pub fn encode<P: bytemuck::Pod>(
        &self,
        encoder: &mut impl crate::device::Recorder,
        device: &crate::Device,
        entry: &'static str,
        params: &P,
        bindings: &[(u32, &wgpu::Buffer)],
        grid: [u32; 3],
    ) -> crate::Result<()> {
        self.encode_specialised(
            encoder,
            device,
            DType::F32,
            entry,
            &[],
            params,
            bindings,
            grid,
        )
    }

    /// [`Self::encode`] over `threads` threads in the 2-D grid of [`grid_1d`]: how the flat
    /// kernels launch.
    pub(crate) fn encode_threads<P: bytemuck::Pod>(
        &self,
        encoder: &mut impl crate::device::Recorder,
        device: &crate::Device,
        entry: &'static str,
        params: &P,
        bindings: &[(u32, &wgpu::Buffer)],
        threads: usize,
    ) -> crate::Result<()> {
        let grid = grid_1d(device, entry, threads)?;
        self.encode(encoder, device, entry, params, bindings, grid)
    }

    /// [`Self::encode`] for the `dtype` instantiation, with the shader's `const NAME: u32 = …;`
    /// lines set to `consts`' values first (see [`Self::specialise`]).
    #[allow(clippy::too_many_arguments)]
    pub fn encode_specialised<P: bytemuck::Pod>(
        &self,
        encoder: &mut impl crate::device::Recorder,
        device: &crate::Device,
        dtype: DType,
        entry: &'static str,
        consts: &[(&str, u32)],
        params: &P,
        bindings: &[(u32, &wgpu::Buffer)],
        grid: [u32; 3],
    ) -> crate::Result<()> {
        let uniform = device.uniform_buffer(entry, params);
        self.encode_with_uniform(
            encoder, device, dtype, entry, consts, &uniform, bindings, grid,
        )
    }

    /// [`Self::encode_threads`] with the parameters already in `uniform`: for a kernel whose
    /// commands write some of them when they run (Adam's bias corrections).
    pub(crate) fn encode_threads_in(
        &self,
        encoder: &mut impl crate::device::Recorder,
        device: &crate::Device,
        entry: &'static str,
        uniform: &wgpu::Buffer,
        bindings: &[(u32, &wgpu::Buffer)],
        threads: usize,
    ) -> crate::Result<()> {
        let grid = grid_1d(device, entry, threads)?;
        self.encode_with_uniform(
            encoder,
            device,
            DType::F32,
            entry,
            &[],
            uniform,
            bindings,
            grid,
        )
    }

    /// Records `entry` with `uniform` at binding 0 and `bindings`: what every launch comes to.
    #[allow(clippy::too_many_arguments)]
    fn encode_with_uniform(
        &self,
        encoder: &mut impl crate::device::Recorder,
        device: &crate::Device,
        dtype: DType,
        entry: &'static str,
        consts: &[(&str, u32)],
        uniform: &wgpu::Buffer,
        bindings: &[(u32, &wgpu::Buffer)],
        grid: [u32; 3],
    ) -> crate::Result<()> {
        let pipeline = self.pipeline_specialised(device, dtype, entry, consts)?;
        let mut all = vec![(0, uniform)];
        all.extend_from_slice(bindings);
        device.encode_dispatch(encoder, entry, &pipeline, &all, grid)
    }

    /// The device's cached pipeline for `entry` of this shader instantiated for `dtype`.
    pub fn pipeline(
        &self,
        device: &crate::Device,
        dtype: DType,
        entry: &str,
    ) -> crate::Result<wgpu::ComputePipeline> {
        self.pipeline_specialised(device, dtype, entry, &[])
    }

    /// [`Self::pipeline`] of the source [`Self::specialise`] gives, cached per constant values. A
    /// constant the shader does not declare is an error; the source is only built on a cache miss.
    pub fn pipeline_specialised(
        &self,
        device: &crate::Device,
        dtype: DType,
        entry: &str,
        consts: &[(&str, u32)],
    ) -> crate::Result<wgpu::ComputePipeline> {
        let mut key = self.key(dtype);
        for (name, value) in consts {
            let declared = std::iter::once(self.source)
                .chain(self.common.iter().copied())
                .any(|text| const_value(text, name).is_some());
            if !declared {
                return Err(crate::Error::Shader {
                    shader: key,
                    message: format!("no `const {name}: u32 = …;` line to specialise"),
                });
            }
            key.push_str(&format!(" {name}={value}"));
        }
        device.pipeline(&key, entry, self.zero_workgroup_memory, || {
            self.specialise(dtype, consts)
        })
    }

    /// The instantiated source with each `const NAME: u32 = …;` line of `consts` given its value:
    /// specialisation by constants, so that compilers see constant loop bounds and array sizes
    /// (WGSL's override constants would do, but naga's backends need them resolved first, and
    /// the validation tests translate the shaders as written). Undeclared names change nothing.
    pub fn specialise(&self, dtype: DType, consts: &[(&str, u32)]) -> String {
        let mut source = self.instantiate(dtype);
        for (name, value) in consts {
            if let Some(range) = const_value(&source, name) {
                source.replace_range(range, &format!("{value}u"));
            }
        }
        source
    }
}

/// Where the value of `const NAME: u32 = …;` stands in `text`.
fn const_value(text: &str, name: &str) -> Option<std::ops::Range<usize>> {
    let prefix = format!("const {name}: u32 = ");
    let start = text.find(&prefix)? + prefix.len();
    let end = start + text[start..].find(';')?;
    Some(start..end)
}
