//! A job of two ranks training an MoE, served live through one address, rank 0's: `gangway
//! trace record` attached to it saves every rank's devices, titled by rank, with kernels on
//! each, and no all-to-all's data drawn as gathered on one rank before it was staged on the
//! other.
//!
//! Each process's trace clock counts from its own start, and rank 1 starts [`LATE`] seconds
//! after rank 0 here (as a rank launched over ssh may): unaligned, its events would be drawn
//! that much early. Rank 0 cannot start its work before rank 1 joins the mesh, so the gap would
//! show in every exchange between them.

use super::{BIN, Hosts, Ran, finish_reading, have_mpirun, mpirun, scratch, train_steps};
use gangway::trace::chrome::{self, ChromeTrace};
use gangway::trace::{Event, EventKind};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const SERVING: &str = "live: serving this job at ";
/// How much later rank 1 starts than rank 0.
const LATE: u32 = 2;

/// Runs `job`, which serves live; as soon as it names its address, `recorder(addr)` attaches
/// to it. The job's run, and the trace the recorder saved at `out`.
fn record_live_job(
    mut job: Command,
    recorder: impl Fn(&str) -> Command,
    out: &Path,
    what: &str,
) -> (Ran, ChromeTrace) {
    let mut child = job.spawn().unwrap();
    let err = child.stderr.take().unwrap();
    let (found, addr) = std::sync::mpsc::channel();
    let err_reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if let Some(a) = line.strip_prefix(SERVING) {
                let _ = found.send(a.trim().to_string());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let Ok(addr) = addr.recv_timeout(Duration::from_secs(120)) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{what}: no address:\n{}", err_reader.join().unwrap());
    };
    let recording = recorder(&addr)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ran = finish_reading(child, err_reader, Duration::from_secs(300), what);
    assert!(ran.ok, "{what} failed:\n{}\n{}", ran.stdout, ran.stderr);
    // The recorder ends with the job's end record (or the closed connection).
    let recorded = recording.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&recorded.stderr);
    assert!(recorded.status.success(), "{what}: trace record: {said}");
    assert!(said.contains("the job ended: ok"), "{what}: {said}");
    let trace = chrome::read(&std::fs::read(out).unwrap()).unwrap();
    (ran, trace)
}

/// Both ranks' devices, in rank order and titled by rank, each running kernels, and no
/// all-to-all's data drawn as gathered on one rank before it was staged on the other.
///
/// A collective node's transfers on a device, in time order, are its stage (the device's
/// shard read back and sent to the other ranks) then its gather (every member's shard written
/// in), once a run, and every rank runs the same runs. So the k-th gather of program p's node
/// n on a device of one rank needs the k-th stage of that node on the other rank's device of
/// the same place to have begun.
/// How far rank 0's estimate of another rank's clock may be off: half the shortest round trip of
/// the forwarder's probes. That is well under a millisecond on an idle machine, but not on a
/// loaded one. A loaded 2-core machine drew a gather 49 µs before the staging it waited for.
/// A CI run drew one 2.07 ms before (2026-12-07): since the ragged all-to-all stages only once
/// its counts are on the host, a stage begins just before its data is ready, so a gather may end
/// that little after it. Without the shift, rank 1's clock is off by about [`LATE`] s (it starts
/// that much later), a hundred times this.
const CLOCK_SLACK_NS: u64 = 20_000_000;

fn check_one_job(trace: &ChromeTrace, what: &str) {
    let labels: Vec<&str> = trace.tracks.iter().map(|t| t.label.as_str()).collect();
    assert_eq!(labels.len(), 4, "{what}: {labels:?}");
    for (lane, label) in labels.iter().enumerate() {
        assert!(
            label.starts_with(&format!("rank {}: ", lane / 2)),
            "{what}: lane {lane} is {label}"
        );
        assert!(
            trace
                .events
                .iter()
                .any(|e| e.device == lane && e.kind == EventKind::Kernel),
            "{what}: no kernel on lane {lane} ({label})"
        );
    }
    // (program, node, lane) -> that node's transfers on that lane, in time order.
    let mut transfers: BTreeMap<(u64, u32, usize), Vec<&Event>> = BTreeMap::new();
    for e in &trace.events {
        if let (EventKind::Transfer, Some(p), Some(n)) = (e.kind, e.program, e.node) {
            transfers.entry((p, n, e.device)).or_default().push(e);
        }
    }
    for list in transfers.values_mut() {
        list.sort_by_key(|e| e.start_ns);
    }
    // A program's runs: its uploads are one transfer a run, the fewest of any of its nodes.
    let mut runs: BTreeMap<(u64, usize), usize> = BTreeMap::new();
    for (&(p, _, lane), list) in &transfers {
        let r = runs.entry((p, lane)).or_insert(usize::MAX);
        *r = (*r).min(list.len());
    }
    let mut checked = 0;
    for (&(p, n, lane), list) in &transfers {
        let across = (lane + 2) % 4;
        // A collective's node: two transfers a run, here and on the other rank.
        let Some(other) = transfers.get(&(p, n, across)) else {
            continue;
        };
        if list.len() != 2 * runs[&(p, lane)] || other.len() != list.len() {
            continue;
        }
        for (mine, theirs) in list.chunks(2).zip(other.chunks(2)) {
            let (gather, stage) = (mine[1], theirs[0]);
            checked += 1;
            assert!(
                gather.end_ns + CLOCK_SLACK_NS >= stage.start_ns,
                "{what}: program {p} node {n}: lane {lane} gathered by {} ns, before lane \
                 {across} began staging at {} ns",
                gather.end_ns,
                stage.start_ns
            );
        }
    }
    assert!(
        checked > 0,
        "{what}: no collective between ranks was recorded"
    );
}

fn live_training(json: &Path) -> Vec<String> {
    ["--backends", "vulkan", "--virtual-devices", "2"]
        .iter()
        .map(|s| s.to_string())
        .chain(["--live".to_string(), "127.0.0.1:0".to_string()])
        .chain(train_steps(json, 4))
        .collect()
}

/// MPMD: rank 0 is `gangway args`, rank 1 a shell that sleeps [`LATE`] seconds, then runs
/// the same.
fn late_second_rank(args: &[String]) -> Vec<String> {
    let late = format!("sleep {LATE}; exec {BIN} {}", args.join(" "));
    ["-np", "1", BIN]
        .iter()
        .map(|s| s.to_string())
        .chain(args.iter().cloned())
        .chain([":", "-np", "1", "sh", "-c"].map(String::from))
        .chain([late])
        .collect()
}

/// `mpirun gangway --live 127.0.0.1:0 train moe …` over two ranks, recorded from this host.
pub(crate) fn a_live_job_of_two_ranks_is_one_address() {
    if !have_mpirun("live") {
        return;
    }
    let dir = scratch("live");
    let out = dir.join("recorded.json");
    let mut job = mpirun(&[]);
    job.args(late_second_rank(&live_training(&dir.join("live.json"))));
    let (ran, trace) = record_live_job(
        job,
        |addr| {
            let mut c = Command::new(BIN);
            c.args(["trace", "record", addr, "--out", out.to_str().unwrap()]);
            c
        },
        &out,
        "live over 2 ranks",
    );
    // Rank 0 alone serves: one address.
    assert_eq!(ran.stderr.matches(SERVING).count(), 1, "{}", ran.stderr);
    check_one_job(&trace, "2 ranks");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The same over two emulated hosts: the recorder runs on rank 0's host (namespace A).
pub(crate) fn a_live_job_over_two_emulated_hosts_is_one_address() {
    if !have_mpirun("live over hosts") {
        return;
    }
    let Some(hosts) = Hosts::make_or_skip("live over two hosts") else {
        return;
    };
    let dir = scratch("live-hosts");
    let out = dir.join("recorded.json");
    let mut job = hosts.mpirun(&dir);
    job.args(late_second_rank(&live_training(&dir.join("hosts.json"))));
    let (_, trace) = record_live_job(
        job,
        |addr| {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", &hosts.names[0], BIN]).args([
                "trace",
                "record",
                addr,
                "--out",
                out.to_str().unwrap(),
            ]);
            c
        },
        &out,
        "live over 2 hosts",
    );
    check_one_job(&trace, "2 hosts");
    drop(hosts);
    std::fs::remove_dir_all(&dir).unwrap();
}
