//! Block row copies on the GPU (the router's kept counts gathered from its statistics). An
//! all-to-all that regroups rows does it on the host as it gathers
//! ([`crate::program::Regroup`]), with no kernel.

use crate::device::Recorder;
use crate::kernels::Shader;
use crate::{DType, Device, Error, Result};

pub const COPY_BLOCKS: Shader = Shader {
    name: "copy_blocks",
    source: include_str!("../../shaders/copy_blocks.wgsl"),
    dtypes: crate::kernels::WORDS,
    ..crate::kernels::SHADER
};

/// Move `rows` rows from `src_row` of the source to `dst_row` of the destination.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Block {
    pub src_row: u32,
    pub dst_row: u32,
    pub rows: u32,
    pub _pad: u32,
}

impl Block {
    pub fn new(src_row: usize, dst_row: usize, rows: usize) -> Self {
        Self {
            src_row: src_row as u32,
            dst_row: dst_row as u32,
            rows: rows as u32,
            _pad: 0,
        }
    }
}

#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    row_words: u32,
    blocks: u32,
    _pad: [u32; 2],
}

/// Records the copies of `blocks` (rows of `row_words` 32-bit words) from `src` to `dst`.
///
/// Blocks must not overlap in the destination; the caller checks they fit both buffers.
pub fn encode(
    encoder: &mut impl Recorder,
    device: &Device,
    blocks: &[Block],
    row_words: usize,
    src: &wgpu::Buffer,
    dst: &wgpu::Buffer,
) -> Result<()> {
    let blocks: Vec<Block> = blocks.iter().copied().filter(|b| b.rows > 0).collect();
    if blocks.is_empty() || row_words == 0 {
        return Ok(());
    }
    let words = |b: &Block, start: u32| (start as u64 + b.rows as u64) * row_words as u64 * 4;
    for b in &blocks {
        if words(b, b.src_row) > src.size() || words(b, b.dst_row) > dst.size() {
            return Err(Error::InvalidArgument {
                what: "copy_blocks",
                reason: format!("block {b:?} of {row_words}-word rows is outside its buffers"),
            });
        }
    }
    let max_rows = blocks.iter().map(|b| b.rows).max().unwrap_or(1);
    let table = device.storage_buffer_init("copy_blocks table", bytemuck::cast_slice(&blocks))?;
    let params = Params {
        row_words: row_words as u32,
        blocks: blocks.len() as u32,
        _pad: [0; 2],
    };
    let uniform = device.uniform_buffer("copy_blocks params", &params);
    let pipeline = COPY_BLOCKS.pipeline(device, DType::U32, "main")?;
    device.encode_dispatch(
        encoder,
        "copy_blocks",
        &pipeline,
        &[(0, &uniform), (1, &table), (2, src), (3, dst)],
        [
            row_words.div_ceil(64) as u32,
            blocks.len() as u32,
            max_rows.min(256),
        ],
    )
}
