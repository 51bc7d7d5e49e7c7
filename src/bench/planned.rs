//! A case as a suite plans it ([`Planned`]): one to run, one that cannot run here and why, or a
//! suite that could not plan. Every suite makes them, the runner takes them; the list of suites
//! (`suite.rs`) sits above both.

use super::harness::Benchmark;

/// A case to run, or one that cannot run here and why.
pub enum Planned {
    Run(Box<dyn Benchmark>),
    Skip {
        case: String,
        reason: String,
    },
    /// The suite could not even plan its cases (bad sizes, missing data).
    Failed {
        case: String,
        reason: String,
    },
}

impl std::fmt::Debug for Planned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Planned::Run(b) => write!(f, "Run({})", b.case()),
            Planned::Skip { case, reason } => write!(f, "Skip({case}: {reason})"),
            Planned::Failed { case, reason } => write!(f, "Failed({case}: {reason})"),
        }
    }
}

impl Planned {
    pub fn skip(case: String, reason: String) -> Self {
        Planned::Skip { case, reason }
    }

    /// Skips `case`, which needs `need` devices of an adapter that has `has`.
    pub fn too_few_devices(case: String, need: usize, has: usize) -> Self {
        Self::skip(
            case,
            format!("needs {need} devices, the adapter has {has} (raise --virtual-devices)"),
        )
    }

    pub fn case(&self) -> String {
        match self {
            Planned::Run(b) => b.case(),
            Planned::Skip { case, .. } | Planned::Failed { case, .. } => case.clone(),
        }
    }
}
