//! `gangway trace FILE [--json]`: a Chrome trace summed up ([`TraceSummary`]) as text, or as
//! JSON for scripts. (`gangway trace record`, saving a live job's stream, is `live_command`'s.)

use std::fmt::Write as _;
use std::time::Instant;

use anyhow::{Context, Result};
use gangway::bench::format::seconds;
use gangway::trace::chrome;
use gangway::trace::summary::TraceSummary;

use crate::cli::TraceArgs;

pub(crate) fn trace(args: &TraceArgs) -> Result<()> {
    let Some(file) = &args.file else {
        anyhow::bail!("gangway trace needs a trace file, or `record ADDR --out FILE`");
    };
    let t0 = Instant::now();
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let trace = chrome::read(&bytes)
        .map_err(anyhow::Error::msg)
        .with_context(|| file.display().to_string())?;
    let summary = TraceSummary::of(&trace, args.top);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print!("{}", text(&summary));
    }
    eprintln!(
        "read {} in {:.2} s",
        file.display(),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

fn ns(ns: u64) -> String {
    seconds(ns as f64 / 1e9)
}

fn percent(f: f64) -> String {
    format!("{:.1}%", f * 100.0)
}

/// The summary for a person: one section per part.
fn text(s: &TraceSummary) -> String {
    let mut out = String::new();
    let list = |l: &[gangway::trace::summary::Count]| {
        l.iter()
            .map(|c| format!("{} {}", c.what, c.count))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(
        out,
        "{} trace ({}): {} trace events, {} slices and {} instants over {}",
        s.dialect,
        if s.dialect == "gangway" {
            "one process per device, one thread per lane"
        } else {
            "one row per thread"
        },
        s.events,
        s.slices,
        s.instants,
        ns(s.span_ns)
    );
    let _ = writeln!(out, "phases: {}", list(&s.phases));
    if !s.not_drawn.is_empty() {
        let _ = writeln!(out, "not drawn: {}", list(&s.not_drawn));
    }
    let _ = writeln!(
        out,
        "\nthreads (busy = union of slices; utilization = busy / the thread's span):"
    );
    for p in &s.processes {
        let name = p.name.as_deref().map_or_else(
            || format!("process {}", p.pid),
            |n| format!("{n} (pid {})", p.pid),
        );
        let _ = writeln!(out, "  {name}");
        for t in &p.threads {
            let _ = writeln!(
                out,
                "    {:<32} {:>7} slices  from {:>9}  span {:>9}  busy {:>9}  {:>6}",
                t.label,
                t.slices,
                ns(t.start_ns),
                ns(t.span_ns),
                ns(t.busy_ns),
                percent(t.utilization)
            );
        }
    }
    if !s.top_names.is_empty() {
        let _ = writeln!(out, "\ntop names by total time (inclusive):");
        for n in &s.top_names {
            let _ = writeln!(out, "  {:>9}  {:>7}×  {}", ns(n.total_ns), n.count, n.name);
        }
    }
    if !s.counters.is_empty() {
        let _ = writeln!(out, "\ncounters:");
        for c in &s.counters {
            let _ = writeln!(
                out,
                "  {} / {}: {} samples, {} .. {}",
                c.process, c.name, c.samples, c.min, c.max
            );
        }
    }
    if !s.devices.is_empty() {
        let _ = writeln!(
            out,
            "\ndevices (kernels and transfers: count, union of their time; utilization = busy / trace span):"
        );
        for d in &s.devices {
            let _ = writeln!(
                out,
                "  device {}{}: kernels {} ({}), transfers {} ({}), busy {}, utilization {}",
                d.device,
                d.name
                    .as_deref()
                    .map_or(String::new(), |n| format!(" ({n})")),
                d.kernels,
                ns(d.kernel_ns),
                d.transfers,
                ns(d.transfer_ns),
                ns(d.busy_ns),
                percent(d.utilization)
            );
            if !d.moved.is_empty() {
                let kinds: Vec<String> = (d.moved.iter())
                    .map(|m| {
                        let b = gangway::bench::format::bytes(m.bytes);
                        let (kind, way) = (m.kind.name(), m.direction.name());
                        format!("{kind} {way} {b} ({}×)", m.transfers)
                    })
                    .collect();
                let total = gangway::bench::format::bytes(d.transfer_bytes);
                let _ = writeln!(out, "    moved {total}: {}", kinds.join(", "));
            }
        }
    }
    if !s.programs.is_empty() {
        let _ = writeln!(
            out,
            "\nprograms (kernels per run: each kernel node once on each of its devices):"
        );
        for p in &s.programs {
            let _ = writeln!(
                out,
                "  program {}: {} kernels and {:.1} transfers per run, {:.1} runs{}",
                p.program,
                p.kernels_per_run,
                p.transfers_per_run,
                p.runs,
                p.first_kernel
                    .as_deref()
                    .map_or(String::new(), |n| format!(" (first kernel: {n})"))
            );
        }
    }
    if let Some(b) = &s.bubble {
        let _ = writeln!(
            out,
            "\npipeline bubble: {} ({} stages, makespan {}; idle compute / (stages × makespan))",
            percent(b.fraction),
            b.stages,
            ns(b.makespan_ns)
        );
    }
    out
}
