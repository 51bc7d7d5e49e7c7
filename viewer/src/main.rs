//! `gangway-viewer [--no-devices] [--no-live] [FILE.json]`: the desktop viewer.

use gangway_viewer::{Options, Tab, ViewerApp};

fn main() -> anyhow::Result<()> {
    let mut options = Options::default();
    let mut file = None;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--no-devices" => options.discover = false,
            "--no-live" => options.autostart_live = false,
            "-h" | "--help" => {
                println!(
                    "gangway-viewer [--no-devices] [--no-live] [FILE.json]\n\n  \
                     --no-devices  simulator only: do not look for adapters\n  \
                     --no-live     do not start the background workload\n  \
                     FILE.json     a Chrome trace or gangway bench --json file to open"
                );
                return Ok(());
            }
            other => file = Some(other.to_string()),
        }
    }
    let native = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default()
            .with_inner_size([1280.0, 820.0])
            .with_title("gangway viewer"),
        ..Default::default()
    };
    eframe::run_native(
        "gangway viewer",
        native,
        Box::new(move |cc| {
            let mut app = ViewerApp::new(options, Some(cc.egui_ctx.clone()));
            if let Some(path) = file {
                app.files.path = path;
                app.files.open_path();
                app.tab = Tab::Files;
            }
            Ok(Box::new(app))
        }),
    )
    .map_err(|e| anyhow::anyhow!("cannot open the window: {e}"))
}
