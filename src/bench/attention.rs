//! The `attention` suite: causal multi-head self-attention at growing context lengths, forward
//! (the tiled FlashAttention-style kernel against the naive three-pass one, in the same run) and
//! backward, each a one-kernel program on the runtime timed by its trace. FLOPs are the usual
//! count (`4·T²/2·Dh` per head forward with the causal half, 2.5× that backward); the roofline's
//! bytes are the compulsory traffic (q, k, v read and the output written once; the backward also
//! reads the output and its gradient and writes three gradients). `--dtype f16` stores q, k, v
//! and the outputs in f16 (cases named `… f16`; skipped where the adapter has no f16).

use super::harness::{Benchmark, Timed, unprepared};
use super::planned::Planned;
use super::traced::TracedProgram;
use super::work::{Work, WorkUnit};
use crate::kernels::attention::AttentionShape;
use crate::kernels::{Attention, AttentionNaive, Kernel, TensorType, eager};
use crate::program::{ProgramBuilder, Variables};
use crate::sched::Runtime;
use crate::{DType, Device, Result, Rng, Tensor};
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct AttentionOptions {
    /// Context lengths (T).
    pub contexts: Vec<usize>,
    pub batch: usize,
    pub heads: usize,
    pub head_dim: usize,
    /// Storage of q, k, v, the output and the gradients (`--dtype`); sums are f32 either way.
    pub dtype: DType,
}

impl AttentionOptions {
    /// Contexts 128 to 2048, one sequence of 4 heads of 64 (d_model 256).
    pub fn standard() -> Self {
        Self {
            contexts: vec![128, 256, 512, 1024, 2048],
            batch: 1,
            heads: 4,
            head_dim: 64,
            dtype: DType::F32,
        }
    }

    /// Two short contexts, one not a multiple of the tiles.
    pub fn quick() -> Self {
        Self {
            contexts: vec![64, 100],
            heads: 2,
            head_dim: 16,
            ..Self::standard()
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    Forward,
    Naive,
    Backward,
}

impl Pass {
    fn name(self) -> &'static str {
        match self {
            Pass::Forward => "forward tiled",
            Pass::Naive => "forward naive",
            Pass::Backward => "backward tiled",
        }
    }
}

/// One (context, pass) on one device.
#[derive(Debug)]
pub struct AttentionBench {
    runtime: Runtime,
    device: Device,
    shape: AttentionShape,
    pass: Pass,
    dtype: DType,
    program: Option<TracedProgram>,
}

fn case_name(seq: usize, pass: Pass, dtype: DType) -> String {
    match dtype {
        DType::F32 => format!("causal T={seq} {}", pass.name()),
        _ => format!("causal T={seq} {} {}", pass.name(), dtype.name()),
    }
}

/// The suite's cases on `device`.
pub fn plan(runtime: &Runtime, device: &Device, o: &AttentionOptions) -> Vec<Planned> {
    let mut out = Vec::new();
    for &seq in &o.contexts {
        let shape = AttentionShape {
            batch: o.batch,
            seq,
            heads: o.heads,
            head_dim: o.head_dim,
        };
        for pass in [Pass::Naive, Pass::Forward, Pass::Backward] {
            let case = case_name(seq, pass, o.dtype);
            if !device.supports(o.dtype) {
                out.push(Planned::skip(
                    case,
                    format!("the adapter has no {}", o.dtype.name()),
                ));
                continue;
            }
            match AttentionShape::of("bench attention", &shape.rows(), o.heads) {
                Ok(_) => out.push(Planned::Run(Box::new(AttentionBench {
                    runtime: runtime.clone(),
                    device: device.clone(),
                    shape,
                    pass,
                    dtype: o.dtype,
                    program: None,
                }))),
                Err(e) => out.push(Planned::Failed {
                    case,
                    reason: e.to_string(),
                }),
            }
        }
    }
    out
}

impl AttentionBench {
    fn forward(&self) -> Attention {
        Attention::new(self.shape.heads, self.shape.head_dim, true)
    }
}

impl Benchmark for AttentionBench {
    fn case(&self) -> String {
        case_name(self.shape.seq, self.pass, self.dtype)
    }

    fn work(&self) -> Work {
        let s = &self.shape;
        let rows = (s.batch * s.seq * s.heads * s.head_dim * self.dtype.size()) as f64;
        match self.pass {
            Pass::Forward | Pass::Naive => {
                Work::new(s.forward_flops(true), WorkUnit::Flop).with_bytes(4.0 * rows)
            }
            Pass::Backward => {
                Work::new(s.backward_flops(true), WorkUnit::Flop).with_bytes(8.0 * rows)
            }
        }
    }

    fn baseline(&self) -> Option<String> {
        (self.pass == Pass::Forward).then(|| case_name(self.shape.seq, Pass::Naive, self.dtype))
    }

    /// Random q, k, v (and, for the backward, the forward's output and a random output gradient)
    /// held as program variables.
    fn prepare(&mut self) -> Result<()> {
        let s = self.shape;
        let rows = s.rows();
        let n: usize = rows.iter().product();
        let mut rng = Rng::new(s.seq as u64);
        let mut random = || Tensor::from_f32(&self.device, &rows, self.dtype, &rng.vec(n));
        let (q, k, v) = (random()?, random()?, random()?);
        let mut variables = Variables::new();
        let mut inputs = vec![("q", q.clone()), ("k", k.clone()), ("v", v.clone())];
        let (kernel, name): (Arc<dyn Kernel>, _) = match self.pass {
            Pass::Forward => (Arc::new(self.forward()), "attention"),
            Pass::Naive => (Arc::new(AttentionNaive(self.forward())), "attention_naive"),
            Pass::Backward => {
                let f = self.forward();
                let [out, lse] = eager::run_n(&f, &[&q, &k, &v])?;
                inputs.extend([("out", out), ("lse", lse), ("d_out", random()?)]);
                (Arc::new(f.backward()), "attention_backward")
            }
        };
        let mut p = ProgramBuilder::new(self.case());
        let values: Vec<_> = inputs
            .into_iter()
            .map(|(name, t)| {
                let ty = TensorType::new(t.dtype(), t.shape());
                variables.insert(name, vec![t]);
                p.variable(name, &[0], ty)
            })
            .collect();
        // The first output is read back; a kernel that refused its inputs fails the build.
        if let Some(&first) = p.kernels(name, &[0], kernel, &values).first() {
            p.result(first);
        }
        self.program = Some(TracedProgram::new(
            &self.runtime,
            &self.device,
            p.build()?,
            &variables,
            name,
        )?);
        Ok(())
    }

    fn run(&mut self) -> Result<()> {
        let name = self.case();
        self.program
            .as_mut()
            .ok_or_else(|| unprepared(&name))?
            .submit()
    }

    fn sync(&mut self) -> Result<Option<Timed>> {
        let name = self.case();
        self.program
            .as_mut()
            .ok_or_else(|| unprepared(&name))?
            .wait()
    }
}
