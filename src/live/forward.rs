//! One address for a job of several ranks: rank 0 serves, and every other rank forwards its
//! events and metrics to rank 0's server over the job's own transport (MPI, or TCP between
//! hosts), as [`Message::Live`] messages: [`Forwarder`] on the other ranks,
//! [`LiveServer::serve_ranks`] on rank 0.
//!
//! **Clocks.** Each process's trace clock counts from its own epoch. Before it forwards, a rank
//! estimates its offset to rank 0's clock NTP-style, over the same transport: it sends
//! [`PROBES`] probes stamped with its clock, rank 0 answers each at once with its own, and the
//! shortest round trip gives the offset (rank 0's stamp minus the probe's midpoint), right to
//! within half that round trip whatever the hosts' wall clocks say. Every forwarded event and
//! metric is moved onto rank 0's clock before it leaves, so a receive on one rank is drawn after
//! its send on another.
//!
//! **Devices.** Rank r's device i is lane `base + i`, `base` counting the devices of the ranks
//! before r: the numbering of the job's mesh, and of the trace gathered at the end.
//!
//! Forwarding is best effort, like serving: a batch that cannot be sent is dropped, never
//! retried, and nothing the forwarder does waits on rank 0 except the probes at its start.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TrySendError};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::protocol::Metric;
use super::server::LiveServer;
use super::shared::{POLL, Shared};
use crate::error::{LiveError, Result};
use crate::job::Job;
use crate::job::transport::{Message, Transport};
use crate::trace::{Event, Tracer, ns_since_epoch};

/// Clock probes a forwarder sends before it forwards.
pub const PROBES: usize = 8;
/// How long a forwarder waits for an answer to one probe.
const PROBE_WAIT: Duration = Duration::from_secs(2);
/// How long a forwarder gathers events into one message after the first arrives: at most
/// about fifty messages a second from a busy rank.
const GATHER: Duration = Duration::from_millis(20);
/// The most events in one forwarded message.
const BATCH_EVENTS: usize = 4096;
/// Forwarded messages waiting on rank 0 for its publishing thread; more are dropped.
const QUEUED_ON_ROOT: usize = 1024;

/// What ranks send each other for the live stream, inside [`Message::Live`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Forwarded {
    /// A rank's clock probe: its trace clock when it sent it.
    Probe { sent_ns: u64 },
    /// Rank 0's answer: the probe's stamp, and rank 0's trace clock when it answered.
    Answer { sent_ns: u64, root_ns: u64 },
    /// Events on rank 0's clock and the job's device numbering.
    Events(Vec<Event>),
    /// A metric on rank 0's clock.
    Metric(Metric),
    /// The sender forwards nothing more.
    Done,
}

impl Forwarded {
    fn message(&self) -> Option<Message> {
        serde_json::to_vec(self).ok().map(Message::Live)
    }

    fn read(message: Message) -> Option<Forwarded> {
        match message {
            Message::Live(bytes) => serde_json::from_slice(&bytes).ok(),
            _ => None,
        }
    }
}

/// A rank's trace clock against rank 0's, as its probes measured it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockEstimate {
    /// Add to this rank's trace times to get rank 0's.
    pub to_root_ns: i64,
    /// The shortest probe's round trip: the estimate is right to within half of it.
    pub round_trip_ns: u64,
}

impl ClockEstimate {
    /// The best of `(sent, root, received)` probe stamps: the one of the shortest round trip.
    fn from_probes(probes: &[(u64, u64, u64)]) -> Option<ClockEstimate> {
        probes
            .iter()
            .min_by_key(|(sent, _, received)| received.saturating_sub(*sent))
            .map(|&(sent, root, received)| {
                let midpoint = (i128::from(sent) + i128::from(received)) / 2;
                ClockEstimate {
                    to_root_ns: i64::try_from(i128::from(root) - midpoint).unwrap_or(0),
                    round_trip_ns: received.saturating_sub(sent),
                }
            })
    }

    fn shift(&self, t_ns: u64) -> u64 {
        crate::trace::shifted_ns(t_ns, self.to_root_ns)
    }
}

/// Forwards one rank's events and metrics to rank 0's server until [`finish`](Self::finish).
pub struct Forwarder {
    transport: Arc<dyn Transport>,
    clock: ClockEstimate,
    stop: Arc<AtomicBool>,
    pump: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Forwarder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwarder")
            .field("rank", &self.transport.rank())
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

impl Forwarder {
    /// On a rank other than 0 (`None` on rank 0 and in a job of one): measures this rank's clock
    /// against rank 0's, then forwards every event `tracer` emits from the call on, its devices
    /// renumbered from `base`. Rank 0 must serve ([`LiveServer::serve_ranks`]): a rank 0 that
    /// answers no probe within [`PROBE_WAIT`] is an error ([`LiveError::RootSilent`]).
    pub fn start(job: &Job, tracer: &Tracer, base: usize) -> Result<Option<Forwarder>> {
        let Some(transport) = job.transport().filter(|t| t.rank() != 0).cloned() else {
            return Ok(None);
        };
        // Subscribed first: what runs while the clock is measured is forwarded too.
        let events = tracer.subscribe();
        let (answers, answered) = std::sync::mpsc::channel();
        transport.set_live_sink(Arc::new(move |from, message| {
            if let (0, Some(Forwarded::Answer { sent_ns, root_ns })) =
                (from, Forwarded::read(message))
            {
                let _ = answers.send((sent_ns, root_ns, now_ns()));
            }
        }));
        let clock = probe(transport.as_ref(), &answered)?;
        let stop = Arc::new(AtomicBool::new(false));
        let pump = {
            let (transport, stop) = (Arc::clone(&transport), Arc::clone(&stop));
            std::thread::Builder::new()
                .name("gangway-live-forward".into())
                .spawn(move || pump(transport.as_ref(), &events, clock, base, &stop))
                .map_err(|e| LiveError::Io {
                    what: "starting the live forwarder's thread".into(),
                    kind: e.kind(),
                    message: e.to_string(),
                })?
        };
        Ok(Some(Forwarder {
            transport,
            clock,
            stop,
            pump: Mutex::new(Some(pump)),
        }))
    }

    /// This rank's clock against rank 0's.
    pub fn clock(&self) -> ClockEstimate {
        self.clock
    }

    /// Forwards `metric`, moved onto rank 0's clock and labelled with this rank (`rank`).
    pub fn metric(&self, mut metric: Metric) {
        metric.t_ns = self.clock.shift(metric.t_ns);
        metric
            .labels
            .insert("rank".into(), self.transport.rank().to_string());
        send(self.transport.as_ref(), &Forwarded::Metric(metric));
    }

    /// Forwards what the tracer emitted until now, then tells rank 0 this rank is done. A
    /// second call does nothing.
    pub fn finish(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let pump = self
            .pump
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(pump) = pump {
            // A panicked pump forwarded what it could; the job goes on without it.
            let _ = pump.join();
            send(self.transport.as_ref(), &Forwarded::Done);
        }
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.finish();
    }
}

fn now_ns() -> u64 {
    ns_since_epoch(Instant::now())
}

fn send(transport: &dyn Transport, what: &Forwarded) {
    if let Some(message) = what.message() {
        // Best effort: a rank 0 that is gone ends the job through the transport's watchdog.
        let _ = transport.send(0, message);
    }
}

/// [`PROBES`] round trips to rank 0, one at a time; their best estimate.
fn probe(transport: &dyn Transport, answered: &Receiver<(u64, u64, u64)>) -> Result<ClockEstimate> {
    let mut probes = Vec::with_capacity(PROBES);
    for _ in 0..PROBES {
        let sent_ns = now_ns();
        send(transport, &Forwarded::Probe { sent_ns });
        let deadline = Instant::now() + PROBE_WAIT;
        // Answers to earlier probes that came late are skipped: only this one's stamp counts.
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match answered.recv_timeout(left) {
                Ok(stamps) if stamps.0 == sent_ns => {
                    probes.push(stamps);
                    break;
                }
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                    return Err(LiveError::RootSilent {
                        rank: transport.rank(),
                        waited_ms: PROBE_WAIT.as_millis() as u64,
                    }
                    .into());
                }
            }
        }
    }
    ClockEstimate::from_probes(&probes).ok_or_else(|| {
        LiveError::RootSilent {
            rank: transport.rank(),
            waited_ms: 0,
        }
        .into()
    })
}

/// Forwards `events` in batches until `stop`, then what is left.
fn pump(
    transport: &dyn Transport,
    events: &Receiver<Event>,
    clock: ClockEstimate,
    base: usize,
    stop: &AtomicBool,
) {
    let forward = |mut batch: Vec<Event>| {
        for e in &mut batch {
            e.device += base;
            (e.start_ns, e.end_ns) = (clock.shift(e.start_ns), clock.shift(e.end_ns));
        }
        send(transport, &Forwarded::Events(batch));
    };
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        let mut batch: Vec<Event> = events.try_iter().take(BATCH_EVENTS).collect();
        if batch.is_empty() {
            if stopping {
                return;
            }
            match events.recv_timeout(POLL) {
                Ok(first) => batch.push(first),
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return,
            }
            // Gather a little more, so a burst of kernels is one message, not hundreds.
            let until = Instant::now() + GATHER;
            while batch.len() < BATCH_EVENTS {
                let left = until.saturating_duration_since(Instant::now());
                match events.recv_timeout(left) {
                    Ok(e) => batch.push(e),
                    Err(_) => break,
                }
            }
        }
        forward(batch);
    }
}

impl LiveServer {
    /// Rank 0 of a job of several ranks: answers the other ranks' clock probes and serves what
    /// they forward as their own ranks' records. Nothing in a job of one.
    pub fn serve_ranks(&self, job: &Job) -> Result<()> {
        let Some(transport) = job.transport().filter(|t| t.rank() == 0).cloned() else {
            return Ok(());
        };
        // Publishing serialises each record; that runs on a thread of the server's, not on the
        // transport's, whose thread also carries the job's own data.
        let (queue, queued) = std::sync::mpsc::sync_channel::<(usize, Forwarded)>(QUEUED_ON_ROOT);
        let shared = Arc::clone(&self.shared);
        let publisher = std::thread::Builder::new()
            .name("gangway-live-ranks".into())
            .spawn(move || publish_forwarded(&shared, &queued))
            .map_err(|e| LiveError::Io {
                what: "starting the live server's ranks thread".into(),
                kind: e.kind(),
                message: e.to_string(),
            })?;
        self.shared.keep(publisher);
        let answer_to: Weak<dyn Transport> = Arc::downgrade(&transport);
        let lost = Arc::new(AtomicUsize::new(0));
        transport.set_live_sink(Arc::new(move |from, message| {
            match Forwarded::read(message) {
                Some(Forwarded::Probe { sent_ns }) => {
                    let answer = Forwarded::Answer {
                        sent_ns,
                        root_ns: now_ns(),
                    };
                    if let (Some(t), Some(m)) = (answer_to.upgrade(), answer.message()) {
                        let _ = t.send(from, m);
                    }
                }
                Some(Forwarded::Answer { .. }) => {}
                Some(other) => {
                    if let Err(TrySendError::Full(_)) = queue.try_send((from, other))
                        && lost.fetch_add(1, Ordering::Relaxed) == 0
                    {
                        eprintln!(
                            "gangway live: rank {from} forwards faster than rank 0 publishes; \
                             forwarded records are dropped"
                        );
                    }
                }
                None => {}
            }
        }));
        Ok(())
    }

    /// Waits until every other rank of a job of `ranks` said it is done forwarding, or `grace`
    /// passed; true when they all did.
    pub fn await_ranks(&self, ranks: usize, grace: Duration) -> bool {
        let deadline = Instant::now() + grace;
        let ranks_done = &self.shared.ranks_done;
        let mut done = ranks_done
            .done
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while done.len() + 1 < ranks {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            done = ranks_done
                .changed
                .wait_timeout(done, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }
}

fn publish_forwarded(shared: &Shared, queued: &Receiver<(usize, Forwarded)>) {
    while !shared.stopping() {
        match queued.recv_timeout(POLL) {
            Ok((from, Forwarded::Events(events))) => shared.publish_events(from, &events),
            Ok((_, Forwarded::Metric(metric))) => shared.publish_metric(metric),
            Ok((from, Forwarded::Done)) => {
                let mut done = shared
                    .ranks_done
                    .done
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if !done.contains(&from) {
                    done.push(from);
                }
                shared.ranks_done.changed.notify_all();
            }
            Ok(_) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_shortest_round_trip_gives_the_offset() {
        // Rank 0's clock is 1 ms ahead; the second probe waited 40 µs in a queue one way.
        let ahead: u64 = 1_000_000;
        let probes = [
            (
                100_000,
                100_000 + ahead + 5_000 + 40_000,
                100_000 + 10_000 + 40_000,
            ),
            (200_000, 200_000 + ahead + 5_000, 200_000 + 10_000),
            (300_000, 300_000 + ahead + 5_000 + 300, 300_000 + 10_600),
        ];
        let c = ClockEstimate::from_probes(&probes).unwrap();
        assert_eq!(c.round_trip_ns, 10_000);
        assert_eq!(c.to_root_ns, ahead as i64);
        assert_eq!(c.shift(5), 5 + ahead);
        let behind = ClockEstimate {
            to_root_ns: -10,
            round_trip_ns: 0,
        };
        assert_eq!(behind.shift(3), 0, "clamped at rank 0's epoch");
        assert!(ClockEstimate::from_probes(&[]).is_none());
    }

    #[test]
    fn forwarded_records_round_trip_and_others_are_ignored() {
        for f in [
            Forwarded::Probe { sent_ns: 7 },
            Forwarded::Answer {
                sent_ns: 7,
                root_ns: u64::MAX,
            },
            Forwarded::Metric(Metric::now("train/loss", f64::NAN).at_step(3)),
            Forwarded::Done,
        ] {
            let back = Forwarded::read(f.message().unwrap()).unwrap();
            // NaN is not equal to itself: compare the encodings.
            assert_eq!(
                serde_json::to_string(&back).unwrap(),
                serde_json::to_string(&f).unwrap()
            );
        }
        assert!(Forwarded::read(Message::Heartbeat).is_none());
        assert!(Forwarded::read(Message::Live(b"{\"Nonsense\":1}".to_vec())).is_none());
    }

    use crate::live::{Hello, LiveClient, Record, ServeOptions};
    use crate::trace::{EventMeta, FlowRole};

    const WAIT: Duration = Duration::from_secs(10);

    /// Records from `client` until `done` says it has what it waits for, within [`WAIT`].
    fn read_until(client: &mut LiveClient, mut done: impl FnMut(&[Record]) -> bool) -> Vec<Record> {
        let deadline = Instant::now() + WAIT;
        let mut got = Vec::new();
        while !done(&got) {
            assert!(Instant::now() < deadline, "waited {WAIT:?}; got {got:?}");
            if let Some(r) = client.recv(Duration::from_millis(200)).unwrap() {
                got.push(r);
            }
        }
        got
    }

    /// Two ranks of one process over the loopback transport: rank 1's events reach rank 0's
    /// server as rank 1's, on its lanes (from `base`), its clock within a round trip of rank 0's
    /// (one process: one epoch, so the true offset is 0), its metrics labelled with its rank,
    /// and rank 0 learns when it is done.
    #[test]
    fn another_ranks_events_and_metrics_reach_rank_0s_clients() {
        let jobs = Job::in_process(2).unwrap();
        let server = LiveServer::bind(
            "127.0.0.1:0",
            ServeOptions::default(),
            Hello::for_this_process(),
        )
        .unwrap();
        server.serve_ranks(&jobs[0]).unwrap();
        let mut client = LiveClient::connect(server.local_addr(), None, WAIT).unwrap();
        assert!(
            Forwarder::start(&jobs[0], &Tracer::streaming(), 0)
                .unwrap()
                .is_none()
        );
        let tracer = Tracer::streaming();
        let forwarder = Forwarder::start(&jobs[1], &tracer, 3).unwrap().unwrap();
        let clock = forwarder.clock();
        assert!(
            clock.to_root_ns.unsigned_abs() <= clock.round_trip_ns,
            "{clock:?}"
        );
        let t0 = tracer.now_ns();
        let send = EventMeta::kernel(1)
            .flow(42, FlowRole::Out)
            .event("send".into(), t0, t0 + 10);
        tracer.emit(send);
        forwarder.metric(Metric::now("bench/median_s", 0.5));
        forwarder.finish();
        assert!(server.await_ranks(2, WAIT), "rank 1 never said it was done");
        let got = read_until(&mut client, |got| {
            got.iter().any(|r| matches!(r, Record::Event { .. }))
                && got.iter().any(|r| matches!(r, Record::Metric(_)))
        });
        let (rank, event) = got
            .iter()
            .find_map(|r| match r {
                Record::Event { rank, event } => Some((*rank, event.clone())),
                _ => None,
            })
            .unwrap();
        assert_eq!((rank, event.device, event.name.as_str()), (1, 4, "send"));
        let moved = i128::from(event.start_ns) - i128::from(t0);
        assert_eq!(moved, i128::from(clock.to_root_ns).max(-i128::from(t0)));
        let metric = got
            .iter()
            .find_map(|r| match r {
                Record::Metric(m) => Some(m.clone()),
                _ => None,
            })
            .unwrap();
        assert_eq!(metric.labels.get("rank").map(String::as_str), Some("1"));
        // A second finish sends nothing more and waits for nothing.
        forwarder.finish();
    }

    /// A rank 0 that does not serve answers no probe: the forwarder says so, in bounded time.
    #[test]
    fn a_rank_0_that_does_not_serve_is_an_error_not_a_hang() {
        let jobs = Job::in_process(2).unwrap();
        let started = Instant::now();
        let e = Forwarder::start(&jobs[1], &Tracer::streaming(), 1).unwrap_err();
        assert!(
            e.to_string().contains("rank 0 answered no clock probe"),
            "{e}"
        );
        assert!(started.elapsed() < PROBE_WAIT + Duration::from_secs(2));
    }
}
