//! Picks the fastest matmul variant per adapter and shape bucket by measurement (on the device's
//! timestamp clock where it has one, else the host's: [`measure`]), and remembers the choice on
//! disk so the next run on the same adapter does not measure again. A bucket is the adapter, the
//! dtype, the transposes, grouping, and power-of-two buckets of M (rows per group), N and K.
//! A program's matmul node chooses too, but only among the variants that compute its sums
//! ([`choose_among`]), so no device of a split sums in another order.
//!
//! Cache file: `$GANGWAY_CACHE_DIR/autotune.json` (else `$XDG_CACHE_HOME/gangway/`, else
//! `~/.cache/gangway/`). `GANGWAY_AUTOTUNE=off` skips measuring and uses a per-device-type default.

use super::super::{Prepared, eager};
use super::encode::{MatmulArgs, MatmulOptions, check_args, encode_variant};
use super::variant::{MatmulShape, MatmulVariant, VariantChoice};
use crate::{Device, Error, Result, Rng, Tensor};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Instant;

pub use crate::fsutil::CACHE_DIR_ENV;
pub const AUTOTUNE_ENV: &str = "GANGWAY_AUTOTUNE";

/// Which clock a [`Measurement`] was taken on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// The device's timestamps around the kernel: what the benches and traced runs measure.
    Gpu,
    /// The host's, from submit to completion: where the device has no timestamp queries.
    Host,
}

/// Timing of one variant on one shape.
#[derive(Debug, Clone, Copy)]
pub struct Measurement {
    pub variant: MatmulVariant,
    /// Median time of one matmul, in seconds, on `clock`.
    pub median_s: f64,
    pub gflops: f64,
    pub clock: Clock,
}

/// Random operands of one matmul shape on one device, for timing.
#[derive(Debug)]
pub struct Operands {
    pub shape: MatmulShape,
    a: Tensor,
    b: Tensor,
    c: Tensor,
    offsets: Tensor,
}

impl Operands {
    /// Uploads random A and B and a zero C; a shape over the device's limits is an error before
    /// any host memory is spent on it.
    pub fn random(device: &Device, shape: &MatmulShape) -> Result<Self> {
        let a_shape = shape.a_shape();
        let b_shape = shape.b_shape();
        let size = shape.dtype.size() as u64;
        for (what, elements) in [
            ("matmul A", a_shape.iter().product::<usize>()),
            ("matmul B", b_shape.iter().product::<usize>()),
            ("matmul C", shape.m * shape.n),
        ] {
            device.check_storage_size(what, elements as u64 * size)?;
        }
        let mut rng = Rng::new(0x6a6e);
        let offsets: Vec<u32> = (0..=shape.row_groups())
            .map(|g| (g * shape.max_group_rows).min(shape.m) as u32)
            .collect();
        Ok(Self {
            shape: *shape,
            a: Tensor::from_f32(
                device,
                &a_shape,
                shape.dtype,
                &rng.vec(a_shape.iter().product()),
            )?,
            b: Tensor::from_f32(
                device,
                &b_shape,
                shape.dtype,
                &rng.vec(b_shape.iter().product()),
            )?,
            c: Tensor::zeros(device, &[shape.m, shape.n], shape.dtype)?,
            offsets: Tensor::from_u32(device, &[offsets.len()], &offsets)?,
        })
    }

    /// The arguments that run `variant` on these operands.
    pub fn args(&self, variant: MatmulVariant) -> MatmulArgs<'_> {
        MatmulArgs {
            a: &self.a,
            b: &self.b,
            c: &self.c,
            offsets: &self.offsets,
            max_group_rows: self.shape.max_group_rows,
            limits: None,
            options: MatmulOptions {
                trans_a: self.shape.trans_a,
                trans_b: self.shape.trans_b,
                variant: VariantChoice::Fixed(variant),
                f16_accumulate: self.shape.f16_accumulate,
            },
            epilogue: Default::default(),
            addend: None,
            saved: None,
            kept: None,
        }
    }
}

/// Runs `variant` on random data of `shape`: `warmup` untimed runs, then the median of `reps`.
///
/// Each run is timed with GPU timestamps around its dispatches ([`eager::gpu_seconds`]), the
/// clock the benches and traced runs use, so the host's submit and wait do not blur a choice
/// between fast kernels. A device without timestamp queries is timed on the host, submit to
/// completion, and the measurement says so.
pub fn measure(
    device: &Device,
    shape: &MatmulShape,
    variant: MatmulVariant,
    warmup: usize,
    reps: usize,
) -> Result<Measurement> {
    let operands = Operands::random(device, shape)?;
    let mut prepared = Prepared::new();
    let args = operands.args(variant);
    let shape = check_args(&args)?;
    encode_variant(&mut prepared, device, &args, &shape, variant)?;
    let on_gpu = || eager::gpu_seconds(device, "matmul timing", &prepared);
    let on_host = || {
        let start = Instant::now();
        eager::submit_and_wait(device, "matmul timing", |encoder| {
            prepared.encode(encoder, None);
            Ok(())
        })?;
        Ok::<_, Error>(start.elapsed().as_secs_f64())
    };
    // A first run, untimed, finds which clock this device gives.
    let clock = match on_gpu()? {
        Some(_) => Clock::Gpu,
        None => Clock::Host,
    };
    let mut samples = Vec::with_capacity(reps);
    for i in 1..warmup.max(1) + reps.max(1) {
        let seconds = match clock {
            Clock::Gpu => on_gpu()?,
            Clock::Host => Some(on_host()?),
        };
        if i >= warmup.max(1) {
            samples.extend(seconds);
        }
    }
    if samples.is_empty() {
        return Err(Error::InvalidArgument {
            what: "matmul timing",
            reason: format!("{variant:?} on {}: no run gave a time", device.label()),
        });
    }
    let median_s = median(&mut samples);
    Ok(Measurement {
        variant,
        median_s,
        gflops: shape.flops() / median_s / 1e9,
        clock,
    })
}

/// Median of a non-empty sample (sorts in place).
pub fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        samples[n / 2]
    } else {
        0.5 * (samples[n / 2 - 1] + samples[n / 2])
    }
}

/// The cache key: adapter, dtype and summation type, transposes, grouping and power-of-two size
/// buckets. A transposed A's keys say `T` since the `transpose` variant competes there: choices
/// cached before it existed are not reused for them.
pub fn bucket_key(device: &Device, shape: &MatmulShape) -> String {
    let bucket = |v: usize| v.max(1).next_power_of_two().clamp(16, 8192);
    format!(
        "{}#{}{}/{}{}/g{}/m{}n{}k{}/n4:{}k4:{}",
        device.info().adapter_key(),
        shape.dtype.name(),
        if shape.f16_accumulate { "+f16sums" } else { "" },
        if shape.trans_a { 'T' } else { 'n' },
        if shape.trans_b { 't' } else { 'n' },
        shape.groups > 1,
        bucket(shape.max_group_rows),
        bucket(shape.n),
        bucket(shape.k),
        shape.n.is_multiple_of(4),
        shape.k.is_multiple_of(4),
    )
}

/// The cache key of a choice among `candidates`: the bucket's, marked with the candidates unless
/// they are all the variants (so the choices of earlier versions stay valid).
fn among_key(device: &Device, shape: &MatmulShape, candidates: &[MatmulVariant]) -> String {
    let key = bucket_key(device, shape);
    if candidates == MatmulVariant::ALL {
        return key;
    }
    let names: Vec<&str> = candidates.iter().map(|v| v.name()).collect();
    format!("{key}/of:{}", names.join(","))
}

/// The variant to use without measuring: workgroup-memory tiles on GPUs, vec4 on CPU drivers
/// and for f16 sums.
pub fn default_variant(device: &Device, shape: &MatmulShape) -> MatmulVariant {
    // Only vec4's kernels sum in f16 (through transpose for `Aᵀ·Bᵀ`).
    if shape.f16_accumulate {
        return if MatmulVariant::Vec4.supports(device, shape) {
            MatmulVariant::Vec4
        } else {
            MatmulVariant::Transpose
        };
    }
    if device.info().device_type == "cpu" && MatmulVariant::Vec4.supports(device, shape) {
        MatmulVariant::Vec4
    } else {
        MatmulVariant::Tiled
    }
}

/// Where the cache lives, from the environment ([`crate::fsutil::cache_dir`]).
pub fn cache_path() -> Option<PathBuf> {
    Some(crate::fsutil::cache_dir()?.join("autotune.json"))
}

/// Measured choices, keyed by [`bucket_key`], persisted as JSON.
#[derive(Debug, Default)]
pub struct Autotuner {
    path: Option<PathBuf>,
    choices: BTreeMap<String, MatmulVariant>,
}

impl Autotuner {
    /// Loads the cache at `path` (a missing file is an empty cache; a malformed one is an error).
    pub fn open(path: Option<PathBuf>) -> Result<Self> {
        match &path {
            Some(p) if p.exists() => {
                let text = std::fs::read(p).map_err(Error::io(p))?;
                Self::parse(&text, path)
            }
            _ => Ok(Self {
                path,
                choices: BTreeMap::new(),
            }),
        }
    }

    /// A tuner whose choices are the cache file's bytes `text` (what [`Self::open`] reads);
    /// `path` is where it saves, and names the file in errors.
    pub fn parse(text: &[u8], path: Option<PathBuf>) -> Result<Self> {
        let choices = serde_json::from_slice(text).map_err(|source| Error::Json {
            path: path.clone().unwrap_or_default(),
            source,
        })?;
        Ok(Self { path, choices })
    }

    /// The cache file's text for these choices (what [`Self::parse`] reads).
    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string_pretty(&self.choices).map_err(|source| Error::Json {
            path: self.path.clone().unwrap_or_default(),
            source,
        })
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    pub fn cached(&self, device: &Device, shape: &MatmulShape) -> Option<MatmulVariant> {
        self.choices.get(&bucket_key(device, shape)).copied()
    }

    /// The cached choice, or measure every applicable variant, remember the fastest and save.
    pub fn choose(&mut self, device: &Device, shape: &MatmulShape) -> Result<MatmulVariant> {
        self.choose_among(device, shape, &MatmulVariant::ALL)
    }

    /// [`Self::choose`] restricted to `candidates` (remembered apart from the choice among all):
    /// a program node picks only among variants that compute its sums in the same order. One
    /// applicable candidate is taken unmeasured; with none, the tiled kernel, which takes every
    /// shape.
    pub fn choose_among(
        &mut self,
        device: &Device,
        shape: &MatmulShape,
        candidates: &[MatmulVariant],
    ) -> Result<MatmulVariant> {
        let able: Vec<MatmulVariant> = candidates
            .iter()
            .copied()
            .filter(|v| v.supports(device, shape))
            .collect();
        match able.as_slice() {
            [] => return Ok(MatmulVariant::Tiled),
            [only] => return Ok(*only),
            _ => {}
        }
        let key = among_key(device, shape, candidates);
        if let Some(&v) = self.choices.get(&key) {
            return Ok(v);
        }
        let mut best: Option<Measurement> = None;
        for variant in able {
            let m = measure(device, shape, variant, 1, 3)?;
            if best.is_none_or(|b| m.median_s < b.median_s) {
                best = Some(m);
            }
        }
        let choice = best.map_or(MatmulVariant::Tiled, |b| b.variant);
        self.choices.insert(key, choice);
        self.save()?;
        Ok(choice)
    }

    fn save(&self) -> Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let io = |source| Error::Io {
            path: path.clone(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        crate::fsutil::write_atomic(path, self.to_json()?.as_bytes())
    }
}

static GLOBAL: OnceLock<Mutex<Option<Autotuner>>> = OnceLock::new();

/// The variant `matmul` uses for `shape` on `device` with [`VariantChoice::Auto`].
pub fn choose(device: &Device, shape: &MatmulShape) -> Result<MatmulVariant> {
    if autotune_off() {
        return Ok(default_variant(device, shape));
    }
    with_global(|tuner| tuner.choose(device, shape))
}

/// The fastest of `candidates` for `shape` on `device` (see [`Autotuner::choose_among`]); with
/// `GANGWAY_AUTOTUNE=off`, [`first_able`].
pub fn choose_among(
    device: &Device,
    shape: &MatmulShape,
    candidates: &[MatmulVariant],
) -> Result<MatmulVariant> {
    if autotune_off() {
        return Ok(first_able(device, shape, candidates));
    }
    with_global(|tuner| tuner.choose_among(device, shape, candidates))
}

/// The choice among `candidates` without measuring: the first that takes `shape` on `device`,
/// else the tiled kernel, which takes every shape.
pub fn first_able(
    device: &Device,
    shape: &MatmulShape,
    candidates: &[MatmulVariant],
) -> MatmulVariant {
    let first = candidates.iter().find(|v| v.supports(device, shape));
    first.copied().unwrap_or(MatmulVariant::Tiled)
}

fn autotune_off() -> bool {
    std::env::var(AUTOTUNE_ENV).is_ok_and(|v| v == "off" || v == "0")
}

/// Runs `f` on the process's autotuner, opened from the cache file on first use.
fn with_global<T>(f: impl FnOnce(&mut Autotuner) -> Result<T>) -> Result<T> {
    let mut slot = GLOBAL
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let tuner = match slot.take() {
        Some(tuner) => slot.insert(tuner),
        None => slot.insert(Autotuner::open(cache_path())?),
    };
    f(tuner)
}

impl VariantChoice {
    /// The variant this choice runs for `shape` on `device`.
    pub(super) fn resolve(self, device: &Device, shape: &MatmulShape) -> Result<MatmulVariant> {
        match self {
            Self::Fixed(v) => Ok(v),
            Self::Auto => choose(device, shape),
            Self::SameSums(v) => match choose_among(device, shape, v.same_sums()) {
                Ok(v) => Ok(v),
                // Measuring only picks the faster of kernels with the same bits: where its
                // second set of operands would pass the device's limits, take the first that fits.
                Err(Error::LimitExceeded { .. }) => Ok(first_able(device, shape, v.same_sums())),
                Err(e) => Err(e),
            },
        }
    }
}
