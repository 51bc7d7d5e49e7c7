//! GPU time of recorded work from two timestamp queries: an empty pass writing one before the
//! work and one writing another after it. Adapters without timestamp queries get no timer, and
//! their benchmarks fall back to host wall time.

use super::harness::Timed;
use crate::device::timestamp_pass;
use crate::{Device, Result};

#[derive(Debug)]
pub struct GpuTimer {
    queries: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    /// Nanoseconds per tick.
    period: f64,
}

impl GpuTimer {
    /// `None` when `device` has no timestamp queries.
    pub fn new(device: &Device) -> Option<Self> {
        Some(Self {
            queries: device.timestamp_queries("bench timer", 2)?,
            resolve: device
                .query_resolve_buffer("bench timer", wgpu::QUERY_RESOLVE_BUFFER_ALIGNMENT),
            period: f64::from(device.queue().get_timestamp_period()),
        })
    }

    /// Records the start timestamp; record the work after this.
    pub fn begin(&self, encoder: &mut wgpu::CommandEncoder) {
        timestamp_pass(encoder, &self.queries, Some(0), None);
    }

    /// Records the end timestamp and resolves both; record nothing timed after this.
    pub fn end(&self, encoder: &mut wgpu::CommandEncoder) {
        timestamp_pass(encoder, &self.queries, None, Some(1));
        encoder.resolve_query_set(&self.queries, 0..2, &self.resolve, 0);
    }

    /// The seconds between the two timestamps of the last submitted (and finished) bracket.
    pub fn read(&self, device: &Device) -> Result<f64> {
        let bytes = device.read_buffer(&self.resolve, 0, 16)?;
        let [begin, end]: [u64; 2] = bytemuck::pod_read_unaligned(&bytes);
        Ok(end.saturating_sub(begin) as f64 * self.period * 1e-9)
    }
}

/// Records work with `record` and submits it, bracketed by `timer` when there is one.
pub fn submit_timed(
    device: &Device,
    timer: Option<&GpuTimer>,
    label: &str,
    record: impl FnOnce(&mut wgpu::CommandEncoder) -> Result<()>,
) -> Result<()> {
    let mut encoder = device.encoder(label);
    if let Some(t) = timer {
        t.begin(&mut encoder);
    }
    record(&mut encoder)?;
    if let Some(t) = timer {
        t.end(&mut encoder);
    }
    device.submit(encoder);
    Ok(())
}

/// Waits for the device; the GPU time of the last [`submit_timed`] when there is a timer.
pub fn wait_timed(device: &Device, timer: Option<&GpuTimer>) -> Result<Option<Timed>> {
    device.wait()?;
    timer.map(|t| t.read(device).map(Timed::gpu)).transpose()
}
