//! The `memory` suite: device-memory bandwidth of a streaming kernel, `y = 2·x + 1` over N f32
//! values (the elementwise affine kernel as a one-node program on the runtime), timed by its trace
//! (GPU timestamps where the adapter has timestamp queries).
//! It reads 4 and writes 4 bytes per element for 2 FLOPs, so it sits far left on the roofline:
//! its fraction of peak is a fraction of the memory bandwidth. After the samples the output is
//! checked against the host.

use super::harness::{Benchmark, Extras, Timed, unprepared};
use super::planned::Planned;
use super::traced::TracedProgram;
use super::work::{Work, WorkUnit};
use crate::kernels::TensorType;
use crate::program::{ProgramBuilder, Variables};
use crate::sched::Runtime;
use crate::{DType, Device, Error, Result, Tensor};

const SCALE: f32 = 2.0;
const SHIFT: f32 = 1.0;

#[derive(Debug, Clone)]
pub struct MemoryOptions {
    /// Elements per stream.
    pub sizes: Vec<usize>,
}

impl MemoryOptions {
    /// 1 Mi and 16 Mi elements (8 and 128 MiB moved per run).
    pub fn standard() -> Self {
        Self {
            sizes: vec![1 << 20, 1 << 24],
        }
    }

    /// 64 Ki elements, and a length that is no multiple of the workgroup.
    pub fn quick() -> Self {
        Self {
            sizes: vec![1 << 16, 100_003],
        }
    }
}

pub fn plan(runtime: &Runtime, device: &Device, o: &MemoryOptions) -> Vec<Planned> {
    o.sizes
        .iter()
        .map(|&len| {
            if len == 0 {
                return Planned::skip("stream 2x+1, 0 f32".into(), "empty".into());
            }
            Planned::Run(Box::new(StreamBench {
                runtime: runtime.clone(),
                device: device.clone(),
                len,
                x: Vec::new(),
                program: None,
            }))
        })
        .collect()
}

#[derive(Debug)]
pub struct StreamBench {
    runtime: Runtime,
    device: Device,
    len: usize,
    /// The input, to check the output against.
    x: Vec<f32>,
    program: Option<TracedProgram>,
}

impl Benchmark for StreamBench {
    fn case(&self) -> String {
        format!("stream 2x+1, {} f32", self.len)
    }

    fn work(&self) -> Work {
        Work::new(8.0 * self.len as f64, WorkUnit::Byte).with_flops(2.0 * self.len as f64)
    }

    /// `y = 2·x + 1` of a program variable `x`, `y` read back after each run.
    fn prepare(&mut self) -> Result<()> {
        self.device
            .check_storage_size("stream x", 4 * self.len as u64)?;
        self.x = (0..self.len).map(|i| (i % 1000) as f32).collect();
        let mut variables = Variables::new();
        let x = Tensor::from_f32(&self.device, &[self.len], DType::F32, &self.x)?;
        variables.insert("x", vec![x]);
        let mut p = ProgramBuilder::new(self.case());
        let x = p.variable("x", &[0], TensorType::f32(&[self.len]));
        let y = p.affine("stream", &[0], x, SCALE, SHIFT);
        p.result(y);
        self.program = Some(TracedProgram::new(
            &self.runtime,
            &self.device,
            p.build()?,
            &variables,
            "stream",
        )?);
        Ok(())
    }

    fn run(&mut self) -> Result<()> {
        self.program
            .as_mut()
            .ok_or_else(|| unprepared("stream"))?
            .submit()
    }

    fn sync(&mut self) -> Result<Option<Timed>> {
        self.program
            .as_mut()
            .ok_or_else(|| unprepared("stream"))?
            .wait()
    }

    /// Checks the last run's every output against the host.
    fn extras(&mut self) -> Result<Extras> {
        let p = self.program.as_ref().ok_or_else(|| unprepared("stream"))?;
        let bytes = p.results.first().map_or(&[][..], Vec::as_slice);
        let got: Vec<f32> = bytemuck::pod_collect_to_vec(bytes);
        if got.len() != self.len {
            return Err(Error::Mismatch {
                what: self.case(),
                detail: format!("{} outputs, expected {}", got.len(), self.len),
            });
        }
        if let Some((i, (g, x))) = got
            .iter()
            .zip(&self.x)
            .enumerate()
            .find(|(_, (g, x))| **g != SCALE * **x + SHIFT)
        {
            return Err(Error::Mismatch {
                what: self.case(),
                detail: format!("y[{i}] = {g}, expected {}", SCALE * x + SHIFT),
            });
        }
        Ok(Extras::default())
    }
}
