//! `gangway plan`: what a run at scale would look like, from costs measured here. The MoE step's
//! and the pipeline's cost models, fed with per-op costs from a `gangway bench` report (or given
//! by hand) and with link figures (the MPI exchange measured here, or datacenter figures the user
//! gives), predict a run over many hosts: the MoE step's time and how much of it the expert
//! all-to-alls leave exposed, and a pipeline's bubble with its transfers.
//!
//! Pure arithmetic on plain numbers; every assumption is a named field.
//!
//! **The MoE step** (weak scaling: each device keeps its tokens and its experts):
//! - compute per device: the measured one-device step time scaled to the device's tokens, divided
//!   by `speedup` (how much faster the target device computes than the measured one);
//! - each all-to-all (4 per MoE block: there and back, forward and backward) sends every other
//!   device an equal chunk of `E · capacity · d · 4` bytes: chunks to devices of the same host go
//!   over the host's link (NVLink), the rest over the device's network link, one message each
//!   with a fixed latency (`α (N − 1) + bytes / β`, the two links in parallel);
//! - the all-reduce of the replicated gradients is a ring over every device (`2 (N − 1)` steps of
//!   `bytes / N` each, bounded by the slower link it crosses);
//! - of that communication, the share the measured trace found exposed (a device idle, waiting)
//!   stays exposed; the rest hides behind compute, up to the compute's time (the excess is
//!   exposed too); the exposed all-to-all share is the all-to-alls' part of the exposed time.
//!
//! **The pipeline**: the simulator ([`crate::pipeline::simulate`]) with per-op costs and a
//! transfer cost between stages on different hosts.

use crate::pipeline::{Costs, Schedule, ScheduleKind, simulate};
use crate::{Error, Result};
use serde::Serialize;

/// Where the devices are and how they talk.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Fabric {
    pub hosts: usize,
    pub devices_per_host: usize,
    /// Each device's bandwidth to the other devices of its host, GB/s (NVLink: 900).
    pub intra_gbs: f64,
    /// Each device's bandwidth off its host, GB/s (a 400 Gb/s NIC per device: 50).
    pub inter_gbs: f64,
    /// Fixed cost of one message, µs.
    pub latency_us: f64,
}

impl Fabric {
    pub fn devices(&self) -> usize {
        self.hosts * self.devices_per_host
    }

    fn check(&self) -> Result<()> {
        let ok = self.hosts > 0
            && self.devices_per_host > 0
            && [self.intra_gbs, self.inter_gbs]
                .iter()
                .all(|b| *b > 0.0 && b.is_finite())
            && self.latency_us >= 0.0
            && self.latency_us.is_finite();
        if ok {
            Ok(())
        } else {
            Err(Error::InvalidArgument {
                what: "plan",
                reason: format!(
                    "a fabric needs hosts and devices per host of at least 1, positive \
                     bandwidths and a latency of at least 0, got {self:?}"
                ),
            })
        }
    }
}

/// The MoE step as measured, per device.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MoeStep {
    /// Seconds of a whole training step on one measured device, and its tokens.
    pub one_device_s: f64,
    pub one_device_tokens: usize,
    /// Tokens per device per step at scale.
    pub tokens_per_device: usize,
    pub model: usize,
    pub experts_per_device: usize,
    pub top_k: usize,
    pub capacity_factor: f32,
    pub blocks: usize,
    /// Replicated (all-reduced) parameters.
    pub dense_params: usize,
    /// Of the communication, the share the measured trace found exposed.
    pub exposed_fraction: f64,
    /// How many times faster than the measured device the target device computes.
    pub speedup: f64,
}

/// What the MoE step would take at scale.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MoePrediction {
    pub devices: usize,
    pub compute_s: f64,
    /// Bytes one device sends in one all-to-all, and how much of it leaves its host.
    pub all_to_all_bytes: u64,
    pub off_host_fraction: f64,
    /// Every all-to-all of a step, and the all-reduce.
    pub all_to_all_s: f64,
    pub all_reduce_s: f64,
    pub exposed_s: f64,
    pub step_s: f64,
    /// Of the step, the time the all-to-alls leave a device waiting.
    pub exposed_all_to_all_share: f64,
    pub tokens_per_s: f64,
}

/// The MoE step over `fabric` (see the module docs).
pub fn moe(step: &MoeStep, fabric: &Fabric) -> Result<MoePrediction> {
    fabric.check()?;
    let bad = |reason: String| Error::InvalidArgument {
        what: "plan",
        reason,
    };
    if !(step.one_device_s > 0.0 && step.speedup > 0.0 && step.one_device_tokens > 0) {
        return Err(bad(format!(
            "the measured step needs a positive time, tokens and speed-up: {step:?}"
        )));
    }
    if !(0.0..=1.0).contains(&step.exposed_fraction) {
        return Err(bad(format!(
            "the exposed fraction must lie in [0, 1], got {}",
            step.exposed_fraction
        )));
    }
    let n = fabric.devices();
    let experts = step.experts_per_device * n;
    let compute_s = step.one_device_s * step.tokens_per_device as f64
        / step.one_device_tokens as f64
        / step.speedup;
    // Capacity per expert for one device's routing group, as the router sizes it.
    let capacity = (step.tokens_per_device as f64 * step.top_k as f64 / experts as f64
        * f64::from(step.capacity_factor))
    .ceil() as u64;
    let all_to_all_bytes = experts as u64 * capacity * step.model as u64 * 4;
    let chunk = all_to_all_bytes as f64 / n as f64;
    let same_host = (fabric.devices_per_host - 1) as f64;
    let off_host = (n - fabric.devices_per_host) as f64;
    let (intra, inter) = (fabric.intra_gbs * 1e9, fabric.inter_gbs * 1e9);
    let alpha = fabric.latency_us * 1e-6;
    let one_all_to_all =
        alpha * (n - 1) as f64 + (chunk * same_host / intra).max(chunk * off_host / inter);
    let all_to_all_s = 4.0 * step.blocks as f64 * one_all_to_all;
    let grad_bytes = step.dense_params as f64 * 4.0;
    let slowest = if fabric.hosts > 1 { inter } else { intra };
    let all_reduce_s = if n > 1 {
        2.0 * (n - 1) as f64 * (alpha + grad_bytes / n as f64 / slowest)
    } else {
        0.0
    };
    // What the trace found exposed stays exposed; the rest hides behind compute, but no more of it
    // than there is compute to hide behind.
    let comm_s = all_to_all_s + all_reduce_s;
    let hidden_s = (comm_s * (1.0 - step.exposed_fraction)).min(compute_s);
    let exposed_s = comm_s - hidden_s;
    let exposed_all_to_all = if comm_s > 0.0 {
        exposed_s * all_to_all_s / comm_s
    } else {
        0.0
    };
    let step_s = compute_s + exposed_s;
    Ok(MoePrediction {
        devices: n,
        compute_s,
        all_to_all_bytes,
        off_host_fraction: off_host / (n - 1).max(1) as f64,
        all_to_all_s,
        all_reduce_s,
        exposed_s,
        step_s,
        exposed_all_to_all_share: exposed_all_to_all / step_s,
        tokens_per_s: (step.tokens_per_device * n) as f64 / step_s,
    })
}

/// A pipeline to predict: its schedule, per-op costs and what crosses between stages.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PipelineStep {
    pub schedule: ScheduleKind,
    pub stages: usize,
    pub microbatches: usize,
    pub chunks: usize,
    /// One microbatch through one stage's model share, µs.
    pub forward_us: f64,
    pub backward_us: f64,
    pub weight_grad_us: f64,
    /// A microbatch's activation at a stage boundary, bytes.
    pub activation_bytes: u64,
}

/// The bubble of a pipeline over `fabric`'s hosts (stages on consecutive hosts): simulated with
/// its transfers, and the textbook's (free transfers).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PipelinePrediction {
    pub makespan_s: f64,
    pub bubble: f64,
    /// `None` where the schedule has no closed form (ZB-V).
    pub textbook_bubble: Option<f64>,
    pub transfer_us: f64,
}

pub fn pipeline(step: &PipelineStep, fabric: &Fabric) -> Result<PipelinePrediction> {
    fabric.check()?;
    let schedule = Schedule::new(step.schedule, step.stages, step.microbatches, step.chunks)?;
    let ns = |us: f64| (us * 1e3).round().max(0.0) as u64;
    // Stages on different hosts talk over the network.
    let bytes_per_ns = if fabric.hosts > 1 {
        fabric.inter_gbs
    } else {
        fabric.intra_gbs
    };
    let costs = Costs {
        latency_ns: ns(fabric.latency_us),
        bytes_per_ns,
        activation_bytes: step.activation_bytes,
        ..Costs::stage_model(
            ns(step.forward_us),
            ns(step.backward_us),
            ns(step.weight_grad_us),
            step.schedule.passes(step.chunks),
        )
    };
    let sim = simulate(&schedule, &costs)?;
    Ok(PipelinePrediction {
        makespan_s: sim.makespan_ns as f64 * 1e-9,
        bubble: sim.bubble_fraction,
        textbook_bubble: crate::pipeline::bubble_formula(
            step.schedule,
            step.stages,
            step.microbatches,
            step.chunks,
        ),
        transfer_us: fabric.latency_us + step.activation_bytes as f64 / bytes_per_ns / 1e3,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn step() -> MoeStep {
        MoeStep {
            one_device_s: 0.1,
            one_device_tokens: 128,
            tokens_per_device: 32,
            model: 64,
            experts_per_device: 2,
            top_k: 2,
            capacity_factor: 1.25,
            blocks: 1,
            dense_params: 40_000,
            exposed_fraction: 0.5,
            speedup: 1.0,
        }
    }

    #[test]
    fn one_device_is_all_compute_and_links_add_by_hand() {
        let one = Fabric {
            hosts: 1,
            devices_per_host: 1,
            intra_gbs: 900.0,
            inter_gbs: 50.0,
            latency_us: 5.0,
        };
        let p = moe(&step(), &one).unwrap();
        assert_eq!(
            (p.all_to_all_s, p.all_reduce_s, p.exposed_s),
            (0.0, 0.0, 0.0)
        );
        assert!((p.compute_s - 0.025).abs() < 1e-12);
        // 2 hosts × 2: each all-to-all sends 4 chunks of E·cap·d·4 / 4 bytes: 1 to the host's
        // other device, 2 off host; 3 messages.
        let two = Fabric {
            hosts: 2,
            devices_per_host: 2,
            ..one
        };
        let p = moe(&step(), &two).unwrap();
        let cap = (32.0_f64 * 2.0 / 8.0 * 1.25).ceil();
        let bytes = 8.0 * cap * 64.0 * 4.0;
        assert_eq!(p.all_to_all_bytes, bytes as u64);
        let one_a2a = 3.0 * 5e-6 + (bytes / 4.0 / 900e9).max(2.0 * bytes / 4.0 / 50e9);
        assert!((p.all_to_all_s - 4.0 * one_a2a).abs() < 1e-15);
        let ring = 6.0 * (5e-6 + 160_000.0 / 4.0 / 50e9);
        assert!((p.all_reduce_s - ring).abs() < 1e-15);
        assert!((p.exposed_s - 0.5 * (p.all_to_all_s + p.all_reduce_s)).abs() < 1e-15);
        assert!((p.off_host_fraction - 2.0 / 3.0).abs() < 1e-12);
        assert!(p.exposed_all_to_all_share > 0.0 && p.exposed_all_to_all_share < 0.5);
        // Compute too short to hide behind: all but the compute's time is exposed.
        let fast = moe(
            &MoeStep {
                speedup: 1e6,
                ..step()
            },
            &two,
        )
        .unwrap();
        let comm = fast.all_to_all_s + fast.all_reduce_s;
        assert!((fast.exposed_s - (comm - fast.compute_s)).abs() < 1e-15);
        assert!(fast.step_s >= comm);
        // Nonsense is an error, not a number.
        assert!(
            moe(
                &MoeStep {
                    speedup: 0.0,
                    ..step()
                },
                &two
            )
            .is_err()
        );
        assert!(moe(&step(), &Fabric { hosts: 0, ..two }).is_err());
    }

    #[test]
    fn a_pipeline_over_hosts_pays_its_transfers() {
        let p = PipelineStep {
            schedule: ScheduleKind::OneFOneB,
            stages: 8,
            microbatches: 32,
            chunks: 1,
            forward_us: 100.0,
            backward_us: 100.0,
            weight_grad_us: 100.0,
            activation_bytes: 1 << 20,
        };
        let fabric = Fabric {
            hosts: 8,
            devices_per_host: 1,
            intra_gbs: 900.0,
            inter_gbs: 50.0,
            latency_us: 5.0,
        };
        let far = pipeline(&p, &fabric).unwrap();
        let near = pipeline(
            &p,
            &Fabric {
                latency_us: 0.0,
                inter_gbs: 1e9,
                ..fabric
            },
        )
        .unwrap();
        assert!(
            (near.bubble - near.textbook_bubble.unwrap()).abs() < 0.01,
            "{near:?}"
        );
        assert!(far.bubble > near.bubble && far.makespan_s > near.makespan_s);
        assert!((far.transfer_us - (5.0 + (1 << 20) as f64 / 50.0 / 1e3)).abs() < 1e-9);
    }
}
