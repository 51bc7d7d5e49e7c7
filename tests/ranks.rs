//! Programs over the devices of several ranks, the ranks being threads of this process joined in
//! memory (`Job::in_process`): the same runtime code as under `mpirun`, without MPI. Each rank
//! gets its own virtual devices of the adapter and its own runtime; they form one mesh and run
//! the same programs (SPMD). Results must equal one process's over the same devices, every rank
//! must get every result, and the gangs spanning ranks must run in one order on every device.
#![allow(clippy::unwrap_used)]

mod common;

use common::moe::{batch, config};
use common::programs::{
    RaggedExchange, assert_consistent_order, exchange_program, exchange_reference, mixed_program,
    mixed_reference, run_exchanges,
};
use common::{Adapters, case};
use gangway::kernels::optim::AdamConfig;
use gangway::moe::{MoeLmParams, MoeTrainer};
use gangway::program::{CompileOptions, ProgramBuilder};
use gangway::sched::{Runtime, RuntimeOptions};
use gangway::{Device, Job, MeshDevice, Rng};
use std::sync::Arc;

fn main() -> std::process::ExitCode {
    common::run(vec![
        case!(adapters: programs_over_ranks_compute_what_one_process_computes),
        case!(adapters: moe_training_over_two_ranks_follows_one_process),
        case!(adapters: a_ragged_exchange_over_ranks_moves_only_live_rows),
        case!(adapters: many_clients_over_ranks_keep_one_gang_order),
        case!(adapters: ranks_running_different_programs_fail_instead_of_hanging),
    ])
}

/// Runs `f(rank, runtime)` on `ranks` threads, rank `r` with its equal share of `devices`, each
/// with a runtime of the same in-process job; their results in rank order.
fn spmd<T: Send>(
    devices: &[Device],
    ranks: usize,
    f: impl Fn(usize, Runtime) -> T + Sync,
) -> Vec<T> {
    let jobs = Job::in_process(ranks).unwrap();
    let per = devices.len() / ranks;
    std::thread::scope(|s| {
        let handles: Vec<_> = jobs
            .into_iter()
            .enumerate()
            .map(|(r, job)| {
                let mine = devices[r * per..(r + 1) * per].to_vec();
                let f = &f;
                s.spawn(move || {
                    let runtime = Runtime::new(
                        mine,
                        RuntimeOptions {
                            job,
                            ..RuntimeOptions::default()
                        },
                    )
                    .unwrap();
                    f(r, runtime)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// The expert exchange's ragged all-to-all over two ranks of two devices each (what MPI carries
/// between hosts is the packed live rows): every rank gets the plain-Rust model's buffers, over
/// runs whose counts differ (none, some, all).
fn a_ragged_exchange_over_ranks_moves_only_live_rows(adapters: &Adapters) {
    let devices = &adapters.mesh(4)[..4];
    let exchange = RaggedExchange {
        devices: 4,
        experts: 2,
        capacity: 3,
        words: 6,
    };
    let runs = 4;
    let inputs: Vec<Vec<f32>> = (0..runs)
        .map(|r| Rng::new(20 + r as u64).vec(4 * exchange.shard()))
        .collect();
    let outputs = spmd(devices, 2, |_, runtime| {
        let one_slot = CompileOptions {
            in_flight: 1,
            ..CompileOptions::default()
        };
        let exec = Arc::new(
            exchange
                .program()
                .compile(runtime.mesh(), one_slot)
                .unwrap(),
        );
        let client = runtime.client("ragged", 1);
        (0..runs)
            .map(|r| {
                let args = exchange.args(r, &inputs[r]);
                client.run(&exec, args, Default::default()).unwrap()
            })
            .collect::<Vec<_>>()
    });
    let mut held = vec![0.0f32; 4 * exchange.shard()];
    let mut home = held.clone();
    for (r, input) in inputs.iter().enumerate() {
        exchange.apply(r, input, &mut held, &mut home);
        for (rank, out) in outputs.iter().enumerate() {
            assert_eq!(out[r][0], held, "rank {rank}, run {r}: there");
            assert_eq!(out[r][1], home, "rank {rank}, run {r}: back");
        }
    }
}

/// Four virtual devices of the adapter, two per rank.
fn programs_over_ranks_compute_what_one_process_computes(adapters: &Adapters) {
    let devices = &adapters.mesh(4)[..4];
    let (shard, c) = (16, 0.5);
    let x: Vec<f32> = (0..4 * shard).map(|i| i as f32 - 20.0).collect();
    let outputs = spmd(devices, 2, |rank, runtime| {
        let mesh = runtime.mesh().to_vec();
        assert_eq!(mesh.len(), 4);
        // Rank-major, the same on every rank; this rank's own devices are local.
        for (i, d) in mesh.iter().enumerate() {
            assert_eq!(d.is_local(), i / 2 == rank, "{i}: {d:?}");
            assert_eq!(d.info().id, devices[i].info().id);
        }
        let client = runtime.client("spmd", 1);
        let exchange = Arc::new(
            exchange_program(&[0, 1, 2, 3], shard, c)
                .compile(&mesh, CompileOptions::default())
                .unwrap(),
        );
        let mixed = Arc::new(
            mixed_program(&[0, 1, 2, 3], shard, c)
                .compile(&mesh, CompileOptions::default())
                .unwrap(),
        );
        // A transfer from a device of rank 1 to one of rank 0 and back, in halves.
        let mut p = ProgramBuilder::new("ping-pong");
        let a = p.arg(&[3], shard);
        let b = p.affine("b", &[3], a, 3.0, 0.0);
        let sent = p.send("sent", b);
        let there = p.recv("there", sent, &[0]);
        let back = p.affine("back", &[1], there, 1.0, 1.0);
        p.result(back);
        let ping = Arc::new(
            p.build()
                .unwrap()
                .compile(&mesh, CompileOptions::default())
                .unwrap(),
        );
        let mut out = Vec::new();
        for _ in 0..3 {
            out.push(
                client
                    .run(&exchange, vec![x.clone()], Default::default())
                    .unwrap(),
            );
            out.push(
                client
                    .run(&mixed, vec![x.clone()], Default::default())
                    .unwrap(),
            );
        }
        out.push(
            client
                .run(&ping, vec![x[..shard].to_vec()], Default::default())
                .unwrap(),
        );
        out
    });
    let exchange = exchange_reference(&x, 4, shard, c);
    let mixed = mixed_reference(&x, 4, shard, c);
    let ping: Vec<f32> = x[..shard].iter().map(|v| v * 3.0 + 1.0).collect();
    for (rank, out) in outputs.iter().enumerate() {
        for pair in out[..6].chunks(2) {
            assert_eq!(pair[0].len(), 1);
            common::assert_close(
                &format!("rank {rank} exchange"),
                &pair[0][0],
                &exchange,
                0.0,
            );
            common::assert_close(&format!("rank {rank} a2a"), &pair[1][0], &mixed[0], 0.0);
            common::assert_close(
                &format!("rank {rank} moved sum"),
                &pair[1][1],
                &mixed[1],
                1e-6,
            );
        }
        common::assert_close(&format!("rank {rank} ping-pong"), &out[6][0], &ping, 0.0);
    }
}

/// Four virtual devices of the adapter: one process over all four against two ranks of two.
fn moe_training_over_two_ranks_follows_one_process(adapters: &Adapters) {
    let devices = &adapters.mesh(4)[..4];
    let cfg = config();
    let params = MoeLmParams::init(cfg).unwrap();
    let adam = AdamConfig::new(0.01);
    let batches: Vec<_> = {
        let mut rng = Rng::new(9);
        (0..6).map(|_| batch(&cfg, 64, &mut rng)).collect()
    };
    let (_runtime, client) = common::runtime_client(devices, "one process");
    let mut one = MoeTrainer::new(
        &client,
        &gangway::Mesh::line(devices),
        &params,
        adam,
        devices.len(),
    )
    .unwrap();
    let want: Vec<f64> = batches
        .iter()
        .map(|(c, t)| one.step(c, t).unwrap().loss)
        .collect();
    let want_params = one.params().unwrap();
    let per_rank = spmd(devices, 2, |_, runtime| {
        let client = runtime.client("trainer", 1);
        let mut trainer =
            MoeTrainer::new(&client, runtime.mesh(), &params, adam, runtime.mesh().len()).unwrap();
        assert_eq!(trainer.mesh().len(), 4);
        let losses: Vec<f64> = batches
            .iter()
            .map(|(c, t)| trainer.step(c, t).unwrap().loss)
            .collect();
        (losses, trainer.params().unwrap())
    });
    for (rank, (losses, got)) in per_rank.iter().enumerate() {
        for (step, (a, b)) in want.iter().zip(losses).enumerate() {
            assert!(
                (a - b).abs() <= 1e-4 * a.abs(),
                "rank {rank} step {step}: one process {a} vs two ranks {b}"
            );
        }
        for (spec, (a, b)) in cfg
            .param_specs()
            .iter()
            .zip(want_params.tensors.iter().zip(&got.tensors))
        {
            common::assert_close(&format!("rank {rank} {}", spec.name), b, a, 1e-4);
        }
    }
}

/// Two virtual devices of the adapter per rank, two ranks: four clients per rank, 50 runs each,
/// of programs over gangs that overlap and all span both ranks.
fn many_clients_over_ranks_keep_one_gang_order(adapters: &Adapters) {
    let devices = &adapters.mesh(4)[..4];
    let gangs: Vec<Vec<usize>> = vec![vec![0, 2], vec![1, 3], vec![0, 1, 2, 3], vec![3, 0]];
    let orders = spmd(devices, 2, |_, runtime| {
        let mesh: Vec<MeshDevice> = runtime.mesh().to_vec();
        std::thread::scope(|s| {
            for (c, gang) in gangs.iter().enumerate() {
                let client = runtime.client(&format!("client {c}"), 1);
                let mesh = &mesh;
                s.spawn(move || {
                    let shard = 4 * gang.len();
                    let prog = exchange_program(gang, shard, c as f32);
                    let exec = Arc::new(prog.compile(mesh, CompileOptions::default()).unwrap());
                    run_exchanges(&client, &exec, gang.len(), shard, c, 50);
                });
            }
        });
        let stats = runtime.client_stats();
        assert!(stats.iter().all(|s| s.finished == 50), "{stats:?}");
        runtime.gang_order()
    });
    for order in &orders {
        assert_consistent_order(order);
    }
    // The runs spanning ranks in the order each rank admitted them: one order.
    let admitted = |order: &[Vec<gangway::sched::GangRecord>]| {
        let mut all: Vec<_> = order.iter().flatten().collect();
        all.sort_by_key(|r| r.seq);
        let mut keys = Vec::new();
        for r in all {
            let key = r.key.expect("every run here spans ranks");
            if keys.last() != Some(&key) {
                keys.push(key);
            }
        }
        keys
    };
    let first = admitted(&orders[0]);
    assert_eq!(first.len(), 4 * 50);
    for order in &orders[1..] {
        assert_eq!(
            admitted(order),
            first,
            "every rank ran the runs in rank 0's order"
        );
    }
}

/// Two ranks, two virtual devices each: when one rank's program differs (here, in its nodes),
/// every rank gets a clear error within seconds, not a hang or the device timeout.
fn ranks_running_different_programs_fail_instead_of_hanging(adapters: &Adapters) {
    let devices = &adapters.mesh(4)[..4];
    let started = std::time::Instant::now();
    let errors = spmd(devices, 2, |rank, runtime| {
        let mesh = runtime.mesh().to_vec();
        let client = runtime.client("divergent", 1);
        // Rank 1's program has an extra node before the all-to-all: the node ids differ.
        let mut p = ProgramBuilder::new("divergent");
        let x = p.arg(&[0, 1, 2, 3], 8);
        let mut y = p.affine("scale", &[0, 1, 2, 3], x, 2.0, 0.0);
        if rank == 1 {
            y = p.affine("extra", &[0, 1, 2, 3], y, 1.0, 0.0);
        }
        let z = p.all_to_all("a2a", y);
        p.result(z);
        let exec = Arc::new(
            p.build()
                .unwrap()
                .compile(&mesh, CompileOptions::default())
                .unwrap(),
        );
        client
            .run(&exec, vec![vec![1.0f32; 32]], Default::default())
            .map(|_| ())
    });
    // The rank that sees the other's data first fails its part and tells the other, which
    // fails too, with that error, instead of waiting out the device timeout for data that the
    // failed rank no longer sends.
    let waited = started.elapsed();
    let timeout = devices[0].wait_timeout();
    assert!(
        waited < timeout / 2,
        "{waited:?}, against a device timeout of {timeout:?}"
    );
    for e in errors {
        let text = e.expect_err("every rank's run must fail").to_string();
        assert!(text.contains("different programs"), "{text}");
    }
}
