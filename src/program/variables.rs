//! The state programs keep across runs: named, sharded tensors (weights, optimizer moments) that
//! programs bind to at compile time. Several programs compiled against the same variables (a
//! training step and an evaluation) see each other's updates, in gang order.

use crate::kernels::TensorType;
use crate::{Device, Error, Result, Tensor};
use std::collections::BTreeMap;

/// Named variables, each one tensor per shard (shard i on the gang's device i). In a job of
/// several ranks a process holds only its own devices' shards: the others are `None`.
#[derive(Debug, Clone, Default)]
pub struct Variables {
    map: BTreeMap<String, Vec<Option<Tensor>>>,
}

impl Variables {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) `name`, one tensor per shard.
    pub fn insert(&mut self, name: impl Into<String>, shards: Vec<Tensor>) {
        self.map
            .insert(name.into(), shards.into_iter().map(Some).collect());
    }

    /// Adds (or replaces) `name` with this process's shards: `None` where another rank holds
    /// the shard.
    pub fn insert_shards(&mut self, name: impl Into<String>, shards: Vec<Option<Tensor>>) {
        self.map.insert(name.into(), shards);
    }

    /// Every shard of `name`, `None` where another rank holds it.
    pub fn get(&self, name: &str) -> Option<&[Option<Tensor>]> {
        self.map.get(name).map(Vec::as_slice)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.map.keys().map(String::as_str)
    }

    /// Shard `i` of `name`, checked against the device and type a program expects.
    pub(crate) fn shard(
        &self,
        name: &str,
        i: usize,
        device: &Device,
        ty: &TensorType,
    ) -> Result<&Tensor> {
        let bad = |reason: String| Error::InvalidArgument {
            what: "program variable",
            reason: format!("{name}: {reason}"),
        };
        let t = self
            .map
            .get(name)
            .ok_or_else(|| bad("no such variable".into()))?
            .get(i)
            .and_then(Option::as_ref)
            .ok_or_else(|| bad(format!("no shard {i} here")))?;
        if t.device() != device {
            return Err(bad(format!(
                "shard {i} is on {}, the program runs it on {}",
                t.device().label(),
                device.label()
            )));
        }
        if t.dtype() != ty.dtype || t.shape() != ty.shape.as_slice() {
            return Err(bad(format!(
                "shard {i} is {}{:?}, the program expects {ty}",
                t.dtype().name(),
                t.shape()
            )));
        }
        Ok(t)
    }
}
