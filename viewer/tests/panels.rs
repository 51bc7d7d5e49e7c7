#![allow(clippy::unwrap_used)]
//! Issue 25's tryout of the panels: the bench view shows each case's metrics and the
//! comparison's notes and only-in lists, the dispatch comparison has a verdict, the MoE panel's
//! expert bars have a capacity line and its notes do not move its plots.

mod common;

use std::path::{Path, PathBuf};

use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;

fn dev_report() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/bench/dev-2core.json")
}

/// The tryout: the bench view never showed a case's metrics (the pipeline suite's measured,
/// simulated and textbook bubble). They are in the note column, as the CLI's table has them.
#[test]
fn the_bench_view_shows_each_case_s_metrics() {
    let mut h = common::open_in_app(&dev_report(), [1400.0, 900.0]);
    h.get_by_label("pipeline").click();
    h.run();
    h.get_by_label_contains(
        "bubble measured 0.3492, bubble simulated 0.3219, bubble textbook 0.2727",
    );
    // Every case of the chart is labelled, and the axis says what it counts.
    h.get_by_label("pipeline: samples/s per case (higher is better)");
}

/// The tryout: the comparison dropped the CLI's "compared per unit of work" note (a row read
/// "682 µs vs 1.57 ms … SLOWER") and its "only in old / only in new" lists.
#[test]
fn the_bench_comparison_shows_notes_and_only_in_lists() {
    use gangway::bench::compare::{CaseComparison, Comparison, Verdict};
    let c = Comparison {
        cases: vec![CaseComparison {
            suite: "moe".into(),
            case: "experts: E=8 K=2".into(),
            adapter: "llvmpipe (vulkan)".into(),
            old_median_s: Some(682e-6),
            new_median_s: Some(1.57e-3),
            time_ratio: Some(0.98),
            verdict: Verdict::WithinNoise,
            note: "work 128 then 256: compared per unit of work".into(),
        }],
        only_old: vec!["btm / branch 3 domains on 1 device(s) / llvmpipe (gl)".into()],
        only_new: vec!["matmul / square 4096 f32 tiled / llvmpipe (gl)".into()],
    };
    let mut h = Harness::builder()
        .with_size([1400.0, 400.0])
        .build_ui(move |ui| gangway_viewer::bench_view::show_comparison(ui, &c, false, 200.0));
    h.run();
    h.get_by_label("work 128 then 256: compared per unit of work");
    h.get_by_label("only in old (1): btm / branch 3 domains on 1 device(s) / llvmpipe (gl)");
    h.get_by_label("only in new (1): matmul / square 4096 f32 tiled / llvmpipe (gl)");
}

/// The tryout: the dispatch comparison had no verdict line.
#[test]
fn the_dispatch_comparison_has_a_verdict() {
    use gangway_viewer::dispatch_compare::verdict;
    assert_eq!(
        verdict(20_000_000, 10_000_000),
        "parallel 2.0× faster than sequential (6 runs each, wall time)"
    );
    assert_eq!(
        verdict(10_000_000, 15_000_000),
        "parallel 1.5× slower than sequential (6 runs each, wall time)"
    );
    assert_eq!(
        verdict(10_000_000, 10_010_000),
        "parallel as fast as sequential (6 runs each, wall time)"
    );
}

/// The MoE panel's expert bars have a capacity line: the most an expert keeps in a step, as the
/// trainer's tokens per expert sum it (blocks × groups × the router's capacity).
#[test]
fn the_moe_capacity_line_is_the_router_s_capacity() {
    let s = gangway_viewer::moe_panel::MoeSettings {
        experts: 8,
        top_k: 2,
        capacity_factor: 1.25,
        devices: 2,
        batch: 128,
        ..Default::default()
    };
    // Per group of 64 tokens: ceil(2 × 64 / 8 × 1.25) = 20; two groups, one block.
    assert_eq!(s.config().blocks, 1);
    assert_eq!(s.expert_capacity(), 40);
}

/// The tryout: a note ("the controls have changed since") pushed every plot down by 20 px. It
/// now shares the run's line; and the capacity is said beside the expert bars.
#[test]
fn the_moe_note_does_not_move_the_plots() {
    use gangway::moe::trainer::StepStats;
    use gangway_viewer::live::DeviceHub;
    use gangway_viewer::moe_panel::{MoePanel, MoeSettings};
    let ran = MoeSettings {
        steps: 3,
        ..MoeSettings::default()
    };
    let step = |step: u32| StepStats {
        step,
        loss: 5.0 - f64::from(step) * 0.1,
        ce: 4.9 - f64::from(step) * 0.1,
        aux: 0.08,
        z: 0.02,
        tokens_per_expert: vec![30, 34, 28, 32, 40, 20, 36, 36],
        dropped_fraction: 0.01,
        blocks: Vec::new(),
        seconds: 0.1,
        trace: Vec::new(),
    };
    let place = |settings: MoeSettings| {
        let mut panel = MoePanel::default();
        panel.settings = settings;
        panel.ran = Some(ran);
        panel.history = vec![step(1), step(2), step(3)];
        panel.valid = vec![(3, 6.5)];
        let hub = DeviceHub::disabled("test");
        let mut h = Harness::builder()
            .with_size([1000.0, 1200.0])
            .build_ui(move |ui| panel.ui(ui, &hub));
        h.run();
        let run = h.get_by_label_contains("run: ").rect();
        let plot = h.get_by_label("loss per step").rect();
        h.get_by_label_contains("capacity: 40 per expert");
        (
            run,
            plot,
            h.query_all_by_label_contains("the controls have changed")
                .count(),
        )
    };
    let (_, same_plot, notes) = place(ran);
    assert_eq!(notes, 0);
    let (run, changed_plot, notes) = place(MoeSettings::default());
    assert_eq!(notes, 1);
    assert!(
        (changed_plot.top() - same_plot.top()).abs() < 1.0,
        "the note moved the plots: {same_plot:?} -> {changed_plot:?} (run line {run:?})"
    );
}
