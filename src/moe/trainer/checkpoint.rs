//! Resumable checkpoints of the GPU trainer: parameters, Adam's moments and step, the Adam
//! settings and the routing groups, so that a run stopped after `n` steps and resumed (on the same
//! or another number of devices dividing both `E` and `G`) takes the same steps as one that never
//! stopped.
//!
//! # File format (little-endian; the tensor records are those of [`super::super::params`])
//!
//! ```text
//! magic    8 bytes  "GWMOETR\0"
//! version  u32      2
//! header   u32 byte length, then JSON {"config": MoeLmConfig, "adam": AdamConfig,
//!                                       "step": u32, "groups": usize}
//! count    u32      3 × the number of parameter tensors
//! count ×  u32 name length, name (UTF-8), u32 rank, rank × u64 dims, f32 values:
//!          every parameter (`embed`, …), then Adam's first moments (`adam.m.embed`, …),
//!          then the second moments (`adam.v.embed`, …), each in parameter order
//! crc32    u32      CRC-32 (IEEE) of every byte after the magic and before this trailer
//! ```
//!
//! Loading checks the magic, the version, the CRC-32 (a torn, truncated or corrupted file), the
//! header (a valid config and Adam setting, `groups` ≥ 1), every name and shape, finite values
//! and non-negative second moments, and that nothing trails; any mismatch is an
//! [`Error::InvalidArgument`], never a panic, and nothing is allocated beyond the file's own size.
//! Version 1 (no CRC-32) is refused.
//!
//! [`TrainerCheckpoint::save`] replaces the file atomically ([`crate::fsutil::write_atomic`]): a
//! run killed at any moment leaves the previous checkpoint or the new one, whole.

use super::super::params::{naming, open_sealed, put_len, put_tensors, read_tensors, seal};
use super::super::{MoeLmConfig, MoeLmParams};
use crate::kernels::optim::{self, AdamConfig};
use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

const MAGIC: &[u8; 8] = b"GWMOETR\0";
const VERSION: u32 = 2;
/// What errors about this format call it.
const WHAT: &str = "moe trainer checkpoint";
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
    Error::InvalidArgument { what: WHAT, reason }
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
        optim::adam_reference(&mut [], &mut [], &mut [], &[], self.adam, 1)?;
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
        seal(&mut out);
        Ok(out)
    }

    /// Parses checkpoint bytes, checking everything against the stored header.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let mut r = open_sealed(bytes, MAGIC, VERSION, WHAT)?;
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

    /// Writes the checkpoint through [`crate::fsutil::write_atomic`]: a run killed while saving
    /// keeps its previous checkpoint.
    pub fn save(&self, path: &Path) -> Result<()> {
        crate::fsutil::write_atomic(path, &self.to_bytes()?)
    }

    pub fn load(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(Error::io(path))?;
        Self::from_bytes(&bytes).map_err(|e| naming(path, e))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn checkpoint() -> TrainerCheckpoint {
        let config = MoeLmConfig {
            context: 2,
            embed: 3,
            model: 4,
            hidden: 5,
            experts: 2,
            top_k: 1,
            blocks: 1,
            ..MoeLmConfig::default()
        };
        let params = MoeLmParams::init(config).unwrap();
        let mut m = MoeLmParams::zeros(config).unwrap();
        m.tensors[0][0] = 0.5;
        TrainerCheckpoint {
            v: MoeLmParams::zeros(config).unwrap(),
            m,
            params,
            step: 7,
            adam: AdamConfig::new(0.01),
            groups: 2,
        }
    }

    /// The load error for `bytes`, which must be one line naming the format.
    fn error(bytes: &[u8]) -> String {
        let e = TrainerCheckpoint::from_bytes(bytes)
            .unwrap_err()
            .to_string();
        assert!(!e.contains('\n') && e.starts_with(WHAT), "{e}");
        e
    }

    #[test]
    fn round_trips_and_saves_atomically() {
        let c = checkpoint();
        let bytes = c.to_bytes().unwrap();
        assert_eq!(TrainerCheckpoint::from_bytes(&bytes).unwrap(), c);
        let dir = std::env::temp_dir().join(format!("gangway-trckpt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.ckpt");
        c.save(&path).unwrap();
        c.save(&path).unwrap();
        assert_eq!(TrainerCheckpoint::load(&path).unwrap(), c);
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        let e = TrainerCheckpoint::load(&path).unwrap_err().to_string();
        assert!(e.contains("t.ckpt") && e.contains("torn"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_truncated_file_is_a_one_line_error() {
        let bytes = checkpoint().to_bytes().unwrap();
        for len in [0, 3, 8, 11, 12, 15, 40, bytes.len() / 2, bytes.len() - 1] {
            let e = error(&bytes[..len]);
            assert!(e.contains("truncated") || e.contains("torn"), "{len}: {e}");
        }
    }

    #[test]
    fn a_flipped_byte_anywhere_is_a_one_line_error() {
        let bytes = checkpoint().to_bytes().unwrap();
        for at in (0..bytes.len()).step_by(5).chain([bytes.len() - 1]) {
            let mut b = bytes.clone();
            b[at] ^= 0x10;
            error(&b);
        }
    }

    #[test]
    fn a_foreign_file_is_a_one_line_error() {
        let elm = checkpoint().params.to_bytes().unwrap();
        assert!(error(&elm).contains("bad magic"));
        assert!(error(b"{\"schema\": \"gangway-bench\"}\n").contains("bad magic"));
        let mut old = checkpoint().to_bytes().unwrap();
        old[8] = 1;
        assert!(error(&old).contains("version 1, this build reads 2"));
    }

    #[test]
    fn sizes_in_a_file_never_allocate_beyond_it() {
        // A valid config of ~2^31 values per tensor, sealed, in a file of a few hundred bytes:
        // refused before any tensor is allocated.
        let huge = MoeLmConfig {
            model: 1 << 15,
            hidden: 1 << 15,
            experts: 2,
            top_k: 1,
            ..MoeLmConfig::default()
        };
        huge.validate().unwrap();
        let header = serde_json::to_vec(&Header {
            config: huge,
            adam: AdamConfig::new(0.01),
            step: 1,
            groups: 1,
        })
        .unwrap();
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&VERSION.to_le_bytes());
        put_len(&mut bytes, header.len()).unwrap();
        bytes.extend_from_slice(&header);
        put_len(&mut bytes, 3 * huge.param_specs().len()).unwrap();
        seal(&mut bytes);
        assert!(error(&bytes).contains("truncated: the config needs"));
    }
}
