//! What the order builders produce: one compute op of a stage's order ([`Step`]) and a stage's
//! whole order ([`ComputeOrder`]). `Schedule::from_orders` adds the transfers around them.

use super::schedule_kind::OpKind;

/// One compute op of a stage's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Step {
    pub kind: OpKind,
    pub mb: usize,
    pub chunk: usize,
    /// An F overlapped with the B after it (F&B).
    pub overlapped: bool,
    /// A W that belongs to the B right before it (a full backward, split only for the data).
    pub glued: bool,
}

impl Step {
    pub(crate) fn new(kind: OpKind, mb: usize, chunk: usize) -> Step {
        Step {
            kind,
            mb,
            chunk,
            overlapped: false,
            glued: false,
        }
    }
}

/// The compute ops in the order `stage` runs them.
pub(crate) type ComputeOrder = Vec<Step>;
