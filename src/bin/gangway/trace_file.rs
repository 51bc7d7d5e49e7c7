//! The `--trace` file while the job runs: every event the tracer streams is appended as it
//! comes ([`gangway::trace::chrome::TraceStream`], flushed every 250 ms), so a job killed or
//! crashed leaves a trace of what ran, and Ctrl-C ([`interrupt`]) closes the file whole. A job
//! that ends rewrites the file with the full export (`main.rs`), as before.

use gangway::trace::chrome::TraceStream;
use gangway::trace::{Tracer, Track};
use std::path::Path;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the file gets what is buffered.
const FLUSH_EVERY: Duration = Duration::from_millis(250);

enum Message {
    Tracks(Vec<Track>),
    Stop,
}

struct Writer {
    to: Sender<Message>,
    thread: JoinHandle<()>,
}

/// The process's streamed trace, where `--trace` asked for one (rank 0 writes it).
static WRITER: Mutex<Option<Writer>> = Mutex::new(None);

/// Starts streaming `tracer`'s events into `path`. An error to create the file is the job's.
pub(crate) fn start(path: &Path, tracer: &Tracer) -> anyhow::Result<()> {
    let mut stream = TraceStream::create(path)?;
    let events = tracer.subscribe();
    let (to, messages) = channel();
    let thread = std::thread::Builder::new()
        .name("gangway-trace-file".into())
        .spawn(move || {
            if let Err(e) = follow(&mut stream, &events, &messages) {
                std::eprintln!("--trace: writing as the job runs failed: {e}");
                return;
            }
            if let Err(e) = stream.close() {
                std::eprintln!("--trace: {e}");
            }
        })?;
    *lock() = Some(Writer { to, thread });
    Ok(())
}

fn lock() -> std::sync::MutexGuard<'static, Option<Writer>> {
    WRITER.lock().unwrap_or_else(PoisonError::into_inner)
}

fn follow(
    stream: &mut TraceStream,
    events: &Receiver<gangway::trace::Event>,
    messages: &Receiver<Message>,
) -> gangway::Result<()> {
    let mut flushed = Instant::now();
    loop {
        match messages.try_recv() {
            Ok(Message::Tracks(tracks)) => stream.set_tracks(&tracks)?,
            Ok(Message::Stop) | Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                // What the tracer sent before the stop is in the channel: take it all.
                while let Ok(e) = events.try_recv() {
                    stream.push(&e)?;
                }
                return Ok(());
            }
            Err(std::sync::mpsc::TryRecvError::Empty) => {}
        }
        match events.recv_timeout(FLUSH_EVERY / 5) {
            Ok(e) => stream.push(&e)?,
            Err(RecvTimeoutError::Timeout) => {}
            // The tracer is gone: wait for the stop.
            Err(RecvTimeoutError::Disconnected) => std::thread::sleep(FLUSH_EVERY / 5),
        }
        if flushed.elapsed() >= FLUSH_EVERY {
            stream.flush()?;
            flushed = Instant::now();
        }
    }
}

/// Names the devices' processes in the file.
pub(crate) fn set_tracks(tracks: &[Track]) {
    if let Some(w) = lock().as_ref() {
        let _ = w.to.send(Message::Tracks(tracks.to_vec()));
    }
}

/// Closes the streamed file (every event so far written, the array closed) and waits for it.
pub(crate) fn stop() {
    let writer = lock().take();
    if let Some(w) = writer {
        let _ = w.to.send(Message::Stop);
        let _ = w.thread.join();
    }
}

/// The process's runtime, quieted before a Ctrl-C exits ([`on_interrupt`]).
static QUIET: std::sync::OnceLock<gangway::sched::Quieter> = std::sync::OnceLock::new();

/// Lets Ctrl-C quiet `runtime` before the process exits.
pub(crate) fn quiet_on_interrupt(runtime: &gangway::sched::Runtime) {
    let _ = QUIET.set(runtime.quieter());
}

/// Ctrl-C: the trace file closed whole, the live stream told, the runtime's runs in flight
/// finished (at most 2 s; none admitted after), then the exit status of a tool ended by SIGINT
/// (130).
pub(crate) fn on_interrupt() {
    let handler = || {
        stop();
        crate::live_command::interrupted();
        if let Some(runtime) = QUIET.get() {
            runtime.quiet(std::time::Duration::from_secs(2));
        }
        std::eprintln!("interrupted");
        std::process::exit(130);
    };
    if let Err(e) = ctrlc::set_handler(handler) {
        std::eprintln!("Ctrl-C will not close the trace file: {e}");
    }
}
