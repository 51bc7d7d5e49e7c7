//! A program's gang: the devices a sharded node runs on (indices into the slice of devices the
//! program is compiled for, one per shard) together with the named axes they are laid out on,
//! row-major. It is what a [`crate::Mesh`] is to a workload, inside a program: every value and
//! node carries its gang, so a collective over an axis and a sharding that names axes always
//! see the axes of the devices they run on.
//!
//! A plain list of devices converts into a gang of one axis, [`DEFAULT_AXIS`]; a gang with named
//! axes comes from [`Gang::new`] (or [`super::ProgramBuilder::mesh`], which defers the error to
//! the build).

use crate::mesh::{LINE_AXIS, MeshError, MeshShape};

/// The axis of a gang laid out as one line, when nobody named its axes.
pub const DEFAULT_AXIS: &str = LINE_AXIS;

/// Devices of a program (slice indices, one per shard) over named axes; see the module docs.
/// It reads as the slice of its device indices.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Gang {
    devices: Vec<usize>,
    shape: MeshShape,
}

impl Gang {
    /// `devices` over `axes`, whose sizes must multiply to the device count.
    pub fn new(devices: impl Into<Vec<usize>>, axes: &[(&str, usize)]) -> Result<Self, MeshError> {
        let devices = devices.into();
        let shape = MeshShape::new(axes, devices.len())?;
        Ok(Self { devices, shape })
    }

    /// `devices` as one axis, [`DEFAULT_AXIS`].
    pub fn line(devices: impl Into<Vec<usize>>) -> Self {
        let devices = devices.into();
        let shape = MeshShape::line(DEFAULT_AXIS, devices.len());
        Self { devices, shape }
    }

    pub fn devices(&self) -> &[usize] {
        &self.devices
    }

    /// The gang's named axes.
    pub fn shape(&self) -> &MeshShape {
        &self.shape
    }
}

impl std::ops::Deref for Gang {
    type Target = [usize];

    fn deref(&self) -> &[usize] {
        &self.devices
    }
}

impl From<&Gang> for Gang {
    fn from(g: &Gang) -> Self {
        g.clone()
    }
}

impl From<&[usize]> for Gang {
    fn from(devices: &[usize]) -> Self {
        Self::line(devices)
    }
}

impl<const N: usize> From<&[usize; N]> for Gang {
    fn from(devices: &[usize; N]) -> Self {
        Self::line(devices.as_slice())
    }
}

impl From<&Vec<usize>> for Gang {
    fn from(devices: &Vec<usize>) -> Self {
        Self::line(devices.as_slice())
    }
}

impl From<Vec<usize>> for Gang {
    fn from(devices: Vec<usize>) -> Self {
        Self::line(devices)
    }
}
