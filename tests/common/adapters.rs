//! The machine's adapters, discovered once per test binary, and the devices a case gets from them.

use gangway::{Device, DeviceInfo, DiscoveryOptions, discover};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// Set to `1` (CI) to make a machine without adapters fail the GPU cases instead of skipping them.
pub const REQUIRE_ADAPTER_ENV: &str = "GANGWAY_REQUIRE_ADAPTER";

/// One physical adapter: its place in discovery order, its case-name slug, and one device on it.
#[derive(Debug)]
pub struct Adapter {
    /// `DeviceInfo::adapter`: the same adapter in every discovery on this machine.
    pub index: usize,
    /// `<backend>_<name>`, e.g. `vulkan_lavapipe`: the suffix of this adapter's case names.
    pub slug: String,
    /// The adapter's only device in the one-device-per-adapter discovery.
    pub device: Device,
}

/// Why there are no adapters to run GPU cases on.
#[derive(Debug, Clone)]
pub struct NoAdapters {
    pub reason: String,
    /// The cases fail rather than skip: CI demands an adapter, or the environment is invalid.
    pub fatal: bool,
}

/// Every adapter on the backends `WGPU_BACKEND` allows, in discovery order.
pub fn found() -> &'static Result<Vec<Adapter>, NoAdapters> {
    static FOUND: OnceLock<Result<Vec<Adapter>, NoAdapters>> = OnceLock::new();
    FOUND.get_or_init(|| {
        let opts = DiscoveryOptions::from_env().map_err(|e| NoAdapters {
            reason: format!("invalid environment: {e}"),
            fatal: true,
        })?;
        let devices = virtual_devices(1, &opts).map_err(|e| {
            let required = std::env::var(REQUIRE_ADAPTER_ENV).is_ok_and(|v| v == "1");
            NoAdapters {
                reason: if required {
                    format!("{REQUIRE_ADAPTER_ENV}=1 but: {e}")
                } else {
                    e.to_string()
                },
                fatal: required,
            }
        })?;
        let slugs: Vec<String> = devices.iter().map(|d| slug(d.info())).collect();
        let adapters = devices
            .iter()
            .zip(&slugs)
            .map(|(d, s)| {
                let index = d.info().adapter;
                // Two alike adapters (two of one GPU model) would share a slug: number them apart.
                let twins = slugs.iter().filter(|t| *t == s).count() > 1;
                Adapter {
                    index,
                    slug: if twins {
                        format!("{s}_{index}")
                    } else {
                        s.clone()
                    },
                    device: d.clone(),
                }
            })
            .collect();
        Ok(adapters)
    })
}

/// An adapter's part of case names: its backend, then its name up to the details in parentheses,
/// in lower case with `_` for anything else (`gl_llvmpipe`, `vulkan_nvidia_geforce_rtx_4090`).
fn slug(info: &DeviceInfo) -> String {
    let name = info.name.split('(').next().unwrap_or_default();
    let mut name: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    while name.contains("__") {
        name = name.replace("__", "_");
    }
    let name = name.trim_matches('_');
    // Mesa's Vulkan software driver reports the name of its GL sibling; call it by its own.
    let name = match (info.backend.as_str(), name) {
        ("vulkan", "llvmpipe") => "lavapipe",
        (_, "") => "adapter",
        _ => name,
    };
    format!("{}_{name}", info.backend)
}

/// `per_adapter` virtual devices of every adapter, discovered once per count (the lock is held
/// through discovery, so cases asking at once wait for the one) and shared by the binary's cases.
fn virtual_devices(per_adapter: usize, base: &DiscoveryOptions) -> gangway::Result<Arc<[Device]>> {
    static MESHES: OnceLock<Mutex<BTreeMap<usize, Arc<[Device]>>>> = OnceLock::new();
    let mut meshes = MESHES
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(found) = meshes.get(&per_adapter) {
        return Ok(found.clone());
    }
    let mut opts = base.clone();
    opts.virtual_devices = per_adapter;
    let found: Arc<[Device]> = discover(&opts)?.into();
    meshes.insert(per_adapter, found.clone());
    Ok(found)
}

/// The adapters one case runs on: one adapter, or every adapter for a cross-adapter case.
#[derive(Debug, Clone)]
pub struct Adapters {
    members: Vec<&'static Adapter>,
}

impl Adapters {
    pub(crate) fn new(members: Vec<&'static Adapter>) -> Self {
        assert!(!members.is_empty(), "a case runs on at least one adapter");
        Self { members }
    }

    pub fn iter(&self) -> impl Iterator<Item = &'static Adapter> + '_ {
        self.members.iter().copied()
    }

    /// The first adapter's device.
    pub fn device(&self) -> &Device {
        &self.members[0].device
    }

    /// `per_adapter` virtual devices of each adapter, adapter by adapter: shared with the other
    /// cases of this test binary.
    pub fn mesh(&self, per_adapter: usize) -> Vec<Device> {
        let opts = DiscoveryOptions::from_env().expect("checked by the first discovery");
        let all = virtual_devices(per_adapter, &opts)
            .unwrap_or_else(|e| panic!("{per_adapter} virtual devices per adapter: {e}"));
        self.keep(&all)
    }

    /// Newly created devices of these adapters (`opts.virtual_devices` each), this case's own:
    /// for cases that set budgets or timeouts, or destroy a device.
    pub fn discover(&self, opts: &DiscoveryOptions) -> Vec<Device> {
        let all = discover(opts).unwrap_or_else(|e| panic!("discovery with {opts:?}: {e}"));
        self.keep(&all)
    }

    /// The devices of `all` that belong to these adapters, checking discovery kept its order.
    fn keep(&self, all: &[Device]) -> Vec<Device> {
        let mut kept = Vec::new();
        for adapter in &self.members {
            let want = adapter.device.info().adapter_key();
            let mine = all.iter().filter(|d| d.info().adapter == adapter.index);
            for d in mine {
                assert_eq!(
                    d.info().adapter_key(),
                    want,
                    "adapter {} changed between discoveries",
                    adapter.index
                );
                kept.push(d.clone());
            }
        }
        kept
    }
}
