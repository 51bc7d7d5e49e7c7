//! Resumable checkpoints of the GPU trainer: parameters, Adam's moments and step, the Adam
//! settings and the routing groups, so that a run stopped after `n` steps and resumed (on the same
//! or another number of devices dividing both `E` and `G`) takes the same steps as one that never
//! stopped.
//!
//! # File format (little-endian; the tensor records are those of [`super::super::params`])
//!
//! ```text
//! magic    8 bytes  "GWMOETR\0"
//! version  u32      1
//! header   u32 byte length, then JSON {"config": MoeLmConfig, "adam": AdamConfig,
//!                                       "step": u32, "groups": usize}
//! count    u32      3 × the number of parameter tensors
//! count ×  u32 name length, name (UTF-8), u32 rank, rank × u64 dims, f32 values:
//!          every parameter (`embed`, …), then Adam's first moments (`adam.m.embed`, …),
//!          then the second moments (`adam.v.embed`, …), each in parameter order
//! ```
//!
//! Loading checks the magic, the version, the header (a valid config and Adam setting, `groups`
//! ≥ 1), every name and shape, finite values and non-negative second moments, and that nothing
//! trails; any mismatch is an [`Error::InvalidArgument`], never a panic.

use super::super::params::{Reader, put_len, put_tensors, read_tensors};
use super::super::{MoeLmConfig, MoeLmParams};
use crate::kernels::lm_train::{self as lt, AdamConfig};
use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

const MAGIC: &[u8; 8] = b"GWMOETR\0";
const VERSION: u32 = 1;
const M_PREFIX: &str = "adam.m.";
const V_PREFIX: &str = "adam.v.";

/// Everything a [`super::GpuTrainer`] needs to continue a run exactly.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainerCheckpoint {
    pub params: MoeLmParams,
    /// Adam's first moments, shaped like `params`.
    pub m: MoeLmParams,
    /// Adam's second moments, shaped like `params`.
    pub v: MoeLmParams,
    /// Steps taken; the next step is `step + 1`.
    pub step: u32,
    pub adam: AdamConfig,
    /// Routing groups per batch (part of the math: a resumed run must keep it).
    pub groups: usize,
}

#[derive(Serialize, Deserialize)]
struct Header {
    config: MoeLmConfig,
    adam: AdamConfig,
    step: u32,
    groups: usize,
}

fn bad(reason: String) -> Error {
    Error::InvalidArgument {
        what: "moe trainer checkpoint",
        reason,
    }
}

impl TrainerCheckpoint {
    /// Errors unless params and moments share one valid config with the right sizes, the Adam
    /// setting is valid, `groups` ≥ 1, every value is finite and `v` is non-negative.
    pub fn check(&self) -> Result<()> {
        self.params.check()?;
        self.m.check()?;
        self.v.check()?;
        if self.m.config != self.params.config || self.v.config != self.params.config {
            return Err(bad(
                "the moments belong to a different config than the parameters".into(),
            ));
        }
        lt::adam_reference(&mut [], &mut [], &mut [], &[], self.adam, 1)?;
        if self.groups == 0 {
            return Err(bad("0 routing groups".into()));
        }
        let specs = self.params.specs();
        for (which, t) in [("", &self.params), (M_PREFIX, &self.m), (V_PREFIX, &self.v)] {
            for (spec, values) in specs.iter().zip(&t.tensors) {
                let ok = if which == V_PREFIX {
                    values.iter().all(|x| x.is_finite() && *x >= 0.0)
                } else {
                    values.iter().all(|x| x.is_finite())
                };
                if !ok {
                    return Err(bad(format!(
                        "{which}{} holds a non-finite{} value",
                        spec.name,
                        if which == V_PREFIX {
                            " or negative"
                        } else {
                            ""
                        }
                    )));
                }
            }
        }
        Ok(())
    }

    pub fn config(&self) -> &MoeLmConfig {
        &self.params.config
    }

    /// The checkpoint bytes (format in the module docs).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        self.check()?;
        let header = serde_json::to_vec(&Header {
            config: self.params.config,
            adam: self.adam,
            step: self.step,
            groups: self.groups,
        })
        .map_err(|e| bad(e.to_string()))?;
        let specs = self.params.specs();
        let mut out = Vec::with_capacity(64 + header.len() + 12 * self.params.count());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        put_len(&mut out, header.len())?;
        out.extend_from_slice(&header);
        put_len(&mut out, 3 * specs.len())?;
        put_tensors(&mut out, &specs, &self.params.tensors, "")?;
        put_tensors(&mut out, &specs, &self.m.tensors, M_PREFIX)?;
        put_tensors(&mut out, &specs, &self.v.tensors, V_PREFIX)?;
        Ok(out)
    }

    /// Parses checkpoint bytes, checking everything against the stored header.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader::new(bytes);
        if r.take(MAGIC.len())? != MAGIC {
            return Err(bad(
                "not a gangway MoE trainer checkpoint (bad magic)".into()
            ));
        }
        let version = r.u32()?;
        if version != VERSION {
            return Err(bad(format!(
                "checkpoint version {version}, this build reads {VERSION}"
            )));
        }
        let len = r.u32()? as usize;
        let header: Header =
            serde_json::from_slice(r.take(len)?).map_err(|e| bad(format!("header JSON: {e}")))?;
        let config = header.config;
        config.validate()?;
        let specs = config.param_specs();
        let count = r.u32()? as usize;
        if count != 3 * specs.len() {
            return Err(bad(format!(
                "{count} tensors, the config needs {}",
                3 * specs.len()
            )));
        }
        let params = read_tensors(&mut r, &specs, "")?;
        let m = read_tensors(&mut r, &specs, M_PREFIX)?;
        let v = read_tensors(&mut r, &specs, V_PREFIX)?;
        r.finish()?;
        let wrap = |tensors| MoeLmParams { config, tensors };
        let out = Self {
            params: wrap(params),
            m: wrap(m),
            v: wrap(v),
            step: header.step,
            adam: header.adam,
            groups: header.groups,
        };
        out.check()?;
        Ok(out)
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        std::fs::write(path, self.to_bytes()?).map_err(Error::io(path))
    }

    pub fn load(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(Error::io(path))?;
        Self::from_bytes(&bytes)
    }
}
