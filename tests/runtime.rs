//! The runtime under load and under faults: gang order across concurrent clients, memory budgets,
//! lost devices, proportional shares, and traces, on the virtual devices of each adapter (and
//! across adapters for gang order and traces).
#![allow(clippy::unwrap_used)]

mod common;

use common::programs::{
    assert_consistent_order, exchange_program, mixed_program, mixed_reference, run_exchanges,
};
use common::{Adapters, Need, Span, case};
use gangway::device::WhenFull;
use gangway::program::{CompileOptions, Executable, ProgramBuilder};
use gangway::sched::{
    DispatchMode, Policy, ResourceManager, RunOptions, Runtime, RuntimeOptions, SliceRequest,
};
use gangway::trace::{Clock, EventKind, Tracer, chrome};
use gangway::{Device, DiscoveryOptions, Error, MeshShape};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() -> std::process::ExitCode {
    common::run(vec![
        case!(adapters: concurrent_clients_with_overlapping_all_to_alls_agree_on_gang_order)
            .span(Span::EachAndCross),
        case!(device: proportional_shares_split_admissions),
        case!(adapters: over_budget_compiles_fail_clearly_or_wait_for_memory),
        case!(adapters: a_lost_device_fails_its_programs_and_spares_the_others),
        case!(adapters: traces_export_to_valid_chrome_json).span(Span::EachAndCross),
        case!(adapters: the_resource_manager_lends_least_shared_devices_and_takes_them_back),
        case!(adapters: a_wait_that_cannot_finish_times_out_naming_what_it_awaited),
        case!(device: a_client_per_request_does_not_grow_the_runtime),
        case!(device: the_gang_order_is_kept_as_long_as_asked),
        case!(device: a_quieted_runtime_finishes_its_runs_and_admits_no_more),
        case!(adapters: a_run_waited_for_at_once_is_driven_by_its_caller),
        case!(adapters: a_compiled_programs_later_runs_create_no_gpu_objects),
        case!(adapters: each_run_handle_returns_its_own_events),
        case!(adapters: a_device_waiting_on_another_runs_independent_work_meanwhile)
            .needs(Need::ConcurrentDevices),
    ])
}

/// New devices of `adapters`, two virtual devices each unless `tweak` says otherwise.
fn fresh_devices(
    adapters: &Adapters,
    tweak: impl FnOnce(&mut DiscoveryOptions),
) -> Vec<gangway::Device> {
    let mut opts = DiscoveryOptions::from_env().unwrap();
    opts.virtual_devices = 2;
    tweak(&mut opts);
    adapters.discover(&opts)
}

/// Two virtual devices of each adapter.
fn concurrent_clients_with_overlapping_all_to_alls_agree_on_gang_order(adapters: &Adapters) {
    let devices = &adapters.mesh(2);
    let n = devices.len();
    let runtime = Runtime::new(devices.to_vec(), RuntimeOptions::default()).unwrap();
    // Overlapping gangs: pairs that share a device, and one over everything.
    let gangs: Vec<Vec<usize>> = vec![
        vec![0, 1 % n],
        vec![1 % n, 2 % n],
        (0..n).collect(),
        vec![(n - 1), 0],
    ]
    .into_iter()
    .map(|mut g| {
        g.dedup();
        g
    })
    .collect();
    std::thread::scope(|s| {
        for (c, gang) in gangs.iter().enumerate() {
            let client = runtime.client(&format!("client {c}"), 1);
            s.spawn(move || {
                let shard = 4 * gang.len();
                let prog = exchange_program(gang, shard, c as f32);
                let exec = Arc::new(prog.compile(devices, CompileOptions::default()).unwrap());
                run_exchanges(&client, &exec, gang.len(), shard, c, 50);
            });
        }
    });
    let stats = runtime.client_stats();
    assert!(stats.iter().all(|s| s.finished == 50), "{stats:?}");
    assert_consistent_order(&runtime.gang_order());
}

/// Under proportional shares 1:2:4:8 and a backlog from every client, admissions split 1:2:4:8.
fn proportional_shares_split_admissions(device: &Device) {
    let devices = std::slice::from_ref(device);
    let runtime = Runtime::new(
        devices.to_vec(),
        RuntimeOptions {
            policy: Policy::Proportional,
            max_in_flight: 1,
            ..RuntimeOptions::default()
        },
    )
    .unwrap();
    let shares = [1u32, 2, 4, 8];
    let mut p = ProgramBuilder::new("tiny");
    let x = p.arg(&[0], 64);
    let y = p.affine("y", &[0], x, 1.0, 1.0);
    p.result(y);
    let prog = p.build().unwrap();
    let opts = CompileOptions {
        in_flight: 40,
        ..CompileOptions::default()
    };
    let clients: Vec<_> = shares
        .iter()
        .map(|&s| {
            (
                runtime.client(&format!("share {s}"), s),
                Arc::new(prog.compile(devices, opts).unwrap()),
            )
        })
        .collect();
    // Line every client's backlog up before admission starts.
    runtime.pause_admission();
    let mut handles = Vec::new();
    for (client, exec) in &clients {
        for _ in 0..30 {
            handles.push(
                client
                    .submit(exec, vec![vec![0.0; 64]], RunOptions::default())
                    .unwrap(),
            );
        }
    }
    runtime.resume_admission();
    for h in handles {
        h.wait().unwrap();
    }
    let mut first_runs: Vec<usize> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for r in &runtime.gang_order()[0] {
        if seen.insert(r.run) {
            first_runs.push(r.client);
        }
    }
    let counts: Vec<usize> = (0..4)
        .map(|c| first_runs[..30].iter().filter(|&&x| x == c).count())
        .collect();
    for (got, want) in counts.iter().zip([2, 4, 8, 16]) {
        assert!(
            got.abs_diff(want) <= 1,
            "first 30 admissions split {counts:?}, want 2:4:8:16"
        );
    }
}

fn over_budget_compiles_fail_clearly_or_wait_for_memory(adapters: &Adapters) {
    let devices = fresh_devices(adapters, |o| o.memory_budget = Some(64 << 10));
    let big = |len: usize| {
        let mut p = ProgramBuilder::new("big");
        let x = p.arg(&[0], len);
        let y = p.relu("y", &[0], x);
        p.result(y);
        p.build().unwrap()
    };
    let fail = CompileOptions {
        in_flight: 1,
        when_full: WhenFull::Fail,
    };
    // 3 buffers of 8192 floats: 96 KiB > 64 KiB.
    let err = big(8192).compile(&devices, fail).unwrap_err();
    assert!(matches!(err, Error::MemoryBudget { .. }), "{err}");
    assert!(err.to_string().contains("never fit"), "{err}");
    // 48 KiB fits once; a second waits until the first is dropped.
    let first = big(4096).compile(&devices, fail).unwrap();
    assert!(matches!(
        big(4096).compile(&devices, fail),
        Err(Error::MemoryBudget { .. })
    ));
    let waiter = std::thread::spawn({
        let devices = devices.clone();
        move || {
            let wait = CompileOptions {
                in_flight: 1,
                when_full: WhenFull::Wait(Duration::from_secs(20)),
            };
            big(4096).compile(&devices, wait).map(|_| ())
        }
    });
    std::thread::sleep(Duration::from_millis(200));
    drop(first);
    waiter.join().unwrap().unwrap();
    assert_eq!(devices[0].memory().in_use, 0, "everything was released");
}

/// Four virtual devices of the adapter: the chain on the first two loses one, the chain on the
/// last two goes on.
fn a_lost_device_fails_its_programs_and_spares_the_others(adapters: &Adapters) {
    let devices = fresh_devices(adapters, |o| {
        o.virtual_devices = 4;
        o.wait_timeout = Duration::from_secs(20);
    });
    let runtime = Runtime::new(devices.clone(), RuntimeOptions::default()).unwrap();
    let doomed_client = runtime.client("doomed", 1);
    let other_client = runtime.client("other", 1);
    let chain = |a: usize, b: usize| {
        Arc::new(
            gangway::program::chain(&[a, b], 256)
                .unwrap()
                .compile(&devices, CompileOptions::default())
                .unwrap(),
        )
    };
    let doomed: Arc<Executable> = chain(0, 1);
    let n = devices.len();
    let other: Arc<Executable> = chain(n - 1, n - 2);
    for e in [&doomed, &other] {
        doomed_client
            .run(e, vec![vec![1.0; 256]], RunOptions::default())
            .unwrap();
    }
    devices[0].destroy();
    let start = Instant::now();
    let err = doomed_client
        .run(&doomed, vec![vec![1.0; 256]], RunOptions::default())
        .unwrap_err();
    assert!(matches!(err, Error::DeviceLost { .. }), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "failed in bounded time"
    );
    for mode in [DispatchMode::Parallel, DispatchMode::Sequential] {
        let out = other_client
            .run(
                &other,
                vec![vec![1.0; 256]],
                RunOptions {
                    mode,
                    microbatch: None,
                    ..RunOptions::default()
                },
            )
            .unwrap();
        assert!(out[0].iter().all(|&v| v == 3.0));
    }
}

/// Two virtual devices of each adapter.
fn traces_export_to_valid_chrome_json(adapters: &Adapters) {
    let devices = &adapters.mesh(2);
    let tracer = Tracer::new();
    let events = tracer.subscribe();
    let runtime = Runtime::new(
        devices.to_vec(),
        RuntimeOptions {
            tracer: tracer.clone(),
            ..RuntimeOptions::default()
        },
    )
    .unwrap();
    let manager = ResourceManager::new(devices.to_vec());
    let slice = manager
        .acquire(&SliceRequest::Devices(devices.len()))
        .unwrap();
    let last = devices.len() - 1;
    let mut p = ProgramBuilder::new("traced");
    let x = p.arg(&[0], 512);
    let a = p.affine("A", &[0], x, 2.0, 1.0);
    let b = p.relu("B", &[last], a);
    p.result(b);
    let exec = Arc::new(
        p.build()
            .unwrap()
            .compile(slice.devices(), CompileOptions::default())
            .unwrap(),
    );
    let client = runtime.client("t", 1);
    for mode in [DispatchMode::Sequential, DispatchMode::Parallel] {
        for _ in 0..3 {
            client
                .run(
                    &exec,
                    vec![vec![1.0; 512]],
                    RunOptions {
                        mode,
                        microbatch: Some(7),
                        ..RunOptions::default()
                    },
                )
                .unwrap();
        }
    }
    // GPU timestamps are resolved in batches, at most ~100 ms after their kernels ran.
    let want = if devices[0].info().features.timestamp_query {
        Clock::Gpu
    } else {
        Clock::Host
    };
    let kernel_on = |recorded: &[gangway::trace::Event], d: &gangway::Device| {
        recorded
            .iter()
            .any(|e| e.kind == EventKind::Kernel && e.device == d.id() && e.clock == want)
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !kernel_on(&tracer.events(), &devices[0]) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let recorded = tracer.events();
    assert!(
        kernel_on(&recorded, &devices[0]),
        "no {want:?}-clock kernel event on device 0"
    );
    assert_eq!(
        events.try_iter().count(),
        recorded.len(),
        "subscribers see every event"
    );
    for kind in [
        EventKind::Kernel,
        EventKind::Transfer,
        EventKind::HostEncode,
    ] {
        assert!(
            recorded.iter().any(|e| e.kind == kind),
            "no {kind:?} events"
        );
    }
    assert!(
        recorded
            .iter()
            .all(|e| e.microbatch == Some(7) && e.program == Some(exec.id()))
    );
    let tracks: Vec<gangway::trace::Track> = devices
        .iter()
        .map(|d| gangway::trace::Track::device(d.id(), d.label()))
        .collect();
    let json = chrome::to_json(&recorded, &tracks);
    let summary = chrome::check(&json).unwrap();
    assert!(summary.flow_pairs >= 6, "{summary:?}");
    assert!(
        summary.counters > 0 && summary.processes >= 2,
        "{summary:?}"
    );
}

/// Two virtual devices of the adapter.
fn the_resource_manager_lends_least_shared_devices_and_takes_them_back(adapters: &Adapters) {
    let devices = adapters.mesh(2);
    let n = devices.len();
    let manager = ResourceManager::new(devices.to_vec());
    let a = manager.acquire(&SliceRequest::Devices(n / 2)).unwrap();
    let b = manager.acquire(&SliceRequest::Devices(n - n / 2)).unwrap();
    assert!(
        a.physical().iter().all(|d| !b.physical().contains(d)),
        "disjoint while devices are free"
    );
    let c = manager.acquire(&SliceRequest::Devices(n)).unwrap();
    assert_eq!(
        manager.load(),
        vec![2; n],
        "a full slice overlaps (time-multiplexed)"
    );
    let mesh = manager
        .acquire(&SliceRequest::Mesh(
            MeshShape::new(&[("data", 2), ("expert", n / 2)], n).unwrap(),
        ))
        .unwrap();
    assert_eq!(mesh.mesh().unwrap().shape().size("expert").unwrap(), n / 2);
    drop((a, b, c, mesh));
    assert_eq!(
        manager.load(),
        vec![0; n],
        "dropping slices returns the devices"
    );
    assert!(matches!(
        manager.acquire(&SliceRequest::Devices(n + 1)),
        Err(Error::Unavailable { requested, available }) if requested == n + 1 && available == n
    ));
}

fn a_wait_that_cannot_finish_times_out_naming_what_it_awaited(adapters: &Adapters) {
    let devices = fresh_devices(adapters, |o| {
        o.virtual_devices = 1;
        o.wait_timeout = Duration::from_millis(300);
    });
    let runtime = Runtime::new(devices.clone(), RuntimeOptions::default()).unwrap();
    let client = runtime.client("c", 1);
    let mut p = ProgramBuilder::new("slot-bound");
    let x = p.arg(&[0], 16);
    p.result(x);
    let exec = Arc::new(
        p.build()
            .unwrap()
            .compile(
                &devices,
                CompileOptions {
                    in_flight: 1,
                    ..CompileOptions::default()
                },
            )
            .unwrap(),
    );
    // Admission paused: the first run holds the only slot, so the second cannot get one.
    runtime.pause_admission();
    let first = client
        .submit(&exec, vec![vec![1.0; 16]], RunOptions::default())
        .unwrap();
    let err = client
        .submit(&exec, vec![vec![1.0; 16]], RunOptions::default())
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("free run slot of program \"slot-bound\""),
        "{err}"
    );
    runtime.resume_admission();
    assert_eq!(first.wait().unwrap()[0], vec![1.0; 16]);
}

/// A long-lived runtime that makes a client per request (the viewer's live workload made one per
/// batch) forgets each once its handle is dropped and its runs are done: the client table stays
/// one slot, and the counts survive, summed by name.
/// The gang order's record keeps the newest gangs, from `gang_order_keep` down to half of it,
/// and none at 0 (the viewer's runtime, which never reads it).
fn the_gang_order_is_kept_as_long_as_asked(device: &Device) {
    let devices = std::slice::from_ref(device);
    let exec = Arc::new(
        gangway::program::chain(&[0], 16)
            .unwrap()
            .compile(devices, CompileOptions::default())
            .unwrap(),
    );
    for keep in [0, 1, 4] {
        let runtime = Runtime::new(
            devices.to_vec(),
            RuntimeOptions {
                gang_order_keep: keep,
                ..RuntimeOptions::default()
            },
        )
        .unwrap();
        let client = runtime.client("c", 1);
        for _ in 0..9 {
            client
                .run(&exec, vec![vec![1.0; 16]], RunOptions::default())
                .unwrap();
        }
        let order = &runtime.gang_order()[0];
        assert!(
            order.len() <= keep && order.len() >= keep.div_ceil(2),
            "keep {keep}: {} kept",
            order.len()
        );
        if let Some(last) = order.last() {
            // The newest run's gang is the last one kept.
            let runs_seen: std::collections::BTreeSet<u64> = order.iter().map(|g| g.run).collect();
            assert_eq!(runs_seen.last(), Some(&last.run), "keep {keep}");
        }
    }
}

/// What a Ctrl-C does before the process exits: the runs in flight finish, later ones wait
/// (here, until admission resumes), and a quieter outlives nothing (the runtime gone, it
/// answers at once).
fn a_quieted_runtime_finishes_its_runs_and_admits_no_more(device: &Device) {
    let devices = std::slice::from_ref(device);
    let runtime = Runtime::new(devices.to_vec(), RuntimeOptions::default()).unwrap();
    let exec = Arc::new(
        gangway::program::chain(&[0, 0, 0], 4096)
            .unwrap()
            .compile(devices, CompileOptions::default())
            .unwrap(),
    );
    let client = runtime.client("c", 1);
    let running = client
        .submit(&exec, vec![vec![1.0; 4096]], RunOptions::default())
        .unwrap();
    let quieter = runtime.quieter();
    assert!(quieter.quiet(Duration::from_secs(30)));
    assert_eq!(running.wait().unwrap()[0], vec![4.0; 4096]);
    let later = client
        .submit(&exec, vec![vec![1.0; 4096]], RunOptions::default())
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        runtime
            .client_stats()
            .iter()
            .map(|c| c.admitted)
            .sum::<u64>(),
        1,
        "a run was admitted after the runtime was quieted"
    );
    runtime.resume_admission();
    assert_eq!(later.wait().unwrap()[0], vec![4.0; 4096]);
    drop(client);
    drop(runtime);
    assert!(quieter.quiet(Duration::ZERO));
}

fn a_client_per_request_does_not_grow_the_runtime(device: &Device) {
    let devices = std::slice::from_ref(device);
    let runtime = Runtime::new(devices.to_vec(), RuntimeOptions::default()).unwrap();
    let mut p = ProgramBuilder::new("request");
    let x = p.arg(&[0], 16);
    let y = p.affine("y", &[0], x, 2.0, 0.0);
    p.result(y);
    let exec = Arc::new(
        p.build()
            .unwrap()
            .compile(devices, CompileOptions::default())
            .unwrap(),
    );
    // A client dropped while its run is still queued keeps its slot until the run is done.
    let early = runtime.client("early", 1);
    runtime.pause_admission();
    let queued = early
        .submit(&exec, vec![vec![1.0; 16]], RunOptions::default())
        .unwrap();
    drop(early);
    runtime.resume_admission();
    assert_eq!(queued.wait().unwrap()[0], vec![2.0; 16]);
    for i in 0..200 {
        let client = runtime.client("per request", 1);
        let out = client
            .run(&exec, vec![vec![i as f32; 16]], RunOptions::default())
            .unwrap();
        assert_eq!(out[0], vec![2.0 * i as f32; 16]);
    }
    let live = runtime.client("live", 1);
    let mut stats = runtime.client_stats();
    stats.sort_by(|a, b| a.name.cmp(&b.name));
    let counts: Vec<(&str, u64, u64)> = stats
        .iter()
        .map(|s| (s.name.as_str(), s.admitted, s.finished))
        .collect();
    assert_eq!(
        counts,
        [("early", 1, 1), ("live", 0, 0), ("per request", 200, 200)]
    );
    // Every gang record names a slot in use then: one slot served all 201 requests.
    let slots: std::collections::BTreeSet<usize> =
        runtime.gang_order()[0].iter().map(|g| g.client).collect();
    assert_eq!(slots.len(), 1, "{slots:?}");
    drop(live);
}

/// Two new virtual devices of the adapter, so nothing else creates on them. Once a compiled
/// program with every kind of node (kernels, an all-to-all, an all-reduce, a transfer, results)
/// has run, traced and not, its later runs create no buffer, bind group, query set or pipeline:
/// everything is made once and reused.
fn a_compiled_programs_later_runs_create_no_gpu_objects(adapters: &Adapters) {
    let devices = &fresh_devices(adapters, |_| {})[..2];
    let runtime = Runtime::new(devices.to_vec(), RuntimeOptions::default()).unwrap();
    let exec = Arc::new(
        mixed_program(&[0, 1], 64, 0.5)
            .compile(devices, CompileOptions::default())
            .unwrap(),
    );
    let client = runtime.client("steady", 1);
    let x: Vec<f32> = (0..2 * 64).map(|i| i as f32 - 40.0).collect();
    let want = mixed_reference(&x, 2, 64, 0.5);
    let created = || devices.iter().map(Device::objects_created).sum::<u64>();
    let run = |mode: DispatchMode, trace: bool| {
        let opts = RunOptions {
            mode,
            trace,
            ..RunOptions::default()
        };
        assert_eq!(client.run(&exec, vec![x.clone()], opts).unwrap(), want);
    };
    let modes = [DispatchMode::Parallel, DispatchMode::Sequential];
    let kinds = modes.iter().flat_map(|&m| [(m, false), (m, true)]);
    for (mode, trace) in kinds.clone() {
        run(mode, trace);
    }
    let before = created();
    for _ in 0..3 {
        for (mode, trace) in kinds.clone() {
            run(mode, trace);
        }
    }
    assert_eq!(
        created() - before,
        0,
        "GPU objects created by 12 later runs"
    );
}

/// Two virtual devices of the adapter. One runtime, its own tracer off: traced runs of two
/// clients in flight at once each get exactly their own events back, on the process's clock;
/// an untraced run gets none.
fn each_run_handle_returns_its_own_events(adapters: &Adapters) {
    let devices = &adapters.mesh(2)[..2];
    let runtime = Runtime::new(devices.to_vec(), RuntimeOptions::default()).unwrap();
    let exchange = |c: f32| {
        Arc::new(
            exchange_program(&[0, 1], 64, c)
                .compile(devices, CompileOptions::default())
                .unwrap(),
        )
    };
    let (a, b) = (exchange(1.0), exchange(2.0));
    let (ca, cb) = (runtime.client("a", 1), runtime.client("b", 1));
    let traced = RunOptions {
        trace: true,
        ..RunOptions::default()
    };
    let x: Vec<f32> = (0..2 * 64).map(|i| i as f32).collect();
    let before = gangway::trace::ns_since_epoch(Instant::now());
    let ha = ca.submit(&a, vec![x.clone()], traced).unwrap();
    let hb = cb.submit(&b, vec![x.clone()], traced).unwrap();
    let quiet = ca
        .submit(&a, vec![x.clone()], RunOptions::default())
        .unwrap();
    let (ra, ea) = ha.wait_traced().unwrap();
    let (rb, eb) = hb.wait_traced().unwrap();
    let (rq, eq) = quiet.wait_traced().unwrap();
    let after = gangway::trace::ns_since_epoch(Instant::now());
    assert_eq!(ra, rq, "tracing does not change results");
    assert!(!rb.is_empty());
    assert!(eq.is_empty(), "an untraced run keeps no events");
    let want_clock = if devices[0].info().features.timestamp_query {
        Clock::Gpu
    } else {
        Clock::Host
    };
    for (events, exec) in [(&ea, &a), (&eb, &b)] {
        assert!(!events.is_empty());
        assert!(
            events.iter().all(|e| e.program == Some(exec.id())),
            "only the run's own program's events"
        );
        assert!(events.windows(2).all(|w| w[0].start_ns <= w[1].start_ns));
        for e in events {
            assert!(
                e.start_ns >= before && e.end_ns <= after,
                "{e:?} outside the run ({before}..{after})"
            );
        }
        // Every kernel of every shard, timed as the adapter can, is there at once.
        let kernels: Vec<_> = events
            .iter()
            .filter(|e| e.kind == EventKind::Kernel)
            .collect();
        let want = exec.program().computations();
        assert_eq!(kernels.len(), want, "{kernels:?}");
        assert!(kernels.iter().all(|e| e.clock == want_clock));
        assert!(events.iter().any(|e| e.kind == EventKind::Transfer));
    }
}

/// Two virtual devices of the adapter. Device 0 waits for data that device 1 computes slowly;
/// meanwhile it runs the later node that does not need that data (run ahead), but not the one
/// that does, and a program that keeps its order runs nothing ahead, unless the waiting node and
/// the independent one share an overlap group. Results are the same.
fn a_device_waiting_on_another_runs_independent_work_meanwhile(adapters: &Adapters) {
    let devices = &adapters.mesh(2)[..2];
    let runtime = Runtime::new(devices.to_vec(), RuntimeOptions::default()).unwrap();
    let client = runtime.client("t", 1);
    const N: usize = 1 << 18;
    let program = |keep_order: bool, paired: bool| {
        let mut p = ProgramBuilder::new("run ahead");
        if keep_order {
            p.keep_order();
        }
        let a = p.arg(&[0], N);
        let b = p.arg(&[1], N);
        let slow = p.fused_affine("slow", &[1], b, 1.0, 1.0, 400);
        let group = if paired { p.overlap_group() } else { 0 };
        p.set_overlap_group(group);
        let moved = p.transfer(slow, &[0]);
        let free = p.affine("independent", &[0], a, 2.0, 0.0);
        p.set_overlap_group(0);
        let joined = p.add("dependent", &[0], moved, free);
        p.result(joined);
        Arc::new(
            p.build()
                .unwrap()
                .compile(devices, CompileOptions::default())
                .unwrap(),
        )
    };
    let traced = RunOptions {
        trace: true,
        ..RunOptions::default()
    };
    let (a, b) = (vec![1.0f32; N], vec![0.0f32; N]);
    let mut outputs = Vec::new();
    for (keep_order, paired) in [(false, false), (true, false), (true, true)] {
        let exec = program(keep_order, paired);
        let (out, events) = client
            .submit(&exec, vec![a.clone(), b.clone()], traced)
            .unwrap()
            .wait_traced()
            .unwrap();
        outputs.push(out);
        let on0 = devices[0].id();
        let named = |name: &str| {
            events
                .iter()
                .find(|e| e.device == on0 && e.name == name && e.kind == EventKind::Kernel)
                .unwrap_or_else(|| panic!("no kernel {name} on device 0: {events:?}"))
        };
        let received = events
            .iter()
            .find(|e| e.device == on0 && e.name.starts_with("recv"))
            .expect("the receive on device 0");
        let (free, dependent) = (named("independent"), named("dependent"));
        assert!(
            dependent.start_ns >= received.end_ns,
            "the node needing the data ran after it arrived"
        );
        if keep_order && !paired {
            assert!(
                free.start_ns >= received.end_ns,
                "in kept order the independent node waits its turn: {free:?} vs {received:?}"
            );
        } else {
            // It started while the data was still on its way (on a loaded machine it may end
            // after, sharing the cores with the slow node).
            assert!(
                free.start_ns < received.start_ns,
                "the independent node ran while device 0 waited: {free:?} vs {received:?}"
            );
        }
    }
    assert_eq!(outputs[0], outputs[1]);
    assert_eq!(outputs[0], outputs[2]);
    // 0 + 400 slow steps of +1, plus 2 · 1.
    let values: Vec<f32> = bytemuck::pod_collect_to_vec(&outputs[0][0]);
    assert!(values.iter().all(|&v| v == 402.0), "{:?}", &values[..4]);
}

/// A one-device run that its caller waits for at once (`Client::run`) is driven on the caller's
/// thread while the device's worker is idle, with the same results; a run submitted to be
/// waited for later, or one spanning devices, is the workers'. A caller that drives while other
/// clients' runs are queued on the device leaves them to the worker, and a panic on the
/// caller's turn fails its run and breaks the device as a worker's would.
fn a_run_waited_for_at_once_is_driven_by_its_caller(adapters: &Adapters) {
    let devices = fresh_devices(adapters, |_| {});
    let runtime = Runtime::new(devices.clone(), RuntimeOptions::default()).unwrap();
    let compile = |gang: &[usize]| {
        let mut p = ProgramBuilder::new("driven");
        let x = p.arg(&[gang[0]], 64);
        let mut y = p.affine("a", &[gang[0]], x, 2.0, 1.0);
        if let Some(&second) = gang.get(1) {
            y = p.affine("b", &[second], y, 1.0, 1.0);
        }
        p.result(y);
        Arc::new(
            p.build()
                .unwrap()
                .compile(&devices, CompileOptions::default())
                .unwrap(),
        )
    };
    let (one, two) = (compile(&[0]), compile(&[0, 1]));
    let driven = |name: &str| {
        let stats = runtime.client_stats();
        stats
            .iter()
            .find(|s| s.name == name)
            .map_or(0, |s| s.driven)
    };
    let client = runtime.client("caller", 1);
    for mode in [DispatchMode::Parallel, DispatchMode::Sequential] {
        let opts = RunOptions {
            mode,
            ..RunOptions::default()
        };
        let before = driven("caller");
        for i in 0..40 {
            let out = client.run(&one, vec![vec![i as f32; 64]], opts).unwrap();
            assert_eq!(out[0], vec![2.0 * i as f32 + 1.0; 64]);
        }
        // The worker's thread may be on a turn of its own (its doorbell's timeout, or still
        // ending the last run's turn on a loaded machine) when a run comes: that run is its, so
        // most but not necessarily all are driven.
        let n = driven("caller") - before;
        assert!(n >= 20, "{mode:?}: {n} of 40 runs driven by their caller");
        let before = driven("caller");
        let out = client.run(&two, vec![vec![1.0; 64]], opts).unwrap();
        assert_eq!(out[0], vec![4.0; 64]);
        let handle = client.submit(&one, vec![vec![1.0; 64]], opts).unwrap();
        assert_eq!(handle.wait().unwrap()[0], vec![3.0; 64]);
        assert_eq!(
            driven("caller"),
            before,
            "{mode:?}: spanning devices or submitted"
        );
    }
    // Another client's runs queued on the device: the caller's run and theirs all finish.
    let other = runtime.client("other", 1);
    let queued: Vec<_> = (0..16)
        .map(|i| {
            other
                .submit(&one, vec![vec![i as f32; 64]], RunOptions::default())
                .unwrap()
        })
        .collect();
    let out = client
        .run(&one, vec![vec![5.0; 64]], RunOptions::default())
        .unwrap();
    assert_eq!(out[0], vec![11.0; 64]);
    for (i, h) in queued.into_iter().enumerate() {
        assert_eq!(h.wait().unwrap()[0], vec![2.0 * i as f32 + 1.0; 64]);
    }
    // A panic on the caller's turn is the device's, as on its worker's.
    runtime
        .inject_panic(&devices[0], "injected on a driven run")
        .unwrap();
    let err = client
        .run(&one, vec![vec![1.0; 64]], RunOptions::default())
        .unwrap_err();
    assert!(
        matches!(&err, Error::Panic { message, .. } if message == "injected on a driven run"),
        "{err}"
    );
    let err = client
        .run(&one, vec![vec![1.0; 64]], RunOptions::default())
        .unwrap_err();
    assert!(
        matches!(err, Error::Panic { .. }),
        "the device stays broken: {err}"
    );
    // The other device's worker was never in the way.
    let only_second = compile(&[1]);
    let out = client
        .run(&only_second, vec![vec![1.0; 64]], RunOptions::default())
        .unwrap();
    assert_eq!(out[0], vec![3.0; 64]);
}
