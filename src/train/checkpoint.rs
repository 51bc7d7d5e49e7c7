//! Every model's files, weights and training checkpoints alike, in the
//! [safetensors](https://github.com/huggingface/safetensors) format, so that PyTorch, JAX and
//! Hugging Face tools load the weights as they are (Python's `safetensors`;
//! `scripts/transformer_numpy.py` loads the Transformer's with its NumPy loader):
//!
//! - every parameter under its name ([`super::StepModel::param_specs`]: names, shapes and order), f32,
//!   little-endian, row-major, in its shape: `[in, out]` for the matrices a row multiplies from
//!   the right (PyTorch's `nn.Linear.weight` is the transpose), experts stacked on the first axis;
//! - a training checkpoint adds Adam's moments as `optim.m.<name>` and `optim.v.<name>`;
//! - metadata (strings): `format` = `pt`; `gangway.model`, the model's [`StepModel::NAME`]
//!   (a file without it is the Transformer's, as before the models shared one format);
//!   `gangway.config`, the model's config as JSON;
//!   `gangway.kind`, `weights` or `checkpoint`; for a checkpoint `gangway.step`, `gangway.groups`
//!   and `gangway.adam` (JSON); and `gangway.crc32`, the CRC-32 of every tensor's bytes in name
//!   order, since safetensors itself has no checksum: zlib's CRC-32, in decimal, which is that
//!   of every byte after the safetensors header (every tensor is f32, and safetensors lays
//!   them out in name order).
//!
//! Loading checks the header, the metadata, every expected name's dtype and shape, that no other
//! tensor is there, the CRC-32, finite values and non-negative second moments: any mismatch is an
//! [`Error::InvalidArgument`] naming what is wrong, never a panic. Saving replaces the file
//! atomically ([`crate::fsutil::write_atomic`]): a run killed mid-save leaves the old file or the
//! new one, whole.
//!
//! A model may also read files of its own older formats, the loader's hook
//! ([`LegacyFormats::read_legacy`]: the MoE LM's `GWMOELM` and `GWMOETR` files load as they are,
//! and are saved as safetensors from then on).

use super::{Params, StepModel};
use crate::kernels::optim::{self, AdamConfig};
use crate::{Error, Result};
use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use std::collections::HashMap;
use std::path::Path;

const WHAT: &str = "checkpoint file";
const M_PREFIX: &str = "optim.m.";
const V_PREFIX: &str = "optim.v.";

fn bad(reason: String) -> Error {
    Error::InvalidArgument { what: WHAT, reason }
}

/// Where a resumed run continues from.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainState<M> {
    /// Adam's moments, laid out as the parameters.
    pub m: Params<M>,
    pub v: Params<M>,
    /// Steps taken.
    pub step: u32,
    pub adam: AdamConfig,
    pub groups: usize,
}

/// Weights, and for a training checkpoint the optimizer's state.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint<M> {
    pub params: Params<M>,
    pub train: Option<TrainState<M>>,
}

/// The checkpoint loader's hook for a model's own older file formats, which
/// [`Checkpoint::from_bytes`] tries before safetensors. A model without any implements it empty.
pub trait LegacyFormats: Sized {
    /// Reads `bytes` when they are a file of one of the model's own older formats (`None`: they
    /// are not, and [`Checkpoint::from_bytes`] reads them as safetensors).
    fn read_legacy(_bytes: &[u8]) -> Option<Result<Checkpoint<Self>>> {
        None
    }
}

impl<M: StepModel> Checkpoint<M> {
    /// Weights alone, no optimizer state.
    pub fn weights_of(params: Params<M>) -> Self {
        Self {
            params,
            train: None,
        }
    }

    /// Steps taken (0 for weights alone).
    pub fn step(&self) -> u32 {
        self.train.as_ref().map_or(0, |t| t.step)
    }

    pub fn config(&self) -> &M {
        &self.params.config
    }

    /// Every tensor under its file name, in the order the CRC-32 covers them (by name).
    fn named(&self) -> Vec<(String, &Params<M>, usize)> {
        let specs = self.params.config.param_specs();
        let mut out = Vec::new();
        let mut sets = vec![("", &self.params)];
        if let Some(t) = &self.train {
            sets.extend([(M_PREFIX, &t.m), (V_PREFIX, &t.v)]);
        }
        for (prefix, set) in sets {
            for (i, s) in specs.iter().enumerate() {
                out.push((format!("{prefix}{}", s.name), set, i));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Errors unless every tensor fits the config, every value is finite and second moments are
    /// not negative.
    pub fn check(&self) -> Result<()> {
        self.params.check()?;
        if let Some(t) = &self.train {
            for (which, set) in [("m", &t.m), ("v", &t.v)] {
                if set.config != self.params.config {
                    return Err(bad(format!("Adam's {which} is for another config")));
                }
                set.check()?;
            }
            optim::adam_reference(&mut [], &mut [], &mut [], &[], t.adam, 1)?;
            if t.groups == 0 {
                return Err(bad("0 routing groups".into()));
            }
        }
        for (name, set, i) in self.named() {
            let second = name.starts_with(V_PREFIX);
            if !set.tensors[i]
                .iter()
                .all(|x| x.is_finite() && (!second || *x >= 0.0))
            {
                return Err(bad(format!(
                    "{name} holds a non-finite{} value",
                    if second { " or negative" } else { "" }
                )));
            }
        }
        Ok(())
    }

    /// The file's bytes (format in the module docs).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        self.check()?;
        let specs = self.params.config.param_specs();
        let named = self.named();
        let mut crc = crc32fast::Hasher::new();
        let mut views = Vec::with_capacity(named.len());
        for (name, set, i) in &named {
            let bytes: &[u8] = bytemuck::cast_slice(&set.tensors[*i]);
            crc.update(bytes);
            let view = TensorView::new(Dtype::F32, specs[*i].shape.clone(), bytes)
                .map_err(|e| bad(format!("{name}: {e}")))?;
            views.push((name.clone(), view));
        }
        let mut meta = HashMap::from([
            ("format".to_string(), "pt".to_string()),
            ("gangway.model".into(), M::NAME.to_string()),
            ("gangway.config".into(), to_json(&self.params.config)?),
            ("gangway.crc32".into(), crc.finalize().to_string()),
        ]);
        match &self.train {
            None => {
                meta.insert("gangway.kind".into(), "weights".into());
            }
            Some(t) => {
                meta.insert("gangway.kind".into(), "checkpoint".into());
                meta.insert("gangway.step".into(), t.step.to_string());
                meta.insert("gangway.groups".into(), t.groups.to_string());
                meta.insert("gangway.adam".into(), to_json(&t.adam)?);
            }
        }
        safetensors::serialize(views, Some(meta)).map_err(|e| bad(e.to_string()))
    }

    /// Parses a file's bytes, checking everything (module docs).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        if let Some(legacy) = M::read_legacy(bytes) {
            return legacy;
        }
        Self::from_bytes_with(bytes, None)
    }

    /// [`Self::from_bytes`] for weights written elsewhere (PyTorch's `save_file` keeps metadata
    /// only when asked): `config` stands in for a missing or different `gangway.config`, a
    /// missing `gangway.kind` means weights, and a missing CRC-32 is not checked.
    pub fn from_bytes_with(bytes: &[u8], config: Option<M>) -> Result<Self> {
        let file = SafeTensors::deserialize(bytes)
            .map_err(|e| bad(format!("not a readable safetensors file: {e}")))?;
        let (_, header) = SafeTensors::read_metadata(bytes)
            .map_err(|e| bad(format!("not a readable safetensors file: {e}")))?;
        let meta = header.metadata().clone().unwrap_or_default();
        let get = |key: &str| {
            meta.get(key)
                .ok_or_else(|| bad(format!("no {key:?} in its metadata (not a gangway file?)")))
        };
        let foreign = config.is_some();
        // Files written before the models shared this format are the Transformer's.
        let model = meta
            .get("gangway.model")
            .map_or("transformer", String::as_str);
        if !foreign && model != M::NAME {
            return Err(bad(format!(
                "the file holds a {model} model, not a {}",
                M::NAME
            )));
        }
        let config: M = match config {
            Some(c) => c,
            None => {
                let text = meta.get("gangway.config").ok_or_else(|| {
                    bad(
                        "no \"gangway.config\" in its metadata: not a gangway file (another \
                         tool's weights load with the model's configuration given, as \
                         `gangway import --config` and `train lm --init --config` take it)"
                            .into(),
                    )
                })?;
                serde_json::from_str(text).map_err(|e| bad(format!("gangway.config: {e}")))?
            }
        };
        config.validate()?;
        let kind = match meta.get("gangway.kind") {
            None if foreign => "weights",
            _ => get("gangway.kind")?.as_str(),
        };
        let checkpoint = match kind {
            "weights" => false,
            "checkpoint" => true,
            other => {
                return Err(bad(format!(
                    "gangway.kind {other:?} is neither weights nor checkpoint"
                )));
            }
        };
        let specs = config.param_specs();
        let prefixes: &[&str] = if checkpoint {
            &["", M_PREFIX, V_PREFIX]
        } else {
            &[""]
        };
        let expected = specs.len() * prefixes.len();
        if file.len() != expected {
            let known: std::collections::HashSet<String> = prefixes
                .iter()
                .flat_map(|p| specs.iter().map(move |s| format!("{p}{}", s.name)))
                .collect();
            let stray = file.names().into_iter().find(|n| !known.contains(*n));
            return Err(bad(format!(
                "{} tensors where the config has {expected}{}",
                file.len(),
                stray.map_or(String::new(), |n| format!(" ({n:?} is not one of them)"))
            )));
        }
        let mut sets = Vec::with_capacity(prefixes.len());
        for prefix in prefixes {
            let mut tensors = Vec::with_capacity(specs.len());
            for s in &specs {
                let name = format!("{prefix}{}", s.name);
                let view = file
                    .tensor(&name)
                    .map_err(|_| bad(format!("{name} is missing")))?;
                if view.dtype() != Dtype::F32 || view.shape() != s.shape.as_slice() {
                    return Err(bad(format!(
                        "{name} is {:?} {:?}, the config wants F32 {:?}",
                        view.dtype(),
                        view.shape(),
                        s.shape
                    )));
                }
                tensors.push(bytemuck::pod_collect_to_vec::<u8, f32>(view.data()));
            }
            sets.push(Params { config, tensors });
        }
        let mut sets = sets.into_iter();
        let params = sets.next().ok_or_else(|| bad("no parameters".into()))?;
        let train = match (sets.next(), sets.next()) {
            (Some(m), Some(v)) => {
                let number = |key: &str| -> Result<u64> {
                    get(key)?.parse().map_err(|e| bad(format!("{key}: {e}")))
                };
                let adam: AdamConfig = serde_json::from_str(get("gangway.adam")?)
                    .map_err(|e| bad(format!("gangway.adam: {e}")))?;
                let step = u32::try_from(number("gangway.step")?)
                    .map_err(|_| bad("gangway.step is out of range".into()))?;
                let groups = usize::try_from(number("gangway.groups")?)
                    .map_err(|_| bad("gangway.groups is out of range".into()))?;
                Some(TrainState {
                    m,
                    v,
                    step,
                    adam,
                    groups,
                })
            }
            _ => None,
        };
        let out = Self { params, train };
        let mut crc = crc32fast::Hasher::new();
        for (_, set, i) in out.named() {
            crc.update(bytemuck::cast_slice(&set.tensors[i]));
        }
        match meta.get("gangway.crc32") {
            None if foreign => {}
            _ => {
                if crc.finalize().to_string() != *get("gangway.crc32")? {
                    return Err(bad("the CRC-32 does not match: the file is damaged".into()));
                }
            }
        }
        out.check()?;
        Ok(out)
    }

    /// Writes the file atomically.
    pub fn save(&self, path: &Path) -> Result<()> {
        crate::fsutil::write_atomic(path, &self.to_bytes()?)
    }

    /// Reads and checks a file; errors name it.
    pub fn load(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(Error::io(path))?;
        Self::from_bytes(&bytes).map_err(|e| naming(path, e))
    }

    /// [`Self::load`] through [`Self::from_bytes_with`].
    pub fn load_with(path: &Path, config: Option<M>) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(Error::io(path))?;
        Self::from_bytes_with(&bytes, config).map_err(|e| naming(path, e))
    }

    /// The weights alone: what `gangway export` writes.
    pub fn weights(&self) -> Self {
        Self {
            params: self.params.clone(),
            train: None,
        }
    }
}

impl<M: StepModel> Params<M> {
    /// The weights alone as a file's bytes ([`Checkpoint::weights_of`]).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        Checkpoint::weights_of(self.clone()).to_bytes()
    }

    /// Weights from a file's bytes: a weights file, or a training checkpoint's parameters.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        Ok(Checkpoint::<M>::from_bytes(bytes)?.params)
    }

    /// Writes the weights alone ([`Checkpoint::weights_of`]) atomically.
    pub fn save(&self, path: &Path) -> Result<()> {
        Checkpoint::weights_of(self.clone()).save(path)
    }

    /// Reads weights: a weights file, or a training checkpoint's parameters.
    pub fn load(path: &Path) -> Result<Self> {
        Ok(Checkpoint::<M>::load(path)?.params)
    }
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

fn to_json(value: &impl serde::Serialize) -> Result<String> {
    serde_json::to_string(value).map_err(|e| bad(e.to_string()))
}
