//! Shared test helpers: the app without devices, and whether a wgpu adapter exists for
//! rendering snapshots.
#![allow(dead_code, clippy::unwrap_used)]

use egui_kittest::Harness;
use gangway_viewer::{Options, ViewerApp};

/// The app as on a machine without adapters: simulator only, no background work.
pub fn app() -> ViewerApp {
    ViewerApp::new(
        Options {
            discover: false,
            autostart_live: false,
            virtual_devices: None,
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
