//! Devices of a job's global mesh: this process's own ([`Device`]), and those of the job's other
//! processes (ranks), known here only by what they are and where they live. Under `mpirun` the
//! mesh is every rank's devices, rank-major and the same on every rank; in one process it is just
//! the process's devices.

use super::{Device, DeviceInfo};
use serde::Serialize;

/// A device of another rank of the job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RemoteDevice {
    pub rank: usize,
    pub host: String,
    /// Its index among its rank's devices.
    pub index: usize,
    pub info: DeviceInfo,
}

/// One device of the job's mesh.
#[derive(Debug, Clone)]
pub enum MeshDevice {
    /// One of this process's devices.
    Local(Device),
    Remote(Box<RemoteDevice>),
}

impl PartialEq for MeshDevice {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Local(a), Self::Local(b)) => a == b,
            (Self::Remote(a), Self::Remote(b)) => a.rank == b.rank && a.index == b.index,
            _ => false,
        }
    }
}

/// A mesh device is a device when it is that device of this process.
impl PartialEq<Device> for MeshDevice {
    fn eq(&self, other: &Device) -> bool {
        self.local() == Some(other)
    }
}

impl From<Device> for MeshDevice {
    fn from(d: Device) -> Self {
        Self::Local(d)
    }
}

impl From<&Device> for MeshDevice {
    fn from(d: &Device) -> Self {
        Self::Local(d.clone())
    }
}

impl MeshDevice {
    /// The device, when it is this process's.
    pub fn local(&self) -> Option<&Device> {
        match self {
            Self::Local(d) => Some(d),
            Self::Remote(_) => None,
        }
    }

    pub fn is_local(&self) -> bool {
        matches!(self, Self::Local(_))
    }

    /// The rank the device lives on; `None` for this process's own.
    pub fn remote_rank(&self) -> Option<usize> {
        match self {
            Self::Local(_) => None,
            Self::Remote(r) => Some(r.rank),
        }
    }

    pub fn info(&self) -> &DeviceInfo {
        match self {
            Self::Local(d) => d.info(),
            Self::Remote(r) => &r.info,
        }
    }

    /// `#2 llvmpipe … [vulkan/1]`, with `rank 1 ` before it for another rank's device.
    pub fn label(&self) -> String {
        match self {
            Self::Local(d) => d.label(),
            Self::Remote(r) => format!("rank {} {}", r.rank, r.info.label()),
        }
    }
}

/// A list of devices a program or workload can be placed on: this process's devices, or a
/// job's mesh (where some are other ranks').
pub trait DeviceList {
    fn mesh_devices(&self) -> Vec<MeshDevice>;
}

impl DeviceList for [Device] {
    fn mesh_devices(&self) -> Vec<MeshDevice> {
        self.iter().map(MeshDevice::from).collect()
    }
}

impl DeviceList for Vec<Device> {
    fn mesh_devices(&self) -> Vec<MeshDevice> {
        self.as_slice().mesh_devices()
    }
}

impl DeviceList for [MeshDevice] {
    fn mesh_devices(&self) -> Vec<MeshDevice> {
        self.to_vec()
    }
}

impl DeviceList for Vec<MeshDevice> {
    fn mesh_devices(&self) -> Vec<MeshDevice> {
        self.clone()
    }
}
