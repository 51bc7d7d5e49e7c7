//! Crash safety of trainer checkpoints, end to end: the real `gangway train moe` is SIGKILLed at 20
//! random moments (three in four after a random number of its saves and a random part of a step,
//! the rest anywhere from start-up to exit) while it saves a checkpoint after every step. Each time the checkpoint left
//! behind must load (the previous one stays whole until the new one is), and `--resume` from it
//! must finish with exactly the final loss, validation score and checkpoint of a run that was
//! never interrupted (same device, same order of work: bit for bit, as the resume tests in
//! `moe_train.rs` check on one mesh).
#![allow(clippy::unwrap_used)]

mod common;

use common::{Adapters, Span, case};
use gangway::Rng;
use gangway::moe::MoeLmConfig;
use gangway::train::Checkpoint;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const STEPS: u32 = 40;
const KILLS: usize = 20;

/// A model small enough that a step takes milliseconds on lavapipe.
const TINY: [&str; 16] = [
    "--batch",
    "8",
    "--context",
    "2",
    "--embed",
    "2",
    "--model",
    "4",
    "--hidden",
    "4",
    "--experts",
    "2",
    "--top-k",
    "1",
    "--checkpoint-every",
    "1",
];

fn train(dir: &Path, ckpt: &Path, steps: u32, resume: bool) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gangway"));
    cmd.args(["train", "moe", "--steps", &steps.to_string()])
        .arg("--corpus")
        .arg(dir.join("text.txt"))
        .arg("--checkpoint")
        .arg(ckpt)
        .arg("--json")
        .arg(dir.join("report.json"))
        .args(TINY)
        // The matmul variant must not depend on a timing race between runs.
        .env("GANGWAY_AUTOTUNE", "off")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if resume {
        cmd.arg("--resume").arg(ckpt);
    }
    cmd
}

/// Runs to completion; returns the report's last loss and validation bits per byte.
fn finish(dir: &Path, ckpt: &Path, steps: u32, resume: bool) -> (f64, f64) {
    let out = train(dir, ckpt, steps, resume).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    last_loss_and_bpb(dir)
}

/// A whole run like [`finish`], timed: when its first checkpoint appeared and when it ended.
fn timed(dir: &Path, ckpt: &Path) -> ((f64, f64), Duration, Duration) {
    let began = Instant::now();
    let mut child = train(dir, ckpt, STEPS, false).spawn().unwrap();
    let mut first = None;
    let status = loop {
        if first.is_none() && ckpt.exists() {
            first = Some(began.elapsed());
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let end = began.elapsed();
    assert!(status.success(), "the uninterrupted run failed");
    (last_loss_and_bpb(dir), first.unwrap_or(end), end)
}

/// Returns once `child` has saved `saves` checkpoints to `ckpt` (each save replaces the file, so
/// a new modification time or length is a new save), or has exited.
fn wait_for_saves(child: &mut std::process::Child, ckpt: &Path, saves: u32) {
    let (mut seen, mut last) = (0, None);
    while seen < saves && child.try_wait().unwrap().is_none() {
        if let Ok(meta) = std::fs::metadata(ckpt) {
            let id = (meta.modified().ok(), meta.len());
            if last != Some(id) {
                last = Some(id);
                seen += 1;
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn last_loss_and_bpb(dir: &Path) -> (f64, f64) {
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    let last = report["losses"].as_array().unwrap().last().unwrap();
    (
        last.as_f64().unwrap(),
        report["valid_bpb"].as_f64().unwrap(),
    )
}

fn main() -> std::process::ExitCode {
    // One trial: the CLI picks its own device, as a user's run would.
    common::run(vec![
        case!(adapters: a_run_killed_at_any_moment_resumes_to_the_same_result).span(Span::All),
    ])
}

/// (`Child::kill` is SIGKILL on unix and TerminateProcess on Windows: no chance to clean up.)
fn a_run_killed_at_any_moment_resumes_to_the_same_result(_: &Adapters) {
    let t0 = Instant::now();
    let dir = std::env::temp_dir().join(format!("gangway-kill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let text = "the quick brown fox jumps over the lazy dog. ".repeat(40);
    std::fs::write(dir.join("text.txt"), text).unwrap();

    // A first run warms the driver's shader cache, so the timed run starts up as the killed
    // ones will.
    finish(&dir, &dir.join("warm-up.ckpt"), STEPS, false);
    let straight_path = dir.join("straight.ckpt");
    let (want, first_checkpoint, run_time) = timed(&dir, &straight_path);
    let straight = Checkpoint::<MoeLmConfig>::load(&straight_path).unwrap();
    assert_eq!(straight.step(), STEPS);

    let mut rng = Rng::new(0x6b11);
    let (mut resumed, mut fresh, mut done) = (0, 0, 0);
    for kill in 0..KILLS {
        let ckpt = dir.join(format!("killed-{kill}.ckpt"));
        // Every fourth kill at a moment anywhere in an uninterrupted run's span, start-up and
        // the final evaluation included; the others after a random number of saves and a random
        // part of a step more, so that most land mid-run however long start-up takes here and
        // however much the runs' speed varies.
        let u = f64::from(rng.unit());
        let step_time = (run_time - first_checkpoint) / STEPS;
        let (at, saves) = if kill % 4 == 3 {
            (run_time.mul_f64(u), 0)
        } else {
            (
                step_time.mul_f64(u),
                1 + rng.below(STEPS as usize - 2) as u32,
            )
        };
        let mut child = train(&dir, &ckpt, STEPS, false).spawn().unwrap();
        wait_for_saves(&mut child, &ckpt, saves);
        std::thread::sleep(at);
        // An error here means it already exited: a kill after the end is a moment too.
        let _ = child.kill();
        child.wait().unwrap();

        let got = if ckpt.exists() {
            let c = Checkpoint::<MoeLmConfig>::load(&ckpt).unwrap_or_else(|e| {
                panic!("kill {kill} after {at:?} left an unreadable checkpoint: {e}")
            });
            assert!(
                c.step() >= 1 && c.step() <= STEPS,
                "kill {kill}: step {}",
                c.step()
            );
            if c.step() == STEPS {
                done += 1;
                assert_eq!(c, straight, "kill {kill}: the finished checkpoint");
                continue;
            }
            resumed += 1;
            finish(&dir, &ckpt, STEPS - c.step(), true)
        } else {
            // Killed before the first checkpoint: start again.
            fresh += 1;
            finish(&dir, &ckpt, STEPS, false)
        };
        assert_eq!(
            got, want,
            "kill {kill} after {at:?}: final loss and validation bpb"
        );
        let end = Checkpoint::<MoeLmConfig>::load(&ckpt).unwrap();
        assert_eq!(end, straight, "kill {kill} after {at:?}: final checkpoint");
    }
    // Temporary files of saves a kill interrupted (the checkpoint beside each stayed whole).
    let torn = std::fs::read_dir(&dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .to_string_lossy()
                .ends_with(".partial")
        })
        .count();
    eprintln!(
        "{KILLS} kills: {resumed} resumed, {fresh} before the first checkpoint, {done} after \
         the end, {torn} during a save; {:.1} s (one run {:.2} s, its first checkpoint at \
         {:.2} s)",
        t0.elapsed().as_secs_f64(),
        run_time.as_secs_f64(),
        first_checkpoint.as_secs_f64()
    );
    // Most kills must land mid-run, or the test proves little.
    assert!(resumed >= KILLS / 2, "only {resumed} kills landed mid-run");
    let _ = std::fs::remove_dir_all(&dir);
}
