//! Issue 55: every numeric flag of `generate`, `eval lm`, `train lm` and `train moe` (and the
//! global ones) at its largest value gives a clear error or a bounded run: never an abort, a
//! panic or unbounded memory. Each flag taking a value gets the largest number its type takes
//! (u64, then u32, then f32, whichever clap accepts first); the command then either ends with
//! `error: …` on one line, ends well, or is still running at a deadline with its memory bounded.
//! Then, on the same checkpoint: `--init` beside training settings says what it applies and
//! ignores, `--prompt-file` takes bytes that are not UTF-8, and zero counts name their flags.
#![allow(clippy::unwrap_used)]

mod common;

use common::{Adapters, Span, case};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn main() -> std::process::ExitCode {
    common::run(vec![
        case!(adapters: every_numeric_flag_at_its_largest_is_an_error_or_a_bounded_run)
            .span(Span::All),
    ])
}

/// The largest values tried, widest type first: clap refuses a value its type cannot hold, and
/// the next is tried.
const LARGEST: [&str; 3] = ["18446744073709551615", "4294967295", "3.4028235e38"];

/// How long a run that was accepted may go on before the test stops it, and the resident memory
/// it may have then.
const DEADLINE: Duration = Duration::from_secs(12);
const MAX_RSS_KIB: u64 = 2 << 20;

/// A command's base flags, each with its value ("" for a switch).
type Flags = Vec<(&'static str, String)>;

#[derive(Debug)]
enum Outcome {
    Exited { code: Option<i32>, stderr: String },
    Running { rss_kib: u64 },
}

fn run(dir: &Path, args: &[String]) -> Outcome {
    let err_path = dir.join("stderr.txt");
    let mut child = Command::new(env!("CARGO_BIN_EXE_gangway"))
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
            return Outcome::Exited {
                code: status.code(),
                stderr,
            };
        }
        if start.elapsed() > DEADLINE {
            let rss_kib = common::rss_kib(child.id());
            let _ = child.kill();
            let _ = child.wait();
            return Outcome::Running { rss_kib };
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The flags of `command` that take a value, from its `--help` (long names, `--x <VALUE>`).
fn value_flags(command: &[&str]) -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_gangway"))
        .args(command)
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout).to_string();
    let mut flags: Vec<String> = help
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l.strip_prefix("-")?;
            let l = l.split_once(", ").map_or(l, |(_, long)| long);
            let l = l.trim_start_matches('-');
            let (name, rest) = l.split_once(' ')?;
            rest.starts_with('<').then(|| format!("--{name}"))
        })
        .collect();
    flags.dedup();
    flags
}

/// `base` (flag, value) pairs with `flag` set to `value` in place of its base value.
fn args_with(command: &[&str], base: &[(&str, String)], flag: &str, value: &str) -> Vec<String> {
    let mut args: Vec<String> = command.iter().map(|s| s.to_string()).collect();
    for (f, v) in base.iter().filter(|(f, _)| *f != flag) {
        args.push(f.to_string());
        if !v.is_empty() {
            args.push(v.clone());
        }
    }
    args.push(flag.to_string());
    args.push(value.to_string());
    args
}

fn every_numeric_flag_at_its_largest_is_an_error_or_a_bounded_run(_: &Adapters) {
    let dir = std::env::temp_dir().join(format!("gangway-limits-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = text_of(4000);
    let corpus = dir.join("corpus.txt");
    std::fs::write(&corpus, &text).unwrap();
    let corpus = corpus.display().to_string();
    let ckpt = dir.join("tiny.safetensors").display().to_string();
    let s = |v: &str| v.to_string();
    let lm_sizes = [
        ("--context", s("8")),
        ("--d-model", s("8")),
        ("--heads", s("2")),
        ("--hidden", s("16")),
        ("--experts", s("2")),
        ("--layers", s("2")),
    ];
    let mut train_lm: Flags = lm_sizes.to_vec();
    train_lm.extend([
        ("--steps", s("2")),
        ("--batch", s("2")),
        ("--eval-sequences", s("4")),
        ("--corpus", corpus.clone()),
    ]);
    // The checkpoint the other commands read.
    let made = run(
        &dir,
        &args_with(&["train", "lm"], &train_lm, "--checkpoint", &ckpt),
    );
    assert!(
        matches!(&made, Outcome::Exited { code: Some(0), .. }),
        "{made:?}"
    );
    let train_moe: Flags = vec![
        ("--steps", s("2")),
        ("--batch", s("16")),
        ("--context", s("4")),
        ("--embed", s("4")),
        ("--model", s("8")),
        ("--hidden", s("8")),
        ("--experts", s("2")),
        ("--eval-every", s("0")),
        ("--corpus", corpus.clone()),
    ];
    let eval_lm: Flags = vec![
        ("--checkpoint", ckpt.clone()),
        ("--file", corpus.clone()),
        ("--max-sequences", s("8")),
    ];
    let generate: Flags = vec![
        ("--checkpoint", ckpt.clone()),
        ("--max-bytes", s("4")),
        ("--prompt", s("the ")),
    ];
    let commands: [(&[&str], &Flags); 4] = [
        (&["generate"], &generate),
        (&["eval", "lm"], &eval_lm),
        (&["train", "lm"], &train_lm),
        (&["train", "moe"], &train_moe),
    ];
    let (mut errors, mut ran, mut running) = (0, 0, 0);
    let mut not_numeric = Vec::new();
    for (command, base) in commands {
        for flag in value_flags(command) {
            let mut tried = Vec::new();
            for value in LARGEST {
                let args = args_with(command, base, &flag, value);
                let outcome = run(&dir, &args);
                let shown = args.join(" ");
                match &outcome {
                    // clap refused the value for its type: the next, narrower one.
                    Outcome::Exited {
                        code: Some(2),
                        stderr,
                    } if stderr.contains("invalid value") => {
                        tried.push(value);
                        continue;
                    }
                    Outcome::Exited {
                        code: Some(0),
                        stderr,
                    } => {
                        assert!(!stderr.contains("panicked"), "{shown}: {stderr}");
                        ran += 1;
                    }
                    Outcome::Exited {
                        code: Some(1 | 2),
                        stderr,
                    } => {
                        // gangway's errors are one line; clap's add its usage after.
                        let said = stderr.lines().find(|l| l.starts_with("error: "));
                        assert!(
                            said.is_some() && !stderr.contains("panicked"),
                            "{shown}: a clear error, not {stderr}"
                        );
                        errors += 1;
                    }
                    Outcome::Running { rss_kib } => {
                        assert!(*rss_kib < MAX_RSS_KIB, "{shown}: {rss_kib} KiB resident");
                        running += 1;
                    }
                    other => panic!("{shown}: neither an error nor a bounded run: {other:?}"),
                }
                break;
            }
            // A flag no number is valid for (`--backends`, `--balance`) is not numeric.
            if tried.len() == LARGEST.len() {
                not_numeric.push(format!("{} {flag}", command.join(" ")));
            }
        }
    }
    eprintln!(
        "largest values: {errors} clear errors, {ran} runs that ended well, {running} bounded \
         runs stopped at {DEADLINE:?}; taking no number: {not_numeric:?}"
    );
    assert!(errors > 10, "the largest values are mostly refused");
    // The case that aborted before: a huge --max-bytes (here and with --host) names the flag.
    for extra in [&[][..], &["--host"][..]] {
        let mut args = args_with(&["generate"], &generate, "--max-bytes", "1000000000000");
        args.extend(extra.iter().map(|s| s.to_string()));
        match run(&dir, &args) {
            Outcome::Exited {
                code: Some(1),
                stderr,
            } => assert!(stderr.contains("--max-bytes 1000000000000"), "{stderr}"),
            other => panic!("{args:?}: {other:?}"),
        }
    }
    init_reports_what_it_applies_and_ignores(&dir, &train_lm, &ckpt);
    small_items_name_their_flags(&dir, &ckpt, &corpus);
    let _ = std::fs::remove_dir_all(&dir);
}

fn stderr_of(dir: &Path, args: &[String]) -> (Option<i32>, String) {
    match run(dir, args) {
        Outcome::Exited { code, stderr } => (code, stderr),
        other => panic!("{args:?}: {other:?}"),
    }
}

/// `--init` beside training settings: before issue 55 the file's α 0.01, z and capacity 1.25
/// were used silently. Now the given settings apply, each with a line, and a size flag is
/// ignored with a line naming it.
fn init_reports_what_it_applies_and_ignores(dir: &Path, train_lm: &Flags, ckpt: &str) {
    let json = dir.join("init.json").display().to_string();
    let mut base: Flags = train_lm
        .iter()
        .filter(|(f, _)| !["--layers", "--steps"].contains(f))
        .cloned()
        .collect();
    base.extend([
        ("--init", ckpt.to_string()),
        ("--aux-alpha", "0.5".into()),
        ("--z-loss", "0".into()),
        ("--capacity-factor", "2.0".into()),
        ("--layers", "4".into()),
        ("--json", json.clone()),
    ]);
    let (code, err) = stderr_of(dir, &args_with(&["train", "lm"], &base, "--steps", "1"));
    assert_eq!(code, Some(0), "{err}");
    for line in [
        "--aux-alpha 0.5: applied (the file's setting was 0.01)",
        "--capacity-factor 2: applied (the file's setting was 1.25)",
        "ignored: --layers 4, the file has 2 (the weights' own size is kept)",
    ] {
        assert!(err.contains(line), "{line}: {err}");
    }
    // z was 0 in the file as on the command line: nothing to say.
    assert!(!err.contains("--z-loss"), "{err}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let c = &report["config"];
    assert_eq!(
        (c["aux_alpha"].as_f64(), c["capacity_factor"].as_f64()),
        (Some(0.5), Some(2.0))
    );
    assert_eq!(c["layers"].as_u64(), Some(2), "the file's size: {c}");
}

/// `--prompt-file` takes any bytes; `--max-sequences 0` and `--samples 0` are refused in their
/// own words.
fn small_items_name_their_flags(dir: &Path, ckpt: &str, corpus: &str) {
    let prompt = dir.join("prompt.bin");
    std::fs::write(&prompt, [0xff, 0xfe, b'a', 0x80]).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gangway"))
        .args([
            "generate",
            "--checkpoint",
            ckpt,
            "--max-bytes",
            "3",
            "--temperature",
            "0",
        ])
        .arg("--prompt-file")
        .arg(&prompt)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stdout.starts_with(&[0xff, 0xfe, b'a', 0x80]),
        "{:?}",
        out.stdout
    );
    assert_eq!(out.stdout.len(), 4 + 3 + 1, "prompt, 3 bytes, a newline");
    let s = |v: &str| v.to_string();
    let (code, err) = stderr_of(
        dir,
        &[
            s("eval"),
            s("lm"),
            s("--checkpoint"),
            s(ckpt),
            s("--file"),
            s(corpus),
            s("--max-sequences"),
            s("0"),
        ],
    );
    assert_eq!(code, Some(1));
    assert!(err.contains("--max-sequences must be at least 1"), "{err}");
    let (code, err) = stderr_of(
        dir,
        &[
            s("generate"),
            s("--checkpoint"),
            s(ckpt),
            s("--samples"),
            s("0"),
        ],
    );
    assert_eq!(code, Some(1));
    assert!(err.contains("--samples must be at least 1"), "{err}");
    // Samples decoded together past the device's buffer limit: at the default sizes (context
    // and width 64) 100,000 samples' key/value cache is 1.6 GB a layer.
    let wide = dir.join("wide.safetensors").display().to_string();
    let (code, err) = stderr_of(
        dir,
        &[
            s("train"),
            s("lm"),
            s("--steps"),
            s("1"),
            s("--batch"),
            s("2"),
            s("--corpus"),
            s(corpus),
            s("--checkpoint"),
            wide.clone(),
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let (code, err) = stderr_of(
        dir,
        &[
            s("generate"),
            s("--checkpoint"),
            wide,
            s("--samples"),
            s("100000"),
            s("--max-bytes"),
            s("1"),
        ],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("--samples 100000: the samples are decoded together"),
        "{err}"
    );
    // A validation part too short for the end's evaluation fails before the first step (it
    // failed after the last one, without the final checkpoint): a million steps never start.
    let small = dir.join("small.txt");
    std::fs::write(&small, text_of(700)).unwrap();
    let (code, err) = stderr_of(
        dir,
        &[
            s("train"),
            s("lm"),
            s("--steps"),
            s("1000000"),
            s("--groups"),
            s("2"),
            s("--batch"),
            s("2"),
            s("--corpus"),
            small.display().to_string(),
        ],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("fewer than the 2 routing groups"), "{err}");
}

/// `n` bytes of plain text.
fn text_of(n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| b"the gangway runs on every GPU. "[i % 31])
        .collect()
}
