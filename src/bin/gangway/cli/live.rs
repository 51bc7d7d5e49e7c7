//! The live stream's flags (`--live`, `--live-token`, `--live-metrics-only`) and the commands that attach to a job
//! served with them (`watch`, `trace record`): definitions only, as the rest of `cli.rs`.

use clap::{Args, Subcommand};
use std::path::PathBuf;

/// Serving the job live (the protocol: the book's reference, docs/src/reference/live-protocol.md).
#[derive(Args, Debug)]
pub(crate) struct LiveArgs {
    /// Serve this job's trace events, metrics and end over TCP at ADDR while it runs, for
    /// `gangway-viewer --attach` or `gangway watch` (`127.0.0.1:0` picks a free port; the
    /// first line on stderr names it). Any address but loopback needs a token.
    #[arg(long, global = true, env = "GANGWAY_LIVE", value_name = "ADDR")]
    pub(crate) live: Option<String>,
    /// The token a client must give; with a non-loopback --live and no token, one is made and
    /// printed.
    #[arg(
        long,
        global = true,
        env = "GANGWAY_LIVE_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub(crate) live_token: Option<String>,
    /// With --live: serve the job's metrics (and its hello and end) but no trace events, so
    /// the job runs without a tracer and serving costs next to nothing.
    #[arg(long, global = true, requires = "live")]
    pub(crate) live_metrics_only: bool,
}

/// Attaching to a job served with `--live`.
#[derive(Args, Debug)]
pub(crate) struct AttachArgs {
    /// The job's address, as its `--live` line printed it (HOST:PORT).
    pub(crate) addr: String,
    /// The job's token, if it has one.
    #[arg(long, env = "GANGWAY_LIVE_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
    /// Seconds to wait for the job to answer.
    #[arg(long, default_value_t = 10)]
    pub(crate) connect_timeout: u64,
}

#[derive(Args, Debug)]
pub(crate) struct WatchArgs {
    #[command(flatten)]
    pub(crate) attach: AttachArgs,
    /// Print one snapshot (after about a second of the stream) and exit.
    #[arg(long)]
    pub(crate) once: bool,
}

#[derive(Subcommand, Debug)]
pub(crate) enum TraceSub {
    /// Save the stream of a job served with `--live` as a trace file (Chrome trace-event JSON,
    /// gangway's layout), until the job ends or Ctrl-C.
    Record {
        #[command(flatten)]
        attach: AttachArgs,
        /// Where to write the trace (an existing file is refused unless --force).
        #[arg(long)]
        out: PathBuf,
        /// Replace --out if it exists.
        #[arg(long)]
        force: bool,
    },
}
