//! `gangway bench` and `gangway bench compare`: options in, progress on stderr, the Markdown table
//! on stdout, the report to `--json`.

use crate::progress;
use crate::{BenchArgs, DTypeArg};
use anyhow::{Context, Result, bail};
use gangway::bench::compare::{Sides, Verdict};
use gangway::bench::format::{number, seconds};
use gangway::bench::harness::SLOWDOWN_VAR;
use gangway::bench::noise::Rule;
use gangway::bench::report::Status;
use gangway::bench::run::{Progress, run};
use gangway::bench::side_by_side::SideBySide;
use gangway::bench::{BenchOptions, Report, Suite, select_adapters};
use gangway::kernels::matmul::MatmulVariant;
use gangway::sched::Runtime;
use gangway::trace::Tracer;
use gangway::{DType, Device};
use std::path::{Path, PathBuf};

/// The options the flags ask for, on top of the standard or quick sizes.
fn options(args: &BenchArgs, tracer: &Tracer) -> Result<BenchOptions> {
    let mut o = if args.quick {
        BenchOptions::quick()
    } else {
        BenchOptions::standard()
    };
    if !args.suites.is_empty() {
        o.suites = args
            .suites
            .iter()
            .map(|s| Suite::from_name(s))
            .collect::<gangway::Result<_>>()?;
        o.suites.dedup();
    }
    o.sampling.warmup = args.warmup.unwrap_or(o.sampling.warmup);
    o.sampling.samples = args.samples.unwrap_or(o.sampling.samples);
    o.command = std::env::args().collect();
    o.peak_gflops = args.peak_gflops;
    o.peak_gbps = args.peak_gbps;
    let s = &mut o.sizes;
    if let Some(v) = &args.matmul_sizes {
        s.matmul.sizes = v.clone();
    }
    if let Some(v) = &args.variants {
        s.matmul.variants = v
            .iter()
            .map(|n| {
                MatmulVariant::from_name(n).with_context(|| {
                    format!("unknown matmul variant {n:?} (naive, tiled, vec4, subgroup)")
                })
            })
            .collect::<Result<_>>()?;
    }
    s.matmul.dtype = match args.dtype {
        DTypeArg::F32 => DType::F32,
        DTypeArg::F16 => DType::F16,
    };
    s.attention.dtype = s.matmul.dtype;
    if let Some(v) = &args.contexts {
        s.attention.contexts = v.clone();
    }
    if let Some(v) = &args.stream_sizes {
        s.memory.sizes = v.clone();
    }
    s.dispatch.max_stages = args.max_stages.unwrap_or(s.dispatch.max_stages);
    s.dispatch.runs = args.runs.unwrap_or(s.dispatch.runs);
    s.dispatch.trace = tracer.clone();
    s.pipeline.stages = args.stages.unwrap_or(s.pipeline.stages);
    if let Some(v) = &args.microbatches {
        s.pipeline.microbatches = v.clone();
    }
    s.moe.tokens = args.tokens.unwrap_or(s.moe.tokens);
    if let Some(v) = &args.experts {
        s.moe.experts = v.clone();
    }
    if let Some(v) = &args.devices {
        s.moe.devices = v.clone();
    }
    s.btm.steps = args.branch_steps.unwrap_or(s.btm.steps);
    if let Some(v) = &args.exchange_sizes {
        s.scaleout.sizes = v.clone();
    }
    Ok(o)
}

/// A finished case in one line.
fn summary(result: &gangway::bench::report::CaseResult) -> String {
    match (&result.stats, &result.figure) {
        (Some(s), Some(f)) if result.status == Status::Ok => format!(
            "{} median ({}), {} {}",
            seconds(s.median_s),
            s.timing.name(),
            number(f.value),
            f.unit
        ),
        _ => format!(
            "{}: {}",
            if result.status == Status::Skipped {
                "skipped"
            } else {
                "FAILED"
            },
            result.reason.clone().unwrap_or_default()
        ),
    }
}

/// Writes `text` to `path` whole or not at all (an interrupted run keeps the last full report).
fn save(path: &Path, text: &str) -> Result<()> {
    crate::write_out(path, text.as_bytes())
}

pub fn bench_suites(
    runtime: &Runtime,
    devices: &[Device],
    args: &BenchArgs,
    tracer: &Tracer,
) -> Result<()> {
    let o = options(args, tracer)?;
    let adapters = select_adapters(devices, &args.adapters)?;
    // Fail on an unwritable output now, not after the run.
    for path in [&args.json, &args.markdown].into_iter().flatten() {
        gangway::fsutil::check_writable(path)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let mut save_error = None;
    let mut pb: Option<indicatif::ProgressBar> = None;
    let report = run(runtime, &adapters, &o, |p| match p {
        Progress::Started {
            index,
            total,
            suite,
            case,
            adapter,
        } => {
            let pb = pb.get_or_insert_with(|| progress::bar(total as u64));
            pb.set_position(index as u64 - 1);
            pb.set_message(format!("{suite} · {case} · {adapter}"));
        }
        Progress::Round {
            round,
            rounds,
            suite,
            adapter,
        } => {
            if let Some(pb) = &pb {
                pb.set_message(format!("{suite} · round {round} of {rounds} · {adapter}"));
            }
        }
        Progress::Finished {
            index,
            total,
            adapter,
            report,
        } => {
            // Saved after every case: an interrupted run keeps what it measured.
            if let Some(path) = &args.json
                && save_error.is_none()
                && let Err(e) = save(path, &report.to_json())
            {
                save_error = Some(e);
            }
            if let Some(result) = report.results.last() {
                crate::live_command::bench_case(result);
                let text = format!(
                    "[{index}/{total}] {} · {} · {adapter}: {}",
                    result.suite,
                    result.case,
                    summary(result)
                );
                match &pb {
                    Some(pb) => progress::line(pb, text),
                    None => eprintln!("{text}"),
                }
            }
        }
    })?;
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    let table = report.table();
    print!("{table}");
    if let Some(e) = save_error {
        return Err(e);
    }
    if let Some(path) = &args.json {
        save(path, &report.to_json())?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = &args.markdown {
        save(path, &table)?;
    }
    let failed: Vec<String> = report
        .failures()
        .map(|r| format!("{} · {}", r.suite, r.case))
        .collect();
    if !failed.is_empty() {
        bail!(
            "{} case(s) FAILED (reasons in the table): {}",
            failed.len(),
            failed.join(", ")
        );
    }
    Ok(())
}

/// Several reports side by side, a column per machine and adapter, optionally only some suites.
pub fn bench_side_by_side(paths: &[PathBuf], suites: &[String]) -> Result<()> {
    let reports = paths
        .iter()
        .map(|p| Ok((p.display().to_string(), Report::load(p)?)))
        .collect::<Result<Vec<_>>>()?;
    let named: Vec<(String, &Report)> = reports.iter().map(|(n, r)| (n.clone(), r)).collect();
    let mut s = SideBySide::new(&named);
    if !suites.is_empty() {
        let known: Vec<String> = s.suites().iter().map(|x| x.to_string()).collect();
        if let Some(missing) = suites.iter().find(|x| !known.contains(x)) {
            bail!(
                "no report has the suite {missing:?}; they have: {}",
                known.join(", ")
            );
        }
        s.rows.retain(|r| suites.contains(&r.suite));
    }
    if s.columns.is_empty() {
        bail!("the reports hold no results");
    }
    print!("{}", s.table());
    Ok(())
}

/// Compares two reports, each optionally narrowed to one adapter.
pub fn bench_compare(
    files: [(&PathBuf, Option<&str>); 2],
    any_adapter: bool,
    fail_on_slower: bool,
    noise_threshold_percent: f64,
) -> Result<()> {
    let rule = Rule::with_percent(noise_threshold_percent).map_err(anyhow::Error::msg)?;
    let (a, b) = (Report::load(files[0].0)?, Report::load(files[1].0)?);
    let sides = Sides {
        old_adapter: files[0].1.map(str::to_string),
        new_adapter: files[1].1.map(str::to_string),
        any_adapter,
    };
    let (c, pairing) = sides.compare(&a, &b, rule).map_err(anyhow::Error::msg)?;
    for (side, r) in [("old", &a), ("new", &b)] {
        let adapters: Vec<String> = r.adapters.iter().map(|a| a.label()).collect();
        println!(
            "{side}: gangway {} ({}) at {} on {}, {}, {} samples a case{}",
            r.gangway.version,
            r.gangway.git,
            r.timestamp,
            r.machine.cpu,
            adapters.join(", "),
            r.settings.sampling.samples,
            r.settings.slowdown.map_or_else(String::new, |f| format!(
                ", SLOWED DOWN {f}× on purpose ({SLOWDOWN_VAR}, test-only)"
            ))
        );
    }
    println!("{}", pairing.describe());
    println!();
    print!("{}", c.table());
    println!(
        "\n{} faster, {} slower, {} no change, {} too few samples, {} not measured. {}",
        c.count(Verdict::Faster),
        c.count(Verdict::Slower),
        c.count(Verdict::WithinNoise),
        c.count(Verdict::TooFewSamples),
        c.count(Verdict::NotMeasured),
        rule.describe()
    );
    if !c.suite_means().is_empty() {
        println!(
            "geometric mean of new/old per suite: {}",
            c.suite_means_line()
        );
    }
    if c.cases.is_empty() {
        bail!(
            "no case is in both reports (different adapters? choose one a side with \
             --old-adapter and --new-adapter, or pass --any-adapter)"
        );
    }
    if fail_on_slower && c.count(Verdict::Slower) > 0 {
        bail!("{} case(s) got slower", c.count(Verdict::Slower));
    }
    Ok(())
}
