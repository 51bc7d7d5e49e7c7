//! A value's type as kernels see it: element type and per-shard shape ([`TensorType`]), what
//! [`super::Kernel::outputs`] maps and sharding rules lay out.

use crate::DType;

/// Element type and per-shard shape of a value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub dtype: DType,
    pub shape: Vec<usize>,
}

impl TensorType {
    pub fn new(dtype: DType, shape: &[usize]) -> Self {
        Self {
            dtype,
            shape: shape.to_vec(),
        }
    }

    pub fn f32(shape: &[usize]) -> Self {
        Self::new(DType::F32, shape)
    }

    pub fn u32(shape: &[usize]) -> Self {
        Self::new(DType::U32, shape)
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
}

impl std::fmt::Display for TensorType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{:?}", self.dtype.name(), self.shape)
    }
}
