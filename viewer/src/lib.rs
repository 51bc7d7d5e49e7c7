//! `gangway-viewer`: an egui desktop app for gangway. It reads only the library's public API
//! and its event stream.
//!
//! - [`bubble_lab`]: pipeline schedules on the cost-model simulator (works without any GPU), and
//!   the same schedule run for real on the devices, measured beside the simulation;
//! - [`live_view`] + [`live`]: the chain program running in the background on the real devices,
//!   every run of the app's runtime served live on loopback and followed onto a [`timeline`]
//!   through that stream, as another process's job is;
//! - [`devices_panel`]: adapters, virtual splits, utilization (busy time / sliding window);
//! - [`dispatch_compare`]: sequential vs parallel dispatch of the same program;
//! - [`moe_panel`]: MoE training on the devices: loss, aux loss, dropped fraction, tokens per
//!   expert per step;
//! - [`files`]: Chrome trace JSON in and out, `gangway bench --json` reports ([`bench_view`]),
//!   compared with another report, of this machine or another ([`bench_compare`]), or shown
//!   beside several others, a column per machine and adapter ([`bench_side_by_side`]);
//! - [`attach_view`] + [`attach`]: jobs of other processes served with `--live`, followed over
//!   the live protocol: their timeline, devices, utilization and training metrics.

pub mod app;
pub mod attach;
pub mod attach_view;
pub mod background;
pub mod bench_compare;
pub mod bench_side_by_side;
pub mod bench_view;
pub mod bubble_lab;
pub mod devices_panel;
pub mod dispatch_compare;
pub mod files;
pub mod fonts;
pub mod frame_stats;
pub mod live;
pub mod live_view;
pub mod moe_panel;
pub mod pace;
pub mod theme;
pub mod timeline;
pub mod utilization;

pub use app::{Options, Settings, Tab, ViewerApp};
