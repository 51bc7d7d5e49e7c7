//! The `memory` suite: device-memory bandwidth of a streaming kernel, `y = 2·x + 1` over N f32
//! values (the elementwise affine kernel), GPU-timed where the adapter has timestamp queries.
//! It reads 4 and writes 4 bytes per element for 2 FLOPs, so it sits far left on the roofline:
//! its fraction of peak is a fraction of the memory bandwidth. After the samples the output is
//! checked against the host.

use super::gpu_timer::{GpuTimer, submit_timed, wait_timed};
use super::harness::{Benchmark, Extras, Timed, Work, WorkUnit, unprepared};
use super::suite::Planned;
use crate::kernels::PreparedDispatch;
use crate::kernels::elementwise::{ElementwiseOp, prepare};
use crate::{Device, Error, Result};

const OP: ElementwiseOp = ElementwiseOp::Affine {
    scale: 2.0,
    shift: 1.0,
    repeat: 1,
};

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

pub fn plan(device: &Device, o: &MemoryOptions) -> Vec<Planned> {
    o.sizes
        .iter()
        .map(|&len| {
            if len == 0 {
                return Planned::skip("stream 2x+1, 0 f32".into(), "empty".into());
            }
            Planned::Run(Box::new(StreamBench {
                device: device.clone(),
                len,
                state: None,
                timer: None,
            }))
        })
        .collect()
}

#[derive(Debug)]
struct Stream {
    x: Vec<f32>,
    y: wgpu::Buffer,
    dispatch: PreparedDispatch,
    _x: wgpu::Buffer,
}

#[derive(Debug)]
pub struct StreamBench {
    device: Device,
    len: usize,
    state: Option<Stream>,
    timer: Option<GpuTimer>,
}

impl Benchmark for StreamBench {
    fn case(&self) -> String {
        format!("stream 2x+1, {} f32", self.len)
    }

    fn work(&self) -> Work {
        Work::new(8.0 * self.len as f64, WorkUnit::Byte).with_flops(2.0 * self.len as f64)
    }

    fn prepare(&mut self) -> Result<()> {
        let bytes = 4 * self.len as u64;
        self.device.check_storage_size("stream x", bytes)?;
        let x: Vec<f32> = (0..self.len).map(|i| (i % 1000) as f32).collect();
        let xb = self
            .device
            .storage_buffer_init("stream x", bytemuck::cast_slice(&x))?;
        let y = self.device.storage_buffer("stream y", bytes)?;
        let dispatch = prepare(&self.device, OP, &xb, None, &y, self.len)?;
        self.state = Some(Stream {
            x,
            y,
            dispatch,
            _x: xb,
        });
        self.timer = GpuTimer::new(&self.device);
        Ok(())
    }

    fn run(&mut self) -> Result<()> {
        let s = self.state.as_ref().ok_or_else(|| unprepared("stream"))?;
        submit_timed(&self.device, self.timer.as_ref(), "stream bench", |e| {
            s.dispatch.encode(e, None);
            Ok(())
        })
    }

    fn sync(&mut self) -> Result<Option<Timed>> {
        wait_timed(&self.device, self.timer.as_ref())
    }

    /// Checks the first and last 1024 outputs against the host.
    fn extras(&mut self) -> Result<Extras> {
        let s = self.state.as_ref().ok_or_else(|| unprepared("stream"))?;
        let n = self.len.min(1024);
        for start in [0, self.len - n] {
            let bytes = self
                .device
                .read_buffer(&s.y, 4 * start as u64, 4 * n as u64)?;
            let got: &[f32] = bytemuck::cast_slice(&bytes);
            if let Some((i, (g, x))) = got
                .iter()
                .zip(&s.x[start..start + n])
                .enumerate()
                .find(|(_, (g, x))| **g != 2.0 * **x + 1.0)
            {
                return Err(Error::Mismatch {
                    what: self.case(),
                    detail: format!("y[{}] = {g}, expected {}", start + i, 2.0 * x + 1.0),
                });
            }
        }
        Ok(Extras::default())
    }
}
