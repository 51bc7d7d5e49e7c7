//! One attached client as publishers see it: its bounded queue of frames ([`Queue`]), the lanes
//! that share it, and the batches its writer takes out. Below everything else of the server: a
//! publisher pushes into a queue without knowing the connection behind it.

use std::collections::VecDeque;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use super::protocol::{self, Record};

/// A writer moves at most this many bytes from its queue per socket write.
pub(super) const BATCH_BYTES: usize = 256 << 10;

/// One encoded frame, shared by the history and every client queue that holds it: a record
/// is serialised once however many clients get it.
pub(super) type Frame = Arc<[u8]>;

/// One attached client as publishers see it.
pub(super) struct Client {
    pub(super) peer: SocketAddr,
    /// A handle on the socket, to shut it down from any thread.
    pub(super) stream: TcpStream,
    pub(super) queue: Mutex<Queue>,
    pub(super) ready: Condvar,
}

#[derive(Default)]
pub(super) struct Queue {
    /// Frames in publication order: events and metrics interleaved as published.
    pub(super) frames: VecDeque<(Lane, Frame)>,
    pub(super) queued_events: usize,
    pub(super) queued_metrics: usize,
    pub(super) end: Option<Frame>,
    pub(super) lost_events: u64,
    pub(super) lost_metrics: u64,
    /// The totals the client was last told in a `dropped` record.
    pub(super) told: (u64, u64),
    /// The connection is over: publishers skip the client and the server forgets it.
    pub(super) closed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lane {
    Event,
    Metric,
}

impl Client {
    pub(super) fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `frame` if its lane has room, counting it lost otherwise; false once the client
    /// is gone, so the publisher forgets it.
    pub(super) fn offer(&self, lane: Lane, frame: &Frame, buffer: usize) -> bool {
        let mut guard = self.lock();
        let q = &mut *guard;
        if q.closed {
            return false;
        }
        let (queued, lost) = match lane {
            Lane::Event => (&mut q.queued_events, &mut q.lost_events),
            Lane::Metric => (&mut q.queued_metrics, &mut q.lost_metrics),
        };
        if *queued < buffer {
            *queued += 1;
            q.frames.push_back((lane, Arc::clone(frame)));
            self.ready.notify_one();
        } else {
            *lost += 1;
        }
        true
    }

    /// Ends the connection from any thread: both of its threads return soon after.
    pub(super) fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

impl Queue {
    pub(super) fn owes_dropped(&self) -> bool {
        self.told != (self.lost_events, self.lost_metrics)
    }

    /// Moves up to [`BATCH_BYTES`] of frames into `batch`, after a `dropped` record when the
    /// client lost records since it was last told; the end once nothing else is left. Returns
    /// whether the end is in `batch`.
    pub(super) fn take_batch(&mut self, batch: &mut Vec<Frame>) -> Result<bool, String> {
        let mut bytes = 0;
        if self.owes_dropped() {
            let record = Record::Dropped {
                events: self.lost_events,
                metrics: self.lost_metrics,
            };
            let frame: Frame = protocol::encode(&record).map_err(|e| e.to_string())?.into();
            bytes += frame.len();
            batch.push(frame);
            self.told = (self.lost_events, self.lost_metrics);
        }
        while bytes < BATCH_BYTES {
            let Some((lane, frame)) = self.frames.pop_front() else {
                break;
            };
            match lane {
                Lane::Event => self.queued_events -= 1,
                Lane::Metric => self.queued_metrics -= 1,
            }
            bytes += frame.len();
            batch.push(frame);
        }
        if self.frames.is_empty()
            && let Some(end) = self.end.take()
        {
            batch.push(end);
            return Ok(true);
        }
        Ok(false)
    }
}
