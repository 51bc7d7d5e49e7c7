//! The `matmul` suite: every matmul variant on square sizes and a tall-skinny expert FFN shape,
//! GPU-timed where the adapter has timestamp queries. Each variant is compared to the naive kernel
//! of the same shape, and placed on the roofline (FLOPs `2·M·N·K` over the compulsory traffic of
//! reading A and B and writing C once).

use super::gpu_timer::{GpuTimer, submit_timed, wait_timed};
use super::harness::{Benchmark, Timed, Work, WorkUnit, unprepared};
use super::suite::Planned;
use crate::kernels::autotune::Operands;
use crate::kernels::matmul::{MatmulShape, MatmulVariant, encode};
use crate::{DType, Device, Result};

#[derive(Debug, Clone)]
pub struct MatmulOptions {
    /// Square sizes.
    pub sizes: Vec<usize>,
    /// The expert FFN shape (tokens, d_model, d_ff): `tokens × d_model` times `d_model × d_ff`.
    pub expert: Option<[usize; 3]>,
    pub variants: Vec<MatmulVariant>,
    pub dtype: DType,
}

impl MatmulOptions {
    /// 256, 512 and 1024 squared, and 4096 tokens × 256 → 1024 (as many FLOPs as 1024³).
    pub fn standard() -> Self {
        Self {
            sizes: vec![256, 512, 1024],
            expert: Some([4096, 256, 1024]),
            variants: MatmulVariant::ALL.to_vec(),
            dtype: DType::F32,
        }
    }

    /// Tiny sizes, one not a multiple of any tile.
    pub fn quick() -> Self {
        Self {
            sizes: vec![64, 100],
            expert: Some([256, 64, 128]),
            ..Self::standard()
        }
    }
}

/// One (shape, variant) on one device.
#[derive(Debug)]
pub struct MatmulBench {
    name: String,
    shape_name: String,
    device: Device,
    shape: MatmulShape,
    variant: MatmulVariant,
    operands: Option<Operands>,
    timer: Option<GpuTimer>,
}

fn case_name(shape_name: &str, dtype: DType, variant: MatmulVariant) -> String {
    format!("{shape_name} {} {}", dtype.name(), variant.name())
}

/// The suite's cases on `device`.
pub fn plan(device: &Device, o: &MatmulOptions) -> Vec<Planned> {
    let mut shapes: Vec<(String, MatmulShape)> = o
        .sizes
        .iter()
        .map(|&s| (format!("square {s}"), MatmulShape::plain(s, s, s, o.dtype)))
        .collect();
    if let Some([t, d, f]) = o.expert {
        shapes.push((
            format!("expert {t}x{d}x{f}"),
            MatmulShape::plain(t, f, d, o.dtype),
        ));
    }
    let mut out = Vec::new();
    for (name, shape) in shapes {
        for &variant in &o.variants {
            let case = case_name(&name, o.dtype, variant);
            if !device.supports(o.dtype) {
                out.push(Planned::skip(
                    case,
                    format!(
                        "{} needs shader-f16, which the adapter lacks",
                        o.dtype.name()
                    ),
                ));
            } else if !variant.supports(&shape) {
                out.push(Planned::skip(
                    case,
                    "needs N and K multiples of 4".to_string(),
                ));
            } else {
                out.push(Planned::Run(Box::new(MatmulBench {
                    name: case,
                    shape_name: name.clone(),
                    device: device.clone(),
                    shape,
                    variant,
                    operands: None,
                    timer: None,
                })));
            }
        }
    }
    out
}

impl Benchmark for MatmulBench {
    fn case(&self) -> String {
        self.name.clone()
    }

    fn work(&self) -> Work {
        let s = &self.shape;
        let elements = s.m * s.k + s.k * s.n + s.m * s.n;
        Work::new(s.flops(), WorkUnit::Flop).with_bytes((elements * s.dtype.size()) as f64)
    }

    fn baseline(&self) -> Option<String> {
        (self.variant != MatmulVariant::Naive)
            .then(|| case_name(&self.shape_name, self.shape.dtype, MatmulVariant::Naive))
    }

    fn prepare(&mut self) -> Result<()> {
        self.operands = Some(Operands::random(&self.device, &self.shape)?);
        self.timer = GpuTimer::new(&self.device);
        Ok(())
    }

    fn run(&mut self) -> Result<()> {
        let Some(operands) = &self.operands else {
            return Err(unprepared(&self.name));
        };
        submit_timed(&self.device, self.timer.as_ref(), "matmul bench", |e| {
            encode(e, &operands.args(self.variant)).map(|_| ())
        })
    }

    fn sync(&mut self) -> Result<Option<Timed>> {
        wait_timed(&self.device, self.timer.as_ref())
    }
}
