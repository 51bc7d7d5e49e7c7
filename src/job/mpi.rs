//! The job's wire across processes and hosts: OpenMPI through rsmpi (the `mpi` feature).
//!
//! One thread per process does all of its MPI: it initialises MPI, posts every send as a
//! non-blocking `MPI_Isend` (from a queue other threads fill without waiting), receives whatever
//! arrives with `MPI_Improbe`/`MPI_Mrecv` and hands it to the runtime's sink, and finalises MPI at
//! the end. So no device worker or client ever blocks in MPI, and the set-up and tear-down
//! collectives (gathers and barriers, built from the same point-to-point messages) never stop the
//! data of runs still in flight.
//!
//! A watchdog runs on the same thread: every rank sends every other rank a heartbeat each second,
//! and a rank that hears nothing from another for [`WATCHDOG_ENV`] seconds (default 10) ends the
//! job with one line naming it. A rank that is killed ends the job through `mpirun`; one that
//! panics ends it through [`Transport::abort`] (`MPI_Abort`), which the CLI's panic hook calls.

use super::transport::{Message, Sink, SinkSlot, Transport};
use crate::{Error, Result};
use mpi::Threading;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use std::collections::HashMap;
use std::sync::mpsc::{Receiver, Sender, TryRecvError, channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Seconds of silence from a rank after which the job ends (`0`: no watchdog).
pub const WATCHDOG_ENV: &str = "GANGWAY_MPI_WATCHDOG";

/// The tag of runtime messages ([`Message`]) and that of collective contributions.
const TAG_MESSAGE: i32 = 1;
const TAG_COLLECTIVE: i32 = 2;

const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);

/// How long the MPI thread sleeps between looks when nothing moves.
const IDLE_SLEEP: Duration = Duration::from_micros(100);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What other threads ask of the MPI thread.
enum Command {
    Send { to: usize, tag: i32, bytes: Vec<u8> },
    Shutdown,
}

/// Contributions to collectives, by generation: `(rank, bytes)` as they arrive.
#[derive(Default)]
struct Collectives {
    arrived: HashMap<u64, Vec<(usize, Vec<u8>)>>,
    /// Set when the MPI thread stopped: no contribution will arrive any more.
    stopped: Option<String>,
}

/// What the MPI thread shares with the callers of the transport.
struct Shared {
    sink: SinkSlot,
    collectives: (Mutex<Collectives>, Condvar),
}

/// This process's MPI link.
pub struct Mpi {
    rank: usize,
    size: usize,
    host: String,
    /// Whether any thread may call MPI (`MPI_THREAD_MULTIPLE`): then [`Transport::abort`] calls
    /// `MPI_Abort` itself.
    multiple: bool,
    commands: Mutex<Sender<Command>>,
    shared: Arc<Shared>,
    /// Collectives started, in the order every rank starts them.
    generation: Mutex<u64>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Mpi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mpi")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("host", &self.host)
            .finish()
    }
}

/// What the MPI thread reports once MPI is up.
struct Started {
    rank: usize,
    size: usize,
    host: String,
    multiple: bool,
}

impl Mpi {
    /// Initialises MPI on a thread of its own and returns this rank's transport.
    pub fn start() -> Result<Arc<dyn Transport>> {
        let shared = Arc::new(Shared {
            sink: SinkSlot::default(),
            collectives: (Mutex::default(), Condvar::new()),
        });
        let (commands, inbox) = channel();
        let (started_tx, started) = channel();
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("gangway mpi".into())
            .spawn(move || {
                crate::sched::threads::register_current();
                run(&thread_shared, &inbox, &started_tx)
            })
            .map_err(|e| Error::Job {
                rank: 0,
                reason: format!("cannot start the MPI thread: {e}"),
            })?;
        let s: Started = started
            .recv()
            .map_err(|_| Error::Job {
                rank: 0,
                reason: "MPI did not start (MPI_Init_thread failed, or MPI was already \
                         initialised)"
                    .into(),
            })?
            .map_err(|reason| Error::Job { rank: 0, reason })?;
        Ok(Arc::new(Mpi {
            rank: s.rank,
            size: s.size,
            host: s.host,
            multiple: s.multiple,
            commands: Mutex::new(commands),
            shared,
            generation: Mutex::new(0),
            thread: Mutex::new(Some(thread)),
        }))
    }

    fn command(&self, c: Command) -> Result<()> {
        lock(&self.commands).send(c).map_err(|_| Error::Job {
            rank: self.rank,
            reason: "its MPI thread has stopped".into(),
        })
    }
}

impl Drop for Mpi {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Transport for Mpi {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn host(&self) -> String {
        self.host.clone()
    }

    fn send(&self, to: usize, message: Message) -> Result<()> {
        if to >= self.size {
            return Err(Error::Job {
                rank: self.rank,
                reason: format!("sent to rank {to}, the job has {}", self.size),
            });
        }
        self.command(Command::Send {
            to,
            tag: TAG_MESSAGE,
            bytes: message.encode(),
        })
    }

    fn set_sink(&self, sink: Sink) {
        self.shared.sink.set(sink);
    }

    fn set_live_sink(&self, sink: Sink) {
        self.shared.sink.set_live(sink);
    }

    fn all_gather(&self, bytes: Vec<u8>) -> Result<Vec<Vec<u8>>> {
        let generation = {
            let mut g = lock(&self.generation);
            *g += 1;
            *g
        };
        let mut payload = generation.to_le_bytes().to_vec();
        payload.extend_from_slice(&bytes);
        for to in (0..self.size).filter(|&r| r != self.rank) {
            self.command(Command::Send {
                to,
                tag: TAG_COLLECTIVE,
                bytes: payload.clone(),
            })?;
        }
        let (arrived, changed) = &self.shared.collectives;
        let mut c = lock(arrived);
        loop {
            if let Some(why) = &c.stopped {
                return Err(Error::Job {
                    rank: self.rank,
                    reason: format!("a collective could not finish: {why}"),
                });
            }
            if c.arrived.get(&generation).map_or(0, Vec::len) + 1 >= self.size {
                break;
            }
            c = changed.wait(c).unwrap_or_else(PoisonError::into_inner);
        }
        let mut all = vec![Vec::new(); self.size];
        for (rank, b) in c.arrived.remove(&generation).unwrap_or_default() {
            if let Some(slot) = all.get_mut(rank) {
                *slot = b;
            }
        }
        all[self.rank] = bytes;
        Ok(all)
    }

    fn gather(&self, bytes: Vec<u8>) -> Result<Option<Vec<Vec<u8>>>> {
        // Every rank's bytes to everyone, kept on rank 0: simple, and the sizes are small
        // (device lists, clock readings) or the tear-down's traces.
        let all = self.all_gather(bytes)?;
        Ok((self.rank == 0).then_some(all))
    }

    fn barrier(&self) -> Result<()> {
        self.all_gather(Vec::new()).map(|_| ())
    }

    fn shutdown(&self) {
        let _ = self.command(Command::Shutdown);
        if let Some(t) = lock(&self.thread).take() {
            let _ = t.join();
        }
    }

    fn abort(&self, code: i32, message: &str) -> ! {
        super::transport::last_words(message);
        if self.multiple {
            SimpleCommunicator::world().abort(code)
        }
        // No MPI call allowed from this thread: ending the process without finalising makes
        // mpirun end the other ranks.
        std::process::exit(code)
    }
}

/// The MPI thread: initialise, report, then move messages until told to stop, then finalise.
fn run(
    shared: &Shared,
    commands: &Receiver<Command>,
    started: &Sender<std::result::Result<Started, String>>,
) {
    let Some((universe, provided)) = mpi::initialize_with_threading(Threading::Multiple) else {
        let _ = started.send(Err(
            "MPI_Init_thread failed or MPI was initialised already".into()
        ));
        return;
    };
    let world = universe.world();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let host = mpi::environment::processor_name().unwrap_or_else(|_| crate::job::local_host());
    if started
        .send(Ok(Started {
            rank,
            size,
            host: host.clone(),
            multiple: provided == Threading::Multiple,
        }))
        .is_err()
    {
        return;
    }
    let watchdog = std::env::var(WATCHDOG_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(10);
    let mut link = Link {
        world: &world,
        rank,
        host,
        shared,
        heard: vec![Instant::now(); size],
        watchdog: (watchdog > 0).then(|| Duration::from_secs(watchdog)),
        last_heartbeat: Instant::now(),
    };
    let why = link.serve(commands);
    let (arrived, changed) = &shared.collectives;
    lock(arrived).stopped = Some(why);
    changed.notify_all();
    // `universe` drops here: MPI_Finalize, on the thread that initialised MPI.
}

/// The MPI thread's state.
struct Link<'a> {
    world: &'a SimpleCommunicator,
    rank: usize,
    host: String,
    shared: &'a Shared,
    /// When each rank was last heard from.
    heard: Vec<Instant>,
    watchdog: Option<Duration>,
    last_heartbeat: Instant,
}

impl Link<'_> {
    /// Moves messages until shutdown; returns why it stopped.
    fn serve(&mut self, commands: &Receiver<Command>) -> String {
        let mut idle = 0u32;
        loop {
            let mut batch = Vec::new();
            loop {
                match commands.try_recv() {
                    Ok(Command::Send { to, tag, bytes }) => batch.push((to, tag, bytes)),
                    Ok(Command::Shutdown) | Err(TryRecvError::Disconnected) => {
                        self.send_all(&batch);
                        return "the transport was shut down".into();
                    }
                    Err(TryRecvError::Empty) => break,
                }
            }
            let sent = !batch.is_empty();
            self.send_all(&batch);
            let received = self.receive_ready();
            self.keep_alive();
            // Busy for a while after traffic (latency), then short sleeps: a message waits at
            // most about IDLE_SLEEP for this thread, which costs a few % of a core meanwhile.
            if sent || received {
                idle = 0;
            } else {
                idle = idle.saturating_add(1);
                if idle > 200 {
                    std::thread::sleep(IDLE_SLEEP);
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }

    /// Posts every send of `batch` and serves receives until they all completed.
    fn send_all(&mut self, batch: &[(usize, i32, Vec<u8>)]) {
        if batch.is_empty() {
            return;
        }
        let world = self.world;
        mpi::request::scope(|scope| {
            let mut pending: Vec<_> = batch
                .iter()
                .map(|(to, tag, bytes)| {
                    world.process_at_rank(*to as i32).immediate_send_with_tag(
                        scope,
                        &bytes[..],
                        *tag,
                    )
                })
                .collect();
            while !pending.is_empty() {
                pending = pending.into_iter().filter_map(|r| r.test().err()).collect();
                if !pending.is_empty() && !self.receive_ready() {
                    // A send to a rank that stopped never completes: look out for that too.
                    self.check_watchdog();
                    std::thread::yield_now();
                }
            }
        });
    }

    /// Receives every message that has arrived; true when there was one.
    fn receive_ready(&mut self) -> bool {
        let mut any = false;
        while let Some(probed) = self.world.any_process().immediate_matched_probe() {
            let (bytes, status) = probed.matched_receive_vec::<u8>();
            let from = status.source_rank() as usize;
            if let Some(t) = self.heard.get_mut(from) {
                *t = Instant::now();
            }
            any = true;
            match status.tag() {
                TAG_COLLECTIVE => self.contribution(from, bytes),
                _ => match Message::decode(from, &bytes) {
                    Ok(Message::Heartbeat) => {}
                    Ok(m) => self.shared.sink.deliver(from, m),
                    Err(e) => {
                        self.end_job(&format!("gangway rank {} ({}): {e}", self.rank, self.host))
                    }
                },
            }
        }
        any
    }

    fn contribution(&self, from: usize, bytes: Vec<u8>) {
        let Some(head) = bytes.get(..8) else { return };
        let mut g = [0u8; 8];
        g.copy_from_slice(head);
        let (arrived, changed) = &self.shared.collectives;
        lock(arrived)
            .arrived
            .entry(u64::from_le_bytes(g))
            .or_default()
            .push((from, bytes[8..].to_vec()));
        changed.notify_all();
    }

    /// Heartbeats out, and the watchdog's look at who went quiet.
    fn keep_alive(&mut self) {
        if self.watchdog.is_none() {
            return;
        }
        if self.last_heartbeat.elapsed() >= HEARTBEAT_EVERY {
            self.last_heartbeat = Instant::now();
            let beat = Message::Heartbeat.encode();
            let batch: Vec<_> = (0..self.heard.len())
                .filter(|&r| r != self.rank)
                .map(|r| (r, TAG_MESSAGE, beat.clone()))
                .collect();
            self.send_all(&batch);
        }
        self.check_watchdog();
    }

    /// Ends the job when a rank has been quiet for longer than the watchdog allows.
    fn check_watchdog(&self) {
        let Some(limit) = self.watchdog else { return };
        if let Some((quiet, t)) = self
            .heard
            .iter()
            .enumerate()
            .find(|&(r, t)| r != self.rank && t.elapsed() > limit)
        {
            self.end_job(&format!(
                "gangway rank {} ({}): rank {quiet} sent nothing for {} s (hung or stopped): \
                 ending the job",
                self.rank,
                self.host,
                t.elapsed().as_secs()
            ));
        }
    }

    fn end_job(&self, message: &str) -> ! {
        super::transport::last_words(message);
        self.world.abort(3)
    }
}
