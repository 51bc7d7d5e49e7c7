//! Element types: what a tensor's storage holds and a kernel computes in. A foundation like
//! `error.rs`: the device, the error type and every kernel use it, and it uses nothing of
//! theirs.

use serde::{Deserialize, Serialize};

/// Element types gangway kernels work in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F32,
    /// Needs the adapter's `shader-f16` feature.
    F16,
    U32,
}

impl DType {
    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::U32 => 4,
            DType::F16 => 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::U32 => "u32",
        }
    }
}
