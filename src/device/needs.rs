//! What a compute entry point needs of a device's limits, read from its WGSL with naga: storage
//! buffers in its stage, workgroup memory, invocations per workgroup and the workgroup's size.
//!
//! WebGPU guarantees only its defaults (8 storage buffers per stage, 16 KiB of workgroup
//! memory, 256 invocations); an adapter may offer more, and a kernel tried only there may
//! quietly need it. [`Device::pipeline`](super::Device::pipeline) checks every entry point here
//! before it creates the pipeline, so a kernel that needs more than a device gives is an
//! [`Error::LimitExceeded`] naming the limit, not a validation message, nor (wgpu does not check
//! workgroup memory) a failure in the driver; the docs' table
//! of every kernel's needs (`tests/shaders.rs`) and `gangway devices --verbose` come from here
//! too. Only what is reachable from the entry point counts, as wgpu's own check counts it.

use super::DeviceLimits;
use crate::{Error, Result};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError};

/// The needs of `entry` of the shader cached as `key` (a pipeline cache key: the same key is
/// the same source on every device), read once per process.
pub(super) fn cached(key: &str, source: &str, entry: &str) -> Result<KernelNeeds> {
    static NEEDS: OnceLock<Mutex<HashMap<String, KernelNeeds>>> = OnceLock::new();
    let cache = NEEDS.get_or_init(Mutex::default);
    if let Some(&needs) = cache
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(key)
    {
        return Ok(needs);
    }
    let needs = KernelNeeds::of(source, entry).map_err(|e| match e {
        Error::Shader { message, .. } => Error::Shader {
            shader: key.to_string(),
            message,
        },
        other => other,
    })?;
    cache
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(key.to_string(), needs);
    Ok(needs)
}

/// What one entry point needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct KernelNeeds {
    /// Storage buffers bound in the compute stage.
    pub storage_buffers: u32,
    /// Workgroup memory in bytes, each variable rounded up to 16 as WebGPU counts it.
    pub workgroup_bytes: u32,
    /// `@workgroup_size`.
    pub workgroup_size: [u32; 3],
}

impl KernelNeeds {
    /// The needs of `entry` in the WGSL `source`.
    pub fn of(source: &str, entry: &str) -> Result<Self> {
        Self::of_all(source)?
            .into_iter()
            .find(|(name, _)| name == entry)
            .map(|(_, needs)| needs)
            .ok_or_else(|| Error::Shader {
                shader: entry.to_string(),
                message: format!("no entry point {entry:?}"),
            })
    }

    /// The needs of every compute entry point of the WGSL `source`, in declaration order.
    pub fn of_all(source: &str) -> Result<Vec<(String, Self)>> {
        let invalid = |message: String| Error::Shader {
            shader: "(needs)".into(),
            message,
        };
        let module = super::parsed::module(source).map_err(invalid)?;
        let info = naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::all(),
        )
        .validate(&module)
        .map_err(|e| invalid(e.emit_to_string(source)))?;
        let needs = |index: usize, ep: &naga::EntryPoint| {
            let uses = info.get_entry_point(index);
            let mut needs = Self {
                storage_buffers: 0,
                workgroup_bytes: 0,
                workgroup_size: ep.workgroup_size,
            };
            for (handle, var) in module.global_variables.iter() {
                if uses[handle].is_empty() {
                    continue;
                }
                match var.space {
                    naga::AddressSpace::Storage { .. } => needs.storage_buffers += 1,
                    naga::AddressSpace::WorkGroup => {
                        let size = module.types[var.ty].inner.size(module.to_ctx());
                        needs.workgroup_bytes += size.div_ceil(16) * 16;
                    }
                    _ => {}
                }
            }
            needs
        };
        Ok(module
            .entry_points
            .iter()
            .enumerate()
            .filter(|(_, ep)| ep.stage == naga::ShaderStage::Compute)
            .map(|(index, ep)| (ep.name.clone(), needs(index, ep)))
            .collect())
    }

    pub fn invocations(&self) -> u32 {
        self.workgroup_size.iter().product()
    }

    /// Every limit of `limits` these needs pass: `(limit's name, needed, limit)`.
    pub fn over(&self, limits: &DeviceLimits) -> Vec<(&'static str, u64, u64)> {
        let mut over = Vec::new();
        let mut check = |name, needed: u32, limit: u32| {
            if needed > limit {
                over.push((name, needed.into(), limit.into()));
            }
        };
        check(
            "max_storage_buffers_per_shader_stage",
            self.storage_buffers,
            limits.max_storage_buffers_per_shader_stage,
        );
        check(
            "max_compute_workgroup_storage_size",
            self.workgroup_bytes,
            limits.max_compute_workgroup_storage_size,
        );
        check(
            "max_compute_invocations_per_workgroup",
            self.invocations(),
            limits.max_compute_invocations_per_workgroup,
        );
        for (axis, name) in [
            "max_compute_workgroup_size_x",
            "max_compute_workgroup_size_y",
            "max_compute_workgroup_size_z",
        ]
        .into_iter()
        .enumerate()
        {
            check(
                name,
                self.workgroup_size[axis],
                limits.max_compute_workgroup_size[axis],
            );
        }
        over
    }

    /// `Ok` where a device of `limits` can run the entry point, else the first limit it passes.
    pub fn check(&self, what: &str, device: &str, limits: &DeviceLimits) -> Result<()> {
        match self.over(limits).first() {
            None => Ok(()),
            Some(&(limit_name, requested, limit)) => Err(Error::LimitExceeded {
                what: what.to_string(),
                device: device.to_string(),
                limit_name,
                requested,
                limit,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str = "
        @group(0) @binding(0) var<storage, read> a: array<f32>;
        @group(0) @binding(1) var<storage, read> b: array<f32>;
        @group(0) @binding(2) var<storage, read_write> c: array<f32>;
        var<workgroup> tile: array<f32, 3>;
        var<workgroup> unused_tile: array<f32, 4096>;
        @compute @workgroup_size(16, 4, 1)
        fn both(@builtin(local_invocation_index) i: u32) {
            tile[i % 3u] = a[i];
            workgroupBarrier();
            c[i] = tile[0] + b[i];
        }
        @compute @workgroup_size(8)
        fn one(@builtin(global_invocation_id) id: vec3<u32>) {
            c[id.x] = 1.0;
        }";

    #[test]
    fn only_what_the_entry_point_reaches_counts() {
        let both = KernelNeeds::of(SOURCE, "both").unwrap();
        // 12 bytes of tile round up to 16; the 16 KiB array no entry point uses costs nothing.
        assert_eq!(
            both,
            KernelNeeds {
                storage_buffers: 3,
                workgroup_bytes: 16,
                workgroup_size: [16, 4, 1],
            }
        );
        assert_eq!(both.invocations(), 64);
        let one = KernelNeeds::of(SOURCE, "one").unwrap();
        assert_eq!((one.storage_buffers, one.workgroup_bytes), (1, 0));
        assert!(KernelNeeds::of(SOURCE, "missing").is_err());
    }

    #[test]
    fn the_first_limit_passed_is_named() {
        let webgpu: DeviceLimits = (&wgpu::Limits::default()).into();
        let needs = KernelNeeds {
            storage_buffers: 9,
            workgroup_bytes: 32 << 10,
            workgroup_size: [512, 1, 1],
        };
        let names: Vec<_> = needs.over(&webgpu).iter().map(|o| o.0).collect();
        assert_eq!(
            names,
            [
                "max_storage_buffers_per_shader_stage",
                "max_compute_workgroup_storage_size",
                "max_compute_invocations_per_workgroup",
                "max_compute_workgroup_size_x",
            ]
        );
        match needs.check("k", "dev", &webgpu) {
            Err(Error::LimitExceeded {
                limit_name,
                requested,
                limit,
                ..
            }) => assert_eq!(
                (limit_name, requested, limit),
                ("max_storage_buffers_per_shader_stage", 9, 8)
            ),
            other => panic!("{other:?}"),
        }
        let fits = KernelNeeds {
            storage_buffers: 8,
            workgroup_bytes: 16 << 10,
            workgroup_size: [256, 1, 1],
        };
        assert!(fits.check("k", "dev", &webgpu).is_ok());
    }
}
