//! Shared test helpers: the app without devices or with discovered ones, sliders, and whether a
//! wgpu adapter exists for rendering snapshots.
#![allow(dead_code, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use egui::accesskit::Role;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use gangway_viewer::live::Discovery;
use gangway_viewer::{Options, ViewerApp};

/// The app as on a machine without adapters: simulator only, no background work.
pub fn app() -> ViewerApp {
    ViewerApp::new(
        Options {
            discover: false,
            autostart_live: false,
            virtual_devices: None,
            ..Options::default()
        },
        None,
    )
}

/// A harness around the whole app.
pub fn harness(size: [f32; 2]) -> Harness<'static, ViewerApp> {
    Harness::builder()
        .with_size(size)
        .build_ui_state(|ui, app: &mut ViewerApp| app.show(ui), app())
}

/// Whether a wgpu adapter exists to render with. Without one, rendering tests skip with a
/// message, unless `GANGWAY_REQUIRE_ADAPTER=1` (CI), where they fail.
pub fn can_render(test: &str) -> bool {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
    let found = !pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all())).is_empty();
    if !found {
        assert!(
            std::env::var("GANGWAY_REQUIRE_ADAPTER").as_deref() != Ok("1"),
            "{test}: no wgpu adapter, and GANGWAY_REQUIRE_ADAPTER=1"
        );
        eprintln!("{test}: skipped, no wgpu adapter to render with");
    }
    found
}

/// The app with device discovery (`virtual_devices` per adapter) and, if `live`, the live
/// workload; `None` (after saying why) when fewer than `needed` devices exist, which fails under
/// `GANGWAY_REQUIRE_ADAPTER=1`.
pub fn device_harness(
    test: &str,
    virtual_devices: usize,
    needed: usize,
    live: bool,
) -> Option<Harness<'static, ViewerApp>> {
    let app = ViewerApp::new(
        Options {
            discover: true,
            autostart_live: live,
            virtual_devices: Some(virtual_devices),
            ..Options::default()
        },
        None,
    );
    // Real trace names contain "→": the bundled font must draw it (kittest fails on a missing
    // glyph).
    let mut h = Harness::builder()
        .with_size([1400.0, 1800.0])
        .build_ui_state(|ui, app: &mut ViewerApp| app.show(ui), app);
    let deadline = Instant::now() + Duration::from_secs(60);
    while matches!(h.state().hub.get(), Discovery::Pending) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    h.step();
    let found = h.state().hub.devices().map_or(0, |d| d.len());
    if found < needed {
        assert!(
            std::env::var("GANGWAY_REQUIRE_ADAPTER").as_deref() != Ok("1"),
            "{test}: {found} devices, and GANGWAY_REQUIRE_ADAPTER=1"
        );
        eprintln!("{test}: skipped, needs {needed} devices, found {found}");
        return None;
    }
    Some(h)
}

/// Sets a slider by its label. `run_ok`, not `run`: background work may keep asking for frames.
pub fn set_slider(h: &mut Harness<'_, ViewerApp>, label: &str, v: f64) {
    h.get_by_role_and_label(Role::Slider, label)
        .set_value_accesskit(v);
    h.run_ok();
}

/// Starts the live workload as the Start button does: it then runs on every tab until Stop.
pub fn start_live(h: &mut Harness<'static, ViewerApp>) {
    let hub = h.state().hub.clone();
    h.state_mut().live.start(&hub, None);
    h.step();
    assert!(
        h.state().live.runner.is_some(),
        "the live workload did not start"
    );
}

/// The app on the Files tab with `path` opened through the path field and the Open button,
/// waited for.
pub fn open_in_app(path: &std::path::Path, size: [f32; 2]) -> Harness<'static, ViewerApp> {
    let mut h = harness(size);
    h.run();
    open_in(&mut h, path);
    h
}

/// Opens `path` in the app `h` as a user does: the Files tab, the path field and Open, waited
/// for.
pub fn open_in(h: &mut Harness<'static, ViewerApp>, path: &std::path::Path) {
    h.get_by_label("Files").click();
    h.run();
    h.state_mut().files.path = path.display().to_string();
    h.run();
    h.get_by_label("Open").click();
    h.step();
    let deadline = Instant::now() + Duration::from_secs(120);
    while h.state().files.is_busy() {
        assert!(Instant::now() < deadline, "the open never finished");
        h.step();
        std::thread::sleep(Duration::from_millis(2));
    }
    h.run();
    assert_eq!(h.state().tab, gangway_viewer::Tab::Files);
}

/// Every text painted in a frame's shapes.
pub fn painted_texts(shapes: &[egui::epaint::ClippedShape]) -> Vec<String> {
    fn walk(shape: &egui::Shape, out: &mut Vec<String>) {
        match shape {
            egui::Shape::Text(t) => out.push(t.galley.text().to_owned()),
            egui::Shape::Vec(v) => v.iter().for_each(|s| walk(s, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    shapes.iter().for_each(|c| walk(&c.shape, &mut out));
    out
}

/// Every shape painted in a frame, nested ones flattened.
pub fn painted_shapes(shapes: &[egui::epaint::ClippedShape]) -> Vec<egui::Shape> {
    fn walk(shape: &egui::Shape, out: &mut Vec<egui::Shape>) {
        match shape {
            egui::Shape::Vec(v) => v.iter().for_each(|s| walk(s, out)),
            other => out.push(other.clone()),
        }
    }
    let mut out = Vec::new();
    shapes.iter().for_each(|c| walk(&c.shape, &mut out));
    out
}

/// Where each painted text is: its text and its top-left corner.
pub fn painted_text_positions(shapes: &[egui::epaint::ClippedShape]) -> Vec<(String, egui::Pos2)> {
    painted_shapes(shapes)
        .into_iter()
        .filter_map(|s| match s {
            egui::Shape::Text(t) => Some((t.galley.text().to_owned(), t.pos)),
            _ => None,
        })
        .collect()
}
