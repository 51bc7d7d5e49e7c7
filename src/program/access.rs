//! Which storage each node reads and writes. A value lives in a storage: its own buffer, or, for
//! a kernel output updated in place, the buffer of the input it updates (and variables are one
//! storage per name). A device worker waiting on other devices for one node may run later nodes
//! of the same run ahead of it (sends early, receives late), but only those that touch no storage
//! an unfinished earlier node still reads or writes: then the device computes exactly what it
//! would in program order.

use super::ir::{Op, Program};
use std::collections::HashMap;

/// The storages one node reads and writes (the same on every shard of its gang).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeAccess {
    pub reads: Vec<usize>,
    pub writes: Vec<usize>,
}

impl NodeAccess {
    /// Whether running `self` before `earlier` could change what either computes: `self` reads
    /// what `earlier` writes, or writes what `earlier` reads or writes.
    pub fn conflicts_with(&self, earlier: &NodeAccess) -> bool {
        let meets = |a: &[usize], b: &[usize]| a.iter().any(|x| b.contains(x));
        meets(&self.reads, &earlier.writes)
            || meets(&self.writes, &earlier.reads)
            || meets(&self.writes, &earlier.writes)
    }
}

/// Every node's storage access, in node order.
pub fn accesses(program: &Program) -> Vec<NodeAccess> {
    // storage[value]: the storage the value lives in.
    let mut storage: Vec<usize> = (0..program.values.len()).collect();
    let mut variables: HashMap<&str, usize> = HashMap::new();
    let mut out = Vec::with_capacity(program.nodes.len());
    for n in &program.nodes {
        let reads: Vec<usize> = n.inputs.iter().map(|v| storage[v.0]).collect();
        match &n.op {
            Op::Variable { name } => {
                if let Some(&v) = n.outputs.first() {
                    storage[v.0] = *variables.entry(name.as_str()).or_insert(v.0);
                }
            }
            Op::Kernel(k) => {
                for (o, i) in k.0.in_place() {
                    if let (Some(out), Some(inp)) = (n.outputs.get(o), n.inputs.get(i)) {
                        storage[out.0] = storage[inp.0];
                    }
                }
            }
            _ => {}
        }
        let writes = n.outputs.iter().map(|v| storage[v.0]).collect();
        out.push(NodeAccess { reads, writes });
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::kernels::{Accumulate, TensorType};
    use crate::program::ProgramBuilder;
    use std::sync::Arc;

    #[test]
    fn in_place_updates_write_the_storage_they_update_and_variables_are_one_storage() {
        let mut p = ProgramBuilder::new("access");
        let x = p.arg(&[0], 4); // node 0
        let y = p.affine("y", &[0], x, 1.0, 0.0); // node 1
        // node 2: y += x, in y's buffer
        let [acc] = p.kernel("acc", &[0], Arc::new(Accumulate), &[y, x]);
        let z = p.relu("z", &[0], x); // node 3
        let w1 = p.variable("w", &[0], TensorType::f32(&[4])); // node 4
        let w2 = p.variable("w", &[0], TensorType::f32(&[4])); // node 5
        let [_] = p.kernel("w += z", &[0], Arc::new(Accumulate), &[w1, z]); // node 6
        let u = p.relu("u", &[0], w2); // node 7
        p.result(acc);
        p.result(u);
        let a = accesses(&p.build().unwrap());
        assert_eq!(
            a[2].writes, a[1].writes,
            "the update writes y's own storage"
        );
        assert_eq!(a[2].reads, [a[1].writes[0], a[0].writes[0]]);
        // Reading what an earlier node writes, or writing what it reads or writes, conflicts.
        assert!(a[2].conflicts_with(&a[1]));
        assert!(a[2].conflicts_with(&a[0]), "reads x, which node 0 writes");
        // Two readers of x do not.
        assert!(!a[3].conflicts_with(&a[2]));
        // The same variable declared twice is one storage: reading it after an update conflicts.
        assert_eq!(a[4].writes, a[5].writes);
        assert!(a[7].conflicts_with(&a[6]));
        assert!(!a[7].conflicts_with(&a[3]));
    }
}
