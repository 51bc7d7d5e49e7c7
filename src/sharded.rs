//! Sharded tensors: one logical tensor split along one dimension over a group of devices (for
//! example one axis of a [`Mesh`](crate::Mesh)), or replicated on each of them.

use crate::collective::transfer::copy_bytes;
use crate::{DType, Device, Error, Result, Tensor};
use std::ops::Range;

/// How a logical tensor is laid over its devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharding {
    /// Every device holds the whole tensor.
    Replicated,
    /// Dimension `dim` is cut into contiguous chunks of `ceil(len / devices)`, one per device
    /// (trailing devices may get fewer rows, or none).
    Split { dim: usize },
}

/// A logical f32/f16 tensor laid over several devices.
#[derive(Debug, Clone)]
pub struct ShardedTensor {
    shape: Vec<usize>,
    dtype: DType,
    sharding: Sharding,
    shards: Vec<Tensor>,
}

impl ShardedTensor {
    /// Uploads `data` (row-major, `shape`) to `devices` as `sharding` says, stored as `dtype`.
    ///
    /// Every shard is checked against its device's limits before anything is uploaded.
    pub fn upload(
        devices: &[Device],
        data: &[f32],
        shape: &[usize],
        dtype: DType,
        sharding: Sharding,
    ) -> Result<Self> {
        let what = "sharded upload";
        if devices.is_empty() {
            return Err(Error::InvalidArgument {
                what,
                reason: "no devices".into(),
            });
        }
        let n: usize = shape.iter().product();
        if n != data.len() {
            return Err(Error::ShapeMismatch {
                what,
                expected: format!("{n} values for shape {shape:?}"),
                got: format!("{} values", data.len()),
            });
        }
        let pieces = plan(shape, sharding, devices.len())?;
        for (device, piece) in devices.iter().zip(&pieces) {
            device.require(what, dtype)?;
            let bytes = crate::tensor::checked_bytes(&piece.shape, dtype)?;
            device.check_storage_size(what, bytes)?;
        }
        let shards = devices
            .iter()
            .zip(&pieces)
            .map(|(device, piece)| {
                Tensor::from_f32(device, &piece.shape, dtype, &piece.extract(data, shape))
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            shape: shape.to_vec(),
            dtype,
            sharding,
            shards,
        })
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    pub fn sharding(&self) -> Sharding {
        self.sharding
    }
    pub fn shards(&self) -> &[Tensor] {
        &self.shards
    }
    pub fn devices(&self) -> Vec<Device> {
        self.shards.iter().map(|s| s.device().clone()).collect()
    }

    /// Downloads and reassembles the logical tensor (from the first replica when replicated).
    pub fn download(&self) -> Result<Vec<f32>> {
        let pieces = plan(&self.shape, self.sharding, self.shards.len())?;
        let mut out = vec![0.0f32; self.shape.iter().product()];
        for (shard, piece) in self.shards.iter().zip(&pieces) {
            piece.insert(&shard.to_f32()?, &mut out, &self.shape);
            if self.sharding == Sharding::Replicated {
                break;
            }
        }
        Ok(out)
    }

    /// Copies every shard to the device at the same position in `devices`, staged through the host
    /// where the devices differ. The result has the same layout on the new devices.
    pub fn copy_to(&self, devices: &[Device]) -> Result<Self> {
        if devices.len() != self.shards.len() {
            return Err(Error::InvalidArgument {
                what: "sharded copy",
                reason: format!(
                    "{} shards cannot move to {} devices",
                    self.shards.len(),
                    devices.len()
                ),
            });
        }
        let shards = self
            .shards
            .iter()
            .zip(devices)
            .map(|(src, device)| {
                let dst = Tensor::zeros(device, src.shape(), src.dtype())?;
                copy_bytes(src, 0, &dst, 0, src.bytes())?;
                Ok(dst)
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            shape: self.shape.clone(),
            dtype: self.dtype,
            sharding: self.sharding,
            shards,
        })
    }
}

/// One device's piece of a logical tensor: `range` along `dim`.
struct Piece {
    dim: usize,
    range: Range<usize>,
    shape: Vec<usize>,
}

impl Piece {
    fn outer_inner(&self, shape: &[usize]) -> (usize, usize) {
        (
            shape[..self.dim].iter().product(),
            shape[self.dim + 1..].iter().product(),
        )
    }

    fn extract(&self, data: &[f32], shape: &[usize]) -> Vec<f32> {
        let (outer, inner) = self.outer_inner(shape);
        let len = shape[self.dim];
        let mut out = Vec::with_capacity(self.shape.iter().product());
        for o in 0..outer {
            let base = o * len * inner;
            out.extend_from_slice(
                &data[base + self.range.start * inner..base + self.range.end * inner],
            );
        }
        out
    }

    fn insert(&self, piece: &[f32], data: &mut [f32], shape: &[usize]) {
        let (outer, inner) = self.outer_inner(shape);
        let len = shape[self.dim];
        let width = self.range.len() * inner;
        for o in 0..outer {
            let base = o * len * inner + self.range.start * inner;
            data[base..base + width].copy_from_slice(&piece[o * width..(o + 1) * width]);
        }
    }
}

fn plan(shape: &[usize], sharding: Sharding, devices: usize) -> Result<Vec<Piece>> {
    match sharding {
        Sharding::Replicated => Ok((0..devices)
            .map(|_| Piece {
                dim: 0,
                range: 0..shape.first().copied().unwrap_or(1),
                shape: shape.to_vec(),
            })
            .collect()),
        Sharding::Split { dim } => {
            let Some(&len) = shape.get(dim) else {
                return Err(Error::InvalidArgument {
                    what: "sharding",
                    reason: format!("cannot split dim {dim} of shape {shape:?}"),
                });
            };
            let chunk = len.div_ceil(devices);
            Ok((0..devices)
                .map(|i| {
                    let start = (i * chunk).min(len);
                    let end = ((i + 1) * chunk).min(len);
                    let mut piece_shape = shape.to_vec();
                    piece_shape[dim] = end - start;
                    Piece {
                        dim,
                        range: start..end,
                        shape: piece_shape,
                    }
                })
                .collect())
        }
    }
}
