//! The model's parameters: a flat, ordered list of named tensors, their initialisation, and a
//! checkpoint format.
//!
//! Order (also the initialisation order and the checkpoint order), `L` blocks:
//!
//! | index        | name             | shape            | fan-in |
//! |--------------|------------------|------------------|--------|
//! | 0            | `embed`          | `[256, d_e]`     | 1      |
//! | 1            | `w_in`           | `[C·d_e, d]`     | C·d_e  |
//! | 2 + 4l       | `blocks.l.dense` | `[d, d]`         | d      |
//! | 3 + 4l       | `blocks.l.router`| `[d, E]`         | d      |
//! | 4 + 4l       | `blocks.l.w1`    | `[E, d, d_ff]`   | d      |
//! | 5 + 4l       | `blocks.l.w2`    | `[E, d_ff, d]`   | d_ff   |
//! | 2 + 4L       | `w_out`          | `[d, 256]`       | d      |
//!
//! Experts are stacked (`w1[e]` is one `[d, d_ff]` matrix), the layout grouped matmul takes; a
//! device holding experts `a..b` holds rows `a..b` of the first axis. Every value is drawn from
//! `Rng::new(seed)` in this order as `symmetric() · sqrt(3 / fan_in)` (variance `1 / fan_in`);
//! the embedding uses scale 1 (uniform in `[-1, 1)`), so `x · W_in` starts with variance 1/3.
//!
//! # Checkpoint format (little-endian)
//!
//! ```text
//! magic    8 bytes  "GWMOELM\0"
//! version  u32      2
//! config   u32 byte length, then the MoeLmConfig as JSON
//! count    u32      number of tensors
//! count ×  u32 name length, name (UTF-8), u32 rank, rank × u64 dims, f32 values
//! crc32    u32      CRC-32 (IEEE) of every byte after the magic and before this trailer
//! ```
//!
//! Loading checks the magic, the version, the CRC-32 (a torn or corrupted file), the config,
//! every name and shape against the config, and that nothing trails; any mismatch is an
//! [`Error::InvalidArgument`], never a panic, and nothing is allocated beyond the file's own size.
//! Version 1 (no CRC-32) is refused. [`MoeLmParams::save`] replaces a file atomically.

use super::{MoeLmConfig, VOCAB};
use crate::{Error, Result, Rng};
use std::path::Path;

const MAGIC: &[u8; 8] = b"GWMOELM\0";
const VERSION: u32 = 2;
/// What errors about this format call it.
const WHAT: &str = "moe lm checkpoint";

/// Name, shape and fan-in of one parameter tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamSpec {
    pub name: String,
    pub shape: Vec<usize>,
    pub fan_in: usize,
}

impl ParamSpec {
    fn new(name: String, shape: &[usize], fan_in: usize) -> Self {
        Self {
            name,
            shape: shape.to_vec(),
            fan_in,
        }
    }

    pub fn len(&self) -> usize {
        self.shape.iter().fold(1, |a, &b| a.saturating_mul(b))
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Initialisation scale: `sqrt(3 / fan_in)`, 1 for the embedding.
    pub fn scale(&self) -> f32 {
        if self.name == "embed" {
            1.0
        } else {
            (3.0 / self.fan_in.max(1) as f32).sqrt()
        }
    }
}

/// Indices of one block's tensors in the flat list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockIndex {
    pub dense: usize,
    pub router: usize,
    pub w1: usize,
    pub w2: usize,
}

/// Index of `embed`.
pub const EMBED: usize = 0;
/// Index of `w_in`.
pub const W_IN: usize = 1;

impl MoeLmConfig {
    /// Every parameter tensor in order.
    pub fn param_specs(&self) -> Vec<ParamSpec> {
        let (c, de, d, ff, e) = (
            self.context,
            self.embed,
            self.model,
            self.hidden,
            self.experts,
        );
        let mut specs = vec![
            ParamSpec::new("embed".into(), &[VOCAB, de], 1),
            ParamSpec::new(
                "w_in".into(),
                &[c.saturating_mul(de), d],
                c.saturating_mul(de),
            ),
        ];
        for l in 0..self.blocks {
            specs.push(ParamSpec::new(format!("blocks.{l}.dense"), &[d, d], d));
            specs.push(ParamSpec::new(format!("blocks.{l}.router"), &[d, e], d));
            specs.push(ParamSpec::new(format!("blocks.{l}.w1"), &[e, d, ff], d));
            specs.push(ParamSpec::new(format!("blocks.{l}.w2"), &[e, ff, d], ff));
        }
        specs.push(ParamSpec::new("w_out".into(), &[d, VOCAB], d));
        specs
    }

    /// Where block `l`'s tensors are.
    pub fn block_index(&self, l: usize) -> BlockIndex {
        let base = 2 + 4 * l;
        BlockIndex {
            dense: base,
            router: base + 1,
            w1: base + 2,
            w2: base + 3,
        }
    }

    /// Index of `w_out`.
    pub fn w_out_index(&self) -> usize {
        2 + 4 * self.blocks
    }
}

/// Values of every parameter tensor, in [`MoeLmConfig::param_specs`] order. Gradients and Adam's
/// moments use the same type.
/// The default is the default model with no tensors (what a report read back from JSON holds:
/// parameters are saved apart); [`MoeLmParams::check`] fails on it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MoeLmParams {
    pub config: MoeLmConfig,
    pub tensors: Vec<Vec<f32>>,
}

impl MoeLmParams {
    /// Draws every tensor from `Rng::new(config.seed)`, in order (see the module docs).
    pub fn init(config: MoeLmConfig) -> Result<Self> {
        config.validate()?;
        let mut rng = Rng::new(config.seed);
        let tensors = config
            .param_specs()
            .iter()
            .map(|s| {
                let scale = s.scale();
                (0..s.len()).map(|_| rng.symmetric() * scale).collect()
            })
            .collect();
        Ok(Self { config, tensors })
    }

    /// All zeros (gradient accumulators, Adam moments).
    pub fn zeros(config: MoeLmConfig) -> Result<Self> {
        config.validate()?;
        let tensors = config
            .param_specs()
            .iter()
            .map(|s| vec![0.0; s.len()])
            .collect();
        Ok(Self { config, tensors })
    }

    pub fn specs(&self) -> Vec<ParamSpec> {
        self.config.param_specs()
    }

    /// Scalars over all tensors.
    pub fn count(&self) -> usize {
        self.tensors.iter().map(Vec::len).sum()
    }

    /// Errors unless the tensors have exactly the config's count and sizes.
    pub fn check(&self) -> Result<()> {
        self.config.validate()?;
        let specs = self.specs();
        if specs.len() != self.tensors.len() {
            return Err(bad(format!(
                "{} tensors, the config has {}",
                self.tensors.len(),
                specs.len()
            )));
        }
        for (s, t) in specs.iter().zip(&self.tensors) {
            if s.len() != t.len() {
                return Err(bad(format!(
                    "{} has {} values, shape {:?} needs {}",
                    s.name,
                    t.len(),
                    s.shape,
                    s.len()
                )));
            }
        }
        Ok(())
    }

    /// The tensor at `index` (empty when out of range; [`Self::check`] rules that out).
    pub fn get(&self, index: usize) -> &[f32] {
        self.tensors.get(index).map_or(&[], Vec::as_slice)
    }

    /// The checkpoint bytes (format in the module docs).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        self.check()?;
        let config = serde_json::to_vec(&self.config).map_err(|e| bad(e.to_string()))?;
        let mut out = Vec::with_capacity(64 + config.len() + 4 * self.count());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        put_len(&mut out, config.len())?;
        out.extend_from_slice(&config);
        put_len(&mut out, self.tensors.len())?;
        put_tensors(&mut out, &self.specs(), &self.tensors, "")?;
        seal(&mut out);
        Ok(out)
    }

    /// Parses checkpoint bytes, checking everything against the stored config.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let mut r = open_sealed(bytes, MAGIC, VERSION, WHAT)?;
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
        Ok(Self { config, tensors })
    }

    /// Writes the checkpoint through [`crate::fsutil::write_atomic`]: an interrupted save keeps
    /// the previous file.
    pub fn save(&self, path: &Path) -> Result<()> {
        crate::fsutil::write_atomic(path, &self.to_bytes()?)
    }

    pub fn load(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(Error::io(path))?;
        Self::from_bytes(&bytes).map_err(|e| naming(path, e))
    }
}

fn bad(reason: String) -> Error {
    Error::InvalidArgument { what: WHAT, reason }
}

/// Puts the file's name into a format error, so a message says which file is damaged.
pub(crate) fn naming(path: &Path, e: Error) -> Error {
    match e {
        Error::InvalidArgument { what, reason } => Error::InvalidArgument {
            what,
            reason: format!("{}: {reason}", path.display()),
        },
        other => other,
    }
}

/// Appends the CRC-32 trailer: of every byte after the 8-byte magic.
pub(crate) fn seal(out: &mut Vec<u8>) {
    let crc = crc32fast::hash(out.get(MAGIC.len()..).unwrap_or_default());
    out.extend_from_slice(&crc.to_le_bytes());
}

/// Checks a sealed file's `magic`, `version` and CRC-32 trailer (in that order, so a foreign file
/// says so and an old one names its version), and returns a reader over the body between the
/// version and the trailer.
pub(crate) fn open_sealed<'a>(
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
pub(crate) fn put_tensors(
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
pub(crate) fn read_tensors(
    r: &mut Reader<'_>,
    specs: &[ParamSpec],
    prefix: &str,
) -> Result<Vec<Vec<f32>>> {
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

pub(crate) fn put_len(out: &mut Vec<u8>, len: usize) -> Result<()> {
    let v = u32::try_from(len).map_err(|_| bad(format!("length {len} exceeds u32")))?;
    out.extend_from_slice(&v.to_le_bytes());
    Ok(())
}

/// A cursor that refuses to read past the end instead of panicking; its errors name `what`.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Self { bytes, at: 0, what }
    }

    fn fail(&self, reason: String) -> Error {
        Error::InvalidArgument {
            what: self.what,
            reason,
        }
    }

    /// Bytes not read yet.
    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    /// Errors unless every byte was read.
    pub(crate) fn finish(&self) -> Result<()> {
        if self.at != self.bytes.len() {
            return Err(self.fail(format!("{} bytes trail the last tensor", self.remaining())));
        }
        Ok(())
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
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

    pub(crate) fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn u64(&mut self) -> Result<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
}
