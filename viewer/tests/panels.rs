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
            old_fastest_s: Some(682e-6),
            new_fastest_s: Some(1.57e-3),
            time_ratio: Some(0.98),
            noise: Some(0.05),
            old_spread: None,
            new_spread: None,
            verdict: Verdict::WithinNoise,
            note: "work 128 then 256: compared per unit of work".into(),
            old_host: None,
            new_host: None,
        }],
        only_old: vec!["btm / branch 3 domains on 1 device(s) / llvmpipe (gl)".into()],
        only_new: vec!["matmul / square 4096 f32 tiled / llvmpipe (gl)".into()],
    };
    let mut h = Harness::builder()
        .with_size([1400.0, 400.0])
        .build_ui(move |ui| gangway_viewer::bench_view::show_comparison(ui, &c, false, 200.0));
    h.run();
    h.get_by_label("work 128 then 256: compared per unit of work");
    // Collapsed under their counts, opened by a click.
    assert!(
        h.query_by_label("btm / branch 3 domains on 1 device(s) / llvmpipe (gl)")
            .is_none()
    );
    h.get_by_label("only in old (1)").click();
    h.run();
    h.get_by_label("only in new (1)").click();
    h.run();
    h.get_by_label("btm / branch 3 domains on 1 device(s) / llvmpipe (gl)");
    h.get_by_label("matmul / square 4096 f32 tiled / llvmpipe (gl)");
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
    use gangway::train::StepStats;
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

/// The numbers a frame painted that read as negative: on the bench chart, whose values are all
/// positive, only a y axis panned off the data shows them.
fn negative_numbers(h: &Harness<'static, gangway_viewer::ViewerApp>) -> Vec<String> {
    common::painted_texts(&h.output().shapes)
        .into_iter()
        .filter(|t| t.trim().parse::<f64>().is_ok_and(|v| v < 0.0))
        .collect()
}

/// The plain numbers painted (the chart's axis labels), in increasing order.
fn axis_numbers(h: &Harness<'static, gangway_viewer::ViewerApp>) -> Vec<f64> {
    let mut v: Vec<f64> = common::painted_texts(&h.output().shapes)
        .into_iter()
        .filter_map(|t| t.trim().parse::<f64>().ok())
        .collect();
    v.sort_by(f64::total_cmp);
    v
}

/// A point inside the bench chart: below its title line, in the middle.
fn in_the_chart(h: &Harness<'static, gangway_viewer::ViewerApp>) -> egui::Pos2 {
    let title = h
        .get_by_label_contains("per case (higher is better)")
        .rect();
    egui::pos2(700.0, title.bottom() + 100.0)
}

fn wheel(h: &mut Harness<'static, gangway_viewer::ViewerApp>, dy: f32) {
    h.event(egui::Event::MouseWheel {
        unit: egui::MouseWheelUnit::Point,
        delta: egui::vec2(0.0, dy),
        phase: egui::TouchPhase::Move,
        source: egui::MouseWheelSource::Wheel,
        modifiers: egui::Modifiers::NONE,
    });
    h.run_ok();
}

/// Issue 38: the wheel over the bench chart panned its y axis off the data (−2…−10 GFLOP/s).
/// It scrolls the page now, and the axis stays on the data.
#[test]
fn the_wheel_over_the_bench_chart_scrolls_the_page() {
    let mut h = common::open_in_app(&dev_report(), [1400.0, 700.0]);
    h.get_by_label("dispatch").click();
    h.run();
    assert!(
        negative_numbers(&h).is_empty(),
        "{:?}",
        negative_numbers(&h)
    );
    let before = h
        .get_by_label_contains("per case (higher is better)")
        .rect();
    h.hover_at(in_the_chart(&h));
    h.run();
    for _ in 0..5 {
        wheel(&mut h, -40.0);
    }
    for _ in 0..30 {
        h.run_ok();
    }
    let after = h
        .get_by_label_contains("per case (higher is better)")
        .rect();
    assert!(
        after.top() < before.top() - 50.0,
        "the page did not scroll: {before:?} -> {after:?}"
    );
    assert!(
        negative_numbers(&h).is_empty(),
        "{:?}",
        negative_numbers(&h)
    );
}

/// Issue 38: a drag pans the chart, a double-click brings it back onto the data, and opening the
/// report again shows it afresh (it kept the panned view).
#[test]
fn the_bench_chart_resets_on_double_click_and_for_a_new_report() {
    let mut h = common::open_in_app(&dev_report(), [1400.0, 1000.0]);
    h.get_by_label("dispatch").click();
    h.run();
    // The axis' numbers as drawn on the data: a pan changes them (on this suite's log axis a
    // pan up shows no negative number, only smaller powers of ten).
    let fitted = axis_numbers(&h);
    assert!(fitted.len() >= 2, "{fitted:?}");
    let drag_up = |h: &mut Harness<'static, gangway_viewer::ViewerApp>| {
        let start = in_the_chart(h);
        h.hover_at(start);
        h.run_ok();
        h.drag_at(start);
        h.run_ok();
        for k in 1..=6 {
            h.hover_at(start - egui::vec2(0.0, 30.0 * k as f32));
            h.run_ok();
        }
        h.drop_at(start - egui::vec2(0.0, 180.0));
        h.run_ok();
        h.run_ok();
        let panned = axis_numbers(h);
        assert!(
            !panned.is_empty() && panned[0] < fitted[0],
            "the drag did not pan: {fitted:?} -> {panned:?}"
        );
    };
    drag_up(&mut h);
    let at = in_the_chart(&h);
    h.hover_at(at);
    h.run_ok();
    // The harness steps a quarter second a frame, and egui takes a press and a release one
    // frame each: allow the two clicks the second that takes.
    h.ctx
        .options_mut(|o| o.input_options.max_double_click_delay = 2.0);
    for _ in 0..2 {
        for pressed in [true, false] {
            h.event(egui::Event::PointerButton {
                pos: at,
                button: egui::PointerButton::Primary,
                pressed,
                modifiers: egui::Modifiers::NONE,
            });
            h.step();
        }
    }
    h.run_ok();
    assert_eq!(
        axis_numbers(&h),
        fitted,
        "the double-click brings the data back"
    );

    drag_up(&mut h);
    h.state_mut().files.path = dev_report().display().to_string();
    h.run_ok();
    h.get_by_label("Open").click();
    h.step();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while h.state().files.is_busy() {
        assert!(
            std::time::Instant::now() < deadline,
            "the open never finished"
        );
        h.step();
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    h.run_ok();
    h.get_by_label("dispatch").click();
    h.run_ok();
    assert_eq!(axis_numbers(&h), fitted, "a new report starts afresh");
}

/// Issue 38: about 40 cases sat on an axis labelled only "case", and the hover gave the value
/// only. Every case is named under the chart here (17 dispatch cases at 1400 px), and hovering a
/// bar names its case, adapter and value with its unit.
#[test]
fn the_bench_chart_names_its_cases_on_the_axis_and_in_the_hover() {
    let mut h = common::open_in_app(&dev_report(), [1400.0, 1000.0]);
    h.get_by_label("dispatch").click();
    h.run();
    let report = gangway::bench::Report::from_value(
        serde_json::from_str(&std::fs::read_to_string(dev_report()).unwrap()).unwrap(),
    )
    .unwrap();
    let mut cases: Vec<&str> = Vec::new();
    for r in report.results.iter().filter(|r| r.suite == "dispatch") {
        if !cases.contains(&r.case.as_str()) {
            cases.push(&r.case);
        }
    }
    assert_eq!(cases.len(), 17);
    // The table below names the cases too: only the chart's names are turned upright.
    let painted: Vec<String> = h
        .output()
        .shapes
        .iter()
        .filter_map(|c| match &c.shape {
            egui::Shape::Text(t) if t.angle != 0.0 => Some(t.galley.text().to_owned()),
            _ => None,
        })
        .collect();
    // Whole, or shortened in its middle when long, its start and its end kept (the hover has
    // the whole name).
    for c in &cases {
        assert!(
            painted.iter().any(|t| t == c
                || t.split_once('…')
                    .is_some_and(|(a, b)| a.len() >= 10 && c.starts_with(a) && c.ends_with(b))),
            "{c} is not named under the chart: {painted:?}"
        );
    }
    // No two of them read the same.
    let mut distinct = painted.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), painted.len(), "{painted:?}");
    // The dispatch suite's figures span far more than 10×: a log axis, and said so.
    h.get_by_label_contains("log scale: the values span more than 10×");
    // Hover a bar. The bars' x is not known to the test: sweep across the chart low down,
    // where the pipeline suite's bars (all of a size) are, until a bar's hover text shows.
    h.get_by_label("pipeline").click();
    h.run();
    let title = h
        .get_by_label_contains("per case (higher is better)")
        .rect();
    let unit = report
        .results
        .iter()
        .find(|r| r.suite == "pipeline")
        .and_then(|r| r.figure.as_ref())
        .unwrap()
        .unit
        .clone();
    cases.clear();
    for r in report.results.iter().filter(|r| r.suite == "pipeline") {
        if !cases.contains(&r.case.as_str()) {
            cases.push(&r.case);
        }
    }
    let mut found = None;
    'sweep: for y in [190.0, 160.0, 130.0] {
        for x in (60..1380).step_by(6) {
            h.hover_at(egui::pos2(x as f32, title.bottom() + y));
            h.run_ok();
            if let Some(t) = common::painted_texts(&h.output().shapes)
                .into_iter()
                .find(|t| t.contains('\n') && t.ends_with(&format!(" {unit}")))
            {
                found = Some(t);
                break 'sweep;
            }
        }
    }
    let text = found.expect("no bar's hover text");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(cases.contains(&lines[0]), "{text}");
    assert!(
        report.adapters.iter().any(|a| a.label() == lines[1]),
        "{text}"
    );
}

/// Issue 38: a skipped row had one cell too many, so its reason sat right of the note column.
#[test]
fn a_skipped_case_s_reason_is_in_the_note_column() {
    let mut h = common::open_in_app(&dev_report(), [1600.0, 1000.0]);
    h.get_by_label("moe").click();
    h.run();
    let report = gangway::bench::Report::from_value(
        serde_json::from_str(&std::fs::read_to_string(dev_report()).unwrap()).unwrap(),
    )
    .unwrap();
    let skipped = report
        .results
        .iter()
        .find(|r| r.suite == "moe" && r.reason.is_some())
        .unwrap();
    let note = h.get_by_label("note").rect();
    // Once per adapter.
    let reasons: Vec<egui::Rect> = h
        .query_all_by_label(skipped.reason.as_deref().unwrap())
        .map(|n| n.rect())
        .collect();
    assert!(!reasons.is_empty());
    for reason in reasons {
        assert!(
            (reason.left() - note.left()).abs() < 1.0,
            "the reason at {reason:?}, the note column at {note:?}"
        );
    }
}

/// Issue 38: the Devices plot panned with the wheel too. It leaves the wheel to the page.
#[test]
fn the_wheel_over_the_utilization_plot_scrolls_the_page() {
    let lines = vec![(
        "device 0".to_string(),
        (0..60)
            .map(|i| [f64::from(i) - 59.0, 0.5])
            .collect::<Vec<_>>(),
    )];
    let mut h = Harness::builder()
        .with_size([800.0, 400.0])
        .build_ui(move |ui| {
            egui::ScrollArea::vertical().show(ui, |ui| {
                ui.label("above the plot");
                gangway_viewer::devices_panel::utilization_plot(ui, lines.clone());
                ui.add_space(600.0);
            });
        });
    h.run();
    let before = h.get_by_label("above the plot").rect();
    h.hover_at(egui::pos2(400.0, 150.0));
    h.run();
    for _ in 0..5 {
        h.event(egui::Event::MouseWheel {
            unit: egui::MouseWheelUnit::Point,
            delta: egui::vec2(0.0, -40.0),
            phase: egui::TouchPhase::Move,
            source: egui::MouseWheelSource::Wheel,
            modifiers: egui::Modifiers::NONE,
        });
        h.run_ok();
    }
    for _ in 0..30 {
        h.run_ok();
    }
    let after = h.get_by_label("above the plot").rect();
    assert!(after.top() < before.top() - 50.0, "{before:?} -> {after:?}");
    // Busy fractions are within 0..1: a y axis number below 0 (a fraction: the x axis counts
    // whole seconds back) means the wheel panned the plot.
    let negative: Vec<String> = common::painted_texts(&h.output().shapes)
        .into_iter()
        .filter(|t| t.contains('.') && t.parse::<f64>().is_ok_and(|v| v < 0.0 && v > -1.0))
        .collect();
    assert!(negative.is_empty(), "{negative:?}");
}

/// Issue 38: the caption's "even share 28" was kept / experts, while the capacity line beside it
/// is built on choices / experts (32). Both now count choices: the even share is 256 / 8 = 32,
/// the capacity 1.25 × 32 = 40, and the kept mean (28) is named a mean of the kept.
#[test]
fn the_moe_caption_states_its_shares_on_one_basis() {
    use gangway::train::StepStats;
    use gangway_viewer::live::DeviceHub;
    use gangway_viewer::moe_panel::{MoePanel, MoeSettings};
    let ran = MoeSettings {
        steps: 1,
        ..MoeSettings::default()
    };
    assert_eq!(ran.choices(), 128 * 2);
    let mut panel = MoePanel::default();
    panel.settings = ran;
    panel.ran = Some(ran);
    panel.history = vec![StepStats {
        step: 1,
        loss: 5.0,
        ce: 4.9,
        aux: 0.08,
        z: 0.02,
        // 224 kept of 256 choices: 28 an expert.
        tokens_per_expert: vec![28; 8],
        dropped_fraction: 32.0 / 256.0,
        blocks: Vec::new(),
        seconds: 0.1,
        trace: Vec::new(),
    }];
    let hub = DeviceHub::disabled("test");
    let mut h = Harness::builder()
        .with_size([1400.0, 1200.0])
        .build_ui(move |ui| panel.ui(ui, &hub));
    h.run();
    h.get_by_label_contains(
        "tokens per expert at step 1 (kept 224 of 256 choices, 28.0 per expert on average;",
    );
    h.get_by_label_contains(
        "capacity: 40 per expert = capacity factor 1.25 × an even share of the choices (256 / 8 \
         = 32)",
    );
    // "Even share" is said once, of the choices: never of the kept ones.
    assert_eq!(h.query_all_by_label_contains("even share").count(), 1);
    // The stated arithmetic holds: ceil(1.25 × 32) is the capacity drawn.
    assert_eq!((1.25f64 * 32.0).ceil() as usize, ran.expert_capacity());
}

/// Issue 57: the chart cut long case names at their end, where the kernel's name is, so five
/// "grouped …" neighbours read the same; now the middle goes.
#[test]
fn long_case_names_lose_their_middle() {
    use gangway_viewer::bench_view::middle_ellipsis;
    assert_eq!(
        middle_ellipsis("square 256 f32 naive", 32),
        "square 256 f32 naive"
    );
    let a = middle_ellipsis("grouped 8 experts 512x512 f32 tiled", 24);
    let b = middle_ellipsis("grouped 8 experts 512x512 f32 naive", 24);
    assert_ne!(a, b);
    assert_eq!(a.chars().count(), 24, "{a}");
    assert!(
        a.starts_with("grouped 8 ") && a.ends_with("f32 tiled"),
        "{a}"
    );
}
