#![allow(clippy::unwrap_used)]
//! The bubble lab driven through its UI, by labels.

mod common;

use egui_kittest::kittest::{NodeT, Queryable};
use gangway::pipeline::{ScheduleKind, bubble_formula};

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
    let sim = &h.state().lab.result.as_ref().unwrap().sim;
    assert!((sim.bubble_fraction - bubble_formula(ScheduleKind::OneFOneB, 4, 8, 1)).abs() < 1e-12);
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
    common::set_slider(&mut h, "microbatches m", 6.0); // not a multiple of p = 4
    h.get_by_label_contains("error: interleaved 1F1B needs the microbatch count (6)");
}

#[test]
fn stepping_says_what_each_stage_waits_for() {
    let mut h = common::harness([1200.0, 900.0]);
    h.get_by_label("step >").click();
    h.run();
    assert_eq!(h.state().lab.step, 1);
    // At t = 0 only stage 0 runs; stage 1 waits for microbatch 0's activation from stage 0.
    h.get_by_label("stage 0: running F mb 0");
    h.get_by_label("stage 1: waits for the activation of mb 0 from stage 0");
    h.get_by_label("< step").click();
    h.run();
    assert_eq!(h.state().lab.step, 0);
}

#[test]
fn no_adapter_banner_says_why_real_runs_are_off() {
    let h = common::harness([1200.0, 900.0]);
    h.get_by_label_contains("Real runs are off: device discovery is off");
    // The lab still works on the simulator.
    h.get_by_label_contains("bubble (simulated):");
}
