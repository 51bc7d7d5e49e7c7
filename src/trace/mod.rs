//! Tracing: what each device did and when, as [`Event`] intervals.
//!
//! Pure data and arithmetic, independent of any GPU API, so the executor, the simulator, the
//! viewer and the tests share one model. A [`Tracer`] records and streams events (or only
//! streams them: [`Tracer::streaming`]); it is off by default and then costs a branch per call.
//! [`mod@utilization`] measures device busy time and [`chrome`] exports traces for Perfetto /
//! `chrome://tracing`, writes them as events come (the one file writer here), checks their
//! structure and reads them back (other tools' traces too). [`summary`] sums a read trace up, [`bubble`]
//! measures a pipeline trace's bubble, and [`track`] says what each lane of a trace is.

pub mod bubble;
pub mod chrome;
pub mod event;
pub mod meta;
pub mod summary;
pub mod tracer;
pub mod track;
pub mod utilization;

pub use bubble::{PipelineBubble, pipeline_bubble};
pub use event::{
    Clock, Direction, Event, EventKind, Flow, FlowRole, Lane, Moved, PipelineOp, TransferKind,
};
pub use meta::EventMeta;
pub use tracer::{SpanStart, Tracer, ns_since_epoch, process_epoch, shifted_ns};
pub use track::{Track, TrackKind};
pub use utilization::{
    BusyTime, exposed_wait_ns, overlap_ns, span, utilization, utilization_series,
};
