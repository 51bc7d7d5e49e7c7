//! `gangway pipeline`: a schedule simulated (its ASCII timeline, bubble against the textbook,
//! peak activations, an SVG figure), several compared, or with `--run` one training step run on
//! the devices (the MLP, or with `--moe` the MoE stack on pairs of devices) and measured beside
//! the simulation. Costs come from `--costs-us` or a pipelined run's trace (`--costs-from`), and
//! ZB-V, zb-auto, V-Half and V-Min are planned for them. `--optimal` adds the shortest schedule
//! of the schedule's family there is ([`gangway::pipeline::optimal`]: one chunk a stage, two in
//! a V, or two looped) and its gap to it; `--compare`, wherever the setting is small enough,
//! the optimum of each family among its rows and every row's gap to its own. One schedule is the library's [`gangway::pipeline::study`], which this
//! only prints. Returns what the trace's lanes are, for `--trace`.

use anyhow::{Context, Result, bail};
use gangway::pipeline::{ScheduleKind, percent};
use gangway::sched::Runtime;
use gangway::trace::{Tracer, Track, TrackKind};

use crate::PipelineArgs;

/// Runs one pipelined training step on the runtime's devices and prints measured beside
/// simulated; the step's events, in the pipeline's view, go to `tracer`.
fn pipeline_run(args: &PipelineArgs, runtime: &Runtime, tracer: &Tracer) -> Result<Vec<Track>> {
    use gangway::pipeline::{bubble_formula, timeline_named};
    let fold = args.fold();
    let client = runtime.client("pipeline", 1);
    // Under mpirun the stages spread over the ranks' devices, rank by rank.
    let devices = runtime.mesh();
    let (report, max_error, what) = if args.moe {
        pipeline_run_moe(args, &client, devices)?
    } else {
        // The schedule planned for the given costs (ZB-V's and zb-auto's depend on them).
        let costs = pipeline_costs(args)?.per_chunk(args.schedule.passes(args.chunks));
        let schedule = gangway::pipeline::Schedule::for_costs_within(
            args.schedule,
            args.stages,
            args.microbatches,
            args.schedule.chunks(args.chunks),
            &costs,
            args.memory_limit,
        )?;
        let (r, report) =
            gangway::pipeline::workload::PreparedCase::of(schedule)?.run(&client, devices, fold)?;
        let what = format!(
            "one MLP training step ({} layers of {}, {} rows per microbatch)",
            gangway::pipeline::workload::layers(args.stages, r.chunks),
            gangway::pipeline::workload::WIDTH,
            gangway::pipeline::workload::ROWS,
        );
        (report, r.max_weight_error, what)
    };
    for e in &report.events {
        tracer.emit(e.clone());
    }
    let chunks = args.schedule.chunks(args.chunks);
    let lanes = fold.device_count(args.stages);
    let lane = gangway::trace::track::kind_of(&report.tracks).word();
    let units = if args.moe {
        "pairs of devices"
    } else {
        "devices"
    };
    let on = if fold.shares(args.stages) {
        format!(
            "{} stages on {lanes} {units} ({})",
            args.stages,
            fold.placement_name()
        )
    } else {
        format!("{} {units}", args.stages)
    };
    println!(
        "{} on {on}, {} microbatches{}: {what}",
        args.schedule.name(),
        args.microbatches,
        chunks_suffix(chunks),
    );
    for track in &report.tracks {
        println!("  {}", track.label);
    }
    let start = report
        .events
        .iter()
        .filter(|e| e.lane == gangway::trace::Lane::Compute)
        .map(|e| e.start_ns)
        .min()
        .unwrap_or(0);
    println!("measured:");
    print!(
        "{}",
        timeline_named(
            &report.events,
            lanes,
            lane,
            start..start + report.makespan_ns,
            args.width
        )
    );
    println!("simulated with this run's op times:");
    print!("{}", report.simulated.timeline(args.width));
    let textbook = bubble_formula(args.schedule, args.stages, args.microbatches, chunks);
    crate::live_command::metric(gangway::live::Metric::now(
        "pipeline/bubble",
        report.measured_bubble,
    ));
    println!(
        "bubble: {:.1}% measured, {:.1}% simulated, {} textbook",
        report.measured_bubble * 100.0,
        report.simulated.bubble_fraction * 100.0,
        percent(textbook)
    );
    let c = &report.measured;
    println!(
        "step {:.2} ms; mean op µs F {:.0} B {:.0} W {:.0}, transfer {:.0}",
        report.makespan_ns as f64 / 1e6,
        c.forward_ns as f64 / 1e3,
        c.backward_ns as f64 / 1e3,
        c.weight_grad_ns as f64 / 1e3,
        c.latency_ns as f64 / 1e3
    );
    if args.moe {
        let (waited, exposed) = (report.all_to_all_wait_ns, report.all_to_all_exposed_ns);
        println!(
            "all-to-all waits {:.2} ms over all devices, {:.2} ms of it with the device idle \
             ({:.0}% hidden under compute)",
            waited as f64 / 1e6,
            exposed as f64 / 1e6,
            100.0 * (1.0 - exposed as f64 / waited.max(1) as f64)
        );
    }
    println!(
        "peak activations per {lane}: {:?}",
        report.simulated.peak_activations
    );
    let reference = if args.moe {
        "one-stage"
    } else {
        "single-device"
    };
    println!("max |pipelined − {reference}| weight: {max_error:.1e}");
    if max_error > 1e-3 {
        bail!("the pipelined step differs from the {reference} step");
    }
    Ok(report.tracks)
}

/// `pipeline --run --moe`: the MoE stack's step on pairs of devices, its largest weight error
/// against the same layers at one stage on the first pair, and what it trained.
fn pipeline_run_moe(
    args: &PipelineArgs,
    client: &gangway::sched::Client,
    devices: &[gangway::device::MeshDevice],
) -> Result<(gangway::pipeline::RunReport, f32, String)> {
    let case = gangway::pipeline::workload::PreparedMoeCase::new(
        client,
        &gangway::Mesh::line(devices),
        args.schedule,
        args.stages,
        args.microbatches,
        args.chunks,
    )?;
    let (report, max_error) = case.run(
        client,
        &gangway::Mesh::line(devices),
        args.fold(),
        !args.no_overlap,
    )?;
    let c = case.stack().config();
    let what = format!(
        "one step of {} residual MoE layers (d {}, {} experts of {}, top-{}, {} rows per \
         microbatch split over a stage's pair){}",
        c.layers,
        c.model,
        c.experts,
        c.hidden,
        c.top_k,
        c.rows,
        if !matches!(
            args.schedule,
            ScheduleKind::DualPipe | ScheduleKind::DualPipeV
        ) {
            ""
        } else if args.no_overlap {
            ", F&B pairs not overlapped"
        } else {
            ", F&B pairs overlapped"
        }
    );
    Ok((report, max_error, what))
}

/// `, V chunks per device` when a schedule has more than one.
fn chunks_suffix(chunks: usize) -> String {
    if chunks > 1 {
        format!(", {chunks} chunks per device")
    } else {
        String::new()
    }
}

/// The cost model `args` describe, for one microbatch through a device's whole model share
/// (each schedule splits it into its chunk ops with [`gangway::pipeline::Costs::per_chunk`]).
fn pipeline_costs(args: &PipelineArgs) -> Result<gangway::pipeline::Costs> {
    use gangway::pipeline::Costs;
    let non_negative = |x: f64, flag: &str| {
        if x.is_finite() && x >= 0.0 {
            Ok(x)
        } else {
            bail!("{flag} must be a non-negative number, got {x}")
        }
    };
    let ns = |us: f64| (us * 1e3).round() as u64;
    // A run's trace gives compute and transfer times in ns; the flags give them in µs and win.
    let measured = args.costs_from.as_deref().map(costs_from).transpose()?;
    let compute = match (measured, &args.costs_us[..]) {
        (Some(m), _) => Costs::compute_only(m.forward_ns, m.backward_ns, m.weight_grad_ns),
        (None, &[f, b, w]) if [f, b, w].iter().all(|c| c.is_finite() && *c >= 0.0) => {
            Costs::compute_only(ns(f), ns(b), ns(w))
        }
        _ => bail!("--costs-us takes three non-negative numbers: forward,backward,weight-grad"),
    };
    let latency_ns = match args.latency_us.or(args.link.map(|l| l.latency_us())) {
        Some(us) => ns(non_negative(us, "--latency-us")?),
        None => measured.map_or(0, |m| m.latency_ns),
    };
    let all_to_all = non_negative(args.all_to_all_us, "--all-to-all-us")?;
    let kib = non_negative(args.activation_kib, "--activation-kib")?;
    let bandwidth = args
        .bandwidth_gbs
        .or(args.link.map(gangway::pipeline::Link::bandwidth_gbs));
    let bytes_per_ns = match bandwidth {
        None => f64::INFINITY,
        Some(g) if g.is_finite() && g > 0.0 => g,
        Some(g) => bail!("--bandwidth-gbs must be a positive number of GB/s, got {g}"),
    };
    Ok(Costs {
        latency_ns,
        bytes_per_ns,
        activation_bytes: (kib * 1024.0).round() as u64,
        all_to_all_ns: ns(all_to_all),
        blocking_sends: args.comm == crate::cli::CommArg::Wait,
        ..compute
    })
}

/// The costs a pipelined run's trace measured, per device's model share
/// ([`gangway::pipeline::measured_share`]).
fn costs_from(path: &std::path::Path) -> Result<gangway::pipeline::Costs> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let trace = gangway::trace::chrome::read(&bytes)
        .map_err(anyhow::Error::msg)
        .with_context(|| path.display().to_string())?;
    gangway::pipeline::measured_share(&trace.events).with_context(|| {
        format!(
            "{} holds no pipelined run's F and B ops (write one with `gangway --trace FILE \
             pipeline --run ...`)",
            path.display()
        )
    })
}

/// "transfers over pcie4 10 µs each, overlapped with compute", or "free" when they cost nothing.
fn describe_link(c: &gangway::pipeline::Costs, link: Option<gangway::pipeline::Link>) -> String {
    let each = c.transfer_ns().unwrap_or(0);
    let over = link
        .map(|l| format!(" over {}", l.name()))
        .unwrap_or_default();
    let mut out = if each == 0 {
        "transfers free".to_owned()
    } else {
        let how = if c.blocking_sends {
            "the sender waits for each"
        } else {
            "overlapped with compute"
        };
        format!("transfers{over} {} µs each, {how}", each as f64 / 1e3)
    };
    if c.all_to_all_ns > 0 {
        out += &format!(
            "; all-to-all {} µs per F or B (hidden in F&B pairs)",
            c.all_to_all_ns as f64 / 1e3
        );
    }
    out
}

/// Simulates (or, given a runtime, runs) one schedule, or compares several; returns what the
/// trace's lanes are (a stage each, or folded, a device each with its stages).
pub(crate) fn pipeline(
    args: &PipelineArgs,
    runtime: Option<&Runtime>,
    tracer: &Tracer,
) -> Result<Vec<Track>> {
    use gangway::pipeline::{Figure, ScheduleError, Search, Spec, Unbounded};
    if args.memory_limit.is_some()
        && !(args.optimal || args.compare || args.schedule == ScheduleKind::ZbAuto)
    {
        bail!(
            "--memory-limit is what --schedule zb-auto plans under, or what --optimal searches \
             under; {} has a fixed memory",
            args.schedule.name()
        );
    }
    if let Some(runtime) = runtime {
        return pipeline_run(args, runtime, tracer);
    }
    let share = pipeline_costs(args)?;
    if let Some(path) = &args.svg {
        if !(args.svg_width.is_finite() && args.svg_width > 0.0) {
            bail!("--svg-width must be a positive number of pixels");
        }
        // Fail now on a bad path, not after the work.
        if path.is_dir() {
            bail!(
                "cannot write the SVG figure: {} is a directory",
                path.display()
            );
        }
        gangway::fsutil::check_writable(path).context("cannot write the SVG figure")?;
    }
    let fold = args.fold();
    let names = gangway::pipeline::lanes(args.stages, fold)?;
    if args.compare {
        let kinds = if args.schedules.is_empty() {
            ScheduleKind::ALL.to_vec()
        } else {
            args.schedules.clone()
        };
        let figure = Figure::compare(
            &kinds,
            args.stages,
            args.microbatches,
            args.chunks,
            &share,
            args.memory_limit,
            &args.stage_costs,
            fold,
        )?;
        let optima = optima(args, &figure, &share)?;
        print_comparison(args, &figure, &share, &optima);
        if let Some(path) = &args.svg {
            write_figure(path, &figure, args)?;
        }
        return Ok(names);
    }
    let study = gangway::pipeline::study(&Spec {
        kind: args.schedule,
        stages: args.stages,
        microbatches: args.microbatches,
        chunks: args.chunks,
        share,
        memory_limit: args.memory_limit,
        stage_costs: args.stage_costs.clone(),
        fold,
        search: if args.optimal {
            Search::UnderTheLimit
        } else {
            Search::Off
        },
    })
    .map_err(|e| match e {
        ScheduleError::BeyondTheSearch { reason } => anyhow::anyhow!("--optimal: {reason}"),
        e => e.into(),
    })?;
    let (row, costs) = (study.row(), study.costs);
    let (schedule, sim) = (&row.schedule, &row.sim);
    let chunks = schedule.chunks;
    let passes = schedule.passes();
    let us = |ns: u64| ns as f64 / 1e3;
    let per_chunk = if passes > 1 {
        format!(
            " per device's model share, so {}/{}/{} µs per chunk op",
            us(costs.forward_ns),
            us(costs.backward_ns),
            us(costs.weight_grad_ns)
        )
    } else {
        String::new()
    };
    println!(
        "{} on {} stages, {} microbatches{} (simulated, F/B/W = {}/{}/{} µs{per_chunk}; {})",
        args.schedule.name(),
        args.stages,
        args.microbatches,
        chunks_suffix(chunks),
        us(share.forward_ns),
        us(share.backward_ns),
        us(share.weight_grad_ns),
        describe_link(&costs, args.link),
    );
    print_stage_costs(&args.stage_costs);
    print_fold(fold, args.stages);
    print!("{}", sim.timeline(args.width));
    println!(
        "bubble: {:.1}% of total time, {:.1}% over the ideal time (textbook at F = B = W with \
         free transfers: {})",
        sim.bubble_fraction * 100.0,
        sim.bubble_over_ideal() * 100.0,
        percent(study.textbook),
    );
    println!("makespan: {:.3} ms", sim.makespan_ns as f64 / 1e6);
    let per = TrackKind::of_pipeline(fold.shares(args.stages)).word();
    println!(
        "peak activations per {per}: {:?} chunk activations ({} per microbatch through a stage)",
        sim.peak_activations, passes
    );
    println!("parameter copies: {}", schedule.kind.parameter_copies());
    if let Some(found) = &study.optimum {
        println!("{}", describe_optimum(&found.optimum, found.memory));
        match found.gap {
            Ok(g) => println!("{}'s gap to it: {:+.1}%", args.schedule.name(), g * 100.0),
            Err(Unbounded::Family) => println!(
                "(the optimum is over {}s: {} is not one, so it may be shorter)",
                found.optimum.family.describe(),
                args.schedule.name()
            ),
            Err(Unbounded::Memory) => println!(
                "({} holds more activations a stage than the optimum may, so it may be shorter)",
                args.schedule.name()
            ),
        }
    }
    for e in &sim.events {
        tracer.emit(e.clone());
    }
    if let Some(path) = &args.svg {
        write_figure(path, &study.figure, args)?;
    }
    Ok(names)
}

/// `--devices`, when fewer than the stages: which stages each device holds.
fn print_fold(fold: gangway::pipeline::Fold, stages: usize) {
    if !fold.shares(stages) {
        return;
    }
    let Ok(of) = fold.devices_of(stages) else {
        return;
    };
    let d = fold.device_count(stages);
    let held: Vec<String> = (0..d)
        .map(|dev| {
            let s: Vec<String> = (0..stages)
                .filter(|&s| of[s] == dev)
                .map(|s| s.to_string())
                .collect();
            format!("device {dev}: stages {}", s.join(", "))
        })
        .collect();
    println!(
        "{stages} stages on {d} devices ({}): {}; a device runs one op at a time, whichever of \
         its stages' next ops can start first, and a hand-off between two of its stages is free",
        fold.placement_name(),
        held.join("; ")
    );
}

/// `--stage-costs`, when given: how each stage's ops are scaled, and what the ideal time is then.
fn print_stage_costs(stage_costs: &[f64]) {
    if stage_costs.is_empty() {
        return;
    }
    let factors: Vec<String> = stage_costs.iter().map(|k| format!("{k}×")).collect();
    println!(
        "uneven stages: the ops of stages 0..{} take {} the costs above; the ideal time is the \
         slowest stage's work alone",
        stage_costs.len(),
        factors.join(", ")
    );
}

/// The shortest schedule of each family among `figure`'s schedules (one chunk a stage; two in a
/// V; two looped) under `share`'s costs and `--memory-limit` (activations a stage: a two-chunk
/// family may hold twice as many chunk activations), each with the chunk activations it was
/// allowed, wherever the setting is small enough for the exact search (`--compare`'s gap
/// column). `--optimal` asks for the one-chunk one whatever the schedules, and it is an error
/// where that setting is past the search.
fn optima(
    args: &PipelineArgs,
    figure: &gangway::pipeline::Figure,
    share: &gangway::pipeline::Costs,
) -> Result<Vec<(gangway::pipeline::Optimum, Option<usize>)>> {
    use gangway::pipeline::{Family, beyond_search, optimal};
    let mut families: Vec<Family> = Vec::new();
    if args.optimal {
        families.push(Family::OneChunk);
    }
    for row in &figure.rows {
        if let Some(f) = Family::of(row.schedule.kind, row.schedule.chunks)
            && !families.contains(&f)
        {
            families.push(f);
        }
    }
    let mut found = Vec::new();
    for family in families {
        let why_not = beyond_search(
            Some(family),
            args.stages,
            args.microbatches,
            share,
            &args.stage_costs,
            args.fold(),
        );
        match why_not {
            Some(why) if args.optimal && family == Family::OneChunk => bail!("--optimal: {why}"),
            Some(_) => {}
            None => {
                let memory = args.memory_limit.map(|k| k * family.chunks());
                let best = optimal(
                    family,
                    args.stages,
                    args.microbatches,
                    &share.per_chunk(family.chunks()),
                    memory,
                )?;
                found.push((best, memory));
            }
        }
    }
    Ok(found)
}

fn describe_optimum(best: &gangway::pipeline::Optimum, memory: Option<usize>) -> String {
    let unit = if best.family.chunks() == 1 {
        "activations"
    } else {
        "chunk activations"
    };
    format!(
        "optimal {}{}: {:.3} ms ({}, {} nodes searched)",
        best.family.describe(),
        memory.map_or_else(String::new, |k| format!(
            " holding at most {k} {unit} a stage"
        )),
        best.makespan_ns as f64 / 1e6,
        if best.proven {
            "proven: none is shorter"
        } else {
            "not proven: the search ran out of its node budget"
        },
        best.nodes
    )
}

/// The schedules of a `--compare` side by side: both bubble conventions (idle share of the
/// makespan, and the makespan beyond the ideal over the ideal, as the Ultra-Scale Playbook's
/// `(p − 1)/m`), the textbook's, peak activations in microbatches through a stage, and
/// parameter copies.
fn print_comparison(
    args: &PipelineArgs,
    figure: &gangway::pipeline::Figure,
    share: &gangway::pipeline::Costs,
    optima: &[(gangway::pipeline::Optimum, Option<usize>)],
) {
    use gangway::pipeline::textbook;
    let us = |ns: u64| ns as f64 / 1e3;
    println!(
        "{} stages, {} microbatches, F/B/W = {}/{}/{} µs per device's model share, {} \
         (simulated; chunk ops split the share)",
        args.stages,
        args.microbatches,
        us(share.forward_ns),
        us(share.backward_ns),
        us(share.weight_grad_ns),
        describe_link(share, args.link),
    );
    print_stage_costs(&args.stage_costs);
    print_fold(args.fold(), args.stages);
    for (best, memory) in optima {
        println!("{}", describe_optimum(best, *memory));
    }
    let rows: Vec<Vec<String>> = figure
        .rows
        .iter()
        .map(|row| {
            let s = &row.schedule;
            let name = if s.kind.takes_chunks() {
                format!("{} v={}", s.kind.name(), s.chunks)
            } else {
                s.kind.name().to_owned()
            };
            let costs = share.per_chunk(s.passes());
            let t = textbook(s.kind, s.stages, s.microbatches, s.chunks, &costs);
            let idle = row.sim.idle_ns();
            let idle_max = idle.iter().copied().max().unwrap_or(0);
            let peak = row.peak_microbatches().into_iter().fold(0.0, f64::max);
            let units = |chunks: f64| format!("{}", chunks);
            // The optimum of the row's own family, if one was searched.
            let to_optimum = (!optima.is_empty()).then(|| {
                optima
                    .iter()
                    .find_map(|(best, memory)| gangway::pipeline::gap(best, *memory, row).ok())
                    .map_or_else(|| "—".to_owned(), |g| format!("{:+.1}%", g * 100.0))
            });
            let mut cells = vec![
                name,
                makespan(row.sim.makespan_ns),
                format!("{:.1}%", row.sim.bubble_fraction * 100.0),
                format!("{:.1}%", row.sim.bubble_over_ideal() * 100.0),
                format!("{} µs", us(idle_max)),
                t.idle_per_stage_ns
                    .map_or_else(|| "—".to_owned(), |x| format!("{} µs", us(x))),
                units(peak),
                t.peak_activations
                    .map_or_else(|| "—".to_owned(), |c| units(c as f64 / s.passes() as f64)),
                s.kind.parameter_copies().to_string(),
            ];
            cells.extend(to_optimum);
            cells
        })
        .collect();
    let mut header = vec![
        "schedule",
        "makespan",
        "bubble (idle / makespan)",
        "bubble (over ideal)",
        "idle per lane (max)",
        "textbook idle",
        "peak activations",
        "textbook peak",
        "parameter copies",
    ];
    if !optima.is_empty() {
        header.push("gap to the optimum");
    }
    print!("{}", gangway::table::markdown_table(&header, &rows));
    if !optima.is_empty() {
        println!(
            "each gap is to the optimum of the schedule's own family: one chunk a stage with B \
             and W split, two chunks in a V with B and W split, or two looped chunks with whole \
             backwards (— where none was searched for its family or it holds more than \
             --memory-limit)"
        );
    }
    println!(
        "peak activations are microbatches through one stage's layers (a chunk op holds 1/v of \
         one); a lane is a stage, or a device with --devices; textbook figures assume one device \
         per stage, free transfers and no all-to-all"
    );
    for (kind, why) in &figure.left_out {
        println!("left out {}: {why}", kind.name());
    }
}

/// A `--compare` makespan: µs to a tenth under a millisecond (28.5 µs and 29.5 µs, not both
/// 0.029 ms), ms to the microsecond from there.
fn makespan(ns: u64) -> String {
    if ns < 1_000_000 {
        format!("{:.1} µs", ns as f64 / 1e3)
    } else {
        format!("{:.3} ms", ns as f64 / 1e6)
    }
}

/// Writes `figure` as SVG to `path`, all or nothing.
fn write_figure(
    path: &std::path::Path,
    figure: &gangway::pipeline::Figure,
    args: &PipelineArgs,
) -> Result<()> {
    let layout = figure.layout(args.svg_width, args.theme.into(), None);
    let text = gangway::pipeline::figure::svg(&layout);
    crate::write_out(path, text.as_bytes()).context("cannot write the SVG figure")?;
    println!(
        "figure: {} ({:.0}×{:.0} px, {} theme)",
        path.display(),
        layout.width,
        layout.height,
        format!("{:?}", args.theme).to_lowercase()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::makespan;

    #[test]
    fn compare_times_under_a_millisecond_are_in_microseconds() {
        assert_eq!(makespan(28_500), "28.5 µs");
        assert_eq!(makespan(29_500), "29.5 µs");
        assert_eq!(makespan(999_940), "999.9 µs");
        assert_eq!(makespan(1_000_000), "1.000 ms");
        assert_eq!(makespan(5_300_000), "5.300 ms");
        assert_eq!(makespan(0), "0.0 µs");
    }
}
