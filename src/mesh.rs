//! Meshes: devices arranged in an n-d grid with named axes (`data`, `expert`, `stage`, ...).

use crate::named_sharding::GangAxes;
use crate::{Device, Error, Result};

/// An n-d, row-major grid of devices with named axes.
#[derive(Debug, Clone)]
pub struct Mesh {
    devices: Vec<Device>,
    axes: GangAxes,
}

impl Mesh {
    /// Arranges `devices` row-major over `axes`; the axis sizes must multiply to the device count.
    pub fn new(devices: Vec<Device>, axes: &[(&str, usize)]) -> Result<Self> {
        let axes = GangAxes::new(axes, devices.len()).map_err(Error::Mesh)?;
        Ok(Self { devices, axes })
    }

    /// The mesh's named axes, as a program's gang over these devices has them.
    pub fn gang_axes(&self) -> &GangAxes {
        &self.axes
    }

    /// A 1-d mesh over all of `devices`.
    pub fn line(devices: Vec<Device>, axis: &str) -> Result<Self> {
        let n = devices.len();
        Self::new(devices, &[(axis, n)])
    }

    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    pub fn shape(&self) -> Vec<usize> {
        self.axes.axes().iter().map(|(_, s)| *s).collect()
    }

    pub fn axis_names(&self) -> Vec<&str> {
        self.axes.axes().iter().map(|(n, _)| n.as_str()).collect()
    }

    /// Position of `axis` among the mesh's axes.
    pub fn axis(&self, axis: &str) -> Result<usize> {
        self.axes
            .axes()
            .iter()
            .position(|(n, _)| n == axis)
            .ok_or_else(|| Error::Mesh(format!("no axis {axis:?} in {:?}", self.axis_names())))
    }

    pub fn axis_size(&self, axis: &str) -> Result<usize> {
        Ok(self.axes.axes()[self.axis(axis)?].1)
    }

    /// Coordinates of the device at row-major index `linear`.
    pub fn coords(&self, mut linear: usize) -> Vec<usize> {
        let mut coords = vec![0; self.axes.axes().len()];
        for (i, (_, size)) in self.axes.axes().iter().enumerate().rev() {
            coords[i] = linear % size;
            linear /= size;
        }
        coords
    }

    /// The device at `coords`.
    pub fn device(&self, coords: &[usize]) -> Result<&Device> {
        if coords.len() != self.axes.axes().len()
            || coords
                .iter()
                .zip(self.axes.axes())
                .any(|(c, (_, s))| c >= s)
        {
            return Err(Error::Mesh(format!(
                "coordinates {coords:?} are outside mesh {:?}",
                self.shape()
            )));
        }
        let linear = coords
            .iter()
            .zip(self.axes.axes())
            .fold(0, |acc, (c, (_, s))| acc * s + c);
        Ok(&self.devices[linear])
    }

    /// Every 1-d group along `axis`: the devices that differ only in that coordinate, in order.
    pub fn groups(&self, axis: &str) -> Result<Vec<Vec<Device>>> {
        let a = self.axis(axis)?;
        let mut groups: Vec<Vec<Device>> = Vec::new();
        let mut keys: Vec<Vec<usize>> = Vec::new();
        for (i, device) in self.devices.iter().enumerate() {
            let mut key = self.coords(i);
            key.remove(a);
            match keys.iter().position(|k| *k == key) {
                Some(g) => groups[g].push(device.clone()),
                None => {
                    keys.push(key);
                    groups.push(vec![device.clone()]);
                }
            }
        }
        Ok(groups)
    }
}
