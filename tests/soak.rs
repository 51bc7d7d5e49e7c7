//! Soak: rounds of 4 clients × 50 programs each over overlapping gangs of one runtime, in both
//! dispatch modes, every result checked against the host. It counts wrong results, deadlocks (a run
//! that stops making progress until the device's wait timeout) and panics, and wants 0 of each.
//!
//! The suite runs a bounded soak of 10 rounds; the full one is
//! `cargo test --release --test soak -- --ignored` (100 rounds).
#![allow(clippy::unwrap_used)]

mod common;

use common::programs::{assert_consistent_order, mixed_program, mixed_reference};
use common::{Adapters, Span, case};
use gangway::program::{CompileOptions, Executable};
use gangway::sched::{DispatchMode, RunOptions, Runtime, RuntimeOptions};
use gangway::{DiscoveryOptions, Error, Rng};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const CLIENTS: usize = 4;
const PROGRAMS: usize = 50;
/// Runs a client keeps in flight: enough to overlap its gangs with the other clients'.
const IN_FLIGHT: usize = 3;

#[derive(Debug, Default)]
struct Tally {
    runs: AtomicU64,
    wrong: AtomicU64,
    deadlocks: AtomicU64,
    panics: AtomicU64,
    other_errors: AtomicU64,
}

impl Tally {
    fn error(&self, e: &Error) {
        let counter = match e {
            Error::Timeout { .. } => &self.deadlocks,
            Error::Panic { .. } => &self.panics,
            _ => &self.other_errors,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        eprintln!("soak: {e}");
    }
}

fn main() -> std::process::ExitCode {
    // The whole machine at once: gangs span virtual devices and adapters.
    common::run(vec![
        case!(adapters: soak_10_rounds).span(Span::All),
        case!(adapters: soak_100_rounds).span(Span::All).opt_in(),
    ])
}

fn soak(adapters: &Adapters, rounds: usize) {
    // Two virtual devices of every adapter. A shorter wait timeout than the default, so a
    // deadlock ends the test in bounded time.
    let mut opts = DiscoveryOptions::from_env().unwrap();
    opts.virtual_devices = 2;
    opts.wait_timeout = Duration::from_secs(30);
    let devices = adapters.discover(&opts);
    let n = devices.len();
    let runtime = Runtime::new(devices.clone(), RuntimeOptions::default()).unwrap();
    // Overlapping gangs: pairs sharing a device, one over everything, and one in reverse order.
    let gangs: Vec<Vec<usize>> = [
        vec![0, 1 % n],
        vec![1 % n, 2 % n],
        (0..n).collect(),
        (0..n).rev().collect(),
    ]
    .into_iter()
    .map(|mut g| {
        g.dedup();
        g
    })
    .collect();
    let programs: Vec<(Arc<Executable>, usize)> = gangs
        .iter()
        .enumerate()
        .map(|(c, gang)| {
            let shard = 4 * gang.len();
            let exec = mixed_program(gang, shard, c as f32)
                .compile(&devices, CompileOptions::default())
                .unwrap();
            (Arc::new(exec), shard)
        })
        .collect();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| runtime.client(&format!("client {c}"), 1))
        .collect();
    let tally = Tally::default();
    let start = Instant::now();
    for round in 0..rounds {
        std::thread::scope(|s| {
            for (c, client) in clients.iter().enumerate() {
                let (exec, shard) = &programs[c];
                let (gang, tally) = (&gangs[c], &tally);
                // A panic on a client thread (inside gangway) fails the test when the scope ends.
                s.spawn(move || {
                    let mut rng = Rng::new((round * CLIENTS + c) as u64);
                    let mut pending = std::collections::VecDeque::new();
                    let check = |(handle, want): (gangway::sched::RunHandle, Vec<Vec<f32>>)| {
                        tally.runs.fetch_add(1, Ordering::Relaxed);
                        match handle.wait() {
                            Ok(got) if got == want => {}
                            Ok(_) => {
                                tally.wrong.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => tally.error(&e),
                        }
                    };
                    for i in 0..PROGRAMS {
                        // Whole numbers: sums are exact in any order, so results compare exactly.
                        let x: Vec<f32> = (0..shard * gang.len())
                            .map(|_| rng.below(17) as f32 - 8.0)
                            .collect();
                        let mode = if (i + round) % 2 == 0 {
                            DispatchMode::Parallel
                        } else {
                            DispatchMode::Sequential
                        };
                        let want = mixed_reference(&x, gang.len(), *shard, c as f32);
                        let run = RunOptions {
                            mode,
                            microbatch: None,
                            ..RunOptions::default()
                        };
                        match client.submit(exec, vec![x], run) {
                            Ok(h) => pending.push_back((h, want)),
                            Err(e) => tally.error(&e),
                        }
                        if pending.len() == IN_FLIGHT
                            && let Some(p) = pending.pop_front()
                        {
                            check(p);
                        }
                    }
                    pending.into_iter().for_each(check);
                });
            }
        });
        assert_consistent_order(&runtime.gang_order());
        runtime.clear_gang_order();
    }
    let runs = tally.runs.load(Ordering::Relaxed);
    let (wrong, deadlocks, panics, other) = (
        tally.wrong.load(Ordering::Relaxed),
        tally.deadlocks.load(Ordering::Relaxed),
        tally.panics.load(Ordering::Relaxed),
        tally.other_errors.load(Ordering::Relaxed),
    );
    eprintln!(
        "soak: {rounds} rounds, {runs} runs over {n} devices in {:.1} s: {wrong} wrong, \
         {deadlocks} deadlocks, {panics} panics, {other} other errors",
        start.elapsed().as_secs_f64()
    );
    assert_eq!(runs, (rounds * CLIENTS * PROGRAMS) as u64);
    assert_eq!((wrong, deadlocks, panics, other), (0, 0, 0, 0));
    let stats = runtime.client_stats();
    assert!(
        stats
            .iter()
            .all(|s| s.finished == (rounds * PROGRAMS) as u64),
        "{stats:?}"
    );
}

fn soak_10_rounds(adapters: &Adapters) {
    soak(adapters, 10);
}

/// The full soak: `cargo test --release --test soak -- --ignored`.
fn soak_100_rounds(adapters: &Adapters) {
    soak(adapters, 100);
}
