//! A cost model: every op gets a duration (each stage's scaled by its own factor in
//! [`simulate_uneven`], for stages of different costs), every transfer a latency and a bandwidth,
//! and the schedule is replayed to see where each device idles: one device per stage, or fewer
//! devices than stages in [`simulate_folded`]. The bubble it measures is the quantity the
//! textbook formulas predict, and what a real run's trace can be compared against.

use std::ops::Range;

use serde::Serialize;

use crate::trace::{Event, TrackKind};

use super::ascii;
use super::engine::{self, OpAt, Timing};
use super::fold::Fold;
use super::schedule::Schedule;
use crate::error::ScheduleError;

/// Durations of one op on one model chunk, and the link between two stages.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Costs {
    /// One forward of one microbatch through one model chunk.
    pub forward_ns: u64,
    /// One input-gradient backward. When the schedule does not split the backward, its B op
    /// costs `backward_ns + weight_grad_ns` ("W folded in").
    pub backward_ns: u64,
    /// One weight-gradient pass.
    pub weight_grad_ns: u64,
    /// Fixed cost of each transfer.
    pub latency_ns: u64,
    /// Link bandwidth; `f64::INFINITY` makes transfers cost only their latency.
    pub bytes_per_ns: f64,
    /// Size of one microbatch's activation at a stage boundary (its gradient is the same size).
    pub activation_bytes: u64,
    /// Each F and B chunk's own communication, such as an MoE layer's dispatch and combine
    /// all-to-all. An F or B that runs alone costs its compute plus this; in an F&B pair
    /// (DualPipe's overlapped forward and backward of two microbatches) one stream computes
    /// both while the other moves both chunks' data, so the pair costs
    /// `max(F + B, 2 · all_to_all_ns)`: each chunk's all-to-all hidden under the other's
    /// compute. With 0 a pair costs `F + B` (B without W, which follows the pair).
    pub all_to_all_ns: u64,
    /// Communication the stages *wait* for: a send holds its stage until the data has arrived
    /// (synchronous point-to-point). Off, sends run beside compute (overlapped) and only a
    /// receive whose data is late waits.
    pub blocking_sends: bool,
}

impl Costs {
    /// Compute costs only: transfers are free and instant, as the textbook formulas assume.
    pub fn compute_only(forward_ns: u64, backward_ns: u64, weight_grad_ns: u64) -> Costs {
        Costs {
            forward_ns,
            backward_ns,
            weight_grad_ns,
            latency_ns: 0,
            bytes_per_ns: f64::INFINITY,
            activation_bytes: 0,
            all_to_all_ns: 0,
            blocking_sends: false,
        }
    }

    /// Compute costs of a stage's *whole* model share, split into `chunks` chunk ops per
    /// microbatch (the schedule's [`Schedule::passes`]; `v` for interleaved) as Megatron's
    /// interleaved schedule splits it: each chunk op costs `1/v` of the whole, so a stage does
    /// the same work per microbatch whatever `v` is, and only the bubble changes. With
    /// `chunks == 1` (1F1B, DualPipe, ...) this is [`Costs::compute_only`].
    ///
    /// Each per-chunk cost is rounded *up* to a whole nanosecond (`ceil(x / v)`), so an uneven
    /// split never makes interleaving look cheaper than it is; the error is under one
    /// nanosecond per chunk op. `chunks == 0` is taken as 1. Transfers are free, as in
    /// [`Costs::compute_only`].
    pub fn stage_model(
        forward_ns: u64,
        backward_ns: u64,
        weight_grad_ns: u64,
        chunks: usize,
    ) -> Costs {
        Costs::compute_only(forward_ns, backward_ns, weight_grad_ns).per_chunk(chunks)
    }

    /// These costs of a stage's whole model share with the compute (F, B, W and the chunk's
    /// all-to-all) split into `chunks` chunk ops, rounded up as [`Costs::stage_model`] does; the
    /// link is kept (an activation between chunks is as large as between stages).
    pub fn per_chunk(&self, chunks: usize) -> Costs {
        let v = chunks.max(1) as u64;
        Costs {
            forward_ns: self.forward_ns.div_ceil(v),
            backward_ns: self.backward_ns.div_ceil(v),
            weight_grad_ns: self.weight_grad_ns.div_ceil(v),
            all_to_all_ns: self.all_to_all_ns.div_ceil(v),
            ..*self
        }
    }

    /// Time one activation or gradient takes from send to arrival.
    pub fn transfer_ns(&self) -> Result<u64, ScheduleError> {
        let bw = self.bytes_per_ns;
        if bw.is_nan() || bw <= 0.0 {
            return Err(ScheduleError::InvalidCosts {
                reason: format!("link bandwidth must be positive, got {bw} bytes/ns"),
            });
        }
        let wire = if self.activation_bytes == 0 {
            0
        } else {
            // Float-to-int casts saturate, so an absurdly slow link cannot wrap around.
            (self.activation_bytes as f64 / bw).ceil() as u64
        };
        Ok(self.latency_ns.saturating_add(wire))
    }
}

/// The outcome of replaying a schedule under a cost model.
#[derive(Debug, Clone, Serialize)]
pub struct Simulation {
    pub stages: usize,
    /// Devices the stages ran on: `stages` unless [`simulate_folded`] folded them.
    pub devices: usize,
    /// `device` is the stage's device (the stage itself unless folded). Compute ops on
    /// [`crate::trace::Lane::Compute`] as kernels marked with their
    /// [`Event::op`](crate::trace::Event::op) and named `F`, `B`, `W` for people (with `.c<k>`
    /// when the device holds more than one model chunk: the schedule's chunk `k` for one stage
    /// per device); sends between devices on the sender's transfer lane named `act` or `grad` (a
    /// hand-off within a device has no event). Each send's flow (Out) points at the compute op
    /// that consumes it (In).
    pub events: Vec<Event>,
    pub makespan_ns: u64,
    /// Per device, time spent computing.
    pub busy_ns: Vec<u64>,
    /// Per device, the most microbatch-chunks whose activations its stages hold at once (for
    /// one stage per device, [`super::Validation::peak_activations`]).
    pub peak_activations: Vec<usize>,
    /// Idle compute time over `devices × makespan`.
    pub bubble_fraction: f64,
    /// The makespan with no bubble at all: the busiest device's work alone, `m · passes ·
    /// (F + B + W)` (`passes` chunk ops per microbatch, [`Schedule::passes`]) per stage it holds,
    /// communication not counted.
    pub ideal_ns: u64,
    /// Every op of the schedule by simulated start time, ties in causal order. Issuing ops in
    /// this order from one host thread never waits on an op not yet issued.
    pub order: Vec<OpAt>,
}

impl Simulation {
    /// Bubble relative to useful work, `(makespan − ideal) / ideal`: the form in which Megatron
    /// states the interleaved bubble, `(p − 1) / (v · m)`.
    pub fn bubble_over_ideal(&self) -> f64 {
        if self.ideal_ns == 0 {
            return 0.0;
        }
        (self.makespan_ns as f64 - self.ideal_ns as f64) / self.ideal_ns as f64
    }

    /// Per device, time not spent computing.
    pub fn idle_ns(&self) -> Vec<u64> {
        self.busy_ns
            .iter()
            .map(|b| self.makespan_ns.saturating_sub(*b))
            .collect()
    }

    /// The ASCII timeline of the whole run in at most `width` columns, a row per device; see
    /// [`ascii::timeline`].
    pub fn timeline(&self, width: usize) -> String {
        let window: Range<u64> = 0..self.makespan_ns;
        let name = TrackKind::of_pipeline(self.devices < self.stages).word();
        ascii::timeline_named(&self.events, self.devices, name, window, width)
    }
}

/// Replays `s` under `c`. A stage runs its ops in order; an op starts once the stage is free and
/// its input has arrived. A send starts when its tensor is ready and its link (one per ordered
/// stage pair) is free, and costs `latency + bytes / bandwidth` on the sender's transfer lane
/// without holding up its compute. Fails exactly when [`super::validate`] fails.
pub fn simulate(s: &Schedule, c: &Costs) -> Result<Simulation, ScheduleError> {
    simulate_uneven(s, c, &[])
}

/// [`simulate`] with stages of different speeds: every op of stage `i` takes `stage_scale[i]`
/// times its cost (a stage holding more layers, or a slower device), one factor per stage, or
/// none for even stages. The ideal time is then the slowest stage's work alone
/// (`max_i stage_scale[i]` times an even stage's), which no schedule can beat.
pub fn simulate_uneven(
    s: &Schedule,
    c: &Costs,
    stage_scale: &[f64],
) -> Result<Simulation, ScheduleError> {
    simulate_folded(s, c, stage_scale, Fold::OnePerStage)
}

/// [`simulate_uneven`] with the stages folded onto fewer devices ([`Fold`]): a device runs one
/// op at a time, taking whichever of its stages' next ops can start first, and a hand-off
/// between two of its stages costs nothing. Busy time, idle time, peak activations and the
/// bubble are per device; the ideal time is the busiest device's work.
pub fn simulate_folded(
    s: &Schedule,
    c: &Costs,
    stage_scale: &[f64],
    fold: Fold,
) -> Result<Simulation, ScheduleError> {
    let devices = fold.devices_of(s.stages)?;
    if !stage_scale.is_empty() && stage_scale.len() != s.stages {
        return Err(ScheduleError::InvalidCosts {
            reason: format!(
                "{} stage cost factors for {} stages",
                stage_scale.len(),
                s.stages
            ),
        });
    }
    if let Some(k) = stage_scale.iter().find(|k| !(k.is_finite() && **k > 0.0)) {
        return Err(ScheduleError::InvalidCosts {
            reason: format!("a stage cost factor must be positive and finite, got {k}"),
        });
    }
    let w = if s.split_backward {
        0
    } else {
        c.weight_grad_ns
    };
    let timing = Timing {
        forward: c.forward_ns,
        backward: c.backward_ns.saturating_add(w),
        weight_grad: c.weight_grad_ns,
        transfer: c.transfer_ns()?,
        all_to_all: c.all_to_all_ns,
        blocking_sends: c.blocking_sends,
    };
    let folded = if fold.shares(s.stages) {
        &devices[..]
    } else {
        &[]
    };
    let run = engine::execute(s, timing, stage_scale, folded, true)?;
    let makespan = run.makespan;
    let idle: u64 = run.busy.iter().map(|b| makespan.saturating_sub(*b)).sum();
    let d = run.busy.len();
    let capacity = d as f64 * makespan as f64;
    let per_unit = c
        .forward_ns
        .saturating_add(c.backward_ns)
        .saturating_add(c.weight_grad_ns);
    let even = ((s.microbatches * s.passes()) as u64).saturating_mul(per_unit);
    // Each device's work in even stages' worth, the busiest one bounding the run.
    let mut load = vec![0.0f64; d];
    for (stage, &dev) in devices.iter().enumerate() {
        load[dev] += stage_scale.get(stage).copied().unwrap_or(1.0);
    }
    let busiest = load.into_iter().fold(0.0f64, f64::max);
    Ok(Simulation {
        stages: s.stages,
        devices: d,
        events: run.events,
        makespan_ns: makespan,
        busy_ns: run.busy,
        peak_activations: run.device_peak_activations,
        bubble_fraction: if makespan == 0 {
            0.0
        } else {
            idle as f64 / capacity
        },
        ideal_ns: if busiest == 1.0 {
            even
        } else {
            (even as f64 * busiest).round() as u64
        },
        order: run.order,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::{HashMap, HashSet};
    use std::time::Instant;

    use super::*;
    use crate::pipeline::{OpKind, ScheduleKind, bubble_formula, validate};
    use crate::trace::{FlowRole, Lane};

    fn sim(kind: ScheduleKind, p: usize, m: usize, v: usize, c: &Costs) -> Simulation {
        simulate(&Schedule::new(kind, p, m, v).unwrap(), c).unwrap()
    }

    fn total_idle(s: &Simulation) -> u64 {
        s.idle_ns().iter().sum()
    }

    /// Uneven stages: factors of 1 change nothing, scaling every stage by 2 doubles the
    /// makespan, a slow stage bounds the run from below by its own work (the ideal time), and
    /// GPipe's forwards finish as a flow shop's jobs do: the last forward on the last stage ends
    /// at `Σ f_s + (m − 1) · max f_s`.
    #[test]
    fn uneven_stages_follow_the_flow_shop() {
        let c = Costs::compute_only(10, 20, 10);
        for kind in [
            ScheduleKind::GPipe,
            ScheduleKind::OneFOneB,
            ScheduleKind::ZbH1,
        ] {
            let s = Schedule::new(kind, 4, 8, 1).unwrap();
            let even = simulate(&s, &c).unwrap();
            let ones = simulate_uneven(&s, &c, &[1.0; 4]).unwrap();
            assert_eq!(ones.makespan_ns, even.makespan_ns, "{kind}");
            assert_eq!(ones.events, even.events, "{kind}");
            let double = simulate_uneven(&s, &c, &[2.0; 4]).unwrap();
            assert_eq!(double.makespan_ns, 2 * even.makespan_ns, "{kind}");
            let slow = simulate_uneven(&s, &c, &[1.0, 3.0, 1.0, 1.0]).unwrap();
            assert_eq!(slow.ideal_ns, 3 * even.ideal_ns, "{kind}");
            assert!(slow.makespan_ns >= slow.ideal_ns, "{kind}");
            assert!(slow.makespan_ns > even.makespan_ns, "{kind}");
            assert_eq!(slow.busy_ns[1], 3 * even.busy_ns[1], "{kind}");
        }
        let s = Schedule::new(ScheduleKind::GPipe, 3, 5, 1).unwrap();
        let scale = [1.0, 4.0, 2.0];
        let sim = simulate_uneven(&s, &Costs::compute_only(10, 10, 0), &scale).unwrap();
        let last_forward = sim
            .events
            .iter()
            .filter(|e| e.device == 2 && e.name == "F")
            .map(|e| e.end_ns)
            .max()
            .unwrap();
        let f: Vec<u64> = scale.iter().map(|k| (10.0 * k) as u64).collect();
        assert_eq!(
            last_forward,
            f.iter().sum::<u64>() + 4 * f.iter().max().unwrap()
        );
        for bad in [&[1.0, 2.0][..], &[1.0, 0.0, 1.0], &[1.0, f64::NAN, 1.0]] {
            assert!(matches!(
                simulate_uneven(&s, &Costs::compute_only(1, 1, 0), bad),
                Err(ScheduleError::InvalidCosts { .. })
            ));
        }
    }

    /// GPipe and 1F1B: bubble fraction (p − 1)/(m + p − 1), exactly (compared in integers),
    /// for any F, B, W; it is the makespan (m + p − 1)(F + B + W).
    #[test]
    fn gpipe_and_1f1b_bubble_is_exact() {
        for kind in [ScheduleKind::GPipe, ScheduleKind::OneFOneB] {
            for p in 1..=8u64 {
                for m in 1..=16u64 {
                    for (f, b, w) in [(1, 1, 0), (2, 3, 1)] {
                        let s = sim(
                            kind,
                            p as usize,
                            m as usize,
                            1,
                            &Costs::compute_only(f, b, w),
                        );
                        assert_eq!(s.makespan_ns, (m + p - 1) * (f + b + w));
                        assert_eq!(total_idle(&s) * (m + p - 1), (p - 1) * p * s.makespan_ns);
                        let theory = bubble_formula(kind, p as usize, m as usize, 1).unwrap();
                        assert!(
                            (s.bubble_fraction - theory).abs() < 1e-12,
                            "{kind} p={p} m={m}"
                        );
                    }
                }
            }
        }
    }

    /// Interleaved: (makespan − ideal)/ideal = (p − 1)/(v·m) exactly: Megatron's order leaves
    /// (p − 1) chunk-op slots idle per stage whatever F and B are.
    #[test]
    fn interleaved_bubble_is_exact() {
        for p in 1..=6u64 {
            for m in (p..=4 * p).step_by(p as usize) {
                for v in 2..=4u64 {
                    for (f, b) in [(1, 1), (1, 2), (3, 2)] {
                        let c = Costs::compute_only(f, b, 0);
                        let s = sim(
                            ScheduleKind::Interleaved,
                            p as usize,
                            m as usize,
                            v as usize,
                            &c,
                        );
                        assert_eq!(s.ideal_ns, m * v * (f + b));
                        assert_eq!((s.makespan_ns - s.ideal_ns) * v * m, (p - 1) * s.ideal_ns);
                        let x = (p - 1) as f64 / (v * m) as f64;
                        assert!((s.bubble_over_ideal() - x).abs() < 1e-12);
                        let theory = bubble_formula(
                            ScheduleKind::Interleaved,
                            p as usize,
                            m as usize,
                            v as usize,
                        )
                        .unwrap();
                        assert!((s.bubble_fraction - theory).abs() < 1e-12);
                    }
                }
            }
        }
    }

    /// ZB-H1 with F = B = W idles (p − 1)·F per stage against 1F1B's 3(p − 1)·F: exactly a third.
    /// In general (m ≥ p) its idle time per stage is (p − 1)·max(F, B, F + B − W), the paper's
    /// (p − 1)(F + B − W) whenever W ≤ min(F, B); 1F1B's is (p − 1)(F + B + W).
    #[test]
    fn zb_h1_bubble_is_a_third_of_1f1b() {
        for p in 1..=8u64 {
            for m in p..=3 * p {
                let (pu, mu) = (p as usize, m as usize);
                let c = Costs::compute_only(10, 10, 10);
                let zb = sim(ScheduleKind::ZbH1, pu, mu, 1, &c);
                let one = sim(ScheduleKind::OneFOneB, pu, mu, 1, &c);
                assert_eq!(zb.idle_ns(), vec![(p - 1) * 10; pu]);
                assert_eq!(one.idle_ns(), vec![(p - 1) * 30; pu]);
                assert_eq!(3 * total_idle(&zb), total_idle(&one));
                let theory = bubble_formula(ScheduleKind::ZbH1, pu, mu, 1).unwrap();
                assert!((zb.bubble_fraction - theory).abs() < 1e-12);
                for (f, b, w) in [(2, 3, 1), (1, 2, 2), (3, 1, 2), (1, 1, 3), (2, 2, 0)] {
                    let zb = sim(ScheduleKind::ZbH1, pu, mu, 1, &Costs::compute_only(f, b, w));
                    let idle = (p - 1) * f.max(b).max((f + b).saturating_sub(w));
                    assert_eq!(
                        zb.idle_ns(),
                        vec![idle; pu],
                        "p={p} m={m} F={f} B={b} W={w}"
                    );
                }
            }
        }
    }

    #[test]
    fn link_latency_and_bandwidth_grow_the_bubble() {
        let free = sim(
            ScheduleKind::OneFOneB,
            4,
            8,
            1,
            &Costs::compute_only(100, 100, 0),
        );
        let mut c = Costs::compute_only(100, 100, 0);
        c.latency_ns = 10;
        let slow = sim(ScheduleKind::OneFOneB, 4, 8, 1, &c);
        assert!(slow.bubble_fraction > free.bubble_fraction);
        assert!(slow.makespan_ns > free.makespan_ns);
        c.activation_bytes = 1000;
        c.bytes_per_ns = 50.0;
        assert_eq!(c.transfer_ns().unwrap(), 30);
        let slower = sim(ScheduleKind::OneFOneB, 4, 8, 1, &c);
        assert!(slower.makespan_ns > slow.makespan_ns);
        c.bytes_per_ns = 0.0;
        assert!(matches!(
            simulate(&Schedule::new(ScheduleKind::GPipe, 2, 2, 1).unwrap(), &c),
            Err(ScheduleError::InvalidCosts { .. })
        ));
    }

    #[test]
    fn events_and_flows_line_up() {
        let mut c = Costs::compute_only(5, 7, 3);
        c.latency_ns = 2;
        for (kind, v) in [(ScheduleKind::Interleaved, 2), (ScheduleKind::ZbH1, 1)] {
            let s = Schedule::new(kind, 4, 8, v).unwrap();
            let r = simulate(&s, &c).unwrap();
            let compute = r.events.iter().filter(|e| e.lane == Lane::Compute).count();
            let per = if s.split_backward { 3 } else { 2 };
            assert_eq!(compute, per * 8 * 4 * v);
            let mut outs = HashMap::new();
            for e in r.events.iter().filter(|e| e.lane == Lane::Transfer) {
                let f = e.flow.unwrap();
                assert_eq!(f.role, FlowRole::Out);
                assert_eq!(e.end_ns - e.start_ns, 2);
                assert!(outs.insert(f.id, e).is_none());
            }
            let mut ins = HashSet::new();
            for e in r.events.iter().filter(|e| e.lane == Lane::Compute) {
                assert!(["F", "B", "W"].contains(&&e.name[..1]));
                if v > 1 {
                    assert!(e.name.contains(".c"), "{}", e.name);
                }
                if let Some(f) = e.flow {
                    assert_eq!(f.role, FlowRole::In);
                    let out = outs[&f.id];
                    assert_ne!(out.device, e.device);
                    assert_eq!(out.microbatch, e.microbatch);
                    assert!(out.end_ns <= e.start_ns);
                    assert!(ins.insert(f.id));
                }
            }
            assert_eq!(ins.len(), outs.len());
            let busy: u64 = r.busy_ns.iter().sum();
            assert_eq!(busy, r.ideal_ns * 4);
        }
    }

    /// The simulated trace opens cleanly in Perfetto: flows pair up and bind to slices.
    #[test]
    fn simulated_trace_passes_the_chrome_check() {
        for latency_ns in [0, 3] {
            let mut c = Costs::compute_only(5, 7, 3);
            c.latency_ns = latency_ns;
            for (kind, v) in [(ScheduleKind::Interleaved, 2), (ScheduleKind::ZbH1, 1)] {
                let r = sim(kind, 4, 8, v, &c);
                let json = crate::trace::chrome::to_json(&r.events, &[]);
                let summary = crate::trace::chrome::check(&json).unwrap();
                let transfers = r.events.iter().filter(|e| e.lane == Lane::Transfer).count();
                assert_eq!(summary.flow_pairs, transfers, "{kind} latency {latency_ns}");
            }
        }
    }

    /// A stage's model share split into v chunks costs 1/v per chunk op (rounded up), so
    /// interleaving keeps the work and shrinks the bubble: below 1F1B at the same share cost.
    #[test]
    fn stage_model_splits_the_share_into_chunks() {
        assert_eq!(
            Costs::stage_model(100, 200, 50, 1),
            Costs::compute_only(100, 200, 50)
        );
        assert_eq!(
            Costs::stage_model(100, 200, 50, 2),
            Costs::compute_only(50, 100, 25)
        );
        assert_eq!(
            Costs::stage_model(10, 10, 10, 3),
            Costs::compute_only(4, 4, 4)
        );
        assert_eq!(Costs::stage_model(7, 0, 1, 0), Costs::compute_only(7, 0, 1));
        let whole = Costs::compute_only(100, 100, 100);
        let one = sim(ScheduleKind::OneFOneB, 4, 8, 1, &whole);
        let inter = sim(
            ScheduleKind::Interleaved,
            4,
            8,
            2,
            &Costs::stage_model(100, 100, 100, 2),
        );
        assert_eq!(one.makespan_ns, 3300);
        assert_eq!(inter.ideal_ns, one.ideal_ns);
        assert_eq!(inter.makespan_ns, 2850);
    }

    /// Issuing ops in `order` from one thread never meets a receive before its send.
    #[test]
    fn order_is_an_issue_order() {
        let s = Schedule::new(ScheduleKind::Interleaved, 4, 8, 2).unwrap();
        let r = simulate(&s, &Costs::compute_only(0, 0, 0)).unwrap();
        assert_eq!(r.order.len(), s.op_count());
        let mut next = vec![0; s.stages];
        let mut sent = HashSet::new();
        for at in &r.order {
            assert_eq!(at.index, next[at.stage]);
            next[at.stage] += 1;
            let op = s.ops[at.stage][at.index];
            let vs = s.virtual_stage(at.stage, op.chunk);
            match op.kind {
                OpKind::SendActivation => assert!(sent.insert((0, op.microbatch, vs + 1))),
                OpKind::SendGradient => assert!(sent.insert((1, op.microbatch, vs - 1))),
                OpKind::RecvActivation => assert!(sent.contains(&(0, op.microbatch, vs))),
                OpKind::RecvGradient => assert!(sent.contains(&(1, op.microbatch, vs))),
                _ => {}
            }
        }
    }

    /// Every kind at p = 4 that takes m = 8, v = 2.
    fn kinds_at_p4() -> Vec<Schedule> {
        ScheduleKind::ALL
            .into_iter()
            .filter_map(|k| Schedule::new(k, 4, 8, k.chunks(2)).ok())
            .collect()
    }

    /// Folded onto fewer devices, a device runs one op at a time, each stage keeps its order,
    /// and on one device nothing ever waits: the makespan is all the work.
    #[test]
    fn folded_stages_share_their_devices() {
        let schedules = kinds_at_p4();
        assert!(schedules.len() >= 8);
        let mut c = Costs::compute_only(5, 7, 3);
        for s in &schedules {
            let kind = s.kind;
            let costs = c.per_chunk(s.passes());
            let alone = simulate(s, &costs).unwrap();
            // d = p folds nothing.
            for fold in [Fold::Blocks { devices: 4 }, Fold::RoundRobin { devices: 4 }] {
                let same = simulate_folded(s, &costs, &[], fold).unwrap();
                assert_eq!(same.events, alone.events, "{kind}");
            }
            for fold in [Fold::Blocks { devices: 1 }, Fold::RoundRobin { devices: 1 }] {
                let one = simulate_folded(s, &costs, &[], fold).unwrap();
                let work: u64 = alone.busy_ns.iter().sum();
                assert_eq!(one.devices, 1);
                assert_eq!(one.busy_ns, [work], "{kind}");
                assert_eq!(one.makespan_ns, work, "{kind} on one device never waits");
                assert_eq!(one.ideal_ns, one.makespan_ns, "{kind}");
                assert_eq!(one.bubble_fraction, 0.0, "{kind}");
                assert!(one.events.iter().all(|e| e.lane == Lane::Compute));
            }
            for latency_ns in [0, 4] {
                c.latency_ns = latency_ns;
                let costs = c.per_chunk(s.passes());
                for fold in [Fold::Blocks { devices: 2 }, Fold::RoundRobin { devices: 2 }] {
                    let r = simulate_folded(s, &costs, &[1.0, 2.0, 1.0, 1.0], fold).unwrap();
                    let of = fold.devices_of(4).unwrap();
                    assert_eq!(r.devices, 2);
                    assert_eq!(r.order.len(), s.op_count(), "{kind} {fold:?}");
                    // One op at a time per device.
                    for dev in 0..2 {
                        let mut spans: Vec<(u64, u64)> = r
                            .events
                            .iter()
                            .filter(|e| e.device == dev && e.lane == Lane::Compute)
                            .map(|e| (e.start_ns, e.end_ns))
                            .collect();
                        spans.sort_unstable();
                        assert!(
                            spans.windows(2).all(|w| w[0].1 <= w[1].0),
                            "{kind} {fold:?}"
                        );
                        let busy: u64 = spans.iter().map(|(a, b)| b - a).sum();
                        assert_eq!(busy, r.busy_ns[dev]);
                    }
                    // Each stage in its own order.
                    let mut next = [0; 4];
                    for at in &r.order {
                        assert_eq!(at.index, next[at.stage], "{kind} {fold:?}");
                        next[at.stage] += 1;
                    }
                    // Transfers only between devices, and every flow still pairs up.
                    let outs = r.events.iter().filter(|e| e.lane == Lane::Transfer).count();
                    let ins = r
                        .events
                        .iter()
                        .filter(|e| e.flow.is_some_and(|f| f.role == FlowRole::In))
                        .count();
                    assert_eq!(outs, ins, "{kind} {fold:?}");
                    let crossing = (0..4)
                        .filter(|&st| st + 1 < 4 && of[st] != of[st + 1])
                        .count();
                    if crossing == 0 {
                        assert_eq!(outs, 0);
                    }
                    // The device holding the slow stage bounds the run.
                    assert_eq!(r.ideal_ns, alone.ideal_ns * 3, "{kind} {fold:?}");
                    assert!(r.makespan_ns >= r.ideal_ns, "{kind} {fold:?}");
                    // A device holds at most what its stages hold apart.
                    let per_stage = validate(s).unwrap().peak_activations;
                    for dev in 0..2 {
                        let mine: Vec<usize> = (0..4)
                            .filter(|&st| of[st] == dev)
                            .map(|st| per_stage[st])
                            .collect();
                        let peak = r.peak_activations[dev];
                        assert!(peak >= *mine.iter().max().unwrap(), "{kind} {fold:?}");
                        assert!(peak <= mine.iter().sum(), "{kind} {fold:?}");
                    }
                }
            }
        }
    }

    /// A hand-worked fold: GPipe, p = 2 on one device, m = 2, F = 1, B = 2 (W folded in, 0).
    /// At 1, F(s1, mb0) and F(s0, mb1) are both ready: the earlier microbatch goes first. At 6,
    /// B(s0, mb0) and B(s1, mb1) are: again the earlier microbatch. No gap anywhere.
    #[test]
    fn a_folded_gpipe_runs_older_work_first() {
        let s = Schedule::new(ScheduleKind::GPipe, 2, 2, 1).unwrap();
        let r = simulate_folded(
            &s,
            &Costs::compute_only(1, 2, 0),
            &[],
            Fold::Blocks { devices: 1 },
        )
        .unwrap();
        let ops: Vec<(String, u32, u64)> = r
            .events
            .iter()
            .map(|e| (e.name.clone(), e.microbatch.unwrap(), e.start_ns))
            .collect();
        let want = [
            ("F.c0", 0, 0),
            ("F.c1", 0, 1),
            ("F.c0", 1, 2),
            ("F.c1", 1, 3),
            ("B.c1", 0, 4),
            ("B.c0", 0, 6),
            ("B.c1", 1, 8),
            ("B.c0", 1, 10),
        ];
        let want: Vec<(String, u32, u64)> =
            want.iter().map(|&(n, m, t)| (n.to_owned(), m, t)).collect();
        assert_eq!(ops, want);
        assert_eq!(r.makespan_ns, 12);
        assert_eq!(r.peak_activations, [4]);
    }

    #[test]
    fn folds_that_do_not_fit_are_refused() {
        let s = Schedule::new(ScheduleKind::OneFOneB, 3, 4, 1).unwrap();
        let c = Costs::compute_only(1, 1, 0);
        for fold in [Fold::Blocks { devices: 0 }, Fold::RoundRobin { devices: 4 }] {
            assert!(matches!(
                simulate_folded(&s, &c, &[], fold),
                Err(ScheduleError::InvalidFold { .. })
            ));
        }
        let mut bad = s.clone();
        bad.ops[2].swap(0, 1);
        assert_eq!(
            simulate_folded(&bad, &c, &[], Fold::Blocks { devices: 2 }).unwrap_err(),
            validate(&bad).unwrap_err()
        );
    }

    #[test]
    fn invalid_schedules_fail_simulation_too() {
        let mut s = Schedule::new(ScheduleKind::OneFOneB, 3, 4, 1).unwrap();
        s.ops[2].swap(0, 1);
        let c = Costs::compute_only(1, 1, 0);
        assert_eq!(simulate(&s, &c).unwrap_err(), validate(&s).unwrap_err());
    }

    /// The event loop is O(ops); release builds should take well under a second here.
    #[test]
    fn large_pipelines_simulate_quickly() {
        let c = Costs::compute_only(100, 200, 100);
        for (kind, v) in [
            (ScheduleKind::OneFOneB, 1),
            (ScheduleKind::ZbH1, 1),
            (ScheduleKind::Interleaved, 2),
        ] {
            let start = Instant::now();
            let s = Schedule::new(kind, 64, 512, v).unwrap();
            let r = simulate(&s, &c).unwrap();
            let took = start.elapsed();
            println!("{kind} p=64 m=512 v={v}: {} ops in {took:?}", s.op_count());
            assert!(r.makespan_ns > 0);
            assert!(took.as_secs() < 30, "{kind} took {took:?}");
        }
    }
}
