//! `gangway-viewer [--no-devices] [--no-live] [--virtual-devices N] [FILE.json]`: the desktop
//! viewer.

use gangway_viewer::{Options, Tab, ViewerApp};

fn main() -> anyhow::Result<()> {
    let mut options = Options::default();
    let mut file = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--no-devices" => options.discover = false,
            "--no-live" => options.autostart_live = false,
            "--virtual-devices" => {
                options.virtual_devices = Some(virtual_devices(args.next().as_deref())?);
            }
            "-h" | "--help" => {
                println!(
                    "gangway-viewer [--no-devices] [--no-live] [--virtual-devices N] [FILE.json]\n\n  \
                     --no-devices         simulator only: do not look for adapters\n  \
                     --no-live            do not start the background workload\n  \
                     --virtual-devices N  make N devices of each adapter (default: \
                     GANGWAY_VIRTUAL_DEVICES, else 1)\n  \
                     FILE.json            a Chrome trace or gangway bench --json file to open"
                );
                return Ok(());
            }
            other => match other.strip_prefix("--virtual-devices=") {
                Some(n) => options.virtual_devices = Some(virtual_devices(Some(n))?),
                None => file = Some(other.to_string()),
            },
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

/// The value of `--virtual-devices`: a whole number of at least 1.
fn virtual_devices(arg: Option<&str>) -> anyhow::Result<usize> {
    arg.and_then(|n| n.trim().parse::<usize>().ok())
        .filter(|&n| n >= 1)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "--virtual-devices needs a whole number of at least 1, got {}",
                arg.unwrap_or("nothing")
            )
        })
}
