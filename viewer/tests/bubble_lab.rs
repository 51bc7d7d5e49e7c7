#![allow(clippy::unwrap_used)]
//! The bubble lab driven through its UI, by labels.

mod common;
#[path = "bubble_lab/formula.rs"]
mod formula;

use egui_kittest::kittest::{NodeT, Queryable};
use std::collections::BTreeSet;

use gangway::pipeline::figure::Shape;
use gangway::pipeline::{ScheduleKind, bubble_formula};

/// Every text the figure's layout draws.
fn texts_of(layout: &gangway::pipeline::figure::Layout) -> Vec<&str> {
    layout
        .shapes
        .iter()
        .filter_map(|s| match s {
            Shape::Text { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[test]
fn one_f_one_b_p4_m8_shows_the_formula_bubble() {
    let mut h = common::harness([1200.0, 900.0]);
    // Start elsewhere so every control really changes something.
    h.get_by_label("GPipe").click();
    h.run();
    common::set_slider(&mut h, "stages p", 2.0);
    common::set_slider(&mut h, "microbatches m", 3.0);
    assert_eq!(h.state().lab.params.kind, ScheduleKind::GPipe);
    h.get_by_label("bubble (simulated): 25.0%");

    h.get_by_label("1F1B").click();
    h.run();
    common::set_slider(&mut h, "stages p", 4.0);
    common::set_slider(&mut h, "microbatches m", 8.0);
    let p = h.state().lab.params;
    assert_eq!(
        (p.kind, p.stages, p.microbatches),
        (ScheduleKind::OneFOneB, 4, 8)
    );
    // 3 / 11 = 27.3 %, simulated and textbook.
    h.get_by_label("bubble (simulated): 27.3%");
    h.get_by_label("textbook: 27.3%");
    h.get_by_label("bubble = (p - 1) / (m + p - 1) = 3 / (8 + 3) = 3/11");
    h.get_by_label("peak activations per stage: 4, 3, 2, 1");
    let sim = &h.state().lab.result.as_ref().unwrap().row().sim;
    assert!(
        (sim.bubble_fraction - bubble_formula(ScheduleKind::OneFOneB, 4, 8, 1).unwrap()).abs()
            < 1e-12
    );
    // The run-on-devices button exists, disabled without devices (tests/run_on_devices.rs).
    assert!(
        h.get_by_label("Run on devices")
            .accesskit_node()
            .is_disabled()
    );
}

#[test]
fn zb_h1_and_interleaved_match_their_formulas() {
    let mut h = common::harness([1200.0, 900.0]);
    h.get_by_label("ZB-H1").click();
    h.run();
    // (4-1) / (3*8 + 3) = 11.1 %
    h.get_by_label("bubble (simulated): 11.1%");
    h.get_by_label("textbook: 11.1%");
    h.get_by_label("Interleaved 1F1B").click();
    h.run();
    common::set_slider(&mut h, "chunks v", 2.0);
    // (4-1) / (2*8 + 3) = 15.8 %
    h.get_by_label("textbook: 15.8%");
}

#[test]
fn bad_shape_is_an_error_in_the_ui_not_a_panic() {
    let mut h = common::harness([1200.0, 900.0]);
    h.get_by_label("Interleaved 1F1B").click();
    h.run();
    common::set_slider(&mut h, "microbatches m", 3.0); // fewer than p = 4
    h.get_by_label_contains("error: interleaved 1F1B needs at least as many microbatches (3)");
}

/// A compared set one schedule cannot take: that one is named and left out, the rest draw.
#[test]
fn compare_names_and_leaves_out_a_schedule_that_cannot_take_the_shape() {
    let mut h = common::harness([1400.0, 1400.0]);
    h.get_by_label("compare").click();
    h.run();
    // The schedule buttons come first, the comparison's checkboxes after them.
    h.get_all_by_label("DualPipe").last().unwrap().click();
    h.run();
    common::set_slider(&mut h, "stages p", 3.0);
    h.get_by_label_contains("left out DualPipe: dualpipe cannot take this shape: it needs an even");
    let figure = h.state().lab.figure().unwrap();
    let titles: Vec<&str> = figure.rows.iter().map(|r| r.title.as_str()).collect();
    assert_eq!(
        titles,
        ["GPipe", "1F1B", "Interleaved 1F1B, v = 2", "ZB-H1"],
        "{titles:?}"
    );
    // With p = 4 and m = 8 it takes the shape and draws as a fifth row.
    common::set_slider(&mut h, "stages p", 4.0);
    assert_eq!(h.state().lab.figure().unwrap().rows.len(), 5);
}

#[test]
fn stepping_says_what_each_stage_waits_for() {
    let mut h = common::harness([1200.0, 900.0]);
    h.get_by_label("step >").click();
    h.run();
    assert_eq!(h.state().lab.player.step(), 1);
    // At t = 0 only stage 0 runs; stage 1 waits for microbatch 0's activation from stage 0.
    h.get_by_label("stage 0: running F mb 1");
    h.get_by_label("stage 1: waits for the activation of mb 1 from stage 0");
    h.get_by_label("< step").click();
    h.run();
    assert_eq!(h.state().lab.player.step(), 0);
}

#[test]
fn no_adapter_banner_says_why_real_runs_are_off() {
    let h = common::harness([1200.0, 900.0]);
    h.get_by_label_contains("Real runs are off: device discovery is off");
    // The lab still works on the simulator.
    h.get_by_label_contains("bubble (simulated):");
}

/// Bug 5: interleaved charged each chunk the whole stage's F/B/W, so v = 2 doubled the model and
/// looked slower than 1F1B. Each chunk op now costs F/v, and interleaved is shorter.
#[test]
fn interleaved_splits_the_stage_model_and_beats_1f1b() {
    let mut h = common::harness([1200.0, 900.0]);
    h.get_by_label("1F1B").click();
    h.run();
    let one = h.state().lab.result.as_ref().unwrap().row().sim.makespan_ns;
    h.get_by_label("makespan 33.0 µs");
    h.get_by_label("Interleaved 1F1B").click();
    h.run();
    common::set_slider(&mut h, "chunks v", 2.0);
    let r = h.state().lab.result.as_ref().unwrap();
    assert_eq!(r.row().schedule.chunks, 2);
    // 2 × 8 microbatch-chunks of (F + B) / 2 per stage, plus a (p − 1) / v ramp.
    assert!(
        r.row().sim.makespan_ns < one,
        "{} vs {one}",
        r.row().sim.makespan_ns
    );
    h.get_by_label("makespan 28.5 µs");
}

/// Issue 41: ZB-V's fixed pattern lost to 1F1B once B cost more than F (45 µs against 44 here,
/// p = 4, m = 8, F/B/W = 1/2/1). Moving B re-plans it for the costs: 35 µs.
#[test]
fn moving_b_replans_zb_v_to_beat_1f1b() {
    let mut h = common::harness([1200.0, 900.0]);
    h.get_by_label("1F1B").click();
    h.run();
    common::set_slider(&mut h, "B", 2.0);
    let one = h.state().lab.result.as_ref().unwrap().row().sim.makespan_ns;
    h.get_by_label("makespan 44.0 µs");
    h.get_by_label("ZB-V").click();
    h.run();
    let r = h.state().lab.result.as_ref().unwrap();
    assert!(r.row().sim.makespan_ns < one, "{}", r.row().sim.makespan_ns);
    h.get_by_label("makespan 35.0 µs");
}

/// Issue 41: "ZB auto" plans for the sliders' costs under its memory slider, live: at p = 4,
/// m = 8, F/B/W = 1/2/1 and a transfer of 0.5 it takes ZB-H1's 44 µs under ZB-H1's memory (4),
/// 38 µs given 7, and "= p" brings the memory back.
#[test]
fn zb_auto_replans_under_its_memory_slider() {
    let mut h = common::harness([1400.0, 1000.0]);
    h.get_by_label("ZB auto").click();
    h.run();
    common::set_slider(&mut h, "B", 2.0);
    common::set_slider(&mut h, "transfer cost", 0.5);
    h.get_by_label("makespan 44.0 µs");
    common::set_slider(&mut h, "zb-auto memory (activations a stage)", 7.0);
    assert_eq!(h.state().lab.params.memory, Some(7));
    h.get_by_label("makespan 38.0 µs");
    let peak = h
        .state()
        .lab
        .result
        .as_ref()
        .unwrap()
        .row()
        .sim
        .peak_activations
        .clone();
    assert!(peak.iter().all(|&a| a <= 7), "{peak:?}");
    h.get_by_label("= p").click();
    h.run();
    assert_eq!(h.state().lab.params.memory, None);
    h.get_by_label("makespan 44.0 µs");
}

/// Uneven stages: a slow stage (here stage 1 at 2×) stretches 1F1B from 33 to 53 µs, the same
/// figure as `gangway pipeline --stage-costs 1,2,1,1`, and back at 1× the stages are even again.
#[test]
fn a_slow_stage_sets_the_pace() {
    let mut h = common::harness([1200.0, 900.0]);
    h.get_by_label("1F1B").click();
    h.run();
    h.get_by_label("makespan 33.0 µs");
    common::set_slider(&mut h, "slow stage", 1.0);
    common::set_slider(&mut h, "its cost ×", 2.0);
    assert_eq!(h.state().lab.params.stage_scale(), [1.0, 2.0, 1.0, 1.0]);
    h.get_by_label("makespan 53.0 µs");
    let sim = &h.state().lab.result.as_ref().unwrap().row().sim;
    assert_eq!(sim.busy_ns[1], 2 * sim.busy_ns[0]);
    common::set_slider(&mut h, "its cost ×", 1.0);
    h.get_by_label("makespan 33.0 µs");
}

/// The stacked comparison: one time axis, the four schedules at the same p, m and total cost;
/// at p = 4, m = 8 interleaved (v = 2) and ZB-H1 finish before 1F1B.
#[test]
fn the_comparison_stacks_the_four_schedules_on_one_axis() {
    let mut h = common::harness([1400.0, 1400.0]);
    h.get_by_label("compare").click();
    h.run();
    let lab = &h.state().lab;
    let figure = lab.figure().unwrap();
    let span: Vec<(String, u64)> = figure
        .rows
        .iter()
        .map(|r| (r.title.clone(), r.sim.makespan_ns))
        .collect();
    let of = |t: &str| span.iter().find(|(n, _)| n.starts_with(t)).unwrap().1;
    assert_eq!(span.len(), 4, "{span:?}");
    assert!(of("Interleaved") < of("1F1B"), "{span:?}");
    assert!(of("ZB-H1") < of("1F1B"), "{span:?}");
    assert_eq!(of("GPipe"), of("1F1B"), "{span:?}");
    // Drawn: each row's title, a makespan and bubble beside each row, every compute op as a
    // block.
    let (layout, rect) = lab.layout.as_ref().unwrap();
    let texts = texts_of(layout);
    for (title, _) in &span {
        assert!(texts.contains(&title.as_str()), "{title} not drawn");
    }
    let makespans = texts.iter().filter(|t| t.starts_with("makespan ")).count();
    assert_eq!(makespans, 4, "{texts:?}");
    let ops: usize = figure.rows.iter().map(|r| r.blocks().len()).sum();
    assert_eq!(layout.blocks.len(), ops);
    // The figure fills the width it is given, and follows a resize (bug 7 for the lab).
    assert!(rect.width() > 1300.0, "{rect:?}");
    h.set_size(egui::vec2(1000.0, 1400.0));
    h.run();
    let (_, rect) = h.state().lab.layout.as_ref().unwrap();
    assert!(rect.width() < 1000.0 && rect.width() > 900.0, "{rect:?}");
}

/// Animation: space plays, ← / → step from one op start time to the next, ops not yet started
/// are dimmed.
#[test]
fn the_animation_plays_and_steps_by_compute_op() {
    let mut h = common::harness([1200.0, 900.0]);
    let total = h.state().lab.player.total();
    // 1F1B, p = 4, m = 8: 4 × 8 × (F + B) ops; sends and receives are not ops. Ops start at
    // whole µs only (F = B = 1 µs), and at 30 different ones.
    assert_eq!(h.state().lab.player.ops(), 64);
    assert_eq!(total, 30);
    h.key_press(egui::Key::ArrowRight);
    h.run();
    h.key_press(egui::Key::ArrowRight);
    h.run();
    assert_eq!(h.state().lab.player.step(), 2);
    // At 1 µs, stage 0's second F and stage 1's first start together.
    h.get_by_label_contains("3/64 ops started by 1.0 µs (step 2/30)");
    // Dimmed: the blocks' fills before and after the cursor differ.
    let dimmed = fills(&h);
    h.key_press(egui::Key::ArrowLeft);
    h.run();
    h.key_press(egui::Key::ArrowLeft);
    h.run();
    assert_eq!(h.state().lab.player.at_ns(), None);
    let whole_fills = fills(&h);
    assert!(
        dimmed.difference(&whole_fills).count() > 0,
        "nothing was dimmed mid-animation"
    );
    h.key_press(egui::Key::Space);
    h.step();
    assert!(h.state().lab.player.playing);
    let t0 = std::time::Instant::now();
    while h.state().lab.player.playing && t0.elapsed() < std::time::Duration::from_secs(30) {
        h.state_mut().lab.player.speed_ns_per_s = 50_000.0;
        h.step();
    }
    assert!(!h.state().lab.player.playing, "never reached the end");
    assert_eq!(h.state().lab.player.step(), total);
    h.run();
    h.get_by_label("Play");
}

/// Every fill colour of the lab's figure as drawn last frame.
fn fills(h: &egui_kittest::Harness<'static, gangway_viewer::ViewerApp>) -> BTreeSet<[u8; 4]> {
    let (layout, _) = h.state().lab.layout.as_ref().unwrap();
    layout
        .shapes
        .iter()
        .filter_map(|s| match s {
            Shape::Rect { fill, .. } => Some(fill.0),
            _ => None,
        })
        .collect()
}

/// The projector theme: `P` toggles it (not while typing), it is light with large type, and it
/// is remembered through eframe's storage.
#[test]
fn p_toggles_the_projector_theme_and_it_is_remembered() {
    let mut h = common::harness([1200.0, 900.0]);
    assert!(!h.state().settings.projector);
    assert!(h.ctx.global_style().visuals.dark_mode);
    h.key_press(egui::Key::P);
    h.run();
    assert!(h.state().settings.projector);
    assert!(!h.ctx.global_style().visuals.dark_mode);
    let body = h.ctx.global_style().text_styles[&egui::TextStyle::Body].size;
    assert!(body >= 18.0, "{body}");
    // The figure is drawn for the projector too: light background.
    let (layout, _) = h.state().lab.layout.as_ref().unwrap();
    assert!(
        layout.background.0[..3].iter().all(|&c| c > 200),
        "{:?}",
        layout.background
    );

    let mut storage = MemoryStorage::default();
    eframe::App::save(h.state_mut(), &mut storage);
    let mut again = common::app();
    again.restore(&storage);
    assert!(again.settings.projector);

    // Typing a P in a text field does not toggle it.
    h.get_by_role(egui::accesskit::Role::TextInput).click();
    h.run();
    h.key_press(egui::Key::P);
    h.run();
    assert!(h.state().settings.projector);
}

#[derive(Default)]
struct MemoryStorage(std::collections::HashMap<String, String>);

impl eframe::Storage for MemoryStorage {
    fn get_string(&self, key: &str) -> Option<String> {
        self.0.get(key).cloned()
    }
    fn set_string(&mut self, key: &str, value: String) {
        self.0.insert(key.into(), value);
    }
    fn remove_string(&mut self, key: &str) {
        self.0.remove(key);
    }
    fn flush(&mut self) {}
}

/// Bug 8: "→" drew as a box. The bundled font draws every symbol the UI prints, in both
/// families, without any system font.
#[test]
fn the_bundled_font_draws_the_arrows_and_symbols() {
    let mut h = common::harness([800.0, 600.0]);
    h.run();
    for family in [egui::FontFamily::Proportional, egui::FontFamily::Monospace] {
        let font = egui::FontId::new(14.0, family.clone());
        let missing: String = h.ctx.fonts_mut(|f| {
            gangway_viewer::fonts::SYMBOLS
                .chars()
                .filter(|&c| !f.has_glyph(&font, c))
                .collect()
        });
        assert!(missing.is_empty(), "{family:?} lacks {missing:?}");
    }
}

/// Export for slides: SVG from the layout, and PNG from that SVG drawn off screen at 2×: the
/// whole figure, here the comparison of four schedules, taller than the window that shows it.
#[test]
fn the_figure_exports_as_svg_and_png() {
    let dir = std::env::temp_dir().join(format!("gangway-export-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut h = common::harness([1200.0, 500.0]);
    h.state_mut().lab.export_path = dir.join("fig").display().to_string();
    h.get_by_label("compare").click();
    h.run();
    let export = |h: &mut egui_kittest::Harness<'static, gangway_viewer::ViewerApp>, what| {
        h.get_by_label(what).click();
        h.step();
        let t0 = std::time::Instant::now();
        while h.state().lab.exporter.is_busy() && t0.elapsed() < std::time::Duration::from_secs(30)
        {
            std::thread::sleep(std::time::Duration::from_millis(20));
            h.step();
        }
        assert!(
            matches!(h.state().lab.exporter.last, Some(Ok(_))),
            "{what}: {:?}",
            h.state().lab.exporter.last
        );
    };
    export(&mut h, "Export SVG");
    let svg = std::fs::read_to_string(dir.join("fig.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") || svg.starts_with("<?xml"),
        "{}",
        &svg[..80]
    );
    assert!(svg.contains("makespan") && svg.trim_end().ends_with("</svg>"));
    h.get_by_label_contains("wrote ");

    // Again to the same path: nothing is written until the user confirms.
    std::fs::write(dir.join("fig.svg"), "kept").unwrap();
    h.get_by_label("Export SVG").click();
    h.run();
    h.get_by_label_contains("fig.svg exists. Replace it?");
    assert!(!h.state().lab.exporter.is_busy());
    h.get_by_label("Cancel").click();
    h.run();
    assert_eq!(
        std::fs::read_to_string(dir.join("fig.svg")).unwrap(),
        "kept"
    );
    assert!(h.query_by_label_contains("Replace it?").is_none());
    h.get_by_label("Export SVG").click();
    h.run();
    export(&mut h, "Overwrite");
    let again = std::fs::read_to_string(dir.join("fig.svg")).unwrap();
    assert_eq!(again, svg, "replaced, once confirmed");

    export(&mut h, "Export PNG");
    let png = image::open(dir.join("fig.png")).unwrap().to_rgba8();
    let (layout, _) = h.state().lab.layout.as_ref().unwrap();
    let scale = gangway_viewer::bubble_lab::PNG_SCALE;
    assert!(
        layout.height > 500.0,
        "the comparison should not fit: {}",
        layout.height
    );
    for (got, want) in [
        (png.width(), layout.width * scale),
        (png.height(), layout.height * scale),
    ] {
        assert!((got as f32 - want).abs() <= 2.0, "{got} vs {want}");
    }
    // Drawn, not blank: the background, the blocks' colours, text and hatching.
    let colours: BTreeSet<[u8; 4]> = png.pixels().map(|p| p.0).collect();
    assert!(colours.len() > 50, "{} colours", colours.len());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A block's hover text sits beside the pointer, not below the whole figure (where egui anchors a
/// widget's tooltip): at the first block of stage 0 and the last of stage 3 alike.
#[test]
fn block_hover_text_follows_the_pointer() {
    let mut h = common::harness([1200.0, 900.0]);
    let (layout, rect) = h.state().lab.layout.clone().unwrap();
    let first = layout.blocks.first().unwrap();
    let last = layout.blocks.last().unwrap();
    for b in [first, last] {
        let pointer = rect.min + egui::vec2(b.x + b.w / 2.0, b.y + b.h / 2.0);
        h.hover_at(pointer);
        h.run();
        let text = format!("on stage {}", b.block.stage);
        let gap = h
            .get_by_label_contains(&text)
            .rect()
            .distance_to_pos(pointer);
        assert!(gap < 40.0, "{text}: hover text {gap} pt from the pointer");
    }
}

/// Figure only: the controls go, the figure and the player stay; Esc brings the controls back.
#[test]
fn figure_only_hides_the_controls_until_escape() {
    let mut h = common::harness([1400.0, 1400.0]);
    h.get_by_label("compare").click();
    h.run();
    h.get_by_label("figure only").click();
    h.run();
    assert!(h.state().lab.figure_only);
    assert!(h.query_by_label("stages p").is_none());
    h.get_by_label("Play");
    h.get_by_label("show the controls (Esc)");
    assert!(h.state().lab.layout.is_some());
    h.key_press(egui::Key::Escape);
    h.run();
    assert!(!h.state().lab.figure_only);
    assert!(h.query_by_label("show the controls (Esc)").is_none());
    assert!(h.query_all_by_label("stages p").next().is_some());
}

/// More stages than devices: the checkbox folds p = 4 onto 2 devices (blocks, then round robin);
/// the figure gets a lane per device, the numbers are `simulate_folded`'s, and unticking it
/// brings the stages back.
#[test]
fn stages_fold_onto_fewer_devices() {
    use gangway::pipeline::{Fold, Schedule, simulate_folded};
    let mut h = common::harness([1200.0, 900.0]);
    h.get_by_label("1F1B").click();
    h.run();
    h.get_by_label("makespan 33.0 µs");
    h.get_by_label("fewer devices than stages").click();
    h.run();
    assert_eq!(h.state().lab.params.fold(), Fold::Blocks { devices: 2 });
    let p = h.state().lab.params;
    let s = Schedule::new(p.kind, p.stages, p.microbatches, 1).unwrap();
    for (fold, choice) in [
        (Fold::Blocks { devices: 2 }, "blocks"),
        (Fold::RoundRobin { devices: 2 }, "round robin"),
    ] {
        h.get_by_label(choice).click();
        h.run();
        assert_eq!(h.state().lab.params.fold(), fold);
        let want = simulate_folded(&s, &p.share_costs(), &[], fold).unwrap();
        let row = h.state().lab.result.as_ref().unwrap().row();
        assert!(row.folded());
        assert_eq!(row.sim.makespan_ns, want.makespan_ns, "{choice}");
        assert_eq!(row.lanes(), 2);
        h.get_by_label(&format!("makespan {:.1} µs", want.makespan_ns as f64 / 1e3));
        let (layout, _) = h.state().lab.layout.as_ref().unwrap();
        let texts = texts_of(layout);
        assert!(texts.contains(&"device 1"), "{texts:?}");
        assert!(!texts.contains(&"stage 2"), "{texts:?}");
        h.get_by_label_contains("peak activations per device: ");
    }
    h.get_by_label("fewer devices than stages").click();
    h.run();
    assert_eq!(h.state().lab.params.fold(), Fold::OnePerStage);
    h.get_by_label("makespan 33.0 µs");
}

/// Issue 38: stepping lit several ops at one press (ops that start together) and nothing at
/// the next. Each press now moves to the next start time: it lights at least one more block,
/// and the figure changes, every time, to the end.
#[test]
fn every_step_lights_something_new() {
    let mut h = common::harness([1200.0, 900.0]);
    h.get_by_label("1F1B").click();
    h.run();
    let lit = |h: &egui_kittest::Harness<'static, gangway_viewer::ViewerApp>| {
        let (layout, _) = h.state().lab.layout.as_ref().unwrap();
        let t = h.state().lab.player.at_ns();
        let n = layout
            .blocks
            .iter()
            .filter(|b| t.is_none_or(|t| b.block.start_ns <= t))
            .count();
        let drawn: Vec<[u8; 4]> = layout
            .shapes
            .iter()
            .filter_map(|s| match s {
                Shape::Rect { fill, .. } => Some(fill.0),
                _ => None,
            })
            .collect();
        (n, drawn)
    };
    h.get_by_label("step >").click();
    h.run();
    let mut last = lit(&h);
    assert_eq!(last.0, 1);
    let total = h.state().lab.player.total();
    for k in 2..=total {
        h.get_by_label("step >").click();
        h.run();
        assert_eq!(h.state().lab.player.step(), k);
        let now = lit(&h);
        assert!(now.0 > last.0, "press {k} lit nothing new: {} ops", now.0);
        assert_ne!(now.1, last.1, "press {k} changed nothing drawn");
        last = now;
    }
    assert_eq!(last.0, h.state().lab.player.ops());
}

/// Issue 38: the transfer cost took whole µs only, so a transfer cheaper than a forward (1 µs)
/// could not be shown. It takes tenths: 0.3 µs lengthens 1F1B's 33 µs, less than 1 µs does.
#[test]
fn a_transfer_can_cost_less_than_a_forward() {
    let mut h = common::harness([1200.0, 900.0]);
    h.get_by_label("1F1B").click();
    h.run();
    h.get_by_label("makespan 33.0 µs");
    let makespan = |h: &egui_kittest::Harness<'static, gangway_viewer::ViewerApp>| {
        h.state().lab.result.as_ref().unwrap().row().sim.makespan_ns
    };
    common::set_slider(&mut h, "transfer cost", 0.3);
    assert!((h.state().lab.params.latency - 0.3).abs() < 1e-9);
    assert_eq!(h.state().lab.params.share_costs().latency_ns, 300);
    let tenths = makespan(&h);
    common::set_slider(&mut h, "transfer cost", 1.0);
    let whole = makespan(&h);
    assert!(
        33_000 < tenths && tenths < whole,
        "0.3 µs: {tenths} ns, 1 µs: {whole} ns"
    );
    h.get_by_label(&format!("makespan {:.1} µs", whole as f64 / 1e3));
}

/// Issue 38: folded, the legend said "chunk" for shades that are a device's stages.
#[test]
fn the_folded_legend_names_stages() {
    let mut h = common::harness([1200.0, 900.0]);
    h.get_by_label("1F1B").click();
    h.run();
    h.get_by_label("fewer devices than stages").click();
    h.run();
    let (layout, _) = h.state().lab.layout.as_ref().unwrap();
    let texts = texts_of(layout);
    assert!(texts.contains(&"device's stage 1, darker"), "{texts:?}");
    assert!(!texts.iter().any(|t| t.starts_with("chunk")), "{texts:?}");
}

/// Issue 38: in the projector theme a single schedule at 1280 px was cut off on the right (its
/// layout is wider than the window). It is drawn smaller to fit the width.
#[test]
fn a_projector_figure_fits_a_1280_px_window() {
    let mut h = common::harness([1280.0, 800.0]);
    h.key_press(egui::Key::P);
    h.run();
    assert!(h.state().settings.projector);
    for kind in ["1F1B", "DualPipeV", "Interleaved 1F1B"] {
        h.get_by_label(kind).click();
        h.run();
        let (layout, rect) = h.state().lab.layout.clone().unwrap();
        let scale = h.state().lab.figure_scale;
        assert!(rect.right() <= 1280.0, "{kind}: {rect:?}");
        assert!(
            (rect.width() - layout.width * scale).abs() < 0.5,
            "{kind}: {rect:?} for {} at {scale}",
            layout.width
        );
        assert!(scale <= 1.0 && scale > 0.5, "{kind}: {scale}");
    }
}

/// Issue 38: Figure only did not rescale the figure. Its "fit" (on by default) scales the whole
/// comparison into the window; off, it is drawn at its size and scrolls.
#[test]
fn figure_only_fits_the_figure_to_the_window() {
    let mut h = common::harness([1280.0, 800.0]);
    h.key_press(egui::Key::P);
    h.run();
    h.get_by_label("compare").click();
    h.run();
    h.get_by_label("figure only").click();
    h.run();
    assert!(h.state().lab.fit);
    let (layout, rect) = h.state().lab.layout.clone().unwrap();
    assert!(
        layout.height > 800.0,
        "the comparison should not fit unscaled"
    );
    assert!(
        rect.bottom() <= 800.0 && rect.right() <= 1280.0,
        "fit: {rect:?} in 1280 × 800"
    );
    assert!(h.state().lab.figure_scale < 1.0);
    // Hovering a block still finds it at its scaled place.
    let b = layout.blocks[layout.blocks.len() / 2];
    let s = h.state().lab.figure_scale;
    let pointer = rect.min + egui::vec2(b.x + b.w / 2.0, b.y + b.h / 2.0) * s;
    h.hover_at(pointer);
    h.run();
    h.get_by_label_contains(&format!("on stage {}", b.block.stage));
    h.get_by_label("fit").click();
    h.run();
    assert!(!h.state().lab.fit);
    // Off: as in the lab, only as narrow as the window, and taller than it.
    let (layout, rect) = h.state().lab.layout.clone().unwrap();
    let s = h.state().lab.figure_scale;
    assert!(rect.right() <= 1280.0 && rect.width() > 1200.0, "{rect:?}");
    assert!((rect.height() - layout.height * s).abs() < 0.5, "{rect:?}");
    assert!(rect.bottom() > 800.0, "{rect:?}");
}

/// Issue 38: in the comparison, ZB-V's and DualPipeV's half-width chunk blocks lost their
/// microbatch numbers (on screen, in the SVG and in the PNG). Every block has its number now,
/// smaller where it must be; the SVG export writes them all.
#[test]
fn the_comparison_numbers_half_width_blocks() {
    let dir = std::env::temp_dir().join(format!("gangway-vnumbers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut h = common::harness([1280.0, 900.0]);
    h.key_press(egui::Key::P);
    h.run();
    h.get_by_label("compare").click();
    h.run();
    for kind in ["ZB-V", "DualPipeV"] {
        h.get_all_by_label(kind).last().unwrap().click();
        h.run();
    }
    let (layout, _) = h.state().lab.layout.clone().unwrap();
    let figure = h.state().lab.figure().unwrap();
    let titles: Vec<&str> = figure.rows.iter().map(|r| r.title.as_str()).collect();
    assert!(
        titles.contains(&"ZB-V") && titles.contains(&"DualPipeV"),
        "{titles:?}"
    );
    let unlabelled: Vec<_> = layout.blocks.iter().filter(|b| !b.labelled).collect();
    assert!(unlabelled.is_empty(), "{} unlabelled", unlabelled.len());
    let numbers = texts_of(&layout)
        .iter()
        .filter(|t| t.parse::<usize>().is_ok_and(|n| (1..=8).contains(&n)))
        .count();
    assert!(numbers >= layout.blocks.len(), "{numbers} numbers");
    h.state_mut().lab.export_path = dir.join("v").display().to_string();
    h.get_by_label("Export SVG").click();
    h.step();
    let t0 = std::time::Instant::now();
    while h.state().lab.exporter.is_busy() && t0.elapsed() < std::time::Duration::from_secs(30) {
        std::thread::sleep(std::time::Duration::from_millis(20));
        h.step();
    }
    let svg = std::fs::read_to_string(dir.join("v.svg")).unwrap();
    let layout_texts = texts_of(&layout).len();
    assert_eq!(svg.matches("<text ").count(), layout_texts);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The lecture view of issue 38, rendered: the projector theme at 1280 × 800, the comparison
/// with ZB-V and DualPipeV (their half-width blocks numbered), in figure only with fit on.
#[test]
fn snapshot_bubble_lab_projector_fit() {
    if !common::can_render("snapshot_bubble_lab_projector_fit") {
        return;
    }
    let mut h = egui_kittest::Harness::builder()
        .with_size([1280.0, 800.0])
        .wgpu()
        .build_ui_state(
            |ui, app: &mut gangway_viewer::ViewerApp| app.show(ui),
            common::app(),
        );
    h.key_press(egui::Key::P);
    h.run();
    h.get_by_label("compare").click();
    h.run();
    for kind in ["ZB-V", "DualPipeV"] {
        h.get_all_by_label(kind).last().unwrap().click();
        h.run();
    }
    h.get_by_label("figure only").click();
    h.run();
    h.remove_cursor();
    h.run();
    h.snapshot_options(
        "bubble_lab_projector_fit",
        &egui_kittest::SnapshotOptions::new()
            .threshold(1.0)
            .max_failed_pixels(60),
    );
}

/// Where the setting is small enough (p ≤ 4, m ≤ 6) the lab says how far the schedule is from
/// the shortest one-chunk schedule under its own memory, as `gangway pipeline --optimal` does:
/// at F/B/W 1/2/1, ZB-H1 is that optimum under 1F1B's memory, 1F1B is 20% longer, GPipe 28.6%
/// (its memory allows the optimum more); a two-chunk schedule at m ≤ 4 is held to the optimum
/// of its own family; at m = 8 the line is gone.
#[test]
fn the_lab_shows_the_gap_to_the_optimum_under_the_same_memory() {
    let mut h = common::harness([1200.0, 900.0]);
    h.get_by_label("ZB-H1").click();
    h.run();
    common::set_slider(&mut h, "stages p", 4.0);
    common::set_slider(&mut h, "microbatches m", 6.0);
    common::set_slider(&mut h, "B", 2.0);
    h.get_by_label(
        "optimal one-chunk schedule under this memory (4 activations a stage): 30.0 µs (gap +0.0%)",
    );
    h.get_by_label("1F1B").click();
    h.run();
    h.get_by_label("optimal one-chunk schedule under this memory (4 activations a stage): 30.0 µs (gap +20.0%)");
    h.get_by_label("GPipe").click();
    h.run();
    h.get_by_label("optimal one-chunk schedule under this memory (6 activations a stage): 28.0 µs (gap +28.6%)");
    let o = h.state().lab.result.as_ref().unwrap().optimum.unwrap();
    assert!(o.proven && o.gap.is_some());
    // Two chunks a stage: ZB-V and V-Min against the V's optimum under their own peaks, and
    // interleaved against the loop's, at m = 4.
    common::set_slider(&mut h, "microbatches m", 4.0);
    for (button, family) in [
        ("ZB-V", "two-chunk V schedule (B and W split)"),
        ("V-Min", "two-chunk V schedule (B and W split)"),
        (
            "Interleaved 1F1B",
            "two-chunk interleaved schedule (whole backwards)",
        ),
    ] {
        h.get_by_label(button).click();
        h.run();
        let o = h.state().lab.result.as_ref().unwrap().optimum.unwrap();
        let text = o.text();
        assert!(
            text.starts_with(&format!("optimal {family} under this memory (")),
            "{text}"
        );
        assert!(o.gap.is_some_and(|g| g >= 0.0), "{button}: {text}");
        assert!(o.lower_bound_ns <= o.makespan_ns);
        h.get_by_label(&text);
    }
    common::set_slider(&mut h, "microbatches m", 8.0);
    assert!(h.state().lab.result.as_ref().unwrap().optimum.is_none());
    assert!(
        h.query_by_label_contains("optimal one-chunk schedule under this memory")
            .is_none()
    );
}

/// Large settings are studied off the UI thread (ZB-V at p = 16, m = 64 takes a second even in a
/// release build): the frame that changes them returns with the figure before still shown and a
/// line saying what is being studied; the new figure arrives when the study ends. Small ones
/// are studied in the frame that changes them, as before.
#[test]
fn a_large_setting_is_studied_off_the_ui_thread() {
    let mut h = common::harness([1400.0, 1000.0]);
    h.get_by_label("ZB-V").click();
    h.run();
    assert!(h.state().lab.computing().is_none(), "p = 4, m = 8 is small");
    let small = h.state().lab.result.as_ref().unwrap().row().sim.makespan_ns;
    h.state_mut().lab.params.stages = 16;
    h.state_mut().lab.params.microbatches = 16;
    h.step();
    let busy = h
        .state()
        .lab
        .computing()
        .expect("a study off the UI thread");
    assert_eq!((busy.stages, busy.microbatches), (16, 16));
    let shown = h.state().lab.result.as_ref().unwrap().row().sim.makespan_ns;
    assert_eq!(shown, small, "the figure before stays up");
    h.step();
    h.get_by_label_contains("studying ZB-V at p = 16, m = 16");
    let start = std::time::Instant::now();
    while h.state().lab.computing().is_some() {
        assert!(start.elapsed().as_secs() < 300, "the study never ended");
        std::thread::sleep(std::time::Duration::from_millis(20));
        h.step();
    }
    h.step();
    let lab = &h.state().lab;
    let want = gangway_viewer::bubble_lab::compute(&lab.params).unwrap();
    let got = lab.result.as_ref().unwrap().row();
    assert_eq!(got.sim.makespan_ns, want.row().sim.makespan_ns);
    assert_ne!(got.sim.makespan_ns, small);
    assert!(h.query_by_label_contains("off the UI thread").is_none());
}
