//! The floor of the `dispatch` suite: the same tiny affine kernels recorded straight into wgpu,
//! with no runtime, no worker threads and no program. What any runtime on wgpu can reach, and
//! what [`super::dispatch`]'s cases are compared to.
//!
//! Each host call writes its input, records the call's kernels into one command encoder (the
//! commands their own [`Kernel::prepare`] made once, so the pipelines and bind groups are the
//! ones gangway uses), appends the copy of the result to a readback buffer made once, submits once and
//! blocks until the result is on the host, as gangway's `submit` + `wait_bytes` does. A chain over
//! several devices hands each stage's result to the next device through the host, as gangway's
//! transfers do, one device after the other.

use super::harness::BlockingRun;
use crate::kernels::{ElementwiseOp, Kernel, Prepared};
use crate::{DType, Device, Result, Tensor};

/// Elements each tiny kernel touches.
pub const TINY: usize = 256;

/// One device's part of a call: its input, its kernels' commands and its result.
struct Stage {
    device: Device,
    input: Tensor,
    output: Tensor,
    commands: Prepared,
    /// Where the result is read back, made once.
    staging: wgpu::Buffer,
}

impl Stage {
    /// `ops` affine kernels on `device`, alternating between two buffers (one with `fused`: a
    /// single kernel applying all of them).
    fn new(device: &Device, ops: usize, fused: bool) -> Result<Self> {
        let a = Tensor::zeros(device, &[TINY], DType::F32)?;
        let b = Tensor::zeros(device, &[TINY], DType::F32)?;
        let step = |repeat: u32| ElementwiseOp::Affine {
            scale: 1.0,
            shift: 1.0,
            repeat,
        };
        let mut commands = Prepared::new();
        let kernels = if fused { 1 } else { ops };
        let repeat = if fused { ops as u32 } else { 1 };
        let (mut from, mut to) = (&a, &b);
        for _ in 0..kernels {
            step(repeat).prepare(
                std::slice::from_ref(from),
                std::slice::from_ref(to),
                &mut commands,
            )?;
            std::mem::swap(&mut from, &mut to);
        }
        Ok(Self {
            device: device.clone(),
            input: a.clone(),
            output: from.clone(),
            commands,
            staging: device.readback_buffer("raw wgpu result", (TINY * 4) as u64),
        })
    }

    /// Writes `x`, runs the commands and reads the result back: one submit, one wait.
    fn call(&self, x: &[f32]) -> Result<Vec<f32>> {
        self.device
            .write_buffer(self.input.buffer(), 0, bytemuck::cast_slice(x));
        let mut encoder = self.device.encoder("raw wgpu call");
        self.commands.encode(&mut encoder, None);
        let bytes = self.device.read_through(
            encoder,
            self.output.buffer(),
            0,
            (TINY * 4) as u64,
            &self.staging,
        )?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }
}

/// `calls` host calls per run, each through every stage in turn.
pub struct RawCalls {
    stages: Vec<Stage>,
    calls: usize,
    runs: usize,
}

impl RawCalls {
    /// One stage per device of `devices`, each `ops` kernels (`fused`: one kernel doing `ops`).
    pub fn new(
        devices: &[Device],
        ops: usize,
        fused: bool,
        calls: usize,
        runs: usize,
    ) -> Result<Self> {
        let stages = devices
            .iter()
            .map(|d| Stage::new(d, ops, fused))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            stages,
            calls,
            runs,
        })
    }
}

impl BlockingRun for RawCalls {
    fn run(&mut self) -> Result<()> {
        for _ in 0..self.runs * self.calls {
            let mut x = vec![0.0f32; TINY];
            for stage in &self.stages {
                x = stage.call(&x)?;
            }
        }
        Ok(())
    }
}
