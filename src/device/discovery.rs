//! Finding adapters on every backend and turning each into one or more devices, with all the
//! limits the adapter offers or only WebGPU's guaranteed defaults ([`LimitsMode`]).

use super::Device;
use super::backends::{backends_to_string, parse_backends};
use super::info::{DeviceFeatures, DeviceInfo, backend_name, device_type_name};
use super::pipeline_cache::{AdapterPipelines, PIPELINE_CACHE_ENV};
use crate::{Error, Result};
use std::sync::Arc;

/// Environment variable that splits every adapter into N virtual devices.
pub const VIRTUAL_DEVICES_ENV: &str = "GANGWAY_VIRTUAL_DEVICES";
/// wgpu's own convention for picking backends.
pub const BACKEND_ENV: &str = "WGPU_BACKEND";
/// Environment variable for each device's memory budget, e.g. `512MiB` or `2GiB`.
pub const MEMORY_BUDGET_ENV: &str = "GANGWAY_MEMORY_BUDGET";
/// Environment variable for the longest wait on a device, in seconds.
pub const WAIT_TIMEOUT_ENV: &str = "GANGWAY_WAIT_TIMEOUT";
/// Environment variable choosing the limits devices are created with: `adapter` or `webgpu`.
pub const LIMITS_ENV: &str = "GANGWAY_LIMITS";

/// The limits each device is created with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LimitsMode {
    /// Everything the adapter offers.
    #[default]
    Adapter,
    /// WebGPU's guaranteed defaults (`wgpu::Limits::default()`: 8 storage buffers per shader
    /// stage, 16 KiB of workgroup memory, 256 invocations per workgroup, 128 MiB storage
    /// bindings): what a browser, or a small integrated or mobile GPU, may give and no more.
    /// Runs here show whether every kernel fits them, on an adapter that offers more.
    WebGpu,
}

impl LimitsMode {
    pub fn parse(value: &str) -> Result<Self> {
        match value.trim().to_ascii_lowercase().as_str() {
            "adapter" | "" => Ok(Self::Adapter),
            "webgpu" | "default" => Ok(Self::WebGpu),
            _ => Err(Error::InvalidSetting {
                name: LIMITS_ENV,
                value: value.to_string(),
                reason: "expected `adapter` (all the adapter offers) or `webgpu` (WebGPU's \
                         guaranteed defaults)"
                    .into(),
            }),
        }
    }

    /// The limits to request of `adapter`, never above what it offers.
    fn request(self, adapter: &wgpu::Limits) -> wgpu::Limits {
        match self {
            Self::Adapter => adapter.clone(),
            // Where an adapter offers less than a default (a GL adapter's storage buffers
            // in some stage), its own is all it can give.
            Self::WebGpu => wgpu::Limits::default().or_worse_values_from(adapter),
        }
    }
}

/// Budget of one adapter when none is set, shared by its virtual devices. WebGPU cannot tell how
/// much memory an adapter has; 4 GiB suits the software adapters and is easy to raise.
pub const DEFAULT_ADAPTER_BUDGET: u64 = 4 << 30;

/// How to discover devices.
#[derive(Debug, Clone)]
pub struct DiscoveryOptions {
    pub backends: wgpu::Backends,
    /// Devices made from each adapter (each its own `wgpu::Device` and queue). At least 1.
    pub virtual_devices: usize,
    /// Bytes each device's pool may hold [default: 4 GiB per adapter / virtual devices].
    pub memory_budget: Option<u64>,
    /// The longest any wait on a device may take before it becomes [`Error::Timeout`].
    pub wait_timeout: std::time::Duration,
    /// The limits devices are created with [default: the adapter's].
    pub limits: LimitsMode,
    /// Where the drivers' compiled pipelines are kept between processes (a file per adapter
    /// under `pipelines/`) [default: none; from the environment: the cache directory, unless
    /// `GANGWAY_PIPELINE_CACHE=off`]. An adapter's devices share them either way.
    pub pipeline_cache: Option<std::path::PathBuf>,
}

impl Default for DiscoveryOptions {
    fn default() -> Self {
        Self {
            backends: wgpu::Backends::all(),
            virtual_devices: 1,
            memory_budget: None,
            wait_timeout: std::time::Duration::from_secs(60),
            limits: LimitsMode::Adapter,
            pipeline_cache: None,
        }
    }
}

impl DiscoveryOptions {
    /// Defaults overridden by `WGPU_BACKEND`, `GANGWAY_VIRTUAL_DEVICES`,
    /// `GANGWAY_MEMORY_BUDGET`, `GANGWAY_WAIT_TIMEOUT` and `GANGWAY_LIMITS`; the pipeline cache
    /// kept in the cache directory ([`crate::fsutil::cache_dir`]) unless
    /// `GANGWAY_PIPELINE_CACHE=off`.
    pub fn from_env() -> Result<Self> {
        let pipeline_cache = match std::env::var(PIPELINE_CACHE_ENV).as_deref() {
            Err(_) | Ok("on") => crate::fsutil::cache_dir(),
            Ok("off") => None,
            Ok(other) => {
                return Err(Error::InvalidSetting {
                    name: PIPELINE_CACHE_ENV,
                    value: other.into(),
                    reason: "expected `on` or `off`".into(),
                });
            }
        };
        let mut opts = Self {
            pipeline_cache,
            ..Self::default()
        };
        if let Ok(mode) = std::env::var(LIMITS_ENV) {
            opts.limits = LimitsMode::parse(&mode)?;
        }
        if let Ok(list) = std::env::var(BACKEND_ENV) {
            opts.backends = parse_backends(&list)?;
        }
        if let Ok(n) = std::env::var(VIRTUAL_DEVICES_ENV) {
            opts.virtual_devices = parse_virtual_devices(VIRTUAL_DEVICES_ENV, &n)?;
        }
        if let Ok(b) = std::env::var(MEMORY_BUDGET_ENV) {
            opts.memory_budget = Some(parse_bytes(MEMORY_BUDGET_ENV, &b)?);
        }
        if let Ok(t) = std::env::var(WAIT_TIMEOUT_ENV) {
            let secs: f64 = t
                .trim()
                .parse()
                .ok()
                .filter(|s: &f64| s.is_finite() && *s > 0.0)
                .ok_or_else(|| Error::InvalidSetting {
                    name: WAIT_TIMEOUT_ENV,
                    value: t.clone(),
                    reason: "expected a positive number of seconds".into(),
                })?;
            opts.wait_timeout = std::time::Duration::from_secs_f64(secs);
        }
        Ok(opts)
    }
}

/// Parses a virtual-device count (1..=64).
pub fn parse_virtual_devices(name: &'static str, value: &str) -> Result<usize> {
    let invalid = |reason: &str| Error::InvalidSetting {
        name,
        value: value.to_string(),
        reason: reason.to_string(),
    };
    let n: usize = value
        .trim()
        .parse()
        .map_err(|_| invalid("expected a whole number"))?;
    if !(1..=64).contains(&n) {
        return Err(invalid("must be between 1 and 64"));
    }
    Ok(n)
}

/// Parses a byte count with an optional K/M/G suffix (`KiB`, `MB`, ... are all powers of 1024).
pub fn parse_bytes(name: &'static str, value: &str) -> Result<u64> {
    let invalid = || Error::InvalidSetting {
        name,
        value: value.to_string(),
        reason: "expected bytes, e.g. 1048576, 512MiB or 2G".into(),
    };
    let v = value.trim();
    let digits = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let n: u64 = v[..digits].parse().map_err(|_| invalid())?;
    let shift = match v[digits..].trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(invalid()),
    };
    n.checked_mul(1 << shift)
        .filter(|&b| b > 0)
        .ok_or_else(invalid)
}

/// Features gangway turns on when an adapter offers them.
fn wanted_features() -> wgpu::Features {
    wgpu::Features::SHADER_F16
        | wgpu::Features::TIMESTAMP_QUERY
        | wgpu::Features::SUBGROUP
        | wgpu::Features::PIPELINE_CACHE
}

/// Enumerates every adapter on the chosen backends and creates `virtual_devices` devices from each.
///
/// Adapters are ordered by backend, then as the backend reports them, so device ids are stable
/// across runs on one machine. No adapter at all is [`Error::NoAdapter`].
pub fn discover(opts: &DiscoveryOptions) -> Result<Vec<Device>> {
    if opts.virtual_devices == 0 {
        return Err(Error::InvalidSetting {
            name: VIRTUAL_DEVICES_ENV,
            value: "0".into(),
            reason: "must be at least 1".into(),
        });
    }
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = opts.backends;
    let instance = wgpu::Instance::new(desc);
    let mut adapters = pollster::block_on(instance.enumerate_adapters(opts.backends));
    adapters.sort_by_key(|a| a.get_info().backend as u32);
    if adapters.is_empty() {
        return Err(Error::NoAdapter {
            backends: backends_to_string(opts.backends),
        });
    }
    let mut devices = Vec::new();
    for (adapter_index, adapter) in adapters.iter().enumerate() {
        let ainfo = adapter.get_info();
        let features = adapter.features() & wanted_features();
        let limits = opts.limits.request(&adapter.limits());
        let gl_lock = (ainfo.backend == wgpu::Backend::Gl).then(Arc::default);
        let pipelines = AdapterPipelines::new(adapter, opts.pipeline_cache.as_deref());
        for virtual_index in 0..opts.virtual_devices {
            let info = DeviceInfo {
                id: devices.len(),
                adapter: adapter_index,
                virtual_index,
                name: ainfo.name.clone(),
                backend: backend_name(ainfo.backend).to_string(),
                device_type: device_type_name(ainfo.device_type).to_string(),
                driver: ainfo.driver.clone(),
                driver_info: ainfo.driver_info.clone(),
                vendor: ainfo.vendor,
                device_pci_id: ainfo.device,
                limits: (&limits).into(),
                features: DeviceFeatures::from(features),
                subgroup_min_size: ainfo.subgroup_min_size,
            };
            let label = info.label();
            let (device, queue) =
                pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
                    label: Some(&label),
                    required_features: features,
                    required_limits: limits.clone(),
                    ..Default::default()
                }))
                .map_err(|source| Error::RequestDevice {
                    adapter: ainfo.name.clone(),
                    source,
                })?;
            let budget = opts
                .memory_budget
                .unwrap_or(DEFAULT_ADAPTER_BUDGET / opts.virtual_devices as u64);
            devices.push(Device::new(
                info,
                device,
                queue,
                gl_lock.clone(),
                pipelines.clone(),
                budget,
                opts.wait_timeout,
            ));
        }
    }
    Ok(devices)
}
