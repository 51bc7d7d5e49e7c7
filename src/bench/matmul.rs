//! The `matmul` suite: every matmul variant on square sizes, the transposed products training's
//! backward issues (`A·Bᵀ`, `Aᵀ·B`) and `Aᵀ·Bᵀ`, a tall-skinny expert FFN shape and grouped expert
//! shapes (even, and uneven with an empty group), each a one-kernel program on the runtime, timed
//! by its trace (GPU timestamps where the adapter has timestamp queries). Each variant is compared
//! to the naive kernel of the same shape, and placed on the roofline (FLOPs `2·M·N·K` over the
//! compulsory traffic of reading A and B and writing C once). With f16 operands, each variant
//! that can also sums in f16 (`MatmulShape::f16_accumulate`), as a case of its own.

use super::harness::{Benchmark, Timed, unprepared};
use super::planned::Planned;
use super::traced::TracedProgram;
use super::work::{Work, WorkUnit};
use crate::kernels::autotune::Operands;
use crate::kernels::matmul::{MatmulShape, MatmulVariant, VariantChoice};
use crate::kernels::{Matmul, TensorType};
use crate::program::{ProgramBuilder, Variables};
use crate::sched::Runtime;
use crate::{DType, Device, Result};
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct MatmulOptions {
    /// Square sizes.
    pub sizes: Vec<usize>,
    /// Square sizes of the transposed cases, `A·Bᵀ`, `Aᵀ·B` and `Aᵀ·Bᵀ`.
    pub transposed: Vec<usize>,
    /// The expert FFN shape (tokens, d_model, d_ff): `tokens × d_model` times `d_model × d_ff`.
    pub expert: Option<[usize; 3]>,
    /// Grouped expert shapes (experts, tokens, d_model, d_ff): `tokens` rows cut into one group
    /// per expert, each times its own `d_model × d_ff`, forward (`A·B[g]`) and backward
    /// (`dY·B[g]ᵀ`), with even groups and with uneven ones, one of them empty.
    pub grouped: Option<[usize; 4]>,
    pub variants: Vec<MatmulVariant>,
    pub dtype: DType,
}

impl MatmulOptions {
    /// 256, 512 and 1024 squared, transposed at 512 and 1024, and 4096 tokens × 256 → 1024 (as
    /// many FLOPs as 1024³), plain and over 8 experts.
    pub fn standard() -> Self {
        Self {
            sizes: vec![256, 512, 1024],
            transposed: vec![512, 1024],
            expert: Some([4096, 256, 1024]),
            grouped: Some([8, 4096, 256, 1024]),
            variants: MatmulVariant::ALL.to_vec(),
            dtype: DType::F32,
        }
    }

    /// Tiny sizes, one not a multiple of any tile.
    pub fn quick() -> Self {
        Self {
            sizes: vec![64, 100],
            transposed: vec![100],
            expert: Some([256, 64, 128]),
            grouped: Some([4, 256, 64, 128]),
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
    /// Row offsets of the groups (`[0, M]` for one).
    offsets: Vec<u32>,
    variant: MatmulVariant,
    program: Option<TracedProgram>,
}

/// Offsets of `groups` groups over `rows` rows: even, or uneven with group 1 empty and the rest
/// growing (what a router's skewed assignment looks like).
fn group_offsets(groups: usize, rows: usize, even: bool) -> Vec<u32> {
    let weights: Vec<usize> = (0..groups)
        .map(|g| match (even, g) {
            (true, _) => 1,
            (false, 1) => 0,
            (false, g) => g + 1,
        })
        .collect();
    let total: usize = weights.iter().sum::<usize>().max(1);
    let mut offsets = vec![0u32];
    let mut acc = 0;
    for (g, w) in weights.iter().enumerate() {
        acc += w;
        let end = if g + 1 == groups {
            rows
        } else {
            rows * acc / total
        };
        offsets.push(end as u32);
    }
    offsets
}

/// The suite's shapes: name, shape and group offsets.
fn shapes(o: &MatmulOptions) -> Vec<(String, MatmulShape, Vec<u32>)> {
    let plain = |name: String, shape: MatmulShape| (name, shape, vec![0, shape.m as u32]);
    let mut shapes: Vec<_> = o
        .sizes
        .iter()
        .map(|&s| plain(format!("square {s}"), MatmulShape::plain(s, s, s, o.dtype)))
        .collect();
    for &s in &o.transposed {
        let square = MatmulShape::plain(s, s, s, o.dtype);
        shapes.push(plain(
            format!("NT {s}"),
            MatmulShape {
                trans_b: true,
                ..square
            },
        ));
        shapes.push(plain(
            format!("TN {s}"),
            MatmulShape {
                trans_a: true,
                ..square
            },
        ));
        shapes.push(plain(
            format!("TT {s}"),
            MatmulShape {
                trans_a: true,
                trans_b: true,
                ..square
            },
        ));
    }
    if let Some([t, d, f]) = o.expert {
        shapes.push(plain(
            format!("expert {t}x{d}x{f}"),
            MatmulShape::plain(t, f, d, o.dtype),
        ));
    }
    if let Some([e, t, d, f]) = o.grouped {
        for even in [true, false] {
            let offsets = group_offsets(e, t, even);
            let max_group_rows = offsets.windows(2).map(|w| (w[1] - w[0]) as usize).max();
            let grouped = |n, k, trans_b| MatmulShape {
                groups: e,
                max_group_rows: max_group_rows.unwrap_or(0),
                trans_b,
                ..MatmulShape::plain(t, n, k, o.dtype)
            };
            let how = if even { "even" } else { "uneven" };
            shapes.push((
                format!("grouped {e}x{how} {t}x{d}x{f}"),
                grouped(f, d, false),
                offsets.clone(),
            ));
            shapes.push((
                format!("grouped NT {e}x{how} {t}x{f}x{d}"),
                grouped(d, f, true),
                offsets,
            ));
        }
    }
    shapes
}

fn case_name(shape_name: &str, dtype: DType, variant: MatmulVariant) -> String {
    format!("{shape_name} {} {}", dtype.name(), variant.name())
}

/// The suite's shapes, each f16 one also with f16 sums: the option where some variant takes it.
fn shapes_and_sums(o: &MatmulOptions) -> Vec<(String, MatmulShape, Vec<u32>)> {
    let mut out = Vec::new();
    for (name, shape, offsets) in shapes(o) {
        if shape.dtype == DType::F16 {
            let sums = MatmulShape {
                f16_accumulate: true,
                ..shape
            };
            out.push((name.clone(), shape, offsets.clone()));
            out.push((format!("{name} f16-sums"), sums, offsets));
        } else {
            out.push((name, shape, offsets));
        }
    }
    out
}

/// The suite's cases on `device`.
pub fn plan(runtime: &Runtime, device: &Device, o: &MatmulOptions) -> Vec<Planned> {
    let mut out = Vec::new();
    for (name, shape, offsets) in shapes_and_sums(o) {
        for &variant in &o.variants {
            if shape.f16_accumulate && variant.unsupported(device, &shape).is_some() {
                continue;
            }
            let case = case_name(&name, o.dtype, variant);
            if !device.supports(o.dtype) {
                out.push(Planned::skip(
                    case,
                    format!(
                        "{} needs shader-f16, which the adapter lacks",
                        o.dtype.name()
                    ),
                ));
            } else if let Some(why) = variant.unsupported(device, &shape) {
                out.push(Planned::skip(case, why.to_string()));
            } else {
                out.push(Planned::Run(Box::new(MatmulBench {
                    name: case,
                    shape_name: name.clone(),
                    runtime: runtime.clone(),
                    device: device.clone(),
                    shape,
                    offsets: offsets.clone(),
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

    /// Naive, with f32 sums, of the same shape.
    fn baseline(&self) -> Option<String> {
        let shape_name = self.shape_name.trim_end_matches(" f16-sums");
        (self.name != case_name(shape_name, self.shape.dtype, MatmulVariant::Naive))
            .then(|| case_name(shape_name, self.shape.dtype, MatmulVariant::Naive))
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
        let a = p.variable("a", &[0], TensorType::new(s.dtype, &s.a_shape()));
        let b = p.variable("b", &[0], TensorType::new(s.dtype, &s.b_shape()));
        let kernel = Arc::new(Matmul {
            limits: None,
            trans_a: s.trans_a,
            trans_b: s.trans_b,
            offsets: (s.groups > 1).then(|| self.offsets.clone()),
            choice: VariantChoice::Fixed(self.variant),
            f16_accumulate: self.shape.f16_accumulate,
            epilogue: crate::kernels::Epilogue::NONE,
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
