//! A tensor on one device: a storage buffer with a shape and an element type.

use crate::device::Device;
use crate::{DType, Error, Result};

/// A dense row-major tensor living in one device's storage buffer.
#[derive(Debug, Clone)]
pub struct Tensor {
    device: Device,
    buffer: wgpu::Buffer,
    shape: Vec<usize>,
    dtype: DType,
    /// The bytes this tensor holds in its device's budget; `None` for buffers made elsewhere.
    _memory: Option<std::sync::Arc<crate::device::Reservation>>,
}

impl Tensor {
    /// An uninitialised (zeroed by wgpu) tensor.
    pub fn zeros(device: &Device, shape: &[usize], dtype: DType) -> Result<Self> {
        device.require("tensor", dtype)?;
        let bytes = checked_bytes(shape, dtype)?;
        let memory = device.reserve(
            crate::device::padded_size(bytes),
            crate::device::WhenFull::Fail,
        )?;
        let buffer = device.storage_buffer(&format!("{} {shape:?}", dtype.name()), bytes)?;
        Ok(Self {
            device: device.clone(),
            buffer,
            shape: shape.to_vec(),
            dtype,
            _memory: Some(std::sync::Arc::new(memory)),
        })
    }

    /// Uploads f32 values, converting to `dtype` (f32 or f16).
    pub fn from_f32(device: &Device, shape: &[usize], dtype: DType, data: &[f32]) -> Result<Self> {
        check_len("tensor upload", shape, data.len())?;
        let t = Self::zeros(device, shape, dtype)?;
        match dtype {
            DType::F32 => device.write_buffer(&t.buffer, 0, bytemuck::cast_slice(data)),
            DType::F16 => {
                let h: Vec<half::f16> = data.iter().map(|&x| half::f16::from_f32(x)).collect();
                device.write_buffer(&t.buffer, 0, bytemuck::cast_slice(&h));
            }
            DType::U32 => {
                return Err(Error::DTypeMismatch {
                    what: "Tensor::from_f32",
                    expected: DType::F32,
                    got: DType::U32,
                });
            }
        }
        Ok(t)
    }

    /// Uploads u32 values.
    pub fn from_u32(device: &Device, shape: &[usize], data: &[u32]) -> Result<Self> {
        check_len("tensor upload", shape, data.len())?;
        let t = Self::zeros(device, shape, DType::U32)?;
        device.write_buffer(&t.buffer, 0, bytemuck::cast_slice(data));
        Ok(t)
    }

    /// Wraps an existing buffer (which must be large enough).
    pub fn from_buffer(
        device: &Device,
        buffer: wgpu::Buffer,
        shape: &[usize],
        dtype: DType,
    ) -> Result<Self> {
        let bytes = checked_bytes(shape, dtype)?;
        if buffer.size() < bytes {
            return Err(Error::InvalidArgument {
                what: "Tensor::from_buffer",
                reason: format!("buffer has {} bytes, shape needs {bytes}", buffer.size()),
            });
        }
        Ok(Self {
            device: device.clone(),
            buffer,
            shape: shape.to_vec(),
            dtype,
            _memory: None,
        })
    }

    /// The same buffer under another shape with as many elements (a reshape without a copy):
    /// kernels that see rows of sequences as `[B, T, W]` take a matmul's `[B·T, W]` output as it is.
    pub fn view(&self, shape: &[usize]) -> Result<Self> {
        if shape.iter().product::<usize>() != self.len() {
            return Err(Error::ShapeMismatch {
                what: "Tensor::view",
                expected: format!("a shape of {} elements", self.len()),
                got: format!("{shape:?}"),
            });
        }
        Ok(Self {
            shape: shape.to_vec(),
            ..self.clone()
        })
    }

    pub fn device(&self) -> &Device {
        &self.device
    }
    pub fn buffer(&self) -> &wgpu::Buffer {
        &self.buffer
    }
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn bytes(&self) -> u64 {
        (self.len() * self.dtype.size()) as u64
    }

    /// Reads the tensor back as f32 (converting from f16).
    pub fn to_f32(&self) -> Result<Vec<f32>> {
        let raw = self.device.read_buffer(&self.buffer, 0, self.bytes())?;
        Ok(match self.dtype {
            DType::F32 => bytemuck::pod_collect_to_vec(&raw),
            DType::F16 => bytemuck::pod_collect_to_vec::<u8, half::f16>(&raw)
                .into_iter()
                .map(f32::from)
                .collect(),
            DType::U32 => {
                return Err(Error::DTypeMismatch {
                    what: "Tensor::to_f32",
                    expected: DType::F32,
                    got: DType::U32,
                });
            }
        })
    }

    /// Reads a u32 tensor back.
    pub fn to_u32(&self) -> Result<Vec<u32>> {
        self.expect_dtype("Tensor::to_u32", DType::U32)?;
        let raw = self.device.read_buffer(&self.buffer, 0, self.bytes())?;
        Ok(bytemuck::pod_collect_to_vec(&raw))
    }

    pub(crate) fn expect_dtype(&self, what: &'static str, dtype: DType) -> Result<()> {
        if self.dtype != dtype {
            return Err(Error::DTypeMismatch {
                what,
                expected: dtype,
                got: self.dtype,
            });
        }
        Ok(())
    }

    pub(crate) fn expect_shape(&self, what: &'static str, shape: &[usize]) -> Result<()> {
        if self.shape != shape {
            return Err(Error::ShapeMismatch {
                what,
                expected: format!("{shape:?}"),
                got: format!("{:?}", self.shape),
            });
        }
        Ok(())
    }

    pub(crate) fn expect_device(&self, what: &'static str, device: &Device) -> Result<()> {
        if &self.device != device {
            return Err(Error::DeviceMismatch {
                what,
                a: device.label(),
                b: self.device.label(),
            });
        }
        Ok(())
    }
}

/// Bytes a shape needs, refusing sizes that overflow.
pub(crate) fn checked_bytes(shape: &[usize], dtype: DType) -> Result<u64> {
    shape
        .iter()
        .try_fold(dtype.size() as u64, |acc, &d| acc.checked_mul(d as u64))
        .ok_or_else(|| Error::InvalidArgument {
            what: "tensor",
            reason: format!("shape {shape:?} overflows u64 bytes"),
        })
}

fn check_len(what: &'static str, shape: &[usize], len: usize) -> Result<()> {
    let n: usize = shape.iter().product();
    if n != len {
        return Err(Error::ShapeMismatch {
            what,
            expected: format!("{n} elements for shape {shape:?}"),
            got: format!("{len} elements"),
        });
    }
    Ok(())
}
