//! `gangway bench matmul`: GFLOP/s of every matmul variant on every adapter, with warm-up runs and
//! medians, and each variant's speed-up over the naive kernel measured in the same run.

use crate::kernels::autotune::measure;
use crate::kernels::matmul::{MatmulShape, MatmulVariant};
use crate::{DType, Device, Result};
use serde::Serialize;

/// One benchmark case: a name and a shape.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub shape: MatmulShape,
}

/// The standard cases: square 256, 512, 1024 and a tall-skinny expert FFN shape
/// (4096 tokens × 256 → 1024, as many FLOPs as 1024³).
pub fn standard_cases(dtype: DType, sizes: &[usize]) -> Vec<Case> {
    let mut cases: Vec<Case> = sizes
        .iter()
        .map(|&s| Case {
            name: format!("square {s}"),
            shape: MatmulShape::plain(s, s, s, dtype),
        })
        .collect();
    cases.push(Case {
        name: "expert 4096x256x1024".into(),
        shape: MatmulShape::plain(4096, 1024, 256, dtype),
    });
    cases
}

/// One measured (adapter, case, variant).
#[derive(Debug, Clone, Serialize)]
pub struct MatmulResult {
    pub adapter: String,
    pub backend: String,
    pub case: String,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub dtype: DType,
    pub variant: MatmulVariant,
    pub warmup: usize,
    pub reps: usize,
    pub median_ms: f64,
    pub gflops: f64,
    /// This variant's speed over the naive kernel's, same adapter, case and run.
    pub speedup_vs_naive: Option<f64>,
}

/// Measures every applicable variant of every case on every device; `progress` sees each result.
pub fn run(
    devices: &[Device],
    cases: &[Case],
    variants: &[MatmulVariant],
    warmup: usize,
    reps: usize,
    mut progress: impl FnMut(&MatmulResult),
) -> Result<Vec<MatmulResult>> {
    let mut results = Vec::new();
    for device in devices {
        for case in cases {
            if !device.supports(case.shape.dtype) {
                continue;
            }
            let mut naive_s = None;
            for &variant in variants.iter().filter(|v| v.supports(&case.shape)) {
                let m = measure(device, &case.shape, variant, warmup, reps)?;
                if variant == MatmulVariant::Naive {
                    naive_s = Some(m.median_s);
                }
                let r = MatmulResult {
                    adapter: device.info().name.clone(),
                    backend: device.info().backend.clone(),
                    case: case.name.clone(),
                    m: case.shape.m,
                    n: case.shape.n,
                    k: case.shape.k,
                    dtype: case.shape.dtype,
                    variant,
                    warmup,
                    reps,
                    median_ms: m.median_s * 1e3,
                    gflops: m.gflops,
                    speedup_vs_naive: naive_s.map(|n| n / m.median_s),
                };
                progress(&r);
                results.push(r);
            }
        }
    }
    Ok(results)
}

/// The results as a Markdown table.
pub fn table(results: &[MatmulResult]) -> String {
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            vec![
                format!("{} ({})", r.adapter, r.backend),
                r.case.clone(),
                r.dtype.name().into(),
                r.variant.name().into(),
                format!("{:.2}", r.median_ms),
                format!("{:.2}", r.gflops),
                r.speedup_vs_naive
                    .map_or("–".into(), |s| format!("{s:.1}×")),
            ]
        })
        .collect();
    super::markdown_table(
        &[
            "adapter",
            "case",
            "dtype",
            "variant",
            "median ms",
            "GFLOP/s",
            "vs naive",
        ],
        &rows,
    )
}
