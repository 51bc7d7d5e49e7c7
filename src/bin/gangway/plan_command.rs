//! `gangway plan`: the cost models of [`gangway::plan`] fed with what a bench report measured,
//! over the link measured here (the scaleout suite's exchanges) and the datacenter link given.

use crate::PlanArgs;
use anyhow::{Context, Result, bail};
use gangway::bench::Report;
use gangway::bench::moe::MoeBenchOptions;
use gangway::bench::report::CaseResult;
use gangway::bench::scaleout::{MESSAGE_BYTES, RANKS};
use gangway::plan::{Fabric, MoeStep, PipelineStep, fit_link, moe, pipeline};
use serde::Serialize;

/// Every prediction, for `--json`.
#[derive(Serialize)]
struct Plan {
    step: MoeStep,
    moe: Vec<(String, Fabric, gangway::plan::MoePrediction)>,
    pipeline: Option<(
        PipelineStep,
        Vec<(String, gangway::plan::PipelinePrediction)>,
    )>,
}

fn case<'a>(report: &'a Report, suite: &str, name: &str) -> Option<&'a CaseResult> {
    report
        .results
        .iter()
        .find(|c| c.suite == suite && c.case == name && c.stats.is_some())
}

/// The link the scaleout suite measured between 2 ranks, as a fabric of the given shape: its
/// latency and bandwidth fitted to the exchanges of every size ([`fit_link`]); `None` where the
/// report has fewer than two sizes (or is from before the exchanges said their sizes).
fn measured_link(report: &Report, shape: &Fabric) -> Option<Fabric> {
    let points: Vec<(f64, f64)> = report
        .results
        .iter()
        .filter(|c| c.suite == "scaleout" && c.metrics.get(RANKS) == Some(&2.0))
        .filter_map(|c| Some((*c.metrics.get(MESSAGE_BYTES)?, c.stats.as_ref()?.median_s)))
        .collect();
    let (latency_us, gbs) = fit_link(&points)?;
    Some(Fabric {
        intra_gbs: gbs,
        inter_gbs: gbs,
        latency_us,
        ..*shape
    })
}

fn moe_step(args: &PlanArgs, report: Option<&Report>) -> Result<MoeStep> {
    let (cfg, tokens) = MoeBenchOptions::standard().parallel;
    let experts_per_device = cfg.experts / 4;
    let dense = cfg
        .param_specs()
        .iter()
        .filter(|s| !s.name.contains(".w1") && !s.name.contains(".w2"))
        .map(|s| s.len())
        .sum();
    let (one_device_s, exposed_fraction) = match report.filter(|_| args.step_ms.is_none()) {
        Some(r) => {
            let one = case(r, "moe", "parallel: D=1")
                .context("the report has no moe `parallel: D=1` case (run `gangway bench moe`)")?;
            let four = case(r, "moe", "parallel: D=4 on one adapter")
                .context("the report has no moe `parallel: D=4 on one adapter` case")?;
            let m = |k: &str| four.metrics.get(k).copied().unwrap_or(0.0);
            let comm = m("all-to-all share") + m("all-reduce share");
            let exposed = if comm > 0.0 {
                (m("collectives exposed") / comm).min(1.0)
            } else {
                0.0
            };
            let one_s = one.stats.as_ref().map_or(0.0, |s| s.median_s);
            (one_s, exposed)
        }
        None => (
            args.step_ms
                .context("give --report REPORT.json, or --step-ms and --exposed")?
                / 1e3,
            args.exposed.context("give --exposed with --step-ms")?,
        ),
    };
    Ok(MoeStep {
        one_device_s,
        one_device_tokens: tokens,
        tokens_per_device: args.tokens_per_device,
        model: cfg.model,
        experts_per_device,
        top_k: cfg.top_k,
        capacity_factor: cfg.capacity_factor,
        blocks: cfg.blocks,
        dense_params: dense,
        exposed_fraction,
        speedup: args.speedup,
    })
}

/// The pipeline suite's measured op times for the largest measured 1F1B step (`None` without).
fn pipeline_step(args: &PlanArgs, report: Option<&Report>) -> Option<PipelineStep> {
    let c = report?
        .results
        .iter()
        .filter(|c| c.suite == "pipeline" && c.case.starts_with("1f1b") && c.stats.is_some())
        .max_by_key(|c| c.case.len())?;
    let m = |k: &str| c.metrics.get(k).copied();
    Some(PipelineStep {
        schedule: args.schedule,
        stages: args.stages,
        microbatches: args.microbatches,
        chunks: args.schedule.chunks(2),
        forward_us: m("F µs")?,
        backward_us: m("B µs")?,
        weight_grad_us: m("W µs")?,
        activation_bytes: m("activation bytes")? as u64,
    })
}

/// The reports given, as one: their results in order, a later case of the same suite and name
/// replacing an earlier one. `None` when none was given.
fn merged_reports(paths: &[std::path::PathBuf]) -> Result<Option<Report>> {
    let mut merged: Option<Report> = None;
    for p in paths {
        let r = Report::load(p).with_context(|| format!("reading {}", p.display()))?;
        match &mut merged {
            None => merged = Some(r),
            Some(m) => {
                for c in r.results {
                    m.results
                        .retain(|old| !(old.suite == c.suite && old.case == c.case));
                    m.results.push(c);
                }
            }
        }
    }
    Ok(merged)
}

pub(crate) fn plan(args: &PlanArgs) -> Result<()> {
    let report = merged_reports(&args.report)?;
    let shape = Fabric {
        hosts: args.hosts,
        devices_per_host: args.devices_per_host,
        intra_gbs: args.intra_gbs,
        inter_gbs: args.inter_gbps / 8.0,
        latency_us: args.latency_us,
    };
    if shape.hosts == 0 || shape.devices_per_host == 0 {
        bail!("--hosts and --devices-per-host must be at least 1");
    }
    let step = moe_step(args, report.as_ref())?;
    let mut fabrics = vec![(
        format!(
            "datacenter: {} GB/s within a host, {} Gb/s between, {} µs",
            args.intra_gbs, args.inter_gbps, args.latency_us
        ),
        shape,
    )];
    if let Some(link) = report.as_ref().and_then(|r| measured_link(r, &shape)) {
        fabrics.insert(
            0,
            (
                format!(
                    "MPI measured here (fitted): {:.2} GB/s, {:.0} µs",
                    link.inter_gbs, link.latency_us
                ),
                link,
            ),
        );
    }
    let n = shape.devices();
    println!(
        "MoE step over {n} devices ({} hosts × {}), {} tokens and {} experts per device, \
         measured step {:.1} ms at {} tokens on one device, {:.0}% of communication exposed, \
         devices {}× as fast as the measured one",
        args.hosts,
        args.devices_per_host,
        step.tokens_per_device,
        step.experts_per_device,
        step.one_device_s * 1e3,
        step.one_device_tokens,
        step.exposed_fraction * 100.0,
        step.speedup
    );
    let mut rows = Vec::new();
    let mut moe_out = Vec::new();
    for (name, fabric) in &fabrics {
        let p = moe(&step, fabric)?;
        let by = |c: &gangway::plan::Collective, times: f64| {
            format!(
                "{:.2} ms {} ({} {:.2} ms)",
                c.seconds * times * 1e3,
                c.chosen.name(),
                c.other.name(),
                c.other_seconds * times * 1e3
            )
        };
        rows.push(vec![
            name.clone(),
            format!("{:.2} ms", p.compute_s * 1e3),
            by(&p.all_to_all, 4.0 * step.blocks as f64),
            by(&p.all_reduce, 1.0),
            format!("{:.2} ms", p.step_s * 1e3),
            format!("{:.1}%", p.exposed_all_to_all_share * 100.0),
            format!("{:.3e}", p.tokens_per_s),
        ]);
        moe_out.push((name.clone(), *fabric, p));
    }
    print!(
        "{}",
        gangway::table::markdown_table(
            &[
                "link",
                "compute",
                "all-to-alls (the cheaper algorithm; the other)",
                "all-reduce (between hosts)",
                "step",
                "exposed all-to-all share",
                "tokens/s"
            ],
            &rows
        )
    );
    let mut pipe_out = None;
    match pipeline_step(args, report.as_ref()) {
        Some(ps) => {
            println!(
                "\n{} over {} stages (one per host), {} microbatches; measured F/B/W {:.0}/{:.0}/{:.0} µs, \
                 {} bytes between stages",
                ps.schedule.name(),
                ps.stages,
                ps.microbatches,
                ps.forward_us,
                ps.backward_us,
                ps.weight_grad_us,
                ps.activation_bytes
            );
            let mut rows = Vec::new();
            let mut preds = Vec::new();
            for (name, fabric) in &fabrics {
                let stages_fabric = Fabric {
                    hosts: ps.stages,
                    devices_per_host: 1,
                    ..*fabric
                };
                let p = pipeline(&ps, &stages_fabric)?;
                rows.push(vec![
                    name.clone(),
                    format!("{:.1} µs", p.transfer_us),
                    format!("{:.1}%", p.bubble * 100.0),
                    gangway::pipeline::percent(p.textbook_bubble),
                    format!("{:.2} ms", p.makespan_s * 1e3),
                ]);
                preds.push((name.clone(), p));
            }
            print!(
                "{}",
                gangway::table::markdown_table(
                    &[
                        "link",
                        "transfer",
                        "bubble (simulated)",
                        "bubble (textbook)",
                        "step"
                    ],
                    &rows
                )
            );
            pipe_out = Some((ps, preds));
        }
        None => println!(
            "\n(no pipeline prediction: give a report with the pipeline suite, `gangway bench pipeline`)"
        ),
    }
    if let Some(path) = &args.json {
        let out = Plan {
            step,
            moe: moe_out,
            pipeline: pipe_out,
        };
        crate::write_out(path, serde_json::to_string_pretty(&out)?.as_bytes())?;
    }
    Ok(())
}
