//! Why a schedule could not be built, validated or simulated. Messages name the stage, the op and
//! the rule broken, so a hand-edited schedule can be fixed from the message alone.

/// Everything that can go wrong when building, checking or simulating a pipeline schedule.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScheduleError {
    #[error(
        "unknown schedule {name:?}: expected one of {}",
        super::ScheduleKind::names()
    )]
    UnknownKind { name: String },

    #[error("a pipeline needs at least one {what}, got 0")]
    Zero { what: &'static str },

    #[error(
        "{kind} puts one model chunk on each stage, got {chunks}; only interleaved and bfs take \
         a chunk count"
    )]
    ChunksNeedInterleaved { kind: &'static str, chunks: usize },

    #[error(
        "{kind} needs at least 2 model chunks per stage, got {chunks}; with one chunk use 1f1b \
         (or gpipe)"
    )]
    TooFewChunks { kind: &'static str, chunks: usize },

    #[error(
        "interleaved 1F1B needs at least as many microbatches ({microbatches}) as stages \
         ({stages}), as Megatron requires"
    )]
    MicrobatchesBelowStages { microbatches: usize, stages: usize },

    #[error("{kind} cannot take this shape: {reason}")]
    Shape { kind: &'static str, reason: String },

    #[error(
        "{stages} stages x {microbatches} microbatches x {chunks} chunks is about {ops} ops, \
         more than the {max} this tool will build"
    )]
    TooLarge {
        stages: usize,
        microbatches: usize,
        chunks: usize,
        ops: u128,
        max: u64,
    },

    #[error("the schedule has op lists for {got} stages but declares {stages}")]
    StageCount { stages: usize, got: usize },

    #[error("stage {stage}, op #{index} ({op}): {reason}")]
    BadOp {
        stage: usize,
        index: usize,
        op: String,
        reason: String,
    },

    #[error("stage {stage}, op #{index}: {op} runs a second time")]
    Duplicate {
        stage: usize,
        index: usize,
        op: String,
    },

    #[error("stage {stage}, op #{index}: {op} runs before {needs}")]
    OutOfOrder {
        stage: usize,
        index: usize,
        op: String,
        needs: String,
    },

    #[error("{op} never runs on stage {stage}")]
    Missing { stage: usize, op: String },

    #[error("stage {stage} sends {what} that stage {peer} never receives")]
    Unreceived {
        stage: usize,
        peer: usize,
        what: String,
    },

    #[error("the schedule deadlocks: {}", stuck.join("; "))]
    Deadlock { stuck: Vec<String> },

    #[error("invalid costs: {reason}")]
    InvalidCosts { reason: String },

    #[error("cannot fold the stages onto devices: {reason}")]
    InvalidFold { reason: String },
}
