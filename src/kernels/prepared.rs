//! Kernels as graph nodes: what a compiled program keeps of a kernel ([`Prepared`]: its
//! dispatches with their bind groups, made once) and what it asks of one ([`Kernel`]: output types
//! from input types, in-place updates, preparing into given buffers). `Prepared` replays each
//! dispatch through [`crate::device::encode_pass`], the one place a dispatch is recorded. Nothing
//! here knows the scheduler: the program layer builds on it.

use super::sharding_rules::{self, Rule};
use super::tensor_type::TensorType;
use crate::device::Recorder;
use crate::named_sharding::NamedSharding;
use crate::{Result, Tensor};

/// A kernel a program can hold as a node: a pure description (shapes, constants), lowered onto a
/// device's buffers once at compile time.
pub trait Kernel: std::fmt::Debug + Send + Sync {
    /// What the kernel is, for node names and trace events (`"matmul"`, `"router"`).
    fn kind(&self) -> &'static str;
    /// The outputs' types for these inputs, or a shape error naming what is wrong.
    fn outputs(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>>;
    /// `(output, input)` pairs: the output is the input's buffer, updated in place (no new
    /// buffer). The input's value must not be read after the node.
    fn in_place(&self) -> Vec<(usize, usize)> {
        Vec::new()
    }
    /// Records the kernel for these buffers (shaped as [`Self::outputs`] said) into `rec`, once.
    fn prepare(&self, inputs: &[Tensor], outputs: &[Tensor], rec: &mut Prepared) -> Result<()>;
    /// How the outputs (of `outputs` types) lie over the gang given the inputs' layouts, or why
    /// running shard by shard would not compute the kernel for these layouts. The default is the
    /// rule of kernels that work row by row ([`sharding_rules::rows`]).
    fn shardings(&self, inputs: &[NamedSharding], outputs: &[TensorType]) -> Rule {
        sharding_rules::rows(inputs, outputs)
    }
    /// Whether the kernel runs transposed matmuls (reported by the benches: they are slower).
    fn transposed(&self) -> bool {
        false
    }
    /// The computations one shard of the node stands for: 1, or each link of a fused chain.
    fn computations(&self) -> usize {
        1
    }
}

#[derive(Debug)]
enum Step {
    Dispatch {
        label: String,
        pipeline: wgpu::ComputePipeline,
        bind_group: wgpu::BindGroup,
        grid: [u32; 3],
        /// What the bind group points at (uniforms made at prepare time included), kept alive.
        _buffers: Vec<wgpu::Buffer>,
    },
    Clear {
        buffer: wgpu::Buffer,
        offset: u64,
        size: Option<u64>,
    },
    Copy {
        src: wgpu::Buffer,
        src_offset: u64,
        dst: wgpu::Buffer,
        dst_offset: u64,
        size: u64,
    },
}

/// Commands recorded once and replayed into every run's encoder: what compiled programs keep.
#[derive(Debug, Default)]
pub struct Prepared {
    steps: Vec<Step>,
}

impl Prepared {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// Dispatches recorded.
    pub fn dispatches(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| matches!(s, Step::Dispatch { .. }))
            .count()
    }

    /// Replays the commands into `encoder`; with `timestamps`, the first dispatch writes the begin
    /// time at `timestamps.1` and the last the end time at `timestamps.1 + 1`. With no dispatch,
    /// one empty pass writes both.
    pub fn encode(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        timestamps: Option<(&wgpu::QuerySet, u32)>,
    ) {
        let dispatches = self.dispatches();
        if dispatches == 0
            && let Some((queries, at)) = timestamps
        {
            crate::device::timestamp_pass(encoder, queries, Some(at), Some(at + 1));
        }
        let mut k = 0;
        for step in &self.steps {
            match step {
                Step::Dispatch {
                    label,
                    pipeline,
                    bind_group,
                    grid,
                    ..
                } => {
                    // The first dispatch writes the begin time, the last the end time.
                    let times = timestamps.map(|(q, at)| {
                        (
                            q,
                            (k == 0).then_some(at),
                            (k + 1 == dispatches).then_some(at + 1),
                        )
                    });
                    crate::device::encode_pass(encoder, label, pipeline, bind_group, *grid, times);
                    k += 1;
                }
                Step::Clear {
                    buffer,
                    offset,
                    size,
                } => encoder.clear_buffer(buffer, *offset, *size),
                Step::Copy {
                    src,
                    src_offset,
                    dst,
                    dst_offset,
                    size,
                } => encoder.copy_buffer_to_buffer(src, *src_offset, dst, *dst_offset, *size),
            }
        }
    }
}

impl Recorder for Prepared {
    fn dispatch(
        &mut self,
        label: &str,
        pipeline: &wgpu::ComputePipeline,
        bind_group: wgpu::BindGroup,
        buffers: &[(u32, &wgpu::Buffer)],
        grid: [u32; 3],
    ) {
        self.steps.push(Step::Dispatch {
            label: label.to_string(),
            pipeline: pipeline.clone(),
            bind_group,
            grid,
            _buffers: buffers.iter().map(|(_, b)| (*b).clone()).collect(),
        });
    }

    fn clear_buffer(&mut self, buffer: &wgpu::Buffer, offset: u64, size: Option<u64>) {
        self.steps.push(Step::Clear {
            buffer: buffer.clone(),
            offset,
            size,
        });
    }

    fn copy_buffer_to_buffer(
        &mut self,
        src: &wgpu::Buffer,
        src_offset: u64,
        dst: &wgpu::Buffer,
        dst_offset: u64,
        size: u64,
    ) {
        self.steps.push(Step::Copy {
            src: src.clone(),
            src_offset,
            dst: dst.clone(),
            dst_offset,
            size,
        });
    }
}
