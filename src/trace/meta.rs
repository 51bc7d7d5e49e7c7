//! Everything about an event except its name and times, so call sites can build it once and
//! hand it to [`Tracer::record`](super::Tracer::record) without allocating when tracing is off.

use super::event::PipelineOp;
use super::event::{Clock, Direction, Event, EventKind, Flow, FlowRole, Lane, Moved, TransferKind};

/// An event template: device, lane, kind, ids, clock and flow.
///
/// Starts with no ids, no flow and [`Clock::Host`]; the builder methods fill in the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventMeta {
    pub device: usize,
    pub lane: Lane,
    pub kind: EventKind,
    pub program: Option<u64>,
    pub node: Option<u32>,
    pub microbatch: Option<u32>,
    pub clock: Clock,
    pub flow: Option<Flow>,
    pub op: Option<PipelineOp>,
    pub moved: Option<Moved>,
}

impl EventMeta {
    /// A template with no ids, no flow, timed on the host clock.
    pub const fn new(device: usize, lane: Lane, kind: EventKind) -> Self {
        Self {
            device,
            lane,
            kind,
            program: None,
            node: None,
            microbatch: None,
            clock: Clock::Host,
            flow: None,
            op: None,
            moved: None,
        }
    }

    /// Host-side encoding for `device`.
    pub const fn host_encode(device: usize) -> Self {
        Self::new(device, Lane::Host, EventKind::HostEncode)
    }

    /// The host waiting on `device`.
    pub const fn wait(device: usize) -> Self {
        Self::new(device, Lane::Host, EventKind::Wait)
    }

    /// A kernel on `device`'s compute lane.
    pub const fn kernel(device: usize) -> Self {
        Self::new(device, Lane::Compute, EventKind::Kernel)
    }

    /// A copy on `device`'s transfer lane.
    pub const fn transfer(device: usize) -> Self {
        Self::new(device, Lane::Transfer, EventKind::Transfer)
    }

    pub const fn program(mut self, program: u64) -> Self {
        self.program = Some(program);
        self
    }

    pub const fn node(mut self, node: u32) -> Self {
        self.node = Some(node);
        self
    }

    pub const fn microbatch(mut self, microbatch: u32) -> Self {
        self.microbatch = Some(microbatch);
        self
    }

    pub const fn clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Marks this event as the pipeline op `op`.
    pub const fn op(mut self, op: PipelineOp) -> Self {
        self.op = Some(op);
        self
    }

    /// A transfer of `bytes` for `kind`, `direction` (see [`Event::moved`]).
    pub const fn moved(mut self, kind: TransferKind, direction: Direction, bytes: u64) -> Self {
        self.moved = Some(Moved {
            kind,
            direction,
            bytes,
        });
        self
    }

    /// Marks this event as one end of the cross-device flow `id`.
    pub const fn flow(mut self, id: u64, role: FlowRole) -> Self {
        self.flow = Some(Flow { id, role });
        self
    }

    /// The event this template describes, named `name`, over `start_ns..end_ns`.
    pub fn event(self, name: String, start_ns: u64, end_ns: u64) -> Event {
        Event {
            device: self.device,
            lane: self.lane,
            kind: self.kind,
            name,
            program: self.program,
            node: self.node,
            microbatch: self.microbatch,
            start_ns,
            end_ns,
            clock: self.clock,
            flow: self.flow,
            op: self.op,
            moved: self.moved,
        }
    }
}

impl From<&Event> for EventMeta {
    fn from(e: &Event) -> Self {
        Self {
            device: e.device,
            lane: e.lane,
            kind: e.kind,
            program: e.program,
            node: e.node,
            microbatch: e.microbatch,
            clock: e.clock,
            flow: e.flow,
            op: e.op,
            moved: e.moved,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_fills_every_field_and_round_trips() {
        let meta = EventMeta::transfer(3)
            .program(7)
            .node(2)
            .microbatch(1)
            .clock(Clock::Gpu)
            .flow(9, FlowRole::In);
        let e = meta.event("recv".into(), 10, 20);
        assert_eq!(e.device, 3);
        assert_eq!(e.lane, Lane::Transfer);
        assert_eq!(e.kind, EventKind::Transfer);
        assert_eq!(
            (e.program, e.node, e.microbatch),
            (Some(7), Some(2), Some(1))
        );
        assert_eq!(
            e.flow,
            Some(Flow {
                id: 9,
                role: FlowRole::In
            })
        );
        assert_eq!((e.start_ns, e.end_ns, e.duration_ns()), (10, 20, 10));
        assert_eq!(EventMeta::from(&e), meta);
    }
}
