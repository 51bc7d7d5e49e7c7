//! Mapping GPU timestamps onto the host clock.
//!
//! One calibration per device, when the device first serves a run timed on the GPU: an empty compute pass writes a timestamp
//! while the host notes the time just before submitting and just after the work is done; the GPU
//! time is taken to be the midpoint. Of three tries, the one with the shortest round trip wins, so
//! the mapping is good to about half that round trip (tens of µs on the software adapters). Drift
//! over a run is not corrected.

use crate::Device;
use crate::trace::Tracer;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy)]
pub(crate) struct GpuClock {
    anchor: Instant,
    anchor_gpu_ns: f64,
    /// Nanoseconds per timestamp tick.
    period: f64,
}

impl GpuClock {
    /// `None` when the device has no timestamp queries (or calibration failed): use host timing.
    pub fn calibrate(device: &Device) -> Option<Self> {
        let queries = device.timestamp_queries("clock calibration", 2)?;
        let resolve =
            device.query_resolve_buffer("clock calibration", wgpu::QUERY_RESOLVE_BUFFER_ALIGNMENT);
        let period = f64::from(device.queue().get_timestamp_period());
        let mut best: Option<(Duration, Self)> = None;
        for _ in 0..3 {
            let mut encoder = device.encoder("clock calibration");
            crate::device::timestamp_pass(&mut encoder, &queries, Some(0), Some(1));
            encoder.resolve_query_set(&queries, 0..2, &resolve, 0);
            let t0 = Instant::now();
            device.submit(encoder);
            device.wait().ok()?;
            let t1 = Instant::now();
            let bytes = device.read_buffer(&resolve, 0, 16).ok()?;
            let ticks: [u64; 2] = bytemuck::pod_read_unaligned(&bytes);
            let clock = Self {
                anchor: t0 + (t1 - t0) / 2,
                anchor_gpu_ns: ticks[1] as f64 * period,
                period,
            };
            if ticks[1] > 0 && best.as_ref().is_none_or(|(rt, _)| t1 - t0 < *rt) {
                best = Some((t1 - t0, clock));
            }
        }
        best.map(|(_, c)| c)
    }

    /// The trace-clock time of a GPU timestamp.
    pub fn host_ns(&self, trace: &Tracer, ticks: u64) -> u64 {
        let gpu = ticks as f64 * self.period;
        let at = if gpu >= self.anchor_gpu_ns {
            self.anchor + Duration::from_nanos((gpu - self.anchor_gpu_ns) as u64)
        } else {
            self.anchor
                .checked_sub(Duration::from_nanos((self.anchor_gpu_ns - gpu) as u64))
                .unwrap_or(self.anchor)
        };
        trace.ns_at(at)
    }
}
