//! Device-to-device copies. Buffers cannot be shared between wgpu devices, so a copy between two
//! devices goes GPU → staging → host → destination GPU; on one device it stays on the GPU.

use crate::{Error, Result, Tensor};

/// Copies `len` bytes from `src` at `src_offset` to `dst` at `dst_offset` (all multiples of 4).
pub fn copy_bytes(
    src: &Tensor,
    src_offset: u64,
    dst: &Tensor,
    dst_offset: u64,
    len: u64,
) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    let aligned = [src_offset, dst_offset, len]
        .iter()
        .all(|v| v % wgpu::COPY_BUFFER_ALIGNMENT == 0);
    if !aligned || src_offset + len > src.buffer().size() || dst_offset + len > dst.buffer().size()
    {
        return Err(Error::InvalidArgument {
            what: "device copy",
            reason: format!(
                "{len} bytes from offset {src_offset} to offset {dst_offset} must be 4-byte aligned \
                 and inside buffers of {} and {} bytes",
                src.buffer().size(),
                dst.buffer().size()
            ),
        });
    }
    if src.device() == dst.device() {
        let device = src.device();
        let mut encoder = device.encoder("device copy");
        encoder.copy_buffer_to_buffer(src.buffer(), src_offset, dst.buffer(), dst_offset, len);
        device.submit(encoder);
        return device.wait();
    }
    let host = src.device().read_buffer(src.buffer(), src_offset, len)?;
    dst.device().write_buffer(dst.buffer(), dst_offset, &host);
    dst.device().wait()
}
