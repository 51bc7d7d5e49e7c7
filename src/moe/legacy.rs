//! The MoE LM's files from before every model saved safetensors ([`crate::train::checkpoint`]):
//! `GWMOELM` weights and `GWMOETR` training checkpoints. [`read`] loads both as they are (the
//! MoE LM's [`crate::train::LegacyFormats::read_legacy`]), so `--resume` and `eval btm` keep working
//! on old files; anything saved from then on is safetensors. Nothing writes these formats but
//! this module's tests.
//!
//! # Formats (little-endian)
//!
//! ```text
//! magic    8 bytes  "GWMOELM\0" (weights) or "GWMOETR\0" (training checkpoint)
//! version  u32      2
//! header   u32 byte length, then JSON: the MoeLmConfig (weights), or
//!          {"config": MoeLmConfig, "adam": AdamConfig, "step": u32, "groups": usize}
//! count    u32      number of tensors (3 × the parameters for a checkpoint)
//! count ×  u32 name length, name (UTF-8), u32 rank, rank × u64 dims, f32 values: every
//!          parameter (`embed`, …), then for a checkpoint Adam's first moments (`adam.m.embed`,
//!          …) and second moments (`adam.v.embed`, …), each in parameter order
//! crc32    u32      CRC-32 (IEEE) of every byte after the magic and before this trailer
//! ```
//!
//! Loading checks the magic, the version, the CRC-32 (a torn, truncated or corrupted file), the
//! header, every name and shape, finite values and non-negative second moments, and that nothing
//! trails; any mismatch is an [`Error::InvalidArgument`], never a panic, and nothing is allocated
//! beyond the file's own size. Version 1 (no CRC-32) is refused.

use super::{MoeLmConfig, MoeLmParams};
use crate::kernels::optim::AdamConfig;
use crate::train::{Checkpoint, ParamSpec, TrainState};
use crate::{Error, Result};
use serde::{Deserialize, Serialize};

const WEIGHTS: &[u8; 8] = b"GWMOELM\0";
const CHECKPOINT: &[u8; 8] = b"GWMOETR\0";
const VERSION: u32 = 2;
/// What errors about these formats call them.
const WHAT: &str = "moe lm legacy file";
const M_PREFIX: &str = "adam.m.";
const V_PREFIX: &str = "adam.v.";

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

/// `bytes` as a checkpoint when they start with one of the two magics; `None` otherwise.
pub(crate) fn read(bytes: &[u8]) -> Option<Result<Checkpoint<MoeLmConfig>>> {
    if bytes.starts_with(WEIGHTS) {
        Some(read_weights(bytes))
    } else if bytes.starts_with(CHECKPOINT) {
        Some(read_checkpoint(bytes))
    } else {
        None
    }
}

fn read_weights(bytes: &[u8]) -> Result<Checkpoint<MoeLmConfig>> {
    let mut r = open_sealed(bytes, WEIGHTS, VERSION, WHAT)?;
    let len = r.u32()? as usize;
    let config: MoeLmConfig =
        serde_json::from_slice(r.take(len)?).map_err(|e| bad(format!("config JSON: {e}")))?;
    config.validate()?;
    let specs = config.param_specs();
    let count = r.u32()? as usize;
    if count != specs.len() {
        return Err(bad(format!(
            "{count} tensors, the config has {}",
            specs.len()
        )));
    }
    let tensors = read_tensors(&mut r, &specs, "")?;
    r.finish()?;
    let out = Checkpoint::weights_of(MoeLmParams { config, tensors });
    out.check()?;
    Ok(out)
}

fn read_checkpoint(bytes: &[u8]) -> Result<Checkpoint<MoeLmConfig>> {
    let mut r = open_sealed(bytes, CHECKPOINT, VERSION, WHAT)?;
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
    let out = Checkpoint {
        params: wrap(params),
        train: Some(TrainState {
            m: wrap(m),
            v: wrap(v),
            step: header.step,
            adam: header.adam,
            groups: header.groups,
        }),
    };
    out.check()?;
    Ok(out)
}

/// Appends the CRC-32 trailer: of every byte after the 8-byte magic.
#[cfg(test)]
fn seal(out: &mut Vec<u8>) {
    let crc = crc32fast::hash(out.get(WEIGHTS.len()..).unwrap_or_default());
    out.extend_from_slice(&crc.to_le_bytes());
}

/// Checks a sealed file's `magic`, `version` and CRC-32 trailer (in that order, so a foreign file
/// says so and an old one names its version), and returns a reader over the body between the
/// version and the trailer.
fn open_sealed<'a>(
    bytes: &'a [u8],
    magic: &[u8; 8],
    version: u32,
    what: &'static str,
) -> Result<Reader<'a>> {
    let fail = |reason: String| Error::InvalidArgument { what, reason };
    if !bytes.starts_with(magic) {
        return Err(fail(if magic.starts_with(bytes) {
            format!("truncated: {} bytes", bytes.len())
        } else {
            format!("not a gangway {what} (bad magic)")
        }));
    }
    let mut r = Reader::new(bytes, what);
    r.take(magic.len())?;
    let found = r.u32()?;
    if found != version {
        return Err(fail(format!(
            "{what} version {found}, this build reads {version}"
        )));
    }
    let body_end = bytes
        .len()
        .checked_sub(4)
        .filter(|&end| end >= r.at)
        .ok_or_else(|| fail(format!("truncated: {} bytes, no CRC-32", bytes.len())))?;
    let (body, trailer) = bytes.split_at(body_end);
    let stored = u32::from_le_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]);
    let crc = crc32fast::hash(&body[magic.len()..]);
    if crc != stored {
        return Err(fail(format!(
            "CRC-32 {crc:08x} but the file says {stored:08x}: the file is torn or corrupted"
        )));
    }
    Ok(Reader {
        bytes: body,
        at: r.at,
        what,
    })
}

/// Appends `tensors` as `name, rank, dims, values` records, each name prefixed by `prefix`.
#[cfg(test)]
fn put_tensors(
    out: &mut Vec<u8>,
    specs: &[ParamSpec],
    tensors: &[Vec<f32>],
    prefix: &str,
) -> Result<()> {
    for (spec, values) in specs.iter().zip(tensors) {
        let name = format!("{prefix}{}", spec.name);
        put_len(out, name.len())?;
        out.extend_from_slice(name.as_bytes());
        put_len(out, spec.shape.len())?;
        for &dim in &spec.shape {
            out.extend_from_slice(&(dim as u64).to_le_bytes());
        }
        for v in values {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    Ok(())
}

/// Reads one record per spec, checking each name (with `prefix`) and shape. The specs come from a
/// validated config, but their values are only allocated once the file is known to hold them, so a
/// file claiming huge sizes costs nothing.
fn read_tensors(r: &mut Reader<'_>, specs: &[ParamSpec], prefix: &str) -> Result<Vec<Vec<f32>>> {
    let values: usize = specs
        .iter()
        .map(ParamSpec::len)
        .fold(0, usize::saturating_add);
    if values.saturating_mul(4) > r.remaining() {
        return Err(r.fail(format!(
            "truncated: the config needs {values} values, only {} bytes are left",
            r.remaining()
        )));
    }
    let mut tensors = Vec::with_capacity(specs.len());
    for spec in specs {
        let want = format!("{prefix}{}", spec.name);
        let len = r.u32()? as usize;
        let name = r.take(len)?;
        if name != want.as_bytes() {
            return Err(r.fail(format!(
                "tensor {:?} where {want} was expected",
                String::from_utf8_lossy(name),
            )));
        }
        let rank = r.u32()? as usize;
        if rank != spec.shape.len() {
            return Err(r.fail(format!(
                "{want} has rank {rank}, the config says {}",
                spec.shape.len()
            )));
        }
        let shape = (0..rank)
            .map(|_| r.u64().map(|d| d as usize))
            .collect::<Result<Vec<_>>>()?;
        if shape != spec.shape {
            return Err(r.fail(format!(
                "{want} has shape {shape:?}, the config says {:?}",
                spec.shape
            )));
        }
        let raw = r.take(4usize.saturating_mul(spec.len()))?;
        tensors.push(
            raw.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        );
    }
    Ok(tensors)
}

#[cfg(test)]
fn put_len(out: &mut Vec<u8>, len: usize) -> Result<()> {
    let v = u32::try_from(len).map_err(|_| bad(format!("length {len} exceeds u32")))?;
    out.extend_from_slice(&v.to_le_bytes());
    Ok(())
}

/// A cursor that refuses to read past the end instead of panicking; its errors name `what`.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Self { bytes, at: 0, what }
    }

    fn fail(&self, reason: String) -> Error {
        Error::InvalidArgument {
            what: self.what,
            reason,
        }
    }

    /// Bytes not read yet.
    fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    /// Errors unless every byte was read.
    fn finish(&self) -> Result<()> {
        if self.at != self.bytes.len() {
            return Err(self.fail(format!("{} bytes trail the last tensor", self.remaining())));
        }
        Ok(())
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| {
                self.fail(format!(
                    "truncated: need {n} bytes at offset {}, {} left",
                    self.at,
                    self.remaining()
                ))
            })?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn params() -> MoeLmParams {
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
        MoeLmParams::init(config).unwrap()
    }

    /// A checkpoint as the old writer wrote it, and what it holds.
    fn old_checkpoint() -> (Vec<u8>, Checkpoint<MoeLmConfig>) {
        let params = params();
        let config = params.config;
        let mut m = MoeLmParams::zeros(config).unwrap();
        m.tensors[0][0] = 0.5;
        let v = MoeLmParams::zeros(config).unwrap();
        let header = serde_json::to_vec(&Header {
            config,
            adam: AdamConfig::new(0.01),
            step: 7,
            groups: 2,
        })
        .unwrap();
        let specs = config.param_specs();
        let mut out = CHECKPOINT.to_vec();
        out.extend_from_slice(&VERSION.to_le_bytes());
        put_len(&mut out, header.len()).unwrap();
        out.extend_from_slice(&header);
        put_len(&mut out, 3 * specs.len()).unwrap();
        put_tensors(&mut out, &specs, &params.tensors, "").unwrap();
        put_tensors(&mut out, &specs, &m.tensors, M_PREFIX).unwrap();
        put_tensors(&mut out, &specs, &v.tensors, V_PREFIX).unwrap();
        seal(&mut out);
        let want = Checkpoint {
            params,
            train: Some(TrainState {
                m,
                v,
                step: 7,
                adam: AdamConfig::new(0.01),
                groups: 2,
            }),
        };
        (out, want)
    }

    fn old_weights() -> Vec<u8> {
        let p = params();
        let config = serde_json::to_vec(&p.config).unwrap();
        let mut out = WEIGHTS.to_vec();
        out.extend_from_slice(&VERSION.to_le_bytes());
        put_len(&mut out, config.len()).unwrap();
        out.extend_from_slice(&config);
        put_len(&mut out, p.tensors.len()).unwrap();
        put_tensors(&mut out, &p.specs(), &p.tensors, "").unwrap();
        seal(&mut out);
        out
    }

    /// The load error for `bytes`, which must be one line naming the format.
    fn error(bytes: &[u8]) -> String {
        let e = Checkpoint::<MoeLmConfig>::from_bytes(bytes)
            .unwrap_err()
            .to_string();
        assert!(!e.contains('\n') && e.starts_with(WHAT), "{e}");
        e
    }

    #[test]
    fn old_files_load_and_save_again_as_safetensors() {
        let (bytes, want) = old_checkpoint();
        let got = Checkpoint::<MoeLmConfig>::from_bytes(&bytes).unwrap();
        assert_eq!(got, want);
        let again = Checkpoint::<MoeLmConfig>::from_bytes(&got.to_bytes().unwrap()).unwrap();
        assert_eq!(again, want);
        assert!(!got.to_bytes().unwrap().starts_with(CHECKPOINT));
        let weights = Checkpoint::<MoeLmConfig>::from_bytes(&old_weights()).unwrap();
        assert_eq!(weights, Checkpoint::weights_of(params()));
    }

    #[test]
    fn a_truncated_file_is_a_one_line_error() {
        let (bytes, _) = old_checkpoint();
        for len in [8, 11, 12, 15, 40, bytes.len() / 2, bytes.len() - 1] {
            let e = error(&bytes[..len]);
            assert!(e.contains("truncated") || e.contains("torn"), "{len}: {e}");
        }
    }

    #[test]
    fn a_flipped_byte_after_the_magic_is_a_one_line_error() {
        for bytes in [old_checkpoint().0, old_weights()] {
            for at in (8..bytes.len()).step_by(5).chain([bytes.len() - 1]) {
                let mut b = bytes.clone();
                b[at] ^= 0x10;
                error(&b);
            }
        }
    }

    #[test]
    fn version_1_is_refused() {
        let mut old = old_checkpoint().0;
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
        let mut bytes = CHECKPOINT.to_vec();
        bytes.extend_from_slice(&VERSION.to_le_bytes());
        put_len(&mut bytes, header.len()).unwrap();
        bytes.extend_from_slice(&header);
        put_len(&mut bytes, 3 * huge.param_specs().len()).unwrap();
        seal(&mut bytes);
        assert!(error(&bytes).contains("truncated: the config needs"));
    }
}
