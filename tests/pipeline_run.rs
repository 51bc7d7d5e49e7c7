//! Real pipelined training runs: every schedule, on p = 2 and p = 4 virtual devices of an adapter,
//! takes the same SGD step as one device accumulating gradients over the same microbatches; the
//! bubble is measured from the trace and compared with the simulator fed the run's own op times.
//! The MoE stack on 2 stages of 2 devices takes the step of one stage on one pair, and DualPipe's
//! F&B pairs, overlapped, run their F and B at once.
#![allow(clippy::unwrap_used)]

mod common;

use common::{Adapters, Need, case};
use gangway::pipeline::{
    Fold, Microbatch, Mlp, MlpConfig, MoeStack, MoeStackConfig, Schedule, ScheduleKind,
    bubble_formula, execute, timeline,
};
use gangway::sched::{Runtime, RuntimeOptions};
use gangway::trace::{FlowRole, Lane, Tracer, chrome};
use gangway::{Error, Rng};

fn main() -> std::process::ExitCode {
    common::run(vec![
        case!(adapters: every_schedule_matches_single_device_gradient_accumulation),
        case!(adapters: bad_inputs_are_clear_errors),
        case!(adapters: folded_stages_run_on_fewer_devices),
        case!(adapters: moe_stages_on_gangs_take_the_one_stage_step),
        case!(adapters: dualpipe_runs_its_f_and_b_pairs_overlapped).needs(Need::ConcurrentDevices),
    ])
}

/// 16 layers: at p = 4 every virtual stage of the V schedules (2p of them) has two, so every B
/// computes an input gradient (a one-layer first stage's split B has no kernel to run).
const WIDTHS: [usize; 17] = [
    24, 32, 32, 32, 32, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 8,
];
const ROWS: usize = 5;
const M: usize = 4;
const LR: f32 = 0.05;

fn model() -> Mlp {
    Mlp::new(&MlpConfig {
        widths: WIDTHS.to_vec(),
        seed: 3,
    })
    .unwrap()
}

fn batch(m: usize) -> Vec<Microbatch> {
    let mut rng = Rng::new(11);
    (0..m)
        .map(|_| Microbatch {
            input: rng.vec(ROWS * WIDTHS[0]),
            target: rng.vec(ROWS * WIDTHS[WIDTHS.len() - 1]),
        })
        .collect()
}

/// The microbatches `kind` runs at `p` stages: M, or DualPipe(V)'s minimum of 2p.
fn microbatches(kind: ScheduleKind, p: usize) -> usize {
    match kind {
        ScheduleKind::DualPipe | ScheduleKind::DualPipeV => M.max(2 * p),
        _ => M,
    }
}

/// Checks that the report has one compute event per F, B (and W) of the schedule; returns how
/// many.
fn every_op_ran(run: &gangway::pipeline::RunReport, schedule: &Schedule, what: &str) -> usize {
    let per_mb = if schedule.split_backward { 3 } else { 2 };
    let compute = run
        .events
        .iter()
        .filter(|e| e.lane == Lane::Compute && e.name != "sgd")
        .count();
    let want = per_mb * schedule.microbatches * schedule.stages * schedule.passes();
    assert_eq!(compute, want, "{what}");
    compute
}

fn every_schedule_matches_single_device_gradient_accumulation(adapters: &Adapters) {
    let devices = adapters.mesh(4);
    let names: Vec<String> = devices.iter().map(|d| d.label()).collect();
    println!("devices: {names:?}");
    let mlp = model();
    // The process's runtime streams every run's events (device ids) to its tracer, while each
    // report holds the run's own events in the pipeline's view.
    let tracer = Tracer::new();
    let runtime = Runtime::new(
        devices[..4].to_vec(),
        RuntimeOptions {
            tracer: tracer.clone(),
            ..RuntimeOptions::default()
        },
    )
    .unwrap();
    let client = runtime.client("pipeline test", 1);
    for p in [2, 4] {
        for kind in ScheduleKind::ALL {
            let v = kind.chunks(2);
            let m = microbatches(kind, p);
            let batch = batch(m);
            let want = mlp.reference_step(&batch, LR).unwrap();
            let schedule = Schedule::new(kind, p, m, v).unwrap();
            drop(tracer.take_events());
            let started = std::time::Instant::now();
            let run = execute(
                &client,
                &schedule,
                &gangway::Mesh::line(&devices[..p]),
                &mlp,
                &batch,
                LR,
                Fold::OnePerStage,
                false,
            )
            .unwrap();
            let took = started.elapsed();
            let what = format!("{kind} p={p} m={m} v={v}");

            for (layer, (got, want)) in run.weights.iter().zip(&want.weights).enumerate() {
                common::assert_close(&format!("{what} layer {layer}"), got, want, 1e-4);
            }
            assert!((run.loss - want.loss).abs() <= 1e-4 * (1.0 + want.loss.abs()));
            assert!(
                run.measured_bubble > 0.0 && run.measured_bubble < 1.0,
                "{what}: bubble {}",
                run.measured_bubble
            );
            let compute = every_op_ran(&run, &schedule, &what);
            // The report's compute ops span the runtime's kernels of the same run.
            let kernels = tracer
                .events()
                .iter()
                .filter(|e| e.lane == Lane::Compute)
                .count();
            assert!(
                kernels >= compute,
                "{what}: {kernels} kernels, {compute} ops"
            );

            let json = chrome::to_json(&run.events, &run.tracks);
            let summary = chrome::check(&json).unwrap_or_else(|e| panic!("{what}: {e}"));
            let transfers = run
                .events
                .iter()
                .filter(|e| e.lane == Lane::Transfer)
                .count();
            assert_eq!(summary.flow_pairs * 2, transfers, "{what}");

            for e in &run.events {
                if let Some(f) = e.flow.filter(|f| f.role == FlowRole::In) {
                    let out = run.events.iter().find(|o| {
                        o.flow
                            .is_some_and(|g| g.id == f.id && g.role == FlowRole::Out)
                    });
                    let out = out.unwrap_or_else(|| panic!("{what}: flow {} has no Out", f.id));
                    assert!(
                        out.start_ns <= e.start_ns && out.device != e.device,
                        "{what}"
                    );
                }
            }

            let mc = &run.measured;
            println!(
                "{what}: {took:?}; measured bubble {:.3}, simulated {:.3}, textbook {}; \
                 F {} µs, B {} µs, W {} µs, transfer {} µs",
                run.measured_bubble,
                run.simulated.bubble_fraction,
                gangway::pipeline::percent(bubble_formula(kind, p, m, v)),
                mc.forward_ns / 1000,
                mc.backward_ns / 1000,
                mc.weight_grad_ns / 1000,
                mc.latency_ns / 1000,
            );
            let first = run.events.iter().map(|e| e.start_ns).min().unwrap_or(0);
            let end = run.events.iter().map(|e| e.end_ns).max().unwrap_or(0);
            print!("{}", timeline(&run.events, p, first..end, 72));
        }
    }
}

/// Two virtual devices of the adapter.
fn bad_inputs_are_clear_errors(adapters: &Adapters) {
    let devices = adapters.mesh(2);
    let mlp = model();
    let batch = batch(M);
    let (_runtime, client) = common::runtime_client(&devices[..2], "test");
    let s = Schedule::new(ScheduleKind::OneFOneB, 2, M, 1).unwrap();
    let folded = |s: &Schedule, d: &[gangway::Device], m: &Mlp, b: &[Microbatch], f: Fold| {
        execute(&client, s, &gangway::Mesh::line(d), m, b, LR, f, false).unwrap_err()
    };
    let err = |s: &Schedule, d: &[gangway::Device], m: &Mlp, b: &[Microbatch]| {
        folded(s, d, m, b, Fold::OnePerStage)
    };
    let e = err(&s, &devices[..1], &mlp, &batch);
    assert!(
        e.to_string()
            .contains("2 stages run on 2 devices (one per stage) but 1 were given"),
        "{e}"
    );
    let e = folded(&s, &devices[..2], &mlp, &batch, Fold::Blocks { devices: 3 });
    assert!(e.to_string().contains("fold onto 1 to 2 devices"), "{e}");
    let e = err(&s, &devices[..2], &mlp, &[]);
    assert!(e.to_string().contains("no microbatches"), "{e}");
    let e = err(&s, &devices[..2], &mlp, &batch[..3]);
    assert!(
        e.to_string().contains("4 microbatches but the batch has 3"),
        "{e}"
    );
    let mut wrong = mlp.clone();
    wrong.weights[2].pop();
    assert!(matches!(
        err(&s, &devices[..2], &wrong, &batch),
        Error::ShapeMismatch { .. }
    ));
    let mut short = batch.clone();
    short[0].target.pop();
    assert!(matches!(
        err(&s, &devices[..2], &mlp, &short),
        Error::ShapeMismatch { .. }
    ));
    let tiny = Mlp::new(&MlpConfig {
        widths: vec![4, 4, 4],
        seed: 0,
    })
    .unwrap();
    let tb: Vec<Microbatch> = (0..M)
        .map(|_| Microbatch {
            input: vec![0.5; 8],
            target: vec![0.5; 8],
        })
        .collect();
    let il = Schedule::new(ScheduleKind::Interleaved, 2, M, 2).unwrap();
    let e = err(&il, &devices[..2], &tiny, &tb);
    assert!(
        e.to_string()
            .contains("2 layers cannot fill 4 virtual stages"),
        "{e}"
    );
    // A runtime whose tracer is off still yields a full report.
    let run = execute(
        &client,
        &s,
        &gangway::Mesh::line(&devices[..2]),
        &tiny,
        &tb,
        LR,
        Fold::OnePerStage,
        false,
    )
    .unwrap();
    assert!(run.events.iter().any(|e| e.flow.is_some()));
}

/// p = 4 stages on 2 devices (blocks and round robin) and on 1: the same step as one device, a
/// lane per device, transfers only between devices, and each device running its stages' ops in
/// the simulated order. DualPipe on one device holds both parameter copies there.
fn folded_stages_run_on_fewer_devices(adapters: &Adapters) {
    let devices = adapters.mesh(2);
    let mlp = model();
    let (_runtime, client) = common::runtime_client(&devices[..2], "folded pipeline test");
    let cases = [
        (ScheduleKind::OneFOneB, Fold::Blocks { devices: 2 }),
        (ScheduleKind::OneFOneB, Fold::RoundRobin { devices: 2 }),
        (ScheduleKind::ZbH1, Fold::RoundRobin { devices: 2 }),
        (ScheduleKind::Interleaved, Fold::Blocks { devices: 2 }),
        (ScheduleKind::DualPipe, Fold::Blocks { devices: 1 }),
        (ScheduleKind::ZbV, Fold::Blocks { devices: 2 }),
    ];
    for (kind, fold) in cases {
        let p = 4;
        let v = kind.chunks(2);
        let m = microbatches(kind, p);
        let batch = batch(m);
        let want = mlp.reference_step(&batch, LR).unwrap();
        let schedule = Schedule::new(kind, p, m, v).unwrap();
        let d = fold.device_count(p);
        let run = execute(
            &client,
            &schedule,
            &gangway::Mesh::line(&devices[..d]),
            &mlp,
            &batch,
            LR,
            fold,
            false,
        )
        .unwrap();
        let what = format!(
            "{kind} p={p} m={m} v={v} on {d} ({})",
            fold.placement_name()
        );
        for (layer, (got, want)) in run.weights.iter().zip(&want.weights).enumerate() {
            common::assert_close(&format!("{what} layer {layer}"), got, want, 1e-4);
        }
        assert_eq!(run.tracks.len(), d, "{what}");
        // Each lane is a device holding its stages, as a type; the label is for people.
        assert_eq!(
            run.tracks[0].kind,
            gangway::trace::TrackKind::Device,
            "{what}"
        );
        assert_eq!(
            run.tracks[0].stages,
            fold.devices_of(p)
                .unwrap()
                .iter()
                .enumerate()
                .filter(|&(_, &dev)| dev == 0)
                .map(|(s, _)| s)
                .collect::<Vec<_>>(),
            "{what}"
        );
        assert!(
            run.tracks[0].label.starts_with("device 0 (stages "),
            "{what}"
        );
        assert!(run.events.iter().all(|e| e.device < d), "{what}");
        every_op_ran(&run, &schedule, &what);
        for e in &run.events {
            if let Some(f) = e.flow.filter(|f| f.role == FlowRole::In) {
                let out = run
                    .events
                    .iter()
                    .find(|o| {
                        o.flow
                            .is_some_and(|g| g.id == f.id && g.role == FlowRole::Out)
                    })
                    .unwrap_or_else(|| panic!("{what}: flow {} has no Out", f.id));
                assert_ne!(out.device, e.device, "{what}: a transfer within a device");
            }
        }
        if d == 1 {
            assert!(
                run.events.iter().all(|e| e.lane != Lane::Transfer),
                "{what}"
            );
        }
        // The simulation folds the same way; each device ran its ops one at a time in the
        // order the lowering issued them, the simulator's at F = B = W.
        assert_eq!(run.simulated.devices, d, "{what}");
        for dev in 0..d {
            let mut ops: Vec<(u64, u64)> = run
                .events
                .iter()
                .filter(|e| e.device == dev && e.lane == Lane::Compute && e.name != "sgd")
                .map(|e| (e.start_ns, e.end_ns))
                .collect();
            ops.sort_unstable();
            assert!(
                ops.windows(2).all(|w| w[0].1 <= w[1].0),
                "{what}: overlap on {dev}"
            );
        }
        println!(
            "{what}: measured bubble {:.3}, simulated {:.3}",
            run.measured_bubble, run.simulated.bubble_fraction
        );
    }
}

/// An MoE stack (residual expert layers, top-2) pipelined over 2 stages of 2 devices each, the
/// experts and each microbatch's rows split over a stage's pair: every schedule kind, and
/// DualPipe(V) and the two 1F1B orders with overlap with their F&B pairs overlapped, takes the step of the same layers at one
/// stage on one pair, and every op ran. Time waited on all-to-alls is measured, and what of it
/// no compute hid is part of it. Bad shapes are clear errors.
fn moe_stages_on_gangs_take_the_one_stage_step(adapters: &Adapters) {
    let devices = adapters.mesh(4);
    let runtime = Runtime::new(devices[..4].to_vec(), RuntimeOptions::default()).unwrap();
    let client = runtime.client("moe pipeline test", 1);
    let config = MoeStackConfig {
        layers: 4,
        model: 8,
        hidden: 12,
        experts: 4,
        top_k: 2,
        capacity_factor: 1.5,
        gang: 2,
        rows: 6,
        seed: 5,
    };
    let stack = MoeStack::new(config).unwrap();
    let batch = stack.batch(4, 9);
    let want = stack
        .reference_step(&client, &gangway::Mesh::line(&devices[..2]), &batch, LR)
        .unwrap();
    assert_eq!(want.weights.len(), 3 * config.layers);
    let moved = want
        .weights
        .iter()
        .flatten()
        .zip(stack.weights().iter().flatten().flatten())
        .any(|(a, b)| a != b);
    assert!(moved, "the step changed the weights");
    let cases = [
        (ScheduleKind::GPipe, false),
        (ScheduleKind::OneFOneB, false),
        (ScheduleKind::Interleaved, false),
        (ScheduleKind::ZbH1, false),
        (ScheduleKind::ZbV, false),
        (ScheduleKind::DualPipe, false),
        (ScheduleKind::DualPipe, true),
        (ScheduleKind::DualPipeV, true),
        (ScheduleKind::OneFOneBOverlap, true),
        (ScheduleKind::InterleavedOverlap, true),
    ];
    for (kind, overlap) in cases {
        let schedule = Schedule::new(kind, 2, 4, kind.chunks(2)).unwrap();
        let what = format!("{kind} overlap={overlap}");
        let on = Placed {
            devices: &devices[..4],
            fold: Fold::OnePerStage,
            overlap,
        };
        let run = takes_the_step(&stack, &client, &schedule, on, &batch, &want, &what);
        every_op_ran(&run, &schedule, &what);
        assert!(
            run.all_to_all_exposed_ns <= run.all_to_all_wait_ns,
            "{what}: exposed {} of {} waited",
            run.all_to_all_exposed_ns,
            run.all_to_all_wait_ns
        );
        println!(
            "{what}: {:.2} ms, all-to-all waits {:.2} ms, exposed {:.2} ms",
            run.makespan_ns as f64 / 1e6,
            run.all_to_all_wait_ns as f64 / 1e6,
            run.all_to_all_exposed_ns as f64 / 1e6
        );
    }
    // More stages than gangs: 4 stages of one layer each on 2 pairs, as blocks (0, 1 | 2, 3)
    // and round robin (0, 2 | 1, 3); a pair runs its stages' ops one at a time, and a hand-off
    // between two stages of one pair moves nothing.
    for fold in [Fold::Blocks { devices: 2 }, Fold::RoundRobin { devices: 2 }] {
        for kind in [
            ScheduleKind::GPipe,
            ScheduleKind::OneFOneB,
            ScheduleKind::ZbH1,
        ] {
            let schedule = Schedule::new(kind, 4, 4, 1).unwrap();
            let what = format!("{kind} on 2 pairs, {}", fold.placement_name());
            let on = Placed {
                devices: &devices[..4],
                fold,
                overlap: false,
            };
            let run = takes_the_step(&stack, &client, &schedule, on, &batch, &want, &what);
            every_op_ran(&run, &schedule, &what);
        }
    }
    let schedule = Schedule::new(ScheduleKind::OneFOneB, 4, 4, 1).unwrap();
    let err = execute(
        &client,
        &schedule,
        &gangway::Mesh::line(&devices[..2]),
        &stack,
        &batch,
        LR,
        Fold::Blocks { devices: 2 },
        false,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("2 gangs of 2 devices (blocks) but 2 were given"),
        "{err}"
    );
    let schedule = Schedule::new(ScheduleKind::OneFOneB, 2, 4, 1).unwrap();
    let short = execute(
        &client,
        &schedule,
        &gangway::Mesh::line(&devices[..3]),
        &stack,
        &batch,
        LR,
        Fold::OnePerStage,
        false,
    );
    let err = short.unwrap_err().to_string();
    assert!(
        err.contains("2 gangs of 2 devices (one per stage) but 3 were given"),
        "{err}"
    );
    let mut bad = batch.clone();
    bad[1].target.pop();
    let err = execute(
        &client,
        &schedule,
        &gangway::Mesh::line(&devices[..4]),
        &stack,
        &bad,
        LR,
        Fold::OnePerStage,
        false,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("MoE microbatch target"), "{err}");
    let uneven = MoeStack::new(MoeStackConfig {
        experts: 3,
        ..config
    });
    let err = uneven.unwrap_err().to_string();
    assert!(err.contains("split evenly"), "{err}");
}

/// Where an MoE step runs: its devices, how its stages fold onto their pairs, and whether F&B
/// pairs overlap.
#[derive(Clone, Copy)]
struct Placed<'a> {
    devices: &'a [gangway::Device],
    fold: Fold,
    overlap: bool,
}

/// Runs the MoE stack's step of `schedule` as `on` says, and checks that its weights and loss
/// are the one-stage step's (`want`) within 1e-4.
fn takes_the_step(
    stack: &MoeStack,
    client: &gangway::sched::Client,
    schedule: &Schedule,
    on: Placed<'_>,
    batch: &[Microbatch],
    want: &gangway::pipeline::RunReport,
    what: &str,
) -> gangway::pipeline::RunReport {
    let run = execute(
        client,
        schedule,
        &gangway::Mesh::line(on.devices),
        stack,
        batch,
        LR,
        on.fold,
        on.overlap,
    )
    .unwrap_or_else(|e| panic!("{what}: {e}"));
    for (i, (got, want)) in run.weights.iter().zip(&want.weights).enumerate() {
        common::assert_close(&format!("{what} parameter {i}"), got, want, 1e-4);
    }
    assert!(
        (run.loss - want.loss).abs() <= 1e-4 * (1.0 + want.loss.abs()),
        "{what}: loss {} against {}",
        run.loss,
        want.loss
    );
    run
}

/// Nanoseconds in which a forward and a backward of one stage ran at once (the pipeline view's
/// op spans, each over its stage's devices).
fn forward_backward_overlap_ns(run: &gangway::pipeline::RunReport) -> u64 {
    let ops: Vec<_> = run
        .events
        .iter()
        .filter(|e| e.lane == Lane::Compute && (e.name.starts_with('F') || e.name.starts_with('B')))
        .collect();
    let mut total = 0;
    for (i, a) in ops.iter().enumerate() {
        for b in &ops[i + 1..] {
            if a.device == b.device && a.name[..1] != b.name[..1] {
                total += a
                    .end_ns
                    .min(b.end_ns)
                    .saturating_sub(a.start_ns.max(b.start_ns));
            }
        }
    }
    total
}

/// DualPipe's F&B pairs on devices: with overlap, a stage's backward computes while the paired
/// forward waits for its all-to-alls, so F and B spans of a stage overlap far more than when
/// each pair runs as F then B (where only the two devices of a stage being out of step makes
/// spans touch). Both take the one-stage step.
fn dualpipe_runs_its_f_and_b_pairs_overlapped(adapters: &Adapters) {
    let devices = adapters.mesh(4);
    let runtime = Runtime::new(devices[..4].to_vec(), RuntimeOptions::default()).unwrap();
    let client = runtime.client("dualpipe overlap test", 1);
    let stack = MoeStack::new(MoeStackConfig {
        layers: 4,
        model: 32,
        hidden: 64,
        experts: 4,
        top_k: 2,
        capacity_factor: 1.25,
        gang: 2,
        rows: 32,
        seed: 8,
    })
    .unwrap();
    let batch = stack.batch(8, 3);
    let want = stack
        .reference_step(&client, &gangway::Mesh::line(&devices[..2]), &batch, LR)
        .unwrap();
    let schedule = Schedule::new(ScheduleKind::DualPipe, 2, 8, 2).unwrap();
    let mut overlap_ns = Vec::new();
    for overlap in [false, true] {
        let on = Placed {
            devices: &devices[..4],
            fold: Fold::OnePerStage,
            overlap,
        };
        let what = format!("overlap={overlap}");
        let run = takes_the_step(&stack, &client, &schedule, on, &batch, &want, &what);
        overlap_ns.push(forward_backward_overlap_ns(&run));
    }
    println!("F-B overlap: {:?} ns (apart, paired)", overlap_ns);
    assert!(
        overlap_ns[1] > 2 * overlap_ns[0] + 1_000_000,
        "F&B pairs overlapped {} ns, run apart {} ns",
        overlap_ns[1],
        overlap_ns[0]
    );
}
