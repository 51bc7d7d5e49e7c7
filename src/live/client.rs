//! The reading side: [`LiveClient`] attaches to a server and yields its records one at a time;
//! [`Recording`] keeps them as a watcher needs them and saves the events as a Chrome trace.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::protocol::{self, Attach, End, FrameDecoder, Hello, Metric, PROTOCOL_VERSION, Record};
use crate::error::{LiveError, Result};
use crate::trace::{Event, Track, chrome};

/// The shortest read timeout a receive uses: a zero timeout is refused by the socket API, and
/// a receive with no time left still looks once at what has arrived.
const MIN_WAIT: Duration = Duration::from_millis(1);

/// A connection to a [`super::LiveServer`] (or any server of the protocol), attached.
pub struct LiveClient {
    stream: TcpStream,
    peer: SocketAddr,
    decoder: FrameDecoder,
    hello: Hello,
    buf: Vec<u8>,
}

impl LiveClient {
    /// Connects to `addr`, attaches with `token` (when the server wants one) and waits for the
    /// hello, all within `timeout`. A refusal is [`LiveError::Refused`] with the server's
    /// reason; a server of another protocol major refuses too.
    pub fn connect(
        addr: impl ToSocketAddrs + std::fmt::Debug,
        token: Option<&str>,
        timeout: Duration,
    ) -> Result<LiveClient> {
        let deadline = Instant::now() + timeout;
        let what = format!("connecting to {addr:?}");
        let addrs: Vec<SocketAddr> = addr
            .to_socket_addrs()
            .map_err(|e| io_error(&what, &e))?
            .collect();
        let mut last = None;
        let mut connected = None;
        for a in addrs {
            let left = deadline
                .saturating_duration_since(Instant::now())
                .max(MIN_WAIT);
            match TcpStream::connect_timeout(&a, left) {
                Ok(stream) => {
                    connected = Some((stream, a));
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let Some((mut stream, peer)) = connected else {
            let e = last.unwrap_or_else(|| ErrorKind::NotFound.into());
            return Err(io_error(&what, &e));
        };
        let _ = stream.set_nodelay(true);
        let attach = Record::Attach(Attach {
            protocol: PROTOCOL_VERSION,
            token: token.map(str::to_string),
            client: Some(format!("gangway {}", env!("CARGO_PKG_VERSION"))),
        });
        let frame = protocol::encode(&attach)?;
        stream
            .set_write_timeout(Some(timeout.max(MIN_WAIT)))
            .and_then(|()| stream.write_all(&frame))
            .map_err(|e| io_error(&format!("attaching to {peer}"), &e))?;
        let mut client = LiveClient {
            stream,
            peer,
            decoder: FrameDecoder::new(),
            hello: Hello::for_this_process(),
            buf: vec![0; 64 << 10],
        };
        let left = deadline.saturating_duration_since(Instant::now());
        match client.recv(left)? {
            Some(Record::Hello(hello)) if hello.protocol == PROTOCOL_VERSION => {
                client.hello = hello;
                Ok(client)
            }
            Some(Record::Hello(hello)) => Err(LiveError::Protocol {
                reason: format!(
                    "the server speaks protocol {}, this client {PROTOCOL_VERSION}",
                    hello.protocol
                ),
            }
            .into()),
            Some(Record::Refused { reason }) => Err(LiveError::Refused { reason }.into()),
            Some(other) => Err(LiveError::Protocol {
                reason: format!("the server sent a {} record before its hello", other.kind()),
            }
            .into()),
            None => Err(LiveError::Io {
                what: format!("attaching to {peer}"),
                kind: ErrorKind::TimedOut,
                message: format!("no hello within {} ms", timeout.as_millis()),
            }
            .into()),
        }
    }

    /// The server's hello.
    pub fn hello(&self) -> &Hello {
        &self.hello
    }

    /// The server's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The next record, waiting up to `timeout`; `None` when none came in time. After an
    /// `end` the server closes the connection, and the next call is [`LiveError::Closed`]. A
    /// bad frame is [`LiveError::BadFrame`], and the connection is closed with it.
    pub fn recv(&mut self, timeout: Duration) -> Result<Option<Record>> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.decoder.next_record() {
                Ok(Some(Record::Attach(_))) => {
                    return Err(self.fail(LiveError::Protocol {
                        reason: "the server sent an attach record".into(),
                    }));
                }
                Ok(Some(record)) => return Ok(Some(record)),
                Ok(None) => {}
                Err(e) => {
                    let _ = self.stream.shutdown(Shutdown::Both);
                    return Err(e);
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            // `set_read_timeout` on a closed socket fails; the read says why better.
            let _ = self.stream.set_read_timeout(Some(left.max(MIN_WAIT)));
            match self.stream.read(&mut self.buf) {
                Ok(0) if self.decoder.pending() > 0 => {
                    return Err(self.fail(LiveError::BadFrame {
                        reason: format!(
                            "the connection closed inside a frame ({} bytes of it came)",
                            self.decoder.pending()
                        ),
                    }));
                }
                Ok(0) => {
                    return Err(LiveError::Closed {
                        peer: self.peer.to_string(),
                    }
                    .into());
                }
                Ok(n) => self.decoder.push(&self.buf[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    if left.is_zero() || Instant::now() >= deadline {
                        return Ok(None);
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(io_error(&format!("reading from {}", self.peer), &e)),
            }
        }
    }

    /// Receives into `recording` until the `end` or until the server closes the connection
    /// (a job killed mid-run sends no end: what came is kept, and this returns `Ok`). Other
    /// errors return with what came before them already in `recording`.
    pub fn record_until_end(&mut self, recording: &mut Recording) -> Result<()> {
        loop {
            match self.recv(Duration::from_millis(200)) {
                Ok(Some(record)) => {
                    if recording.push(record) {
                        return Ok(());
                    }
                }
                Ok(None) => {}
                Err(crate::Error::Live(LiveError::Closed { .. })) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }

    fn fail(&self, e: LiveError) -> crate::Error {
        let _ = self.stream.shutdown(Shutdown::Both);
        e.into()
    }
}

impl std::fmt::Debug for LiveClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveClient")
            .field("peer", &self.peer)
            .field("producer", &self.hello.producer)
            .field("pending_bytes", &self.decoder.pending())
            .finish_non_exhaustive()
    }
}

fn io_error(what: &str, e: &std::io::Error) -> crate::Error {
    LiveError::Io {
        what: what.to_string(),
        kind: e.kind(),
        message: e.to_string(),
    }
    .into()
}

/// What a stream has told so far, kept as a watcher wants it.
#[derive(Clone, PartialEq)]
pub struct Recording {
    pub hello: Hello,
    /// Every event received, in arrival order.
    pub events: Vec<Event>,
    /// The rank each of [`events`](Self::events) came from (the same length).
    pub event_ranks: Vec<usize>,
    /// Every metric received, in arrival order.
    pub metrics: Vec<Metric>,
    /// Events and metrics the server could not send this client (the latest totals).
    pub dropped_events: u64,
    pub dropped_metrics: u64,
    pub end: Option<End>,
    /// The producer's clock at the last heartbeat, in ns since its trace epoch.
    pub last_heartbeat_ns: Option<u64>,
}

impl Recording {
    /// An empty recording of the stream `hello` starts.
    pub fn new(hello: Hello) -> Recording {
        Recording {
            hello,
            events: Vec::new(),
            event_ranks: Vec::new(),
            metrics: Vec::new(),
            dropped_events: 0,
            dropped_metrics: 0,
            end: None,
            last_heartbeat_ns: None,
        }
    }

    /// Takes one record in; true when it was the end. A second hello replaces the first; an
    /// attach or a refusal changes nothing.
    pub fn push(&mut self, record: Record) -> bool {
        match record {
            Record::Hello(hello) => self.hello = hello,
            Record::Event { rank, event } => {
                self.events.push(event);
                self.event_ranks.push(rank);
            }
            Record::Metric(metric) => self.metrics.push(metric),
            Record::Dropped { events, metrics } => {
                // Totals only grow; keeping the larger survives reordering by a relay.
                self.dropped_events = self.dropped_events.max(events);
                self.dropped_metrics = self.dropped_metrics.max(metrics);
            }
            Record::End(end) => {
                self.end = Some(end);
                return true;
            }
            Record::Heartbeat { t_ns } => self.last_heartbeat_ns = Some(t_ns),
            Record::Attach(_) | Record::Refused { .. } => {}
        }
        false
    }

    /// The metrics named `name`, in arrival order.
    pub fn series<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Metric> + 'a {
        self.metrics.iter().filter(move |m| m.name == name)
    }

    /// The lanes of the hello's devices.
    pub fn tracks(&self) -> Vec<Track> {
        self.hello.tracks()
    }

    /// The events as Chrome trace-event JSON ([`chrome::to_string`]), lanes titled by the
    /// hello's devices: what `gangway trace record` saves.
    pub fn to_chrome_trace(&self) -> String {
        chrome::to_string(&self.events, &self.tracks())
    }
}

impl std::fmt::Debug for Recording {
    /// Terse: a recording may hold a million events.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recording")
            .field("producer", &self.hello.producer)
            .field("events", &self.events.len())
            .field("metrics", &self.metrics.len())
            .field("dropped_events", &self.dropped_events)
            .field("dropped_metrics", &self.dropped_metrics)
            .field("end", &self.end)
            .finish_non_exhaustive()
    }
}
