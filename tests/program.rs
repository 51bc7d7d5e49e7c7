//! Programs on the runtime: Pathways Fig. 4's chain, collectives, both dispatch modes, on every
//! adapter (two virtual devices each) and across adapters.
#![allow(clippy::unwrap_used)]

mod common;

use common::programs::RaggedExchange;
use common::{Adapters, Span, case};
use gangway::kernels::{Accumulate, TensorType};
use gangway::program::{CompileOptions, Program, ProgramBuilder, chain, chain_reference};
use gangway::sched::{DispatchMode, RunOptions, Runtime, RuntimeOptions};
use gangway::trace::{Direction, TransferKind};
use gangway::{Device, Rng};
use std::sync::Arc;

fn main() -> std::process::ExitCode {
    common::run(vec![
        case!(adapters: fig4_chain_matches_the_host_in_both_modes).span(Span::EachAndCross),
        case!(adapters: collectives_match_the_host).span(Span::EachAndCross),
        case!(adapters: collectives_over_one_axis_of_a_2d_mesh).span(Span::EachAndCross),
        case!(adapters: a_ragged_exchange_moves_only_live_rows).span(Span::EachAndCross),
        case!(adapters: idle_shards_leave_zeros_and_keep_in_place_inputs).span(Span::EachAndCross),
        case!(device: wrong_arguments_are_errors),
    ])
}

const MODES: [DispatchMode; 2] = [DispatchMode::Sequential, DispatchMode::Parallel];

fn opts(mode: DispatchMode) -> RunOptions {
    RunOptions {
        mode,
        microbatch: None,
        ..RunOptions::default()
    }
}

fn compile(p: &Program, devices: &[Device]) -> Arc<gangway::program::Executable> {
    Arc::new(p.compile(devices, CompileOptions::default()).unwrap())
}

/// The chain (Pathways' Fig. 4) over three stages, each on the next device (wrapping), with a
/// length that is not a multiple of 256, on two virtual devices of each adapter.
fn fig4_chain_matches_the_host_in_both_modes(adapters: &Adapters) {
    let devices = &adapters.mesh(2);
    let n = devices.len();
    let len = 1000;
    let prog = chain(&[0, 1 % n, 2 % n], len).unwrap();
    let exec = compile(&prog, devices);
    let runtime = Runtime::new(devices.to_vec(), RuntimeOptions::default()).unwrap();
    let client = runtime.client("test", 1);
    let input = Rng::new(3).vec(len);
    let want = chain_reference(&input, 3);
    for mode in MODES {
        for _ in 0..3 {
            let out = client.run(&exec, vec![input.clone()], opts(mode)).unwrap();
            common::assert_close(&format!("fig4 {mode:?}"), &out[0], &want, 1e-6);
        }
    }
}

/// All-to-all then all-reduce over every device (two virtual devices of each adapter), and a
/// sharded add, against host references.
fn collectives_match_the_host(adapters: &Adapters) {
    let devices = &adapters.mesh(2);
    let n = devices.len();
    let gang: Vec<usize> = (0..n).collect();
    let shard = 6 * n; // chunks of 6
    let mut p = ProgramBuilder::new("collectives");
    let x = p.arg(&gang, shard);
    let w = p.constant(
        "w",
        &gang,
        (0..n * shard).map(|i| i as f32 * 0.25).collect(),
    );
    let s = p.add("x+w", &gang, x, w);
    let t = p.all_to_all("a2a", s);
    let r = p.all_reduce("sum", t);
    p.result(t);
    p.result(r);
    let exec = compile(&p.build().unwrap(), devices);
    // Every device holds, for each of its two slots of runs, nine shards: the argument, the
    // constant and the sum, each collective's output and staging, and each result's staging.
    assert_eq!(exec.buffer_bytes(), vec![2 * 9 * shard as u64 * 4; n]);
    let runtime = Runtime::new(devices.to_vec(), RuntimeOptions::default()).unwrap();
    let client = runtime.client("test", 1);
    let input = Rng::new(5).vec(n * shard);
    let sum: Vec<f32> = input
        .iter()
        .enumerate()
        .map(|(i, v)| v + i as f32 * 0.25)
        .collect();
    let chunk = shard / n;
    let mut a2a = vec![0.0; n * shard];
    for src in 0..n {
        for dst in 0..n {
            for k in 0..chunk {
                a2a[dst * shard + src * chunk + k] = sum[src * shard + dst * chunk + k];
            }
        }
    }
    let reduced: Vec<f32> = (0..shard)
        .map(|i| (0..n).map(|d| a2a[d * shard + i]).sum())
        .collect();
    let all_reduced: Vec<f32> = (0..n).flat_map(|_| reduced.clone()).collect();
    for mode in MODES {
        let out = client.run(&exec, vec![input.clone()], opts(mode)).unwrap();
        common::assert_close("all-to-all", &out[0], &a2a, 1e-6);
        common::assert_close("all-reduce", &out[1], &all_reduced, 1e-5);
        // Every transfer says what it moved: per device, the argument in, each collective's
        // shard out and its result in, and the two results out, a shard's bytes each.
        let traced = RunOptions {
            trace: true,
            ..opts(mode)
        };
        let (_, events) = client
            .submit(&exec, vec![input.clone()], traced)
            .unwrap()
            .wait_traced()
            .unwrap();
        let bytes = (shard * 4) as u64;
        for device in devices {
            let mut moved: Vec<(TransferKind, Direction, u64)> = events
                .iter()
                .filter(|e| e.device == device.id())
                .filter_map(|e| e.moved.map(|m| (m.kind, m.direction, m.bytes)))
                .collect();
            moved.sort();
            let want = vec![
                (TransferKind::Host, Direction::In, bytes),
                (TransferKind::Host, Direction::Out, bytes),
                (TransferKind::Host, Direction::Out, bytes),
                (TransferKind::AllToAll, Direction::In, bytes),
                (TransferKind::AllToAll, Direction::Out, bytes),
                (TransferKind::AllReduce, Direction::In, bytes),
                (TransferKind::AllReduce, Direction::Out, bytes),
            ];
            assert_eq!(moved, want, "{mode:?} on {}", device.label());
            let transfers = events.iter().filter(|e| {
                e.device == device.id() && e.kind == gangway::trace::EventKind::Transfer
            });
            assert_eq!(transfers.clone().count(), want.len());
            assert!(transfers.clone().all(|e| e.moved.is_some()));
        }
    }
}

/// A data × expert mesh (four virtual devices of each adapter): an all-to-all within each row of
/// experts, then an all-reduce of the partial sums within each column of data replicas, against
/// host references. Shard i sits at (data i / E, expert i % E).
fn collectives_over_one_axis_of_a_2d_mesh(adapters: &Adapters) {
    let devices = &adapters.mesh(4);
    let n = devices.len();
    let (data, experts) = (2, n / 2);
    let shard = 5 * experts; // chunks of 5
    let mut p = ProgramBuilder::new("2-d collectives");
    let gang = p.mesh(
        &(0..n).collect::<Vec<_>>(),
        &[("data", data), ("expert", experts)],
    );
    // Each data replica holds a partial sum of rows split over the experts (a gradient).
    let laid = p.spec(&gang, &[&["expert"]], &["data"]);
    let x = p.sharded_arg(&gang, TensorType::f32(&[shard]), laid);
    let t = p.all_to_all_over("a2a over experts", x, "expert");
    let r = p.all_reduce_over("sum over data", t, "data");
    let whole = format!("P(expert) over {{data=2, expert={experts}}}");
    assert_eq!(p.sharding(r).to_string(), whole);
    p.result(t);
    p.result(r);
    let exec = compile(&p.build().unwrap(), devices);
    let runtime = Runtime::new(devices.to_vec(), RuntimeOptions::default()).unwrap();
    let client = runtime.client("test", 1);
    let input = Rng::new(9).vec(n * shard);
    let chunk = shard / experts;
    let mut a2a = vec![0.0; n * shard];
    for i in 0..n {
        let (row, e) = (i / experts * experts, i % experts);
        for k in 0..experts {
            for c in 0..chunk {
                a2a[i * shard + k * chunk + c] = input[(row + k) * shard + e * chunk + c];
            }
        }
    }
    let reduced: Vec<f32> = (0..n * shard)
        .map(|j| {
            let (i, at) = (j / shard, j % shard);
            (0..data)
                .map(|d| a2a[(d * experts + i % experts) * shard + at])
                .sum()
        })
        .collect();
    for mode in MODES {
        let out = client.run(&exec, vec![input.clone()], opts(mode)).unwrap();
        common::assert_close("all-to-all over experts", &out[0], &a2a, 1e-6);
        common::assert_close("all-reduce over data", &out[1], &reduced, 1e-5);
    }
}

/// The expert exchange's all-to-all, ragged: every device's `[expert][capacity]` slot blocks to
/// the devices of their experts, expert-major, only each block's counted rows, over four virtual
/// devices of each adapter and in both dispatch modes. Against a plain-Rust model of the output
/// buffers: counted rows land where the full exchange puts them, and the rest keep what they
/// held, over runs whose counts differ (none, some, every row). Each device writes the counted
/// rows' bytes and reads back its whole shard and its counts.
fn a_ragged_exchange_moves_only_live_rows(adapters: &Adapters) {
    let devices = &adapters.mesh(4);
    let n = devices.len();
    let exchange = RaggedExchange {
        devices: n,
        experts: 2,
        capacity: 3,
        words: 5,
    };
    // One slot of buffers, so that every run writes the buffers the one before wrote.
    let one_slot = CompileOptions {
        in_flight: 1,
        ..CompileOptions::default()
    };
    let exec = Arc::new(exchange.program().compile(devices, one_slot).unwrap());
    let runtime = Runtime::new(devices.to_vec(), RuntimeOptions::default()).unwrap();
    let client = runtime.client("test", 1);
    // The model of every device's output buffers, zero before the first run.
    let mut held = vec![0.0f32; n * exchange.shard()];
    let mut home = held.clone();
    let mut rng = Rng::new(11);
    for mode in MODES {
        for run in 0..4 {
            let input = rng.vec(n * exchange.shard());
            let live = exchange.apply(run, &input, &mut held, &mut home);
            let traced = RunOptions {
                trace: true,
                ..opts(mode)
            };
            let (out, events) = client
                .submit(&exec, exchange.args(run, &input), traced)
                .unwrap()
                .wait_traced()
                .unwrap();
            let there: Vec<f32> = bytemuck::pod_collect_to_vec(&out[0]);
            let back: Vec<f32> = bytemuck::pod_collect_to_vec(&out[1]);
            assert_eq!(there, held, "{mode:?}, run {run}: there");
            assert_eq!(back, home, "{mode:?}, run {run}: back");
            // Both ways, each device reads back and writes only the counted rows; the counts'
            // exchange moves its records whole.
            let moved = |direction| -> u64 {
                events
                    .iter()
                    .filter_map(|e| e.moved)
                    .filter(|m| m.kind == TransferKind::AllToAll && m.direction == direction)
                    .map(|m| m.bytes)
                    .sum()
            };
            let rows = (2 * live * exchange.words * 4) as u64;
            let counts = (n * n * exchange.experts * 8) as u64;
            assert_eq!(moved(Direction::In), rows + counts, "run {run}");
            assert_eq!(moved(Direction::Out), rows + counts, "run {run}");
        }
    }
}

fn wrong_arguments_are_errors(device: &Device) {
    let devices = std::slice::from_ref(device);
    let mut p = ProgramBuilder::new("one");
    let x = p.arg(&[0], 8);
    p.result(x);
    let prog = p.build().unwrap();
    let exec = compile(&prog, devices);
    let runtime = Runtime::new(devices.to_vec(), RuntimeOptions::default()).unwrap();
    let client = runtime.client("test", 1);
    assert!(
        client
            .run(&exec, vec![vec![0.0; 7]], opts(DispatchMode::Parallel))
            .is_err()
    );
    assert!(
        client
            .run(&exec, Vec::<Vec<f32>>::new(), opts(DispatchMode::Parallel))
            .is_err()
    );
    let mut p = ProgramBuilder::new("wide");
    let x = p.arg(&[devices.len()], 8);
    p.result(x);
    let err = p
        .build()
        .unwrap()
        .compile(devices, CompileOptions::default())
        .unwrap_err();
    assert!(err.to_string().contains("uses"), "{err}");
}

/// Kernel nodes that run on some shards only (`ProgramBuilder::only_where`), two virtual devices
/// of each adapter and across adapters: an idle shard's fresh output is zero, what it sends in an
/// all-to-all is zero rows, and its in-place update leaves the input as it was, run after run.
fn idle_shards_leave_zeros_and_keep_in_place_inputs(adapters: &Adapters) {
    let devices = &adapters.mesh(2);
    let n = devices.len();
    let gang: Vec<usize> = (0..n).collect();
    let shard = 5 * n;
    // Shard 0 and every third one run; the others are idle.
    let active: Vec<bool> = (0..n).map(|i| i % 3 == 0).collect();
    let mut p = ProgramBuilder::new("idle shards");
    let x = p.arg(&gang, shard);
    let (y, acc) = p.only_where(Some(&active), |p| {
        let y = p.affine("2x+1", &gang, x, 2.0, 1.0);
        // Every shard of x accumulates y in place, but only the active shards run.
        let [acc] = p.kernel("x += y", &gang, Arc::new(Accumulate), &[x, y]);
        (y, acc)
    });
    // Collectives run everywhere: idle shards send their zeros.
    let t = p.all_to_all("a2a", y);
    let back = p.affine("t+0", &gang, t, 1.0, 0.0);
    p.result(y);
    p.result(acc);
    p.result(back);
    let prog = p.build().unwrap();
    let idle = (0..n).filter(|&i| !active[i]).count();
    let node = prog.nodes().iter().find(|n| n.name == "2x+1").unwrap();
    assert_eq!(node.active.is_some(), idle > 0);
    assert_eq!(prog.computations(), 2 * (n - idle) + n);
    let exec = compile(&prog, devices);
    let runtime = Runtime::new(devices.to_vec(), RuntimeOptions::default()).unwrap();
    let client = runtime.client("test", 1);
    let chunk = shard / n;
    for (run, mode) in MODES.into_iter().cycle().take(4).enumerate() {
        let input = Rng::new(run as u64).vec(n * shard);
        let mut want_y = vec![0.0f32; n * shard];
        let mut want_acc = input.clone();
        for i in (0..n).filter(|&i| active[i]) {
            for k in i * shard..(i + 1) * shard {
                want_y[k] = 2.0 * input[k] + 1.0;
                want_acc[k] = input[k] + want_y[k];
            }
        }
        let mut want_t = vec![0.0f32; n * shard];
        for src in 0..n {
            for dst in 0..n {
                for k in 0..chunk {
                    want_t[dst * shard + src * chunk + k] = want_y[src * shard + dst * chunk + k];
                }
            }
        }
        let out = client.run(&exec, vec![input], opts(mode)).unwrap();
        common::assert_close(&format!("y, run {run}"), &out[0], &want_y, 1e-6);
        common::assert_close(&format!("x += y, run {run}"), &out[1], &want_acc, 1e-6);
        common::assert_close(&format!("all-to-all, run {run}"), &out[2], &want_t, 1e-6);
    }
    // Flags must match the gang.
    let mut p = ProgramBuilder::new("bad flags");
    let x = p.arg(&gang, 4);
    let y = p.only_where(Some(&[true; 7]), |p| p.relu("r", &gang, x));
    p.result(y);
    let err = p.build().unwrap_err().to_string();
    assert!(err.contains("7 shard flags"), "{err}");
}
