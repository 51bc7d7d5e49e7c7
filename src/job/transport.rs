//! The seam between the runtime and the wire to the job's other processes (ranks). The runtime's
//! host mailboxes are where a shard's bytes wait for the device that needs them; within a
//! process the runtime fills them itself, and a transport fills them with the bytes of other
//! ranks' shards ([`Message::Data`]). The gang order across ranks travels the same way
//! ([`Message::Admit`], from rank 0's sequencer), and so does a run's failure on one rank
//! ([`Message::Failed`]), which ends it on the others.
//!
//! Two transports implement it: [`super::loopback`] (ranks as threads of one process, for tests
//! and for trying multi-rank programs without MPI) and, with the `mpi` feature, `super::mpi`
//! (OpenMPI through rsmpi, across processes and hosts).

use crate::{Error, Result};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Writes a rank's last line to stderr in one write. `eprintln!` may write the message and its
/// newline separately, and mpirun forwards each rank's output in the chunks it reads, so a line
/// written in pieces can be cut by another rank's output.
pub(crate) fn last_words(message: &str) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("{message}\n").as_bytes());
}

/// Names one run that spans ranks the same way on every rank: its client's name and how many
/// runs spanning ranks clients of that name submitted before it. Every rank submits the same such
/// runs in the same order (SPMD), so the keys agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct RunKey {
    /// A hash of the client's name.
    pub client: u64,
    pub seq: u64,
}

/// What ranks send each other.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// Shard `shard` of node `node`'s host bytes in run `run` (what a transfer's send, a
    /// collective member's stage or a result's read-back put in the mailbox).
    Data {
        run: RunKey,
        /// The sender's program's fingerprint: a rank running another program is an error.
        program: u64,
        node: u32,
        shard: u32,
        bytes: Vec<u8>,
    },
    /// Rank 0's sequencer: the next run spanning ranks to admit.
    Admit { run: RunKey },
    /// "Still here", for the watchdog.
    Heartbeat,
    /// The sender's part of run `run` failed with the error `reason`: the run ends on every
    /// rank, instead of waiting for data the sender will not send.
    Failed { run: RunKey, reason: String },
    /// What watching the job live sends between ranks (a rank's events and metrics for rank 0's
    /// server, and the clock probes that align them: `crate::live::forward`), opaque here. It
    /// goes to the transport's live sink, never to the runtime's.
    Live(Vec<u8>),
}

const DATA: u8 = 1;
const ADMIT: u8 = 2;
const HEARTBEAT: u8 = 3;
const FAILED: u8 = 4;
const LIVE: u8 = 5;
/// Kind byte, client, seq, program, node, shard.
const DATA_HEADER: usize = 1 + 8 + 8 + 8 + 4 + 4;

impl Message {
    /// The message as bytes on the wire (little-endian header, then the payload).
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Message::Data {
                run,
                program,
                node,
                shard,
                bytes,
            } => {
                let mut out = Vec::with_capacity(DATA_HEADER + bytes.len());
                out.push(DATA);
                out.extend_from_slice(&run.client.to_le_bytes());
                out.extend_from_slice(&run.seq.to_le_bytes());
                out.extend_from_slice(&program.to_le_bytes());
                out.extend_from_slice(&node.to_le_bytes());
                out.extend_from_slice(&shard.to_le_bytes());
                out.extend_from_slice(bytes);
                out
            }
            Message::Admit { run } => {
                let mut out = vec![ADMIT];
                out.extend_from_slice(&run.client.to_le_bytes());
                out.extend_from_slice(&run.seq.to_le_bytes());
                out
            }
            Message::Heartbeat => vec![HEARTBEAT],
            Message::Failed { run, reason } => {
                let mut out = vec![FAILED];
                out.extend_from_slice(&run.client.to_le_bytes());
                out.extend_from_slice(&run.seq.to_le_bytes());
                out.extend_from_slice(reason.as_bytes());
                out
            }
            Message::Live(bytes) => {
                let mut out = Vec::with_capacity(1 + bytes.len());
                out.push(LIVE);
                out.extend_from_slice(bytes);
                out
            }
        }
    }

    /// A message from `bytes` received from rank `from`, or why they are not one.
    pub fn decode(from: usize, bytes: &[u8]) -> Result<Message> {
        let bad = |what: &str| Error::Job {
            rank: from,
            reason: format!("sent a malformed message ({what}, {} bytes)", bytes.len()),
        };
        let u64_at = |at: usize| -> Result<u64> {
            let b = bytes.get(at..at + 8).ok_or_else(|| bad("short"))?;
            Ok(u64::from_le_bytes(b.try_into().map_err(|_| bad("short"))?))
        };
        let u32_at = |at: usize| -> Result<u32> {
            let b = bytes.get(at..at + 4).ok_or_else(|| bad("short"))?;
            Ok(u32::from_le_bytes(b.try_into().map_err(|_| bad("short"))?))
        };
        match bytes.first() {
            Some(&DATA) if bytes.len() >= DATA_HEADER => Ok(Message::Data {
                run: RunKey {
                    client: u64_at(1)?,
                    seq: u64_at(9)?,
                },
                program: u64_at(17)?,
                node: u32_at(25)?,
                shard: u32_at(29)?,
                bytes: bytes[DATA_HEADER..].to_vec(),
            }),
            Some(&ADMIT) if bytes.len() == 17 => Ok(Message::Admit {
                run: RunKey {
                    client: u64_at(1)?,
                    seq: u64_at(9)?,
                },
            }),
            Some(&HEARTBEAT) if bytes.len() == 1 => Ok(Message::Heartbeat),
            Some(&FAILED) if bytes.len() >= 17 => Ok(Message::Failed {
                run: RunKey {
                    client: u64_at(1)?,
                    seq: u64_at(9)?,
                },
                reason: String::from_utf8_lossy(&bytes[17..]).into_owned(),
            }),
            Some(&LIVE) => Ok(Message::Live(bytes[1..].to_vec())),
            _ => Err(bad("unknown kind")),
        }
    }
}

/// Where a transport hands what arrives: `(sending rank, message)`.
pub type Sink = Arc<dyn Fn(usize, Message) + Send + Sync>;

/// The sink once set, and the messages that came before it.
type Slot = (Option<Sink>, VecDeque<(usize, Message)>);

/// The most [`Message::Live`] messages kept while no live sink is set: a rank 0 that does not
/// serve never sets one, and what its ranks forward must not grow without bound there.
const EARLY_LIVE: usize = 1024;

/// A transport's two sinks, the runtime's and the live stream's ([`Message::Live`]), and what
/// arrived for each before it was set (handed over when it is).
#[derive(Default)]
pub struct SinkSlot {
    slot: Mutex<Slot>,
    live: Mutex<Slot>,
}

impl std::fmt::Debug for SinkSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SinkSlot").finish_non_exhaustive()
    }
}

fn lock(slot: &Mutex<Slot>) -> MutexGuard<'_, Slot> {
    slot.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SinkSlot {
    /// Sets the runtime's sink and hands it what came before, in order.
    pub fn set(&self, sink: Sink) {
        Self::set_in(&self.slot, sink);
    }

    /// Sets the live sink ([`Message::Live`]) and hands it what came before, in order.
    pub fn set_live(&self, sink: Sink) {
        Self::set_in(&self.live, sink);
    }

    fn set_in(slot: &Mutex<Slot>, sink: Sink) {
        let early: Vec<(usize, Message)> = {
            let mut s = lock(slot);
            s.0 = Some(sink.clone());
            s.1.drain(..).collect()
        };
        for (from, m) in early {
            sink(from, m);
        }
    }

    /// Hands `m` from rank `from` to its sink, or keeps it until there is one (live messages
    /// up to [`EARLY_LIVE`]; the runtime's all, since a rank's run waits for them).
    pub fn deliver(&self, from: usize, m: Message) {
        let (slot, cap) = match m {
            Message::Live(_) => (&self.live, EARLY_LIVE),
            _ => (&self.slot, usize::MAX),
        };
        let sink = {
            let mut s = lock(slot);
            match &s.0 {
                Some(sink) => sink.clone(),
                None => {
                    if s.1.len() < cap {
                        s.1.push_back((from, m));
                    }
                    return;
                }
            }
        };
        sink(from, m);
    }
}

/// One process's link to the job's other ranks.
pub trait Transport: Send + Sync + std::fmt::Debug {
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    /// This process's host name, as the other ranks see it.
    fn host(&self) -> String;
    /// Queues `message` for rank `to` and returns at once (a rank's devices never wait on the
    /// network to hand data on).
    fn send(&self, to: usize, message: Message) -> Result<()>;
    /// Sets where messages from other ranks go; those that came before are handed over at once,
    /// in arrival order.
    fn set_sink(&self, sink: Sink);
    /// Sets where [`Message::Live`] messages go instead (see [`SinkSlot`]).
    fn set_live_sink(&self, sink: Sink);
    /// Every rank's `bytes`, in rank order, on every rank. A set-up and tear-down collective:
    /// call it when no run spanning ranks is in flight.
    fn all_gather(&self, bytes: Vec<u8>) -> Result<Vec<Vec<u8>>>;
    /// Every rank's `bytes` on rank 0 (`Some` there, `None` elsewhere); like
    /// [`Self::all_gather`], between runs.
    fn gather(&self, bytes: Vec<u8>) -> Result<Option<Vec<Vec<u8>>>>;
    /// Returns once every rank called it; messages keep arriving meanwhile.
    fn barrier(&self) -> Result<()>;
    /// Stops this rank's part of the job for good (MPI_Finalize), after the job's last
    /// collective. Nothing may be sent after it.
    fn shutdown(&self);
    /// Ends the whole job at once with `code`, every rank (MPI_Abort). `message` is the one line
    /// that says why.
    fn abort(&self, code: i32, message: &str) -> !;
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_garbage_is_an_error_naming_the_rank() {
        let run = RunKey {
            client: u64::MAX - 3,
            seq: 77,
        };
        for m in [
            Message::Data {
                run,
                program: 42,
                node: 5,
                shard: 2,
                bytes: vec![1, 2, 3, 255],
            },
            Message::Data {
                run,
                program: u64::MAX,
                node: 0,
                shard: 0,
                bytes: Vec::new(),
            },
            Message::Admit { run },
            Message::Heartbeat,
            Message::Failed {
                run,
                reason: "device 2: out of memory (ü)".into(),
            },
            Message::Failed {
                run,
                reason: String::new(),
            },
            Message::Live(b"{\"events\":[]}".to_vec()),
            Message::Live(Vec::new()),
        ] {
            assert_eq!(Message::decode(0, &m.encode()).unwrap(), m);
        }
        for garbage in [
            &[][..],
            &[9],
            &[DATA, 1, 2],
            &[ADMIT; 5],
            &[HEARTBEAT, 0],
            &[FAILED; 16],
        ] {
            let e = Message::decode(3, garbage).unwrap_err().to_string();
            assert!(e.starts_with("rank 3: sent a malformed message"), "{e}");
        }
    }
}
