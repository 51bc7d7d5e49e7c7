//! Chrome trace-event JSON: export for Perfetto and `chrome://tracing` (whole, or as the
//! events come: [`TraceStream`], which a killed job leaves readable), a structure check, and
//! import of gangway's traces and other tools' ([`ChromeTrace`]).
//!
//! Layout: `otherData.producer` is [`PRODUCER`], the marker the import tells gangway's traces
//! by; one process per device (`pid` = device id), one thread per [`Lane`] (`tid` 1 host,
//! 2 compute, 3 transfer). Slices on one thread never overlap, because both viewers mis-draw or
//! drop overlapping complete events; overlapping events of one lane go to overflow threads
//! (`tid` = lane tid + 10·k, named e.g. "compute (overlap 1)") so every time stays true.
//! Transfers are linked by flow arrows, and each device gets a busy-time counter
//! ([`UTILIZATION_COUNTER`]).

mod check;
mod export;
mod import;
mod imported;
mod stream;

pub use check::{ChromeSummary, check};
pub use export::{to_json, to_string};
pub use import::{Document, parse, parse_slice, read, sniff, sniff_value, text_of};
pub use imported::{
    BoundFlow, ChromeTrace, CounterTrack, Dialect, Id, InstantEvent, InstantScope, PRODUCER,
    ThreadRow, process_label,
};
pub use stream::TraceStream;

use super::event::Lane;

/// Name of the per-device counter track: the percentage of each time bin during which the
/// device ran at least one kernel or transfer (the union of their intervals, any lane, divided
/// by the bin length; see [`utilization`](mod@super::utilization)). Host encoding and waits are
/// not device time. Bins split the whole trace's span into about 100 equal slices of at least
/// 1 µs each.
pub const UTILIZATION_COUNTER: &str = "utilization (busy time / window, %)";

/// Category and name of flow events; Perfetto pairs v1 flows by (id, cat, name).
pub const FLOW_NAME: &str = "transfer";

/// Chrome thread id of a lane's `slot`-th thread; slot 0 is the lane's own, the rest overflow.
pub fn thread_id(lane: Lane, slot: usize) -> u64 {
    let base = match lane {
        Lane::Host => 1,
        Lane::Compute => 2,
        Lane::Transfer => 3,
    };
    base + 10 * slot as u64
}

#[cfg(test)]
mod tests;
