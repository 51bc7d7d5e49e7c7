//! `gangway-viewer`: the desktop viewer. See `gangway-viewer --help`.

use std::path::PathBuf;

use clap::Parser;
use gangway_viewer::{Options, ViewerApp};

/// The gangway desktop viewer: pipeline bubble lab, live dispatch timelines, device
/// utilization, MoE training, trace and benchmark files.
#[derive(Parser, Debug)]
#[command(name = "gangway-viewer", version)]
struct Args {
    /// Simulator only: do not look for adapters.
    #[arg(long)]
    no_devices: bool,
    /// Do not start the live workload when the Live timeline tab is shown.
    #[arg(long)]
    no_live: bool,
    /// Devices made from each adapter (default: GANGWAY_VIRTUAL_DEVICES, else 1).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    virtual_devices: Option<u32>,
    /// Start in the projector theme (light, large type); `P` toggles it in the app.
    #[arg(long)]
    projector: bool,
    /// Print frame-rate statistics to stderr about once a second while the window draws.
    #[arg(long)]
    frame_stats: bool,
    /// Attach to a job served with `--live` at HOST:PORT (repeatable: several jobs at once).
    #[arg(long, value_name = "HOST:PORT")]
    attach: Vec<String>,
    /// The token of the jobs attached to (their `--live-token`), for a server not on loopback.
    #[arg(long, env = "GANGWAY_LIVE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// A Chrome trace or `gangway bench --json` report to open.
    #[arg(value_name = "FILE.json")]
    file: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    // Unknown flags and bad values end here with clap's message and exit code 2.
    let args = Args::parse();
    let options = Options {
        discover: !args.no_devices,
        autostart_live: !args.no_live,
        virtual_devices: args.virtual_devices.map(|n| n as usize),
        frame_stats: args.frame_stats,
    };
    let native = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default()
            .with_inner_size([1280.0, 820.0])
            .with_title("gangway viewer")
            .with_drag_and_drop(true),
        ..Default::default()
    };
    eframe::run_native(
        "gangway viewer",
        native,
        Box::new(move |cc| {
            let mut app = ViewerApp::new(options, Some(cc.egui_ctx.clone()));
            if let Some(storage) = cc.storage {
                app.restore(storage);
            }
            if args.projector {
                app.settings.projector = true;
            }
            if let Some(path) = args.file {
                app.open_file(path);
            }
            for addr in &args.attach {
                app.attach_to(addr, args.token.clone(), Some(cc.egui_ctx.clone()));
            }
            Ok(Box::new(app))
        }),
    )
    .map_err(|e| anyhow::anyhow!("cannot open the window: {e}"))
}
