//! The serving side: what publishers call, the history a late client gets, and stopping. Each
//! client's connection, its queue and its threads are in `connection.rs`.
//!
//! Publishing serialises a record once, then under one short lock appends it to the history
//! and offers the same bytes (`Arc<[u8]>`) to each client's bounded queue; a full queue drops
//! the record for that client and counts it. Nothing a client does (not reading, reading
//! slowly, vanishing) can block a publisher or grow memory past the queues' and history's caps.

use std::collections::VecDeque;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::connection::{Client, Lane, accept_loop};
use super::forward::RanksDone;
use super::protocol::{self, End, EventRef, Hello, Metric, Record};
use crate::error::{LiveError, Result};
use crate::trace::{Event, Tracer};

/// How long a new connection has to send its attach.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a client's writer stays silent before it sends a heartbeat.
pub const HEARTBEAT: Duration = Duration::from_secs(1);
/// How long a client may accept no byte at all before the server closes it (a peer that
/// vanished without a FIN keeps its socket open for many minutes otherwise).
pub const STALL_LIMIT: Duration = Duration::from_secs(60);
/// How long [`LiveServer::finish`] waits for clients to receive their `end`.
pub const FINISH_GRACE: Duration = Duration::from_secs(1);
/// How often blocked socket calls wake to see whether the server is stopping.
pub(super) const POLL: Duration = Duration::from_millis(100);
/// How long the listener sleeps when no connection is waiting.
pub(super) const ACCEPT_POLL: Duration = Duration::from_millis(20);
/// The longest error text an `end` carries, in bytes.
const MAX_END_ERROR: usize = 64 << 10;
/// A writer moves at most this many bytes from its queue per socket write.
pub(super) const BATCH_BYTES: usize = 256 << 10;

/// One encoded frame, shared by the history and every client queue that holds it: a record
/// is serialised once however many clients get it.
pub(super) type Frame = Arc<[u8]>;

/// How a [`LiveServer`] serves.
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

/// Serves one process's stream until [`finish`](Self::finish) or drop. Publishing never blocks
/// on a client.
pub struct LiveServer {
    pub(super) shared: Arc<Shared>,
    local_addr: SocketAddr,
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

impl LiveServer {
    /// Listens on `addr` and starts accepting clients. A non-loopback address needs a token
    /// ([`LiveError::TokenNeeded`]); port 0 picks a free port ([`local_addr`](Self::local_addr)).
    pub fn bind(
        addr: impl ToSocketAddrs + std::fmt::Debug,
        mut options: ServeOptions,
        hello: Hello,
    ) -> Result<LiveServer> {
        // An empty token would let anyone in while looking like protection.
        options.token = options.token.filter(|t| !t.is_empty());
        let what = format!("binding {addr:?}");
        let addrs: Vec<SocketAddr> = addr.to_socket_addrs().map_err(io(&what))?.collect();
        if options.token.is_none()
            && let Some(open) = addrs.iter().find(|a| !a.ip().is_loopback())
        {
            return Err(LiveError::TokenNeeded {
                addr: open.to_string(),
            }
            .into());
        }
        let listener = TcpListener::bind(&addrs[..]).map_err(io(&what))?;
        let local_addr = listener.local_addr().map_err(io(&what))?;
        listener.set_nonblocking(true).map_err(io(&what))?;
        options.client_buffer = options.client_buffer.max(1);
        let shared = Arc::new(Shared {
            options,
            stop: AtomicBool::new(false),
            state: Mutex::new(State {
                hello: protocol::encode(&Record::Hello(hello))?.into(),
                metrics: VecDeque::new(),
                events: VecDeque::new(),
                clients: Vec::new(),
                pending: 0,
                end: None,
            }),
            threads: Mutex::new(Vec::new()),
            told_oversize: AtomicBool::new(false),
            ranks_done: RanksDone::default(),
        });
        let accepting = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name("gangway-live-accept".into())
            .spawn(move || accept_loop(&accepting, &listener))
            .map_err(io("starting the live server's thread"))?;
        shared.keep(accept);
        Ok(LiveServer { shared, local_addr })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Replaces the hello: clients attaching from now on receive it first, and those attached
    /// receive it next, in the metrics' lane (which an event flood cannot fill), so a watcher
    /// that attached before the job found its devices learns them. A later hello replaces the
    /// earlier one whole.
    pub fn update_hello(&self, hello: Hello) -> Result<()> {
        let frame: Frame = protocol::encode(&Record::Hello(hello))?.into();
        let mut state = self.shared.lock();
        state.hello = Arc::clone(&frame);
        let buffer = self.shared.options.client_buffer;
        state
            .clients
            .retain(|c| c.offer(Lane::Metric, &frame, buffer));
        Ok(())
    }

    /// Streams one event of `rank` to every client and keeps it for late ones.
    pub fn publish_event(&self, rank: usize, event: &Event) {
        self.shared
            .publish_events(rank, std::slice::from_ref(event));
    }

    /// Streams events of `rank`, under one lock.
    pub fn publish_events(&self, rank: usize, events: &[Event]) {
        self.shared.publish_events(rank, events);
    }

    /// Streams one metric to every client and keeps it for late ones.
    pub fn publish_metric(&self, metric: Metric) {
        self.shared.publish_metric(metric);
    }

    /// Streams every event `tracer` emits from now on as `rank`'s, from a thread of the
    /// server's, until the server stops or the tracer is dropped.
    pub fn attach_tracer(&self, rank: usize, tracer: &Tracer) -> Result<()> {
        let events = tracer.subscribe();
        let shared = Arc::clone(&self.shared);
        let pump = std::thread::Builder::new()
            .name("gangway-live-tracer".into())
            .spawn(move || {
                while !shared.stopping() {
                    match events.recv_timeout(POLL) {
                        Ok(first) => {
                            // Take what else is waiting, so a burst costs one lock.
                            let mut batch = vec![first];
                            batch.extend(events.try_iter().take(4095));
                            shared.publish_events(rank, &batch);
                        }
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
            })
            .map_err(io("starting the live server's tracer thread"))?;
        self.shared.keep(pump);
        Ok(())
    }

    /// Sends `end` to every client after what is queued for it, waits up to [`FINISH_GRACE`]
    /// for them to receive it, and stops. Records published afterwards go nowhere; a second
    /// call does nothing.
    pub fn finish(&self, mut end: End) {
        // The error's text is for people: its first 64 KiB keep the end within a frame.
        if let Some(error) = &mut end.error
            && error.len() > MAX_END_ERROR
        {
            let cut = (0..=MAX_END_ERROR)
                .rev()
                .find(|&i| error.is_char_boundary(i))
                .unwrap_or(0);
            error.truncate(cut);
        }
        let Some(frame) = self.shared.frame(&Record::End(end)) else {
            self.shared.shut_down();
            return;
        };
        let clients = {
            let mut state = self.shared.lock();
            if state.end.is_some() {
                return;
            }
            state.end = Some(Arc::clone(&frame));
            state.clients.clone()
        };
        for c in &clients {
            let mut q = c.lock();
            q.end = Some(Arc::clone(&frame));
            c.ready.notify_one();
        }
        let deadline = Instant::now() + FINISH_GRACE;
        while Instant::now() < deadline && clients.iter().any(|c| !c.lock().closed) {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.shared.shut_down();
    }

    /// How many clients are attached now.
    pub fn client_count(&self) -> usize {
        let state = self.shared.lock();
        state.clients.iter().filter(|c| !c.lock().closed).count()
    }
}

impl std::fmt::Debug for LiveServer {
    /// Terse: the history may hold a hundred thousand frames.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveServer")
            .field("local_addr", &self.local_addr)
            .field("clients", &self.client_count())
            .field("stopped", &self.shared.stopping())
            .finish_non_exhaustive()
    }
}

impl Drop for LiveServer {
    /// Stops every thread and closes every connection, without an `end` unless
    /// [`finish`](LiveServer::finish) sent one.
    fn drop(&mut self) {
        self.shared.shut_down();
    }
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
    fn frame(&self, record: &impl serde::Serialize) -> Option<Frame> {
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
    fn shut_down(&self) {
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

fn io(what: &str) -> impl FnOnce(std::io::Error) -> crate::Error + '_ {
    move |e| {
        LiveError::Io {
            what: what.to_string(),
            kind: e.kind(),
            message: e.to_string(),
        }
        .into()
    }
}

pub(super) fn log(peer: SocketAddr, message: &str) {
    eprintln!("gangway live: {peer}: {message}");
}

#[cfg(test)]
impl LiveServer {
    /// The frames queued for each attached client now, for tests of the bound.
    pub(crate) fn queued(&self) -> Vec<usize> {
        let state = self.shared.lock();
        state
            .clients
            .iter()
            .map(|c| c.lock().frames.len())
            .collect()
    }

    /// The events and metrics a late client would get first.
    pub(crate) fn history_len(&self) -> (usize, usize) {
        let state = self.shared.lock();
        (state.events.len(), state.metrics.len())
    }
}
