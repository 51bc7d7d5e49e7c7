//! How a program value lies over its gang, after JAX's `NamedSharding`: the gang is a mesh with
//! named axes ([`MeshShape`]), and for every dimension of the value the spec names the mesh axes that split it.
//! Axes that split no dimension either hold copies (replicated) or, after a local reduction such
//! as a weight gradient, partial sums that an all-reduce over those axes completes (GSPMD's
//! "partial" sharding, which `NamedSharding` leaves implicit).
//!
//! Axes of size 1 are dropped from specs and partial sets, so a one-device gang is trivially
//! consistent and `split over an axis of 1` equals `replicated`.

use crate::mesh::MeshShape;
use std::fmt;

/// A value's layout over its gang: which axes split which dimension, and over which axes the
/// shards are partial sums. Shard shapes are what the program's types hold; the global shape
/// multiplies each split dimension by its axes' sizes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NamedSharding {
    mesh: MeshShape,
    /// Per dimension of the value, the axes splitting it, major first.
    dims: Vec<Vec<String>>,
    partial: Vec<String>,
}

impl NamedSharding {
    /// `dims[d]` names the axes splitting dimension `d` (a value of `dims.len()` dimensions);
    /// `partial` the axes over which shards are partial sums. Every axis is used at most once.
    pub fn new(mesh: &MeshShape, dims: &[&[&str]], partial: &[&str]) -> Result<Self, String> {
        let mut used: Vec<&str> = Vec::new();
        for axis in dims.iter().flat_map(|d| d.iter()).chain(partial) {
            if mesh.size(axis).is_none() {
                return Err(format!("no axis {axis:?} in {mesh}"));
            }
            if used.contains(axis) {
                return Err(format!("axis {axis:?} is used twice"));
            }
            used.push(axis);
        }
        let keep = |axes: &[&str]| -> Vec<String> {
            axes.iter()
                .filter(|a| mesh.size(a).is_some_and(|s| s > 1))
                .map(|a| a.to_string())
                .collect()
        };
        Ok(Self {
            mesh: mesh.clone(),
            dims: dims.iter().map(|d| keep(d)).collect(),
            partial: keep(partial),
        })
    }

    /// Every shard holds the whole value.
    pub fn replicated(mesh: &MeshShape, rank: usize) -> Self {
        Self {
            mesh: mesh.clone(),
            dims: vec![Vec::new(); rank],
            partial: Vec::new(),
        }
    }

    /// Dimension 0 split over every axis, major first: shard-major host data is the global array.
    pub fn rows(mesh: &MeshShape, rank: usize) -> Self {
        let mut s = Self::replicated(mesh, rank);
        let Some(rows) = s.dims.first_mut() else {
            return s;
        };
        *rows = mesh
            .axes()
            .iter()
            .filter(|(_, size)| *size > 1)
            .map(|(n, _)| n.clone())
            .collect();
        s
    }

    pub fn mesh(&self) -> &MeshShape {
        &self.mesh
    }

    /// The axes splitting each dimension.
    pub fn dims(&self) -> &[Vec<String>] {
        &self.dims
    }

    pub fn partial(&self) -> &[String] {
        &self.partial
    }

    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// No dimension split and no partial sums: every shard holds the same whole value.
    pub fn is_replicated(&self) -> bool {
        self.dims.iter().all(Vec::is_empty) && self.partial.is_empty()
    }

    /// Only dimension 0 is split, if any.
    pub fn splits_only_rows(&self) -> bool {
        self.dims.iter().skip(1).all(Vec::is_empty)
    }

    /// The global shape for shards of `shard` shape.
    pub fn global_shape(&self, shard: &[usize]) -> Vec<usize> {
        shard
            .iter()
            .enumerate()
            .map(|(d, &n)| {
                let split: usize = self
                    .dims
                    .get(d)
                    .map(|axes| axes.iter().filter_map(|a| self.mesh.size(a)).product())
                    .unwrap_or(1);
                n * split
            })
            .collect()
    }

    /// This sharding for a value of another rank: dimension 0 split as here, the others not.
    pub fn with_rows_of(&self, rank: usize) -> Self {
        let mut s = Self::replicated(&self.mesh, rank);
        if let Some(rows) = s.dims.first_mut() {
            *rows = self.dims.first().cloned().unwrap_or_default();
        }
        s.partial = self.partial.clone();
        s
    }

    /// The axes splitting dimension 0 (none for a scalar).
    pub fn row_axes(&self) -> &[String] {
        self.dims.first().map(Vec::as_slice).unwrap_or(&[])
    }

    /// The same layout, with shards partial sums over `axes` too.
    pub fn with_partial(mut self, axes: &[String]) -> Self {
        for a in axes {
            if !self.partial.contains(a) {
                self.partial.push(a.clone());
            }
        }
        self
    }

    /// The layout after summing the shards over `axes` (an all-reduce, JAX's `psum`): every
    /// member holds the same sum, so the axes neither hold partial sums nor split anything.
    /// (Summing shards that were pieces of a value is a sum of its blocks, as `psum` in
    /// `shard_map` gives.)
    pub fn reduced(mut self, axes: &[&str]) -> Self {
        self.partial.retain(|a| !axes.contains(&a.as_str()));
        for dim in &mut self.dims {
            dim.retain(|a| !axes.contains(&a.as_str()));
        }
        self
    }

    /// The same layout on a gang with the same axes (a transfer's destination).
    pub fn on(&self, mesh: &MeshShape) -> Result<Self, String> {
        if *mesh != self.mesh {
            return Err(format!(
                "a value laid over {} cannot move to a gang with axes {mesh}",
                self.mesh
            ));
        }
        Ok(self.clone())
    }
}

impl fmt::Display for NamedSharding {
    /// `P(expert, -) over {expert=4}`, plus `partial over data` when there are partial sums.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dims: Vec<String> = self
            .dims
            .iter()
            .map(|axes| match axes.len() {
                0 => "-".to_string(),
                1 => axes[0].clone(),
                _ => format!("({})", axes.join(", ")),
            })
            .collect();
        write!(f, "P({}) over {}", dims.join(", "), self.mesh)?;
        if !self.partial.is_empty() {
            write!(f, ", partial over {}", self.partial.join(", "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn global_shapes_and_groups_of_a_2d_mesh() {
        let mesh = MeshShape::new(&[("data", 2), ("expert", 3)], 6).unwrap();
        let s = NamedSharding::new(&mesh, &[&["expert"], &[], &["data"]], &[]).unwrap();
        assert_eq!(s.global_shape(&[4, 5, 7]), [12, 5, 14]);
        assert_eq!(s.to_string(), "P(expert, -, data) over {data=2, expert=3}");
        assert_eq!(mesh.group("data").unwrap(), (2, 3));
        assert_eq!(mesh.group("expert").unwrap(), (3, 1));
        let rows = NamedSharding::rows(&mesh, 2);
        assert_eq!(rows.global_shape(&[4, 5]), [24, 5]);
        assert_eq!(
            rows.to_string(),
            "P((data, expert), -) over {data=2, expert=3}"
        );
    }

    #[test]
    fn partial_sums_until_reduced() {
        let mesh = MeshShape::new(&[("data", 2), ("expert", 2)], 4).unwrap();
        let g = NamedSharding::replicated(&mesh, 2).with_partial(&["data".into()]);
        assert!(!g.is_replicated());
        assert_eq!(
            g.to_string(),
            "P(-, -) over {data=2, expert=2}, partial over data"
        );
        assert!(g.reduced(&["data"]).is_replicated());
    }

    #[test]
    fn unit_axes_vanish_and_bad_specs_are_errors() {
        let one = MeshShape::line("d", 1);
        assert!(
            NamedSharding::new(&one, &[&["d"]], &[])
                .unwrap()
                .is_replicated()
        );
        assert!(
            NamedSharding::new(&one, &[&[]], &["d"])
                .unwrap()
                .is_replicated()
        );
        let mesh = MeshShape::new(&[("a", 2), ("b", 2)], 4).unwrap();
        assert!(NamedSharding::new(&mesh, &[&["a"], &["a"]], &[]).is_err());
        assert!(NamedSharding::new(&mesh, &[&["c"]], &[]).is_err());
        assert!(MeshShape::new(&[("a", 2), ("b", 2)], 3).is_err());
        assert!(MeshShape::new(&[("a", 2), ("a", 2)], 4).is_err());
        let other = MeshShape::line("x", 4);
        assert!(NamedSharding::rows(&mesh, 1).on(&other).is_err());
    }
}
