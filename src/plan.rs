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
//! - 4 all-to-alls per MoE block (there and back, forward and backward), each moving the kept
//!   rows of an even routing (`T·K/E` choices an expert, up to its capacity: the exchange is
//!   ragged), and one all-reduce of the replicated gradients, each costed as collective libraries run them ([`all_to_all`],
//!   [`all_reduce`]): every algorithm's α–β cost over the host's link and the network, and the
//!   cheaper one taken, as MPI libraries choose by message size;
//! - of that communication, the share the measured trace found exposed (a device idle, waiting)
//!   stays exposed; the rest hides behind compute, up to the compute's time (the excess is
//!   exposed too); the exposed all-to-all share is the all-to-alls' part of the exposed time.
//!
//! **Collectives** over `N = H·G` devices (`H` hosts of `G`), `α` a message's latency, `β_i`
//! and `β_e` a device's bandwidth within its host and off it:
//! - all-to-all of `b` bytes a device, `c = b / N` to each peer:
//!   - *pairwise exchange*: `N − 1` rounds of one message each; the rounds to the host's devices
//!     and those to other hosts use different links and go at once:
//!     `max((G − 1)(α + c/β_i), (N − G)(α + c/β_e))`;
//!   - *Bruck*: `⌈log₂ N⌉` steps; step `k` sends the `n_k` chunks whose index has bit `k` set
//!     (about half) to the device `2^k` along, over the network once there are several hosts:
//!     `Σ_k (α + n_k·c/β)`. Fewer messages, more bytes: it wins for small chunks.
//! - all-reduce of `b` bytes, hierarchical as NCCL runs it: a ring reduce-scatter and all-gather
//!   within each host, `2(G − 1)(α + b/(G·β_i))`, then between hosts on each device's `b/G`
//!   shard (every device its own network link):
//!   - *ring*: `2(H − 1)(α + b/(G·H·β_e))`;
//!   - *tree* (binary, reduce then broadcast): `2⌈log₂ H⌉(α + b/(G·β_e))`;
//!   - on one host the two are a ring and a binary tree over its `G` devices.
//!
//! The measured link is fitted from exchanges of several message sizes ([`fit_link`]:
//! `time = α + bytes/β` by least squares on the relative error), not taken from one median.
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

    /// A message's latency (s) and the bandwidths within a host and off it (bytes/s).
    fn alpha_beta(&self) -> (f64, f64, f64) {
        (
            self.latency_us * 1e-6,
            self.intra_gbs * 1e9,
            self.inter_gbs * 1e9,
        )
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

/// How a collective runs: the algorithms [`all_to_all`] and [`all_reduce`] choose between.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    /// All-to-all: one message to each peer in turn.
    Pairwise,
    /// All-to-all: `⌈log₂ N⌉` steps of about half the chunks each.
    Bruck,
    /// All-reduce: rings within hosts and between them.
    Ring,
    /// All-reduce: rings within hosts, a binary tree between them.
    Tree,
}

impl Algorithm {
    pub fn name(self) -> &'static str {
        match self {
            Self::Pairwise => "pairwise",
            Self::Bruck => "Bruck",
            Self::Ring => "ring",
            Self::Tree => "tree",
        }
    }
}

/// One collective's cost by each algorithm, and the one taken (the cheaper; the first on a tie).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Collective {
    pub chosen: Algorithm,
    pub seconds: f64,
    /// The other algorithm and what it would cost.
    pub other: Algorithm,
    pub other_seconds: f64,
}

impl Collective {
    fn cheaper(a: (Algorithm, f64), b: (Algorithm, f64)) -> Self {
        let (chosen, other) = if b.1 < a.1 { (b, a) } else { (a, b) };
        Self {
            chosen: chosen.0,
            seconds: chosen.1,
            other: other.0,
            other_seconds: other.1,
        }
    }
}

/// `⌈log₂ n⌉`, 0 for `n ≤ 1`.
fn log2_ceil(n: usize) -> u32 {
    n.next_power_of_two().trailing_zeros()
}

/// An all-to-all in which each device sends `bytes` in all (an equal chunk to every device,
/// itself included) over `fabric`: pairwise exchange or Bruck, whichever costs less (see the
/// module docs).
pub fn all_to_all(bytes: f64, fabric: &Fabric) -> Result<Collective> {
    fabric.check()?;
    let (n, g) = (fabric.devices(), fabric.devices_per_host);
    let (alpha, intra, inter) = fabric.alpha_beta();
    let chunk = bytes / n as f64;
    let pairwise =
        ((g - 1) as f64 * (alpha + chunk / intra)).max((n - g) as f64 * (alpha + chunk / inter));
    // A step's peer is 2^k along: on another host for some device once there are several.
    let link = if fabric.hosts > 1 { inter } else { intra };
    let bruck = (0..log2_ceil(n))
        .map(|k| {
            let sent = (0..n).filter(|j| j & (1 << k) != 0).count();
            alpha + sent as f64 * chunk / link
        })
        .sum::<f64>();
    Ok(Collective::cheaper(
        (Algorithm::Pairwise, pairwise),
        (Algorithm::Bruck, bruck),
    ))
}

/// An all-reduce of `bytes` on every device over `fabric`: hierarchical, with a ring or a tree
/// between hosts, whichever costs less (see the module docs).
pub fn all_reduce(bytes: f64, fabric: &Fabric) -> Result<Collective> {
    fabric.check()?;
    let (h, g) = (fabric.hosts, fabric.devices_per_host);
    let (alpha, intra, inter) = fabric.alpha_beta();
    let within = 2.0 * (g - 1) as f64 * (alpha + bytes / (g as f64 * intra));
    let (ring, tree) = if h == 1 {
        (
            within,
            2.0 * f64::from(log2_ceil(g)) * (alpha + bytes / intra),
        )
    } else {
        let shard = bytes / g as f64;
        (
            within + 2.0 * (h - 1) as f64 * (alpha + shard / (h as f64 * inter)),
            within + 2.0 * f64::from(log2_ceil(h)) * (alpha + shard / inter),
        )
    };
    Ok(Collective::cheaper(
        (Algorithm::Ring, ring),
        (Algorithm::Tree, tree),
    ))
}

/// A link's latency and bandwidth fitted to exchanges of several sizes: `(bytes, seconds)`
/// pairs, `seconds = α + bytes / β` by least squares on the relative error (each point weighted
/// by `1 / seconds²`), so that the small messages, which fix the latency, count as much as the
/// large ones, which fix the bandwidth; plain least squares let a 4 MiB exchange's milliseconds
/// swamp the microseconds of 1 KiB. `(α in µs, β in GB/s)`; `None` with fewer than two sizes or
/// where time does not grow with size (no bandwidth to fit). A negative intercept is taken as
/// no latency.
pub fn fit_link(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    if points.len() < 2
        || points
            .iter()
            .any(|p| p.1.is_nan() || p.1 <= 0.0 || !p.0.is_finite())
    {
        return None;
    }
    let weight = |p: &(f64, f64)| 1.0 / (p.1 * p.1);
    let total: f64 = points.iter().map(weight).sum();
    let mean_x = points.iter().map(|p| weight(p) * p.0).sum::<f64>() / total;
    let mean_y = points.iter().map(|p| weight(p) * p.1).sum::<f64>() / total;
    let sxx: f64 = points
        .iter()
        .map(|p| weight(p) * (p.0 - mean_x).powi(2))
        .sum();
    let sxy: f64 = points
        .iter()
        .map(|p| weight(p) * (p.0 - mean_x) * (p.1 - mean_y))
        .sum();
    if sxx <= 0.0 || sxy <= 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    let intercept = (mean_y - slope * mean_x).max(0.0);
    Some((intercept * 1e6, 1.0 / slope / 1e9))
}

/// What the MoE step would take at scale.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MoePrediction {
    pub devices: usize,
    pub compute_s: f64,
    /// Bytes one device sends in one all-to-all, and how much of it leaves its host.
    pub all_to_all_bytes: u64,
    pub off_host_fraction: f64,
    /// One all-to-all and the all-reduce, by the algorithm each takes.
    pub all_to_all: Collective,
    pub all_reduce: Collective,
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
    // Capacity per expert for one device's routing group, as the router sizes it; the exchange
    // moves only the kept rows, here of an even routing (each expert gets T·K/E choices).
    let share = step.tokens_per_device as f64 * step.top_k as f64 / experts as f64;
    let capacity = (share * f64::from(step.capacity_factor)).ceil();
    let kept = share.min(capacity);
    let all_to_all_bytes = (experts as f64 * kept).round() as u64 * step.model as u64 * 4;
    let off_host = (n - fabric.devices_per_host) as f64;
    let a2a = all_to_all(all_to_all_bytes as f64, fabric)?;
    let all_to_all_s = 4.0 * step.blocks as f64 * a2a.seconds;
    let reduce = all_reduce(step.dense_params as f64 * 4.0, fabric)?;
    let all_reduce_s = reduce.seconds;
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
        all_to_all: a2a,
        all_reduce: reduce,
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
        // 2 hosts × 2: each all-to-all sends 4 chunks of E·kept·d·4 / 4 bytes, 1 to the host's
        // other device and 2 off host (pairwise: 1 round on each link, 2 on the network);
        // Bruck takes 2 steps of 2 chunks each over the network.
        let two = Fabric {
            hosts: 2,
            devices_per_host: 2,
            ..one
        };
        let p = moe(&step(), &two).unwrap();
        // An even share of 8 choices per expert, under its capacity of 10: all kept.
        let cap = (32.0_f64 * 2.0 / 8.0 * 1.25).ceil();
        let bytes = 8.0 * cap.min(8.0) * 64.0 * 4.0;
        assert_eq!(p.all_to_all_bytes, bytes as u64);
        let chunk = bytes / 4.0;
        let pairwise = (5e-6 + chunk / 900e9).max(2.0 * (5e-6 + chunk / 50e9));
        let bruck = 2.0 * (5e-6 + 2.0 * chunk / 50e9);
        assert_eq!(p.all_to_all.chosen, Algorithm::Pairwise);
        assert!((p.all_to_all.seconds - pairwise).abs() < 1e-15);
        assert!((p.all_to_all.other_seconds - bruck).abs() < 1e-15);
        assert!((p.all_to_all_s - 4.0 * pairwise).abs() < 1e-15);
        // The all-reduce of 160,000 bytes: a ring within each host (2 devices), then a ring or
        // a tree of 2 hosts on each device's 80,000-byte shard.
        let within = 2.0 * (5e-6 + 160_000.0 / (2.0 * 900e9));
        let ring = within + 2.0 * (5e-6 + 80_000.0 / (2.0 * 50e9));
        let tree = within + 2.0 * (5e-6 + 80_000.0 / 50e9);
        assert_eq!(p.all_reduce.chosen, Algorithm::Ring);
        assert!((p.all_reduce_s - ring).abs() < 1e-15);
        assert!((p.all_reduce.other_seconds - tree).abs() < 1e-15);
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
    fn small_collectives_take_the_few_message_algorithms_and_large_ones_the_bandwidth_ones() {
        let fabric = Fabric {
            hosts: 128,
            devices_per_host: 8,
            intra_gbs: 900.0,
            inter_gbs: 50.0,
            latency_us: 5.0,
        };
        // 512 bytes to each of 1023 peers: pairwise pays 1016 latencies on the network, Bruck
        // 10 steps of 512 chunks.
        let small = all_to_all(512.0 * 1024.0, &fabric).unwrap();
        assert_eq!(small.chosen, Algorithm::Bruck);
        let bruck = 10.0 * (5e-6 + 512.0 * 512.0 / 50e9);
        assert!((small.seconds - bruck).abs() < 1e-12, "{small:?}");
        assert!((small.other_seconds - 1016.0 * (5e-6 + 512.0 / 50e9)).abs() < 1e-12);
        let large = all_to_all(64e6 * 1024.0, &fabric).unwrap();
        assert_eq!(large.chosen, Algorithm::Pairwise);
        // 160 KB of gradients: a tree between the 128 hosts (7 levels, twice); 4 GB: rings.
        let grads = all_reduce(160e3, &fabric).unwrap();
        assert_eq!(grads.chosen, Algorithm::Tree);
        let within = 14.0 * (5e-6 + 160e3 / 8.0 / 900e9);
        let tree = within + 14.0 * (5e-6 + 20e3 / 50e9);
        assert!((grads.seconds - tree).abs() < 1e-12, "{grads:?}");
        assert_eq!(all_reduce(4e9, &fabric).unwrap().chosen, Algorithm::Ring);
        // One host: a ring or a binary tree over its devices; one device: nothing.
        let host = Fabric { hosts: 1, ..fabric };
        let r = all_reduce(80e6, &host).unwrap();
        assert_eq!(r.chosen, Algorithm::Ring);
        assert!((r.seconds - 14.0 * (5e-6 + 10e6 / 900e9)).abs() < 1e-12);
        assert!((r.other_seconds - 6.0 * (5e-6 + 80e6 / 900e9)).abs() < 1e-12);
        assert_eq!(all_reduce(8e6, &host).unwrap().chosen, Algorithm::Tree);
        let alone = Fabric {
            devices_per_host: 1,
            ..host
        };
        assert_eq!(all_reduce(8e6, &alone).unwrap().seconds, 0.0);
        assert_eq!(all_to_all(8e6, &alone).unwrap().seconds, 0.0);
    }

    #[test]
    fn a_link_is_fitted_by_least_squares() {
        // 10 µs and 2 GB/s, exactly, then with noise either way.
        let exact: Vec<(f64, f64)> = [1e3, 2e4, 1.6e5, 4e6]
            .iter()
            .map(|&b| (b, 10e-6 + b / 2e9))
            .collect();
        let (alpha, gbs) = fit_link(&exact).unwrap();
        assert!((alpha - 10.0).abs() < 1e-6 && (gbs - 2.0).abs() < 1e-9);
        let noisy: Vec<(f64, f64)> = exact
            .iter()
            .enumerate()
            .map(|(i, &(b, t))| (b, t * if i % 2 == 0 { 1.05 } else { 0.95 }))
            .collect();
        let (alpha, gbs) = fit_link(&noisy).unwrap();
        assert!(
            (alpha - 10.0).abs() < 5.0 && (gbs - 2.0).abs() < 0.2,
            "{alpha} {gbs}"
        );
        assert_eq!(fit_link(&exact[..1]), None);
        assert_eq!(fit_link(&[(1e3, 2e-5), (1e6, 1e-5)]), None);
        // Time that barely grows: a latency, never a negative one.
        let (alpha, _) = fit_link(&[(0.0, 1e-6), (1e6, 1e-3)]).unwrap();
        assert!(alpha >= 0.0);
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
