//! What a case measures, as its report records it: what one run does ([`Work`], in a
//! [`WorkUnit`]) and how many runs are timed ([`Sampling`]). Below the harness that measures and
//! the report that records.

use serde::{Deserialize, Serialize};

/// What one run of a benchmark does, for its derived figure and its place on the roofline.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Work {
    /// How much of `unit` one run does; the derived figure is `amount / median` (scaled).
    pub amount: f64,
    pub unit: WorkUnit,
    /// Floating-point operations one run does, when known (gives the fraction of peak FLOP/s).
    pub flops: Option<f64>,
    /// Bytes one run must move to or from device memory at least, when known (gives the
    /// arithmetic intensity, and with `flops` the roofline).
    pub bytes: Option<f64>,
}

/// What a benchmark counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WorkUnit {
    Flop,
    Byte,
    Token,
    Computation,
    Sample,
}

impl WorkUnit {
    /// The derived figure's unit and the factor that turns `amount / s` into it.
    pub fn figure(self) -> (&'static str, f64) {
        match self {
            WorkUnit::Flop => ("GFLOP/s", 1e-9),
            WorkUnit::Byte => ("GB/s", 1e-9),
            WorkUnit::Token => ("tokens/s", 1.0),
            WorkUnit::Computation => ("computations/s", 1.0),
            WorkUnit::Sample => ("samples/s", 1.0),
        }
    }
}

impl Work {
    pub fn new(amount: f64, unit: WorkUnit) -> Self {
        Self {
            amount,
            unit,
            flops: (unit == WorkUnit::Flop).then_some(amount),
            bytes: (unit == WorkUnit::Byte).then_some(amount),
        }
    }

    pub fn with_flops(self, flops: f64) -> Self {
        Self {
            flops: Some(flops),
            ..self
        }
    }

    pub fn with_bytes(self, bytes: f64) -> Self {
        Self {
            bytes: Some(bytes),
            ..self
        }
    }
}

/// Warm-up runs and timed samples per case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Sampling {
    pub warmup: usize,
    pub samples: usize,
}
