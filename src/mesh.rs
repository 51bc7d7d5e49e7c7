//! The one mesh, after JAX's `Mesh(devices, axis_names)`: devices in an n-d, row-major grid with
//! named axes ([`DATA_AXIS`], [`EXPERT_AXIS`], [`STAGE_AXIS`], ...). The same type is the job's
//! global mesh (every rank's devices: [`crate::sched::Runtime::mesh`], [`crate::Job::mesh`]) and
//! what workloads take: the trainer (`{data, expert}`, or one axis of experts), the pipelines
//! (which lay their devices out as `{stage, expert}` and give stage `k` the row
//! `mesh.sub("stage", k)`), Branch-Train-Merge and the benchmarks. A plain device list is
//! [`Mesh::line`]. Its shape ([`MeshShape`]) is what a program's gang is laid out as (inside a
//! program, a [`crate::program::Gang`]: slice indices with their axes, what a `Mesh` is to a
//! workload) and what a [`crate::NamedSharding`] names axes of. Errors are [`MeshError`]s.

use crate::device::{DeviceList, MeshDevice};
pub use crate::error::MeshError;
use crate::{Error, Result};
use std::fmt;

/// The axis of a mesh laid out as one line when nobody named its axes (a runtime's devices, a
/// job's, a program's gang).
pub const LINE_AXIS: &str = "d";
/// The data axis of a `{data, expert}` mesh (GShard, DeepSpeed-MoE): replicas of every expert.
pub const DATA_AXIS: &str = "data";
/// The axis experts are split over: a trainer's gang, a data row, a pipeline stage's gang.
pub const EXPERT_AXIS: &str = "expert";
/// The pipeline axis of a `{stage, expert}` mesh: one row of devices per stage (or per gang the
/// stages fold onto).
pub const STAGE_AXIS: &str = "stage";

/// A mesh's named axes, row-major: device `i` sits at the coordinates of `i` in this grid.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MeshShape(Vec<(String, usize)>);

impl MeshShape {
    /// Axes whose sizes must multiply to the device count, named once each.
    pub fn new(axes: &[(&str, usize)], devices: usize) -> std::result::Result<Self, MeshError> {
        if axes.is_empty() {
            return Err(MeshError::NoAxes);
        }
        for (i, (name, size)) in axes.iter().enumerate() {
            if *size == 0 {
                return Err(MeshError::ZeroAxis(name.to_string()));
            }
            if axes[..i].iter().any(|(n, _)| n == name) {
                return Err(MeshError::RepeatedAxis(name.to_string()));
            }
        }
        let holds: usize = axes.iter().map(|(_, n)| n).product();
        if holds != devices {
            return Err(MeshError::Size {
                axes: format!("{axes:?}"),
                holds,
                devices,
            });
        }
        Ok(Self(
            axes.iter().map(|(n, s)| (n.to_string(), *s)).collect(),
        ))
    }

    /// One axis named `name` over all `devices`.
    pub fn line(name: &str, devices: usize) -> Self {
        Self(vec![(name.to_string(), devices)])
    }

    /// Axes written as `name=size,name=size` (`data=2,expert=2`), as the command line takes them.
    pub fn parse_axes(text: &str) -> std::result::Result<Vec<(String, usize)>, MeshError> {
        let fail = |reason: String| MeshError::Parse {
            text: text.to_string(),
            reason,
        };
        text.split(',')
            .map(|part| {
                let (name, size) = part
                    .split_once('=')
                    .ok_or_else(|| fail(format!("{part:?} has no `=`")))?;
                let name = name.trim();
                if name.is_empty() {
                    return Err(fail(format!("{part:?} names no axis")));
                }
                let size = size
                    .trim()
                    .parse::<usize>()
                    .map_err(|e| fail(format!("{part:?}: {e}")))?;
                Ok((name.to_string(), size))
            })
            .collect()
    }

    pub fn axes(&self) -> &[(String, usize)] {
        &self.0
    }

    pub fn devices(&self) -> usize {
        self.0.iter().map(|(_, s)| s).product()
    }

    pub fn size(&self, axis: &str) -> Option<usize> {
        self.0.iter().find(|(n, _)| n == axis).map(|(_, s)| *s)
    }

    /// Position of `axis` among the axes.
    pub fn position(&self, axis: &str) -> std::result::Result<usize, MeshError> {
        self.0
            .iter()
            .position(|(n, _)| n == axis)
            .ok_or_else(|| MeshError::NoAxis {
                axis: axis.to_string(),
                shape: self.to_string(),
            })
    }

    /// Devices whose coordinates differ only along `axis` form one group of a collective over
    /// it: `(group size, stride between members)` in device order.
    pub fn group(&self, axis: &str) -> std::result::Result<(usize, usize), MeshError> {
        let at = self.position(axis)?;
        let stride = self.0[at + 1..].iter().map(|(_, s)| s).product();
        Ok((self.0[at].1, stride))
    }

    /// Coordinates of the device at row-major index `linear`.
    pub fn coords(&self, mut linear: usize) -> Vec<usize> {
        let mut coords = vec![0; self.0.len()];
        for (i, (_, size)) in self.0.iter().enumerate().rev() {
            coords[i] = linear % size;
            linear /= size;
        }
        coords
    }
}

impl fmt::Display for MeshShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let axes: Vec<String> = self.0.iter().map(|(n, s)| format!("{n}={s}")).collect();
        write!(f, "{{{}}}", axes.join(", "))
    }
}

/// Devices in an n-d, row-major grid with named axes; some may be other ranks' (a job's global
/// mesh). It reads as the slice of its devices in row-major order.
#[derive(Debug, Clone)]
pub struct Mesh {
    devices: Vec<MeshDevice>,
    shape: MeshShape,
}

impl Mesh {
    /// Arranges `devices` row-major over `axes`; the axis sizes must multiply to the device
    /// count.
    pub fn new(devices: &(impl DeviceList + ?Sized), axes: &[(&str, usize)]) -> Result<Self> {
        let devices = devices.mesh_devices();
        let shape = MeshShape::new(axes, devices.len())?;
        Ok(Self { devices, shape })
    }

    /// Arranges `devices` row-major as `shape`, which must hold exactly as many.
    pub fn with_shape(devices: &(impl DeviceList + ?Sized), shape: &MeshShape) -> Result<Self> {
        let axes: Vec<(&str, usize)> = shape.axes().iter().map(|(n, s)| (n.as_str(), *s)).collect();
        Self::new(devices, &axes)
    }

    /// A 1-d mesh over all of `devices`, its axis [`LINE_AXIS`]: what a plain device list is
    /// to a workload.
    pub fn line(devices: &(impl DeviceList + ?Sized)) -> Self {
        Self::line_along(devices.mesh_devices(), LINE_AXIS)
    }

    fn line_along(devices: Vec<MeshDevice>, axis: &str) -> Self {
        let shape = MeshShape::line(axis, devices.len());
        Self { devices, shape }
    }

    /// The same devices over other axes.
    pub fn reshape(&self, axes: &[(&str, usize)]) -> Result<Self> {
        Self::new(&self.devices, axes)
    }

    pub fn devices(&self) -> &[MeshDevice] {
        &self.devices
    }

    /// The mesh's named axes, as a program's gang over these devices has them.
    pub fn shape(&self) -> &MeshShape {
        &self.shape
    }

    /// The sub-mesh at index `i` of `axis`: the devices whose coordinate along `axis` is `i`, over
    /// the other axes (a 1-d mesh of one device when `axis` was the only one). One data row of a
    /// `{data, expert}` mesh is `sub("data", i)`: a gang that holds every expert once.
    pub fn sub(&self, axis: &str, i: usize) -> Result<Mesh> {
        let axes = self.shape.axes();
        let a = self.shape.position(axis)?;
        if i >= axes[a].1 {
            let mut coords = vec![0; axes.len()];
            coords[a] = i;
            return Err(Error::Mesh(MeshError::Coords {
                coords,
                shape: axes.iter().map(|(_, s)| *s).collect(),
            }));
        }
        let devices: Vec<MeshDevice> = (self.devices.iter().enumerate())
            .filter(|(k, _)| self.shape.coords(*k)[a] == i)
            .map(|(_, d)| d.clone())
            .collect();
        let rest: Vec<(&str, usize)> = (self.shape.axes().iter().enumerate())
            .filter(|(k, _)| *k != a)
            .map(|(_, (n, s))| (n.as_str(), *s))
            .collect();
        if rest.is_empty() {
            return Ok(Self::line_along(devices, axis));
        }
        Self::new(&devices, &rest)
    }
}

impl std::ops::Deref for Mesh {
    type Target = [MeshDevice];

    fn deref(&self) -> &[MeshDevice] {
        &self.devices
    }
}

impl DeviceList for Mesh {
    fn mesh_devices(&self) -> Vec<MeshDevice> {
        self.devices.clone()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn shapes_parse_and_refuse_what_they_cannot_hold() {
        let axes = MeshShape::parse_axes("data=2, expert=3").unwrap();
        assert_eq!(axes, [("data".to_string(), 2), ("expert".to_string(), 3)]);
        for bad in ["data", "data=x", "=2", "data=2,"] {
            assert!(matches!(
                MeshShape::parse_axes(bad),
                Err(MeshError::Parse { .. })
            ));
        }
        let shape = MeshShape::new(&[("data", 2), ("expert", 3)], 6).unwrap();
        assert_eq!(shape.to_string(), "{data=2, expert=3}");
        assert_eq!(shape.coords(4), [1, 1]);
        assert_eq!(shape.group("data").unwrap(), (2, 3));
        assert!(matches!(
            MeshShape::new(&[("a", 2)], 3),
            Err(MeshError::Size { holds: 2, .. })
        ));
        assert_eq!(MeshShape::new(&[], 0), Err(MeshError::NoAxes));
        assert!(matches!(
            MeshShape::new(&[("a", 0)], 0),
            Err(MeshError::ZeroAxis(_))
        ));
        assert!(matches!(
            MeshShape::new(&[("a", 1), ("a", 1)], 1),
            Err(MeshError::RepeatedAxis(_))
        ));
        assert!(matches!(
            shape.group("stage"),
            Err(MeshError::NoAxis { .. })
        ));
    }
}
