//! `gangway bench`: benchmark suites whose results compare across machines and versions.
//!
//! - [`harness`]: the [`Benchmark`] trait (prepare / run / sync) and the measuring loop, which
//!   counts the host's cost per run ([`host`]: launches, CPU, context switches).
//! - [`suite`]: the suites and their sizes; [`matmul`], [`attention`], [`memory`], [`dispatch`],
//!   [`pipeline`] (with [`pipeline_moe`]), [`moe`], [`transformer`], [`generate`], [`btm`] and
//!   [`scaleout`] plan their cases.
//! - [`run`]: every suite on every chosen adapter into one [`Report`].
//! - [`report`]: the versioned JSON schema and its Markdown table; [`compare`] pairs two reports
//!   ([`noise`]: when a change is called); [`side_by_side`] lays several out, a column per
//!   machine and adapter.
//! - [`peak`]: theoretical peaks and the roofline.

pub mod attention;
pub mod btm;
pub mod compare;
pub mod dispatch;
mod dispatch_raw;
pub mod format;
pub mod generate;
pub mod harness;
pub mod host;
pub mod machine;
pub mod matmul;
pub mod memory;
pub mod moe;
pub mod noise;
pub mod peak;
pub mod pipeline;
pub mod pipeline_moe;
pub mod planned;
pub mod report;
pub mod run;
pub mod scaleout;
pub mod side_by_side;
pub mod suite;
mod traced;
pub mod transformer;
pub mod work;

pub use harness::Benchmark;
pub use report::Report;
pub use run::{BenchOptions, select_adapters};
pub use suite::{Suite, SuiteOptions};
pub use work::{Sampling, Work, WorkUnit};
