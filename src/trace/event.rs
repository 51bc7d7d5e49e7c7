//! One traced interval: a kernel, a transfer, host encoding or a wait, on one lane of one device.
//! A pipeline op's event says which op it is ([`PipelineOp`], set by the simulator and the
//! pipeline executor, carried in a Chrome trace as the slice's `op` arg); a transfer the runtime
//! made says what it moved ([`Moved`]: kind, direction, bytes; the `transfer`, `direction` and
//! `bytes` args). Names are never read for either.
//!
//! Times are nanoseconds on the host clock since the process's trace epoch
//! ([`super::process_epoch`]). GPU times taken from
//! timestamp queries are mapped onto that clock before they become events; [`Clock`] says which.

use serde::{Deserialize, Serialize};

/// What an event spent its time on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum EventKind {
    /// A compute dispatch on the GPU.
    Kernel,
    /// Moving bytes between devices (or device and host).
    Transfer,
    /// The host recording commands, bind groups or staging for a device.
    HostEncode,
    /// The host blocked on the device or on another device's data.
    Wait,
}

/// A row of a device's timeline: one Chrome-trace thread per lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Lane {
    /// Host-side work done for this device (encoding, waiting).
    Host,
    /// The device's compute queue.
    Compute,
    /// Copies into and out of the device.
    Transfer,
}

/// Where an event's start and end came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Clock {
    /// GPU timestamp queries, mapped onto the host clock.
    Gpu,
    /// Host timestamps around the work (the adapter has no timestamp queries, or it is host work).
    Host,
    /// A cost-model simulation, not a measurement.
    Simulated,
}

/// Which end of a cross-device data flow an event is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FlowRole {
    /// The event that sends the data.
    Out,
    /// The event that receives it.
    In,
}

/// What a transfer event moved data for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransferKind {
    /// Between the device and the host: an argument written, a result read back.
    Host,
    /// From one device to another: a send's read-back, a receive's write.
    PointToPoint,
    /// A member of an all-to-all: its shard read back, or its chunks gathered.
    AllToAll,
    /// A member of an all-reduce: its shard read back, or the sum written.
    AllReduce,
}

/// Which way a transfer moved its bytes, seen from its device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Written to the device.
    In,
    /// Read back from it.
    Out,
}

/// What a transfer event moved: its kind, its direction and its bytes, as Perfetto and Nsight
/// show a copy's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Moved {
    pub kind: TransferKind,
    pub direction: Direction,
    pub bytes: u64,
}

impl TransferKind {
    /// Every kind, in declaration order.
    pub const ALL: [TransferKind; 4] = [
        TransferKind::Host,
        TransferKind::PointToPoint,
        TransferKind::AllToAll,
        TransferKind::AllReduce,
    ];

    /// Snake-case name, as a Chrome trace's `transfer` arg carries it.
    pub const fn name(self) -> &'static str {
        match self {
            TransferKind::Host => "host",
            TransferKind::PointToPoint => "point_to_point",
            TransferKind::AllToAll => "all_to_all",
            TransferKind::AllReduce => "all_reduce",
        }
    }

    /// The kind named `name` ([`Self::name`]).
    pub fn of_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl Direction {
    /// `in` or `out`, as a Chrome trace's `direction` arg carries it.
    pub const fn name(self) -> &'static str {
        match self {
            Direction::In => "in",
            Direction::Out => "out",
        }
    }

    /// The direction named `name` ([`Self::name`]).
    pub fn of_name(name: &str) -> Option<Self> {
        [Direction::In, Direction::Out]
            .into_iter()
            .find(|d| d.name() == name)
    }
}

/// Links the sending and receiving events of one transfer (Chrome flow events).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Flow {
    pub id: u64,
    pub role: FlowRole,
}

/// One traced interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub device: usize,
    pub lane: Lane,
    pub kind: EventKind,
    pub name: String,
    pub program: Option<u64>,
    pub node: Option<u32>,
    pub microbatch: Option<u32>,
    pub start_ns: u64,
    pub end_ns: u64,
    pub clock: Clock,
    pub flow: Option<Flow>,
    /// The pipeline op this event is, where a pipeline's simulator or executor made it.
    #[serde(default)]
    pub op: Option<PipelineOp>,
    /// For a transfer the runtime made: what it moved ([`Moved`]). An upload, a receive or a
    /// collective's gather wrote its bytes to its device; a read-back read them from it. `None`
    /// for every other event, and for traces that did not record it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved: Option<Moved>,
}

impl EventKind {
    /// Every kind, in declaration order.
    pub const ALL: [EventKind; 4] = [
        EventKind::Kernel,
        EventKind::Transfer,
        EventKind::HostEncode,
        EventKind::Wait,
    ];

    /// Snake-case name, used as the Chrome-trace category.
    pub const fn name(self) -> &'static str {
        match self {
            EventKind::Kernel => "kernel",
            EventKind::Transfer => "transfer",
            EventKind::HostEncode => "host_encode",
            EventKind::Wait => "wait",
        }
    }

    /// Whether this kind occupies the device; host encoding and waits are host work.
    pub const fn is_device_work(self) -> bool {
        matches!(self, EventKind::Kernel | EventKind::Transfer)
    }
}

impl Lane {
    /// Every lane, in timeline order.
    pub const ALL: [Lane; 3] = [Lane::Host, Lane::Compute, Lane::Transfer];

    /// Lower-case name, used as the Chrome-trace thread name.
    pub const fn name(self) -> &'static str {
        match self {
            Lane::Host => "host",
            Lane::Compute => "compute",
            Lane::Transfer => "transfer",
        }
    }
}

impl Clock {
    /// Human-readable source of the times, shown in trace viewers.
    pub const fn name(self) -> &'static str {
        match self {
            Clock::Gpu => "gpu timestamp",
            Clock::Host => "host",
            Clock::Simulated => "simulated",
        }
    }
}

impl Event {
    /// Length in nanoseconds; 0 when the end is not after the start.
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }

    /// End clamped to the start, so a malformed event is an empty interval, never a negative one.
    pub fn clamped_end_ns(&self) -> u64 {
        self.end_ns.max(self.start_ns)
    }

    /// Whether this event occupies its device (a kernel or a transfer).
    pub fn is_device_work(&self) -> bool {
        self.kind.is_device_work()
    }
}

/// Which pipeline op an event is, as its producer (the simulator, the pipeline executor) said
/// in [`Event::op`]; its name is for people and is never read for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PipelineOp {
    Forward,
    Backward,
    WeightGrad,
}

impl PipelineOp {
    pub const ALL: [PipelineOp; 3] = [
        PipelineOp::Forward,
        PipelineOp::Backward,
        PipelineOp::WeightGrad,
    ];

    /// `F`, `B` or `W`: the letter on the timelines, and the Chrome trace's `op` arg.
    pub const fn letter(self) -> &'static str {
        match self {
            PipelineOp::Forward => "F",
            PipelineOp::Backward => "B",
            PipelineOp::WeightGrad => "W",
        }
    }

    /// The op a [`PipelineOp::letter`] stands for.
    pub fn of_letter(letter: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|op| op.letter() == letter)
    }

    /// The op an event is: a kernel on a compute lane whose [`Event::op`] is set.
    pub fn of(e: &Event) -> Option<Self> {
        if e.kind == EventKind::Kernel && e.lane == Lane::Compute {
            e.op
        } else {
            None
        }
    }
}
