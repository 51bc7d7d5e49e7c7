//! What the flat f32 kernels share (`shaders/flat_common.wgsl`, put before each of their shaders):
//! one parameter block, a launcher over a 2-D grid of [`super::WORKGROUP`]-thread workgroups, and
//! the checks of shapes and routings. Those kernels: [`super::embedding`], [`super::loss`],
//! [`super::optim`], [`super::expert_grad`], and the backwards of [`super::moe_dispatch`] and
//! [`super::router`]. The bindings `flat_common.wgsl` declares mean the same in all of them.

use super::Shader;
use super::router::{ExpertStat, Route, Routing};
use crate::device::Recorder;
use crate::{DType, Device, Error, Result, Tensor};

/// The WGSL every flat kernel's shader follows: its parameters, records and grid.
pub(super) const FLAT_COMMON: &[&str] = &[include_str!("../../shaders/flat_common.wgsl")];

/// `Params` of `flat_common.wgsl`, field for field; what each field means per kernel is written
/// there.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(super) struct Params {
    pub rows: u32,
    pub cols: u32,
    pub context: u32,
    pub k: u32,
    pub capacity: u32,
    pub experts: u32,
    pub normalize: u32,
    pub inner: u32,
    pub alpha: f32,
    pub z_loss: f32,
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub bias1: f32,
    pub bias2: f32,
}

impl Params {
    pub(super) fn zeroed() -> Self {
        bytemuck::Zeroable::zeroed()
    }
}

pub(super) fn to_u32(what: &'static str, v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::InvalidArgument {
        what,
        reason: format!("{v} does not fit in u32"),
    })
}

pub(super) fn bad(what: &'static str, reason: String) -> Error {
    Error::InvalidArgument { what, reason }
}

/// Records `entry` of `shader` over `threads` threads with `bindings` (binding 0, the parameters, added here).
pub(super) fn encode(
    encoder: &mut impl Recorder,
    device: &Device,
    shader: &Shader,
    entry: &'static str,
    params: &Params,
    bindings: &[(u32, &wgpu::Buffer)],
    threads: usize,
) -> Result<()> {
    let grid = super::grid_1d(device, entry, threads)?;
    shader.encode(encoder, device, entry, params, bindings, grid)
}

/// [`encode`] with the parameters in `uniform`.
pub(super) fn encode_with(
    encoder: &mut impl Recorder,
    device: &Device,
    shader: &Shader,
    entry: &'static str,
    uniform: &wgpu::Buffer,
    bindings: &[(u32, &wgpu::Buffer)],
    threads: usize,
) -> Result<()> {
    let pipeline = shader.pipeline(device, DType::F32, entry)?;
    let mut all = vec![(0, uniform)];
    all.extend_from_slice(bindings);
    device.encode_dispatch(
        encoder,
        entry,
        &pipeline,
        &all,
        super::grid_1d(device, entry, threads)?,
    )
}

/// Runs `record` in a fresh encoder on `device` and blocks until the GPU is done.
pub(super) fn run(
    device: &Device,
    what: &'static str,
    record: impl FnOnce(&mut wgpu::CommandEncoder) -> Result<()>,
) -> Result<()> {
    super::eager::submit_and_wait(device, what, record)
}

pub(super) fn dims2(what: &'static str, t: &Tensor) -> Result<(usize, usize)> {
    match *t.shape() {
        [r, c] => Ok((r, c)),
        _ => Err(Error::ShapeMismatch {
            what,
            expected: "a 2-d tensor".into(),
            got: format!("{:?}", t.shape()),
        }),
    }
}

/// Checks a routing's buffers against its sizes and `device`; returns `(tokens, k, capacity)`.
pub(super) fn routing_dims(
    what: &'static str,
    routing: &Routing,
    device: &Device,
) -> Result<[usize; 3]> {
    if routing.device() != device {
        return Err(Error::DeviceMismatch {
            what,
            a: device.label(),
            b: routing.device().label(),
        });
    }
    routing.config.validate()?;
    let k = routing.config.k;
    let need = (routing.tokens * k * std::mem::size_of::<Route>()) as u64;
    if routing.routes.size() < need {
        return Err(bad(
            what,
            format!("routes hold {} bytes, need {need}", routing.routes.size()),
        ));
    }
    let stats = (routing.config.experts * std::mem::size_of::<ExpertStat>()) as u64;
    if routing.stats.size() < stats {
        return Err(bad(
            what,
            format!("stats hold {} bytes, need {stats}", routing.stats.size()),
        ));
    }
    to_u32(what, routing.tokens * k)?;
    to_u32(what, routing.config.experts * routing.capacity)?;
    Ok([routing.tokens, k, routing.capacity])
}
