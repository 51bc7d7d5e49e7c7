//! One client's connection on the server: the listener that accepts it, its handshake, the
//! thread that writes its queue (`queue.rs`) to the socket, and the one that notices a
//! hang-up. A writer holds its queue's lock only to move frames out, never across a socket
//! call, so a publisher that pushes into the queue never waits on the client.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Instant;

use super::protocol::{self, Attach, FrameDecoder, PROTOCOL_VERSION, Record};
use super::queue::{BATCH_BYTES, Client, Frame, Queue};
use super::shared::{
    ACCEPT_POLL, HANDSHAKE_TIMEOUT, HEARTBEAT, POLL, STALL_LIMIT, ServeOptions, Shared, log,
};
use crate::trace::ns_since_epoch;

pub(super) fn accept_loop(shared: &Arc<Shared>, listener: &TcpListener) {
    while !shared.stopping() {
        let (stream, peer) = match listener.accept() {
            Ok(conn) => conn,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(ACCEPT_POLL);
                continue;
            }
            Err(e) => {
                // Out of descriptors and the like: wait for it to pass rather than spin.
                eprintln!("gangway live: accepting a connection: {e}");
                std::thread::sleep(POLL);
                continue;
            }
        };
        {
            let mut state = shared.lock();
            if state.pending >= shared.options.max_clients.max(1) {
                drop(state);
                log(
                    peer,
                    "too many connections in their handshake: closed unanswered",
                );
                continue;
            }
            state.pending += 1;
        }
        let serving = Arc::clone(shared);
        let spawned = std::thread::Builder::new()
            .name("gangway-live-client".into())
            .spawn(move || serve(&serving, stream, peer));
        match spawned {
            Ok(handle) => shared.keep(handle),
            Err(e) => {
                shared.lock().pending -= 1;
                log(peer, &format!("cannot start a thread for it: {e}"));
            }
        }
    }
}

/// One connection, from its attach to its end; this thread then writes the client's stream.
fn serve(shared: &Arc<Shared>, mut stream: TcpStream, peer: SocketAddr) {
    let attach = handshake(shared, &mut stream);
    shared.lock().pending -= 1;
    let attach = match attach {
        Ok(attach) => attach,
        Err(reason) => return log(peer, &format!("closing: {reason}")),
    };
    if let Some(reason) = refusal(&shared.options, &attach) {
        return refuse(&mut stream, peer, &reason);
    }
    let (client, catch_up) = match register(shared, &stream, peer) {
        Ok(registered) => registered,
        Err(reason) => return refuse(&mut stream, peer, &reason),
    };
    let watcher = Arc::clone(&client);
    match std::thread::Builder::new()
        .name("gangway-live-hangup".into())
        .spawn(move || watch_for_hangup(&watcher))
    {
        Ok(handle) => shared.keep(handle),
        Err(e) => {
            client.close();
            return log(peer, &format!("cannot start a thread for it: {e}"));
        }
    }
    let mut writer = Writer { shared, stream };
    let result = writer.run(&client, catch_up);
    // A client that hung up, or a server that stops, makes the socket fail too: that is no
    // news, and only a failure of the connection itself is logged.
    if let Err(reason) = result
        && !client.lock().closed
        && !shared.stopping()
    {
        log(peer, &format!("closing: {reason}"));
    }
    client.close();
}

/// Reads the attach within [`HANDSHAKE_TIMEOUT`]; anything else first is a reason to close.
fn handshake(shared: &Shared, stream: &mut TcpStream) -> Result<Attach, String> {
    let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
    // Accepted sockets may inherit the listener's non-blocking mode on some platforms.
    stream
        .set_nonblocking(false)
        .and_then(|()| stream.set_read_timeout(Some(POLL)))
        .map_err(|e| e.to_string())?;
    let _ = stream.set_nodelay(true);
    let mut decoder = FrameDecoder::new();
    let mut buf = [0u8; 4096];
    loop {
        match decoder.next_record() {
            Ok(Some(Record::Attach(attach))) if decoder.pending() == 0 => return Ok(attach),
            Ok(Some(Record::Attach(_))) => return Err("it sent more after its attach".into()),
            Ok(Some(other)) => {
                return Err(format!(
                    "it sent a {} record instead of attach",
                    other.kind()
                ));
            }
            Ok(None) => {}
            Err(e) => return Err(e.to_string()),
        }
        if shared.stopping() {
            return Err("the server is stopping".into());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "no attach within {} s",
                HANDSHAKE_TIMEOUT.as_secs()
            ));
        }
        match stream.read(&mut buf) {
            Ok(0) => return Err("it closed the connection before attaching".into()),
            Ok(n) => decoder.push(&buf[..n]),
            Err(e) if is_timeout(&e) => {}
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Why `attach` is refused, if it is.
fn refusal(options: &ServeOptions, attach: &Attach) -> Option<String> {
    if attach.protocol != PROTOCOL_VERSION {
        return Some(format!(
            "protocol {} is not served here: this server speaks protocol {PROTOCOL_VERSION}",
            attach.protocol
        ));
    }
    let expected = options.token.as_deref()?;
    match attach.token.as_deref() {
        None => Some("this server needs a token".into()),
        Some(given) if !super::tokens_match(expected, given) => Some("wrong token".into()),
        Some(_) => None,
    }
}

fn refuse(stream: &mut TcpStream, peer: SocketAddr, reason: &str) {
    log(peer, &format!("refused: {reason}"));
    let record = Record::Refused {
        reason: reason.into(),
    };
    if let Ok(frame) = protocol::encode(&record) {
        let _ = stream.set_write_timeout(Some(POLL));
        let _ = stream.write_all(&frame);
    }
    let _ = stream.shutdown(Shutdown::Both);
}

/// Adds the client to those published to, with what it gets first: the hello, the metric
/// history and the recent events, taken under the same lock its queue starts under, so it
/// misses nothing and gets nothing twice. The error is the reason to refuse it (the server is
/// full).
fn register(
    shared: &Shared,
    stream: &TcpStream,
    peer: SocketAddr,
) -> Result<(Arc<Client>, Vec<Frame>), String> {
    let handle = stream
        .try_clone()
        .map_err(|e| format!("the server cannot serve it: {e}"))?;
    let mut state = shared.lock();
    state.clients.retain(|c| !c.lock().closed);
    let max = shared.options.max_clients;
    if state.clients.len() >= max {
        return Err(format!("{max} clients are attached already"));
    }
    state.trim_events(Instant::now(), &shared.options);
    let mut catch_up = Vec::with_capacity(1 + state.metrics.len() + state.events.len());
    catch_up.push(Arc::clone(&state.hello));
    catch_up.extend(state.metrics.iter().cloned());
    catch_up.extend(state.events.iter().map(|(_, f)| Arc::clone(f)));
    let client = Arc::new(Client {
        peer,
        stream: handle,
        queue: Mutex::new(Queue {
            end: state.end.clone(),
            ..Queue::default()
        }),
        ready: Condvar::new(),
    });
    state.clients.push(Arc::clone(&client));
    Ok((client, catch_up))
}

/// Blocks on the socket until the client hangs up or sends anything (it may not after its
/// attach), then closes the connection; returns when the connection is shut down.
fn watch_for_hangup(client: &Client) {
    let mut stream = &client.stream;
    let _ = stream.set_read_timeout(None);
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => {}
        Ok(_) => {
            if !client.lock().closed {
                log(client.peer, "closing: it sent data after its attach");
            }
        }
        Err(e) => {
            if !client.lock().closed {
                log(client.peer, &format!("closing: {e}"));
            }
        }
    }
    client.close();
}

/// Writes one client's stream.
struct Writer<'a> {
    shared: &'a Shared,
    stream: TcpStream,
}

impl Writer<'_> {
    fn run(&mut self, client: &Client, catch_up: Vec<Frame>) -> Result<(), String> {
        self.stream
            .set_write_timeout(Some(POLL))
            .map_err(|e| e.to_string())?;
        let mut out = Vec::with_capacity(BATCH_BYTES);
        for frame in catch_up {
            out.extend_from_slice(&frame);
            if out.len() >= BATCH_BYTES {
                self.write(&out, client)?;
                out.clear();
            }
        }
        self.write(&out, client)?;
        let mut last_sent = Instant::now();
        let mut batch = Vec::new();
        loop {
            let ended = {
                let mut q = client.lock();
                while !q.closed && q.frames.is_empty() && q.end.is_none() && !q.owes_dropped() {
                    let wait = HEARTBEAT.saturating_sub(last_sent.elapsed());
                    if wait.is_zero() || self.shared.stopping() {
                        break;
                    }
                    q = client
                        .ready
                        .wait_timeout(q, wait.min(POLL))
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
                if q.closed || self.shared.stopping() {
                    return Ok(());
                }
                q.take_batch(&mut batch)?
            };
            // Copied out of the queue's frames after its lock is released.
            out.clear();
            for frame in batch.drain(..) {
                out.extend_from_slice(&frame);
            }
            if out.is_empty() {
                // Nothing for a second: a heartbeat says the job is alive.
                let t_ns = ns_since_epoch(Instant::now());
                out = protocol::encode(&Record::Heartbeat { t_ns }).map_err(|e| e.to_string())?;
            }
            self.write(&out, client)?;
            last_sent = Instant::now();
            if ended {
                let _ = self.stream.flush();
                return Ok(());
            }
        }
    }

    /// Writes all of `bytes`, resuming after each write timeout where it stopped (a frame cut
    /// in half would end the stream), until done, the server stops, the client is closed, or
    /// it took nothing for [`STALL_LIMIT`].
    fn write(&mut self, mut bytes: &[u8], client: &Client) -> Result<(), String> {
        let mut last_progress = Instant::now();
        while !bytes.is_empty() {
            match self.stream.write(bytes) {
                Ok(0) => return Err("the connection is closed".into()),
                Ok(n) => {
                    bytes = &bytes[n..];
                    last_progress = Instant::now();
                }
                Err(e) if is_timeout(&e) => {
                    if self.shared.stopping() || client.lock().closed {
                        return Ok(());
                    }
                    if last_progress.elapsed() > STALL_LIMIT {
                        return Err(format!("it read nothing for {} s", STALL_LIMIT.as_secs()));
                    }
                }
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(())
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}
