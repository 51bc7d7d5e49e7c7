//! The resource manager (Pathways §4.1): clients ask for a virtual slice of devices and get
//! physical devices for it. Slices may overlap; the devices are then time-multiplexed by the gang
//! scheduler. Dropping a slice returns its devices.

use crate::{Device, Error, Mesh, MeshShape, Result};
use std::sync::{Arc, Mutex, PoisonError};

/// What a client asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SliceRequest {
    /// Any `n` distinct devices.
    Devices(usize),
    /// A mesh of this shape (named axes, row-major), as many devices as it holds.
    Mesh(MeshShape),
}

impl SliceRequest {
    fn devices(&self) -> usize {
        match self {
            Self::Devices(n) => *n,
            Self::Mesh(shape) => shape.devices(),
        }
    }
}

#[derive(Debug)]
struct Holds {
    /// Slices currently holding each device.
    per_device: Vec<usize>,
    next_id: u64,
}

/// Maps virtual slices onto the physical devices it was given.
#[derive(Debug, Clone)]
pub struct ResourceManager {
    devices: Vec<Device>,
    holds: Arc<Mutex<Holds>>,
}

/// Devices lent to one client. Logical device `i` of a program run on the slice is `devices()[i]`.
#[derive(Debug)]
pub struct Slice {
    id: u64,
    devices: Vec<Device>,
    physical: Vec<usize>,
    mesh: Option<Mesh>,
    holds: Arc<Mutex<Holds>>,
}

impl ResourceManager {
    pub fn new(devices: Vec<Device>) -> Self {
        let n = devices.len();
        Self {
            devices,
            holds: Arc::new(Mutex::new(Holds {
                per_device: vec![0; n],
                next_id: 1,
            })),
        }
    }

    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// Slices holding each device now.
    pub fn load(&self) -> Vec<usize> {
        self.holds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .per_device
            .clone()
    }

    /// Lends a slice: the least-shared devices first (ties by id), so slices overlap only when
    /// they must. Asking for more devices than exist is [`Error::Unavailable`].
    pub fn acquire(&self, request: &SliceRequest) -> Result<Slice> {
        let n = request.devices();
        if n == 0 || n > self.devices.len() {
            return Err(Error::Unavailable {
                requested: n,
                available: self.devices.len(),
            });
        }
        let mut holds = self.holds.lock().unwrap_or_else(PoisonError::into_inner);
        let mut order: Vec<usize> = (0..self.devices.len()).collect();
        order.sort_by_key(|&d| (holds.per_device[d], d));
        let mut physical: Vec<usize> = order[..n].to_vec();
        physical.sort_unstable();
        let devices: Vec<Device> = physical.iter().map(|&d| self.devices[d].clone()).collect();
        let mesh = match request {
            SliceRequest::Devices(_) => None,
            SliceRequest::Mesh(shape) => Some(Mesh::with_shape(&devices, shape)?),
        };
        for &d in &physical {
            holds.per_device[d] += 1;
        }
        let id = holds.next_id;
        holds.next_id += 1;
        Ok(Slice {
            id,
            devices,
            physical,
            mesh,
            holds: self.holds.clone(),
        })
    }
}

impl Slice {
    pub fn id(&self) -> u64 {
        self.id
    }
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }
    /// Indices of the slice's devices in the manager's device list.
    pub fn physical(&self) -> &[usize] {
        &self.physical
    }
    /// The mesh, when the slice was asked for as one.
    pub fn mesh(&self) -> Option<&Mesh> {
        self.mesh.as_ref()
    }
}

impl Drop for Slice {
    fn drop(&mut self) {
        let mut holds = self.holds.lock().unwrap_or_else(PoisonError::into_inner);
        for &d in &self.physical {
            holds.per_device[d] = holds.per_device[d].saturating_sub(1);
        }
    }
}
