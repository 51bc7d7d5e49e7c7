//! What the server's threads share: its options and limits, the history a late client gets,
//! the attached clients' queues, the ranks that finished forwarding, and publishing into all of
//! them. `server.rs` owns it, `connection.rs` adds clients to it, `forward.rs` publishes other
//! ranks' records through it.
//!
//! Publishing serialises a record once, then under one short lock appends it to the history
//! and offers the same bytes (`Arc<[u8]>`) to each client's bounded queue; a full queue drops
//! the record for that client and counts it. Nothing a client does (not reading, reading
//! slowly, vanishing) can block a publisher or grow memory past the queues' and history's caps.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::protocol::{self, EventRef, Metric, Record};
use super::queue::{Client, Frame, Lane};
use crate::trace::Event;

/// How long a new connection has to send its attach.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a client's writer stays silent before it sends a heartbeat.
pub const HEARTBEAT: Duration = Duration::from_secs(1);
/// How long a client may accept no byte at all before the server closes it (a peer that
/// vanished without a FIN keeps its socket open for many minutes otherwise).
pub const STALL_LIMIT: Duration = Duration::from_secs(60);
/// How long [`super::LiveServer::finish`] waits for clients to receive their `end`.
pub const FINISH_GRACE: Duration = Duration::from_secs(1);
/// How often blocked socket calls wake to see whether the server is stopping.
pub(super) const POLL: Duration = Duration::from_millis(100);
/// How long the listener sleeps when no connection is waiting.
pub(super) const ACCEPT_POLL: Duration = Duration::from_millis(20);
/// The longest error text an `end` carries, in bytes.
pub(super) const MAX_END_ERROR: usize = 64 << 10;

/// How a [`super::LiveServer`] serves.
#[derive(Clone)]
pub struct ServeOptions {
    /// The token clients must attach with; required to serve a non-loopback address.
    pub token: Option<String>,
    /// The most events queued for one client; as many metrics again have their own budget.
    pub client_buffer: usize,
    /// A client that joins late first gets the events published this long ago or since...
    pub event_history: Duration,
    /// ...but at most this many of them (the newest).
    pub history_events: usize,
    /// The metrics a late client gets first: every one published, up to this many (the newest).
    pub history_metrics: usize,
    /// Clients attached at once; one more is refused. As many connections again may be in
    /// their handshake; beyond that a connection is closed unanswered.
    pub max_clients: usize,
}

impl std::fmt::Debug for ServeOptions {
    /// Everything but the token's value: a Debug print may end up in a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeOptions")
            .field("token", &self.token.as_ref().map(|_| "(set)"))
            .field("client_buffer", &self.client_buffer)
            .field("event_history", &self.event_history)
            .field("history_events", &self.history_events)
            .field("history_metrics", &self.history_metrics)
            .field("max_clients", &self.max_clients)
            .finish()
    }
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            token: None,
            client_buffer: 65_536,
            event_history: Duration::from_secs(60),
            history_events: 100_000,
            history_metrics: 100_000,
            max_clients: 16,
        }
    }
}

/// Rank 0's side: which ranks said they are done.
#[derive(Default)]
pub(super) struct RanksDone {
    pub(super) done: Mutex<Vec<usize>>,
    pub(super) changed: Condvar,
}

pub(super) struct Shared {
    pub(super) options: ServeOptions,
    /// Set once: every thread of the server returns within about [`POLL`].
    pub(super) stop: AtomicBool,
    pub(super) state: Mutex<State>,
    /// Every thread the server started, joined when it stops; finished ones are pruned as new
    /// ones start, so many short connections do not grow it.
    pub(super) threads: Mutex<Vec<JoinHandle<()>>>,
    /// Whether a record too large for a frame was reported (once is enough).
    pub(super) told_oversize: AtomicBool,
    /// The job's other ranks that finished forwarding (`forward.rs`).
    pub(super) ranks_done: RanksDone,
}

pub(super) struct State {
    pub(super) hello: Frame,
    pub(super) metrics: VecDeque<Frame>,
    /// Events with when they were published, oldest first.
    pub(super) events: VecDeque<(Instant, Frame)>,
    pub(super) clients: Vec<Arc<Client>>,
    /// Connections in their handshake.
    pub(super) pending: usize,
    /// Set by `finish`: nothing is published after it.
    pub(super) end: Option<Frame>,
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        // Plain data: a panic elsewhere leaves nothing half-updated worth refusing to serve.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    pub(super) fn keep(&self, handle: JoinHandle<()>) {
        let mut threads = self.threads.lock().unwrap_or_else(PoisonError::into_inner);
        threads.retain(|t| !t.is_finished());
        threads.push(handle);
    }

    /// `record` framed, or `None` (reported once) when it does not fit a frame.
    pub(super) fn frame(&self, record: &impl serde::Serialize) -> Option<Frame> {
        match protocol::encode_any(record) {
            Ok(frame) => Some(frame.into()),
            Err(e) => {
                if !self.told_oversize.swap(true, Ordering::Relaxed) {
                    eprintln!(
                        "gangway live: a record was not sent (and later ones may not be): {e}"
                    );
                }
                None
            }
        }
    }

    pub(super) fn publish_metric(&self, metric: Metric) {
        if let Some(frame) = self.frame(&Record::Metric(metric)) {
            let mut state = self.lock();
            if state.end.is_some() {
                return;
            }
            state.metrics.push_back(Arc::clone(&frame));
            let cap = self.options.history_metrics;
            while state.metrics.len() > cap {
                state.metrics.pop_front();
            }
            let buffer = self.options.client_buffer;
            state
                .clients
                .retain(|c| c.offer(Lane::Metric, &frame, buffer));
        }
    }

    pub(super) fn publish_events(&self, rank: usize, events: &[Event]) {
        // Serialise outside the lock: it is the only slow part.
        let frames: Vec<Frame> = events
            .iter()
            .filter_map(|event| self.frame(&EventRef { rank, event }))
            .collect();
        let now = Instant::now();
        let mut state = self.lock();
        if state.end.is_some() {
            return;
        }
        let buffer = self.options.client_buffer;
        for frame in frames {
            state.events.push_back((now, Arc::clone(&frame)));
            state
                .clients
                .retain(|c| c.offer(Lane::Event, &frame, buffer));
        }
        state.trim_events(now, &self.options);
    }

    /// Stops accepting, closes every connection and joins every thread.
    pub(super) fn shut_down(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let clients = std::mem::take(&mut self.lock().clients);
        for c in clients {
            c.close();
        }
        loop {
            let threads =
                std::mem::take(&mut *self.threads.lock().unwrap_or_else(PoisonError::into_inner));
            if threads.is_empty() {
                break;
            }
            for t in threads {
                // A panicked server thread has already lost its connection; nothing to add.
                let _ = t.join();
            }
        }
    }
}

impl State {
    /// Forgets events older than the history window or beyond its count.
    pub(super) fn trim_events(&mut self, now: Instant, options: &ServeOptions) {
        while self.events.len() > options.history_events {
            self.events.pop_front();
        }
        while self
            .events
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) > options.event_history)
        {
            self.events.pop_front();
        }
    }
}

pub(super) fn log(peer: SocketAddr, message: &str) {
    eprintln!("gangway live: {peer}: {message}");
}
