//! Ranks as threads of one process: [`transports`] makes `n` transports joined in memory, one per
//! rank, for tests and for trying multi-rank programs without MPI. Each rank's messages are
//! handed to its sink by a delivery thread of its own, in order, so a sender never runs the
//! receiver's code (as over a real network).

use super::transport::{Message, Sink, SinkSlot, Transport};
use crate::{Error, Result};
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// One rank's inbox: messages not yet handed over.
#[derive(Default)]
struct Inbox {
    queue: VecDeque<(usize, Message)>,
    closed: bool,
}

/// A collective in progress: what each rank brought to the current round.
#[derive(Default)]
struct Round {
    generation: u64,
    brought: Vec<Option<Vec<u8>>>,
    /// The last finished round's contributions, for ranks still to take them.
    done: Vec<Vec<u8>>,
}

struct Shared {
    inboxes: Vec<(Mutex<Inbox>, Condvar)>,
    sinks: Vec<SinkSlot>,
    round: (Mutex<Round>, Condvar),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One in-process rank's transport.
pub struct Loopback {
    rank: usize,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Loopback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loopback")
            .field("rank", &self.rank)
            .field("size", &self.shared.inboxes.len())
            .finish()
    }
}

/// `n` transports, rank `i` at index `i`, each with a delivery thread that stops when the
/// transport is dropped.
pub fn transports(n: usize) -> Result<Vec<Arc<dyn Transport>>> {
    let shared = Arc::new(Shared {
        inboxes: (0..n).map(|_| (Mutex::default(), Condvar::new())).collect(),
        sinks: (0..n).map(|_| SinkSlot::default()).collect(),
        round: (
            Mutex::new(Round {
                brought: vec![None; n],
                ..Round::default()
            }),
            Condvar::new(),
        ),
    });
    (0..n)
        .map(|rank| {
            let deliver = shared.clone();
            std::thread::Builder::new()
                .name(format!("gangway loopback rank {rank}"))
                .spawn(move || {
                    crate::sched::threads::register_current();
                    deliver_forever(&deliver, rank)
                })
                .map_err(|e| Error::Job {
                    rank,
                    reason: format!("cannot start its delivery thread: {e}"),
                })?;
            Ok(Arc::new(Loopback {
                rank,
                shared: shared.clone(),
            }) as Arc<dyn Transport>)
        })
        .collect()
}

/// Hands rank `rank`'s messages to its sink, in order, until its transport is dropped.
fn deliver_forever(shared: &Shared, rank: usize) {
    let (inbox, ready) = &shared.inboxes[rank];
    loop {
        let (from, message) = {
            let mut i = lock(inbox);
            loop {
                if i.closed {
                    return;
                }
                if let Some(next) = i.queue.pop_front() {
                    break next;
                }
                i = ready.wait(i).unwrap_or_else(PoisonError::into_inner);
            }
        };
        shared.sinks[rank].deliver(from, message);
    }
}

impl Drop for Loopback {
    fn drop(&mut self) {
        let (inbox, ready) = &self.shared.inboxes[self.rank];
        lock(inbox).closed = true;
        ready.notify_all();
    }
}

impl Transport for Loopback {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.shared.inboxes.len()
    }

    fn host(&self) -> String {
        format!("loopback{}", self.rank)
    }

    fn send(&self, to: usize, message: Message) -> Result<()> {
        let (inbox, ready) = self.shared.inboxes.get(to).ok_or_else(|| Error::Job {
            rank: self.rank,
            reason: format!("sent to rank {to}, the job has {}", self.size()),
        })?;
        lock(inbox).queue.push_back((self.rank, message));
        ready.notify_all();
        Ok(())
    }

    fn set_sink(&self, sink: Sink) {
        self.shared.sinks[self.rank].set(sink);
    }

    fn set_live_sink(&self, sink: Sink) {
        self.shared.sinks[self.rank].set_live(sink);
    }

    fn all_gather(&self, bytes: Vec<u8>) -> Result<Vec<Vec<u8>>> {
        let (round, changed) = &self.shared.round;
        let mut r = lock(round);
        // Another caller of this rank's all-gather is in a round not yet complete: wait it out.
        while r.brought[self.rank].is_some() {
            r = changed.wait(r).unwrap_or_else(PoisonError::into_inner);
        }
        let generation = r.generation;
        r.brought[self.rank] = Some(bytes);
        if r.brought.iter().all(Option::is_some) {
            r.done = r.brought.iter_mut().filter_map(Option::take).collect();
            r.generation += 1;
            changed.notify_all();
        }
        while r.generation == generation {
            r = changed.wait(r).unwrap_or_else(PoisonError::into_inner);
        }
        Ok(r.done.clone())
    }

    fn gather(&self, bytes: Vec<u8>) -> Result<Option<Vec<Vec<u8>>>> {
        let all = self.all_gather(bytes)?;
        Ok((self.rank == 0).then_some(all))
    }

    fn barrier(&self) -> Result<()> {
        self.all_gather(Vec::new()).map(|_| ())
    }

    fn shutdown(&self) {}

    fn abort(&self, code: i32, message: &str) -> ! {
        // The ranks are this process's threads: ending the process ends them all.
        super::transport::last_words(message);
        std::process::exit(code)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::job::transport::RunKey;
    use std::sync::mpsc::channel;

    #[test]
    fn messages_arrive_in_order_and_collectives_meet() {
        let ranks = transports(3).unwrap();
        let (tx, rx) = channel();
        // Sent before the sink is set: held, then handed over in order.
        for seq in 0..5 {
            let run = RunKey { client: 1, seq };
            ranks[0].send(2, Message::Admit { run }).unwrap();
        }
        ranks[2].set_sink(Arc::new(move |from, m| {
            tx.send((from, m)).unwrap();
        }));
        let got: Vec<_> = (0..5).map(|_| rx.recv().unwrap()).collect();
        for (seq, (from, m)) in got.into_iter().enumerate() {
            let run = RunKey {
                client: 1,
                seq: seq as u64,
            };
            assert_eq!((from, m), (0, Message::Admit { run }));
        }
        assert!(ranks[0].send(3, Message::Heartbeat).is_err());
        // Twice in a row, from three threads.
        let handles: Vec<_> = ranks
            .iter()
            .cloned()
            .map(|t| {
                std::thread::spawn(move || {
                    let r = t.rank() as u8;
                    let a = t.all_gather(vec![r]).unwrap();
                    let b = t.gather(vec![r, r]).unwrap();
                    t.barrier().unwrap();
                    (a, b)
                })
            })
            .collect();
        for (rank, h) in handles.into_iter().enumerate() {
            let (a, b) = h.join().unwrap();
            assert_eq!(a, vec![vec![0], vec![1], vec![2]]);
            assert_eq!(b.is_some(), rank == 0);
            if let Some(b) = b {
                assert_eq!(b, vec![vec![0, 0], vec![1, 1], vec![2, 2]]);
            }
        }
    }
}
