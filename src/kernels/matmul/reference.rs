//! The plain-Rust matmul every variant is checked against, and the host's check of grouped row
//! offsets.

use super::variant::MatmulShape;
use crate::{Error, Result};

/// Validates host row offsets for `groups` groups over `m` rows; returns the largest group.
pub fn check_offsets(offsets: &[u32], groups: usize, m: usize) -> Result<usize> {
    let bad = |reason: String| Error::InvalidArgument {
        what: "grouped matmul offsets",
        reason,
    };
    if offsets.len() != groups + 1 {
        return Err(bad(format!(
            "need {} offsets for {groups} groups, got {}",
            groups + 1,
            offsets.len()
        )));
    }
    if offsets.windows(2).any(|w| w[1] < w[0]) {
        return Err(bad(format!("offsets must not decrease: {offsets:?}")));
    }
    let last = *offsets.last().unwrap_or(&0) as usize;
    if last > m {
        return Err(bad(format!("last offset {last} is past the {m} rows of A")));
    }
    Ok(offsets
        .windows(2)
        .map(|w| (w[1] - w[0]) as usize)
        .max()
        .unwrap_or(0))
}

/// Plain-Rust reference of the grouped matmul (f64 accumulation), `shape.blocks` row groups per
/// weight matrix. Rows outside every group are 0.
pub fn reference(a: &[f32], b: &[f32], offsets: &[u32], shape: &MatmulShape) -> Vec<f32> {
    let MatmulShape { m, n, k, .. } = *shape;
    let mut c = vec![0.0f32; m * n];
    for g in 0..offsets.len().saturating_sub(1) {
        let b_base = g / shape.blocks.max(1) * k * n;
        for row in offsets[g] as usize..offsets[g + 1] as usize {
            for col in 0..n {
                let mut acc = 0.0f64;
                for kk in 0..k {
                    let av = if shape.trans_a {
                        a[kk * m + row]
                    } else {
                        a[row * k + kk]
                    };
                    let bv = if shape.trans_b {
                        b[b_base + col * k + kk]
                    } else {
                        b[b_base + kk * n + col]
                    };
                    acc += f64::from(av) * f64::from(bv);
                }
                c[row * n + col] = acc as f32;
            }
        }
    }
    c
}
