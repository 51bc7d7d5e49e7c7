//! The serving side's face: binding, what publishers call, and stopping. What its threads share
//! (the history, the client queues, publishing) is in `shared.rs`; each client's connection and
//! its threads are in `connection.rs`.

use std::collections::VecDeque;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::connection::accept_loop;
use super::protocol::{self, End, Hello, Metric, Record};
use super::queue::{Frame, Lane};
pub use super::shared::{FINISH_GRACE, HANDSHAKE_TIMEOUT, HEARTBEAT, STALL_LIMIT, ServeOptions};
use super::shared::{MAX_END_ERROR, POLL, RanksDone, Shared, State};
use crate::error::{LiveError, Result};
use crate::trace::{Event, Tracer};

/// Serves one process's stream until [`finish`](Self::finish) or drop. Publishing never blocks
/// on a client.
pub struct LiveServer {
    pub(super) shared: Arc<Shared>,
    local_addr: SocketAddr,
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
