//! The `matmul` suite: every matmul variant on square sizes and a tall-skinny expert FFN shape,
//! each a one-kernel program on the runtime, timed by its trace (GPU timestamps where the adapter
//! has timestamp queries). Each variant is compared to the naive kernel
//! of the same shape, and placed on the roofline (FLOPs `2·M·N·K` over the compulsory traffic of
//! reading A and B and writing C once).

use super::harness::{Benchmark, Timed, Work, WorkUnit, unprepared};
use super::suite::Planned;
use super::traced::TracedProgram;
use crate::kernels::TensorType;
use crate::kernels::autotune::Operands;
use crate::kernels::matmul::{MatmulShape, MatmulVariant};
use crate::kernels::ops::KernelOp;
use crate::program::{ProgramBuilder, Variables};
use crate::sched::Runtime;
use crate::{DType, Device, Result};
use std::sync::Arc;

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
    runtime: Runtime,
    device: Device,
    shape: MatmulShape,
    variant: MatmulVariant,
    program: Option<TracedProgram>,
}

fn case_name(shape_name: &str, dtype: DType, variant: MatmulVariant) -> String {
    format!("{shape_name} {} {}", dtype.name(), variant.name())
}

/// The suite's cases on `device`.
pub fn plan(runtime: &Runtime, device: &Device, o: &MatmulOptions) -> Vec<Planned> {
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
                    runtime: runtime.clone(),
                    device: device.clone(),
                    shape,
                    variant,
                    program: None,
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

    /// `c = a · b` of random operands held as program variables, `c` read back after each run.
    fn prepare(&mut self) -> Result<()> {
        let operands = Operands::random(&self.device, &self.shape)?;
        let args = operands.args(self.variant);
        let mut variables = Variables::new();
        variables.insert("a", vec![args.a.clone()]);
        variables.insert("b", vec![args.b.clone()]);
        let s = &self.shape;
        let mut p = ProgramBuilder::new(self.name.clone());
        let a = p.variable("a", &[0], TensorType::new(s.dtype, &[s.m, s.k]));
        let b = p.variable("b", &[0], TensorType::new(s.dtype, &[s.k, s.n]));
        let kernel = Arc::new(KernelOp::Matmul {
            trans_a: false,
            trans_b: false,
            offsets: None,
            variant: self.variant,
        });
        let [c] = p.kernel("matmul", &[0], kernel, &[a, b]);
        p.result(c);
        self.program = Some(TracedProgram::new(
            &self.runtime,
            &self.device,
            p.build()?,
            &variables,
            "matmul",
        )?);
        Ok(())
    }

    fn run(&mut self) -> Result<()> {
        let name = &self.name;
        self.program
            .as_mut()
            .ok_or_else(|| unprepared(name))?
            .submit()
    }

    fn sync(&mut self) -> Result<Option<Timed>> {
        let name = &self.name;
        self.program
            .as_mut()
            .ok_or_else(|| unprepared(name))?
            .wait()
    }
}
