//! The one error type of the library. Every fallible public function returns [`Result`].
//!
//! This file imports no feature module: the errors of a part with many of its own (the pipeline
//! schedules' [`ScheduleError`], a mesh's [`MeshError`]) are typed enums wrapped by
//! one variant each, and those defined here are plain data (names, numbers, text), in sections.

use std::path::PathBuf;

/// Everything that can go wrong in gangway, with enough structure to act on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "no GPU adapter found on backends [{backends}]. On headless Linux install Mesa's software \
         drivers (`apt-get install -y mesa-vulkan-drivers libegl1 libgl1-mesa-dri`); elsewhere install \
         your GPU's Vulkan/Metal/DX12 driver, or widen the search (DiscoveryOptions::backends, \
         $WGPU_BACKEND)"
    )]
    NoAdapter { backends: String },

    #[error(
        "unknown backend {name:?}: expected a comma list of vulkan|vk, metal|mtl, dx12|d3d12, gl|gles|opengl"
    )]
    UnknownBackend { name: String },

    #[error("invalid setting {name}={value:?}: {reason}")]
    InvalidSetting {
        name: &'static str,
        value: String,
        reason: String,
    },

    #[error("requesting a device from adapter {adapter:?} failed: {source}")]
    RequestDevice {
        adapter: String,
        #[source]
        source: wgpu::RequestDeviceError,
    },

    #[error("device {device} was lost: {reason}")]
    DeviceLost { device: String, reason: String },

    #[error("{what}: shape mismatch, expected {expected}, got {got}")]
    ShapeMismatch {
        what: &'static str,
        expected: String,
        got: String,
    },

    #[error("{what}: dtype mismatch, expected {expected:?}, got {got:?}")]
    DTypeMismatch {
        what: &'static str,
        expected: crate::DType,
        got: crate::DType,
    },

    #[error("{what}: {dtype:?} is not supported by device {device} (missing feature {feature})")]
    UnsupportedDType {
        what: &'static str,
        dtype: crate::DType,
        device: String,
        feature: &'static str,
    },

    #[error("{what}: tensors live on different devices ({a} and {b})")]
    DeviceMismatch {
        what: &'static str,
        a: String,
        b: String,
    },

    #[error("{what}: invalid argument: {reason}")]
    InvalidArgument { what: &'static str, reason: String },

    #[error("{what}: {requested} exceeds device {device}'s limit {limit_name} = {limit}")]
    LimitExceeded {
        what: String,
        device: String,
        limit_name: &'static str,
        requested: u64,
        limit: u64,
    },

    #[error("shader {shader}: {message}")]
    Shader { shader: String, message: String },

    #[error("GPU validation error in {what}: {message}")]
    Gpu { what: String, message: String },

    #[error("mapping a buffer for readback failed: {0}")]
    Map(#[from] wgpu::BufferAsyncError),

    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("{path}: malformed JSON: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },

    #[error("{what}: the result differs from the reference: {detail}")]
    Mismatch { what: String, detail: String },

    #[error("{what} panicked: {message}")]
    Panic { what: String, message: String },

    #[error("{path}: {reason}")]
    BenchReport { path: PathBuf, reason: String },

    #[error("mesh: {0}")]
    Mesh(#[from] MeshError),

    #[error("timed out after {waited_ms} ms waiting for {what}")]
    Timeout { what: String, waited_ms: u64 },

    #[error(
        "device {device}: {requested} bytes do not fit the memory budget ({in_use} of {budget} bytes in use){hint}"
    )]
    MemoryBudget {
        device: String,
        requested: u64,
        in_use: u64,
        budget: u64,
        hint: &'static str,
    },

    #[error("resource manager: {requested} devices requested, only {available} exist")]
    Unavailable { requested: usize, available: usize },

    #[error("program {program:?}: {reason}")]
    Program { program: String, reason: String },

    /// Something between the job's processes: a rank that cannot be reached or disagrees.
    #[error("rank {rank}: {reason}")]
    Job { rank: usize, reason: String },

    #[error("pipeline schedule: {0}")]
    Schedule(#[from] ScheduleError),

    /// A rank of the job was started with a setting other than rank 0's ([`crate::job::Job::agree`]).
    #[error(
        "rank {rank} was started with other settings than rank 0: {setting} is {value} there, \
         {root_value} on rank 0{}",
        if *more > 0 { format!(" (and {more} more differ)") } else { String::new() }
    )]
    RanksDisagree {
        rank: usize,
        setting: String,
        value: String,
        root_value: String,
        more: usize,
    },

    /// The live stream ([`crate::live`]): a bad frame, a refused attach, a closed connection.
    #[error("live stream: {0}")]
    Live(#[from] LiveError),
}

/// `Result` with gangway's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Turns an I/O failure on `path` into [`Error::Io`]: `fs::read(p).map_err(Error::io(p))`.
    pub fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
        move |source| Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// The error for a caught panic in `what`, with the panic's message when it has one.
    pub fn panicked(what: impl Into<String>, payload: &(dyn std::any::Any + Send)) -> Error {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".into());
        Error::Panic {
            what: what.into(),
            message,
        }
    }

    /// A copy to hand to another waiter (a run's error reaches its client and its other tasks).
    /// Variants holding non-clonable sources keep their message.
    pub fn clone_for_report(&self) -> Error {
        match self {
            Error::NoAdapter { backends } => Error::NoAdapter {
                backends: backends.clone(),
            },
            Error::DeviceLost { device, reason } => Error::DeviceLost {
                device: device.clone(),
                reason: reason.clone(),
            },
            Error::ShapeMismatch {
                what,
                expected,
                got,
            } => Error::ShapeMismatch {
                what,
                expected: expected.clone(),
                got: got.clone(),
            },
            Error::InvalidArgument { what, reason } => Error::InvalidArgument {
                what,
                reason: reason.clone(),
            },
            Error::Timeout { what, waited_ms } => Error::Timeout {
                what: what.clone(),
                waited_ms: *waited_ms,
            },
            Error::MemoryBudget {
                device,
                requested,
                in_use,
                budget,
                hint,
            } => Error::MemoryBudget {
                device: device.clone(),
                requested: *requested,
                in_use: *in_use,
                budget: *budget,
                hint,
            },
            Error::Program { program, reason } => Error::Program {
                program: program.clone(),
                reason: reason.clone(),
            },
            Error::Gpu { what, message } => Error::Gpu {
                what: what.clone(),
                message: message.clone(),
            },
            Error::Panic { what, message } => Error::Panic {
                what: what.clone(),
                message: message.clone(),
            },
            Error::Job { rank, reason } => Error::Job {
                rank: *rank,
                reason: reason.clone(),
            },
            other => Error::Gpu {
                what: "reported".into(),
                message: other.to_string(),
            },
        }
    }
}

// ---- Pipeline schedules: building, checking, simulating and lowering them.

/// Everything that can go wrong when building, checking or simulating a pipeline schedule.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScheduleError {
    #[error("unknown schedule {name:?}: expected one of {expected}")]
    UnknownKind { name: String, expected: String },

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
    /// The exact search for the optimum cannot take the setting (too large, blocking sends,
    /// uneven or folded stages).
    #[error("{reason}")]
    BeyondTheSearch { reason: String },

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

// ---- Meshes: their shapes, and questions asked of them.

/// What is wrong with a mesh, its shape, or a question asked of it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MeshError {
    #[error("axes {axes} hold {holds} devices, the mesh has {devices}")]
    Size {
        axes: String,
        holds: usize,
        devices: usize,
    },
    #[error("a mesh needs at least one axis")]
    NoAxes,
    #[error("axis {0:?} has size 0")]
    ZeroAxis(String),
    #[error("axis {0:?} appears twice")]
    RepeatedAxis(String),
    #[error("no axis {axis:?} in {shape}")]
    NoAxis { axis: String, shape: String },
    #[error("coordinates {coords:?} are outside a mesh of shape {shape:?}")]
    Coords {
        coords: Vec<usize>,
        shape: Vec<usize>,
    },
    #[error("cannot read axes from {text:?}: {reason} (write them as `data=2,expert=2`)")]
    Parse { text: String, reason: String },
}

// ---- The live stream: serving a job's records over TCP, and reading them.

/// What went wrong on a live connection ([`crate::live`]), by what a client may do about it: a
/// refusal will not change on retry, a closed or failed connection may.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LiveError {
    /// A frame broke the framing rules or held no record of this protocol.
    #[error("bad frame: {reason}")]
    BadFrame { reason: String },
    /// A well-formed record that the protocol does not allow here (an event before the hello).
    #[error("protocol violation: {reason}")]
    Protocol { reason: String },
    /// The server answered the attach with `refused`.
    #[error("the server refused the attach: {reason}")]
    Refused { reason: String },
    /// The peer closed the connection.
    #[error("{peer} closed the connection")]
    Closed { peer: String },
    /// A socket call failed (connect, read, write, bind); the kind says which failure.
    #[error("{what}: {message}")]
    Io {
        what: String,
        kind: std::io::ErrorKind,
        message: String,
    },
    /// Serving a non-loopback address without a token.
    #[error(
        "{addr} is not a loopback address: serving it needs a token (ServeOptions::token; \
         live::generate_token makes one), and across untrusted networks an SSH tunnel"
    )]
    TokenNeeded { addr: String },
    /// A rank forwarding to rank 0's server had no answer to its clock probe.
    #[error(
        "rank {rank}: rank 0 answered no clock probe within {waited_ms} ms: does it serve the job \
         live (the same --live on every rank)?"
    )]
    RootSilent { rank: usize, waited_ms: u64 },
}
