//! The chain, Pathways' Fig. 4: one value handed along a path of devices, `x + 1` on each. It is
//! the smallest program that crosses devices, so it is what measures dispatch: the bench's
//! dispatch suite, the viewer's Live tab, the runtime and fault tests and the `fig4_chain`
//! example all run this one program, and [`chain_reference`] is its result on the host.

use super::{Program, ProgramBuilder};
use crate::{Error, Result};

/// `len` values arriving on `path[0]`, then stage `s` (`x + 1`, node `stage s`) on device
/// `path[s]`: a transfer wherever consecutive stages are on different devices. Named
/// `chain x{stages}`.
pub fn chain(path: &[usize], len: usize) -> Result<Program> {
    let first = *path.first().ok_or_else(|| Error::InvalidArgument {
        what: "chain",
        reason: "a chain needs at least one stage".into(),
    })?;
    let mut p = ProgramBuilder::new(format!("chain x{}", path.len()));
    let mut v = p.arg(&[first], len);
    for (s, &device) in path.iter().enumerate() {
        v = p.affine(&format!("stage {s}"), &[device], v, 1.0, 1.0);
    }
    p.result(v);
    p.build()
}

/// What [`chain`] of `stages` stages returns for `input`.
pub fn chain_reference(input: &[f32], stages: usize) -> Vec<f32> {
    input
        .iter()
        .map(|&x| (0..stages).fold(x, |v, _| v + 1.0))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_has_a_node_per_stage_and_a_transfer_per_crossing() {
        let p = chain(&[0, 1, 1, 2], 8).unwrap();
        let kernels = p
            .nodes()
            .iter()
            .filter(|n| n.name.starts_with("stage "))
            .count();
        assert_eq!(kernels, 4);
        assert_eq!(p.name(), "chain x4");
        assert_eq!(chain_reference(&[0.5, -2.0], 4), vec![4.5, 2.0]);
        assert!(chain(&[], 8).is_err());
    }
}
