//! Finding adapters on every backend and turning each into one or more devices.

use super::Device;
use super::backends::{backends_to_string, parse_backends};
use super::info::{DeviceFeatures, DeviceInfo, backend_name, device_type_name};
use crate::{Error, Result};
use std::sync::Arc;

/// Environment variable that splits every adapter into N virtual devices.
pub const VIRTUAL_DEVICES_ENV: &str = "GANGWAY_VIRTUAL_DEVICES";
/// wgpu's own convention for picking backends.
pub const BACKEND_ENV: &str = "WGPU_BACKEND";

/// How to discover devices.
#[derive(Debug, Clone)]
pub struct DiscoveryOptions {
    pub backends: wgpu::Backends,
    /// Devices made from each adapter (each its own `wgpu::Device` and queue). At least 1.
    pub virtual_devices: usize,
}

impl Default for DiscoveryOptions {
    fn default() -> Self {
        Self {
            backends: wgpu::Backends::all(),
            virtual_devices: 1,
        }
    }
}

impl DiscoveryOptions {
    /// Defaults overridden by `WGPU_BACKEND` and `GANGWAY_VIRTUAL_DEVICES`.
    pub fn from_env() -> Result<Self> {
        let mut opts = Self::default();
        if let Ok(list) = std::env::var(BACKEND_ENV) {
            opts.backends = parse_backends(&list)?;
        }
        if let Ok(n) = std::env::var(VIRTUAL_DEVICES_ENV) {
            opts.virtual_devices = parse_virtual_devices(VIRTUAL_DEVICES_ENV, &n)?;
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

/// Features gangway turns on when an adapter offers them.
fn wanted_features() -> wgpu::Features {
    wgpu::Features::SHADER_F16 | wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::SUBGROUP
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
        let limits = adapter.limits();
        let gl_lock = (ainfo.backend == wgpu::Backend::Gl).then(Arc::default);
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
            devices.push(Device::new(info, device, queue, gl_lock.clone()));
        }
    }
    Ok(devices)
}
