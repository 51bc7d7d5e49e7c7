//! What a user needs to know about a device, in a serializable form.

use serde::{Deserialize, Serialize};

/// The limits that decide which problems fit on a device.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DeviceLimits {
    pub max_buffer_size: u64,
    pub max_storage_buffer_binding_size: u64,
    pub max_storage_buffers_per_shader_stage: u32,
    pub max_compute_workgroup_storage_size: u32,
    pub max_compute_invocations_per_workgroup: u32,
    pub max_compute_workgroup_size: [u32; 3],
    pub max_compute_workgroups_per_dimension: u32,
}

impl From<&wgpu::Limits> for DeviceLimits {
    fn from(l: &wgpu::Limits) -> Self {
        Self {
            max_buffer_size: l.max_buffer_size,
            max_storage_buffer_binding_size: l.max_storage_buffer_binding_size,
            max_storage_buffers_per_shader_stage: l.max_storage_buffers_per_shader_stage,
            max_compute_workgroup_storage_size: l.max_compute_workgroup_storage_size,
            max_compute_invocations_per_workgroup: l.max_compute_invocations_per_workgroup,
            max_compute_workgroup_size: [
                l.max_compute_workgroup_size_x,
                l.max_compute_workgroup_size_y,
                l.max_compute_workgroup_size_z,
            ],
            max_compute_workgroups_per_dimension: l.max_compute_workgroups_per_dimension,
        }
    }
}

/// Optional features gangway uses when they exist.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct DeviceFeatures {
    pub timestamp_query: bool,
    pub shader_f16: bool,
    pub subgroups: bool,
}

impl From<wgpu::Features> for DeviceFeatures {
    fn from(f: wgpu::Features) -> Self {
        Self {
            timestamp_query: f.contains(wgpu::Features::TIMESTAMP_QUERY),
            shader_f16: f.contains(wgpu::Features::SHADER_F16),
            subgroups: f.contains(wgpu::Features::SUBGROUP),
        }
    }
}

/// One device: which adapter it came from, which virtual slice of it it is, and what it can do.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DeviceInfo {
    /// Index in the discovered device list.
    pub id: usize,
    /// Index of the physical adapter this device was created from.
    pub adapter: usize,
    /// Which virtual device of its adapter this is (0 when not split).
    pub virtual_index: usize,
    pub name: String,
    pub backend: String,
    pub device_type: String,
    pub driver: String,
    pub driver_info: String,
    pub vendor: u32,
    pub device_pci_id: u32,
    pub limits: DeviceLimits,
    pub features: DeviceFeatures,
    /// The fewest invocations a subgroup of this adapter can have (wgpu's `subgroup_min_size`;
    /// 8 on lavapipe, 32 on NVIDIA). 0 in reports written before it was recorded.
    #[serde(default)]
    pub subgroup_min_size: u32,
}

impl DeviceInfo {
    /// A stable key for the physical adapter, used to cache per-adapter choices (autotuning).
    pub fn adapter_key(&self) -> String {
        format!(
            "{}|{}|{}|{}",
            self.name, self.backend, self.driver, self.driver_info
        )
    }

    /// Short label such as `#2 llvmpipe (LLVM 15.0.6, 256 bits) [vulkan/1]`.
    pub fn label(&self) -> String {
        format!(
            "#{} {} [{}/{}]",
            self.id, self.name, self.backend, self.virtual_index
        )
    }
}

pub(crate) fn backend_name(b: wgpu::Backend) -> &'static str {
    match b {
        wgpu::Backend::Vulkan => "vulkan",
        wgpu::Backend::Metal => "metal",
        wgpu::Backend::Dx12 => "dx12",
        wgpu::Backend::Gl => "gl",
        wgpu::Backend::BrowserWebGpu => "webgpu",
        wgpu::Backend::Noop => "noop",
    }
}

pub(crate) fn device_type_name(t: wgpu::DeviceType) -> &'static str {
    match t {
        wgpu::DeviceType::Other => "other",
        wgpu::DeviceType::IntegratedGpu => "integrated-gpu",
        wgpu::DeviceType::DiscreteGpu => "discrete-gpu",
        wgpu::DeviceType::VirtualGpu => "virtual-gpu",
        wgpu::DeviceType::Cpu => "cpu",
    }
}
