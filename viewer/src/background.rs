//! The one way the viewer runs work off the UI thread: a named thread whose result comes back as
//! a [`Job`] ([`spawn`]), or, for work that reports as it goes (training), whose messages and
//! result come back as a [`Stream`] ([`spawn_stream`]). The UI polls either each frame; a repaint
//! is requested with every message and when the work ends (even if it panicked, so the UI wakes
//! up and sees it gone). The live timeline's events are not a thread of the viewer's: they come
//! from the runtime's tracer subscription.

use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError, channel};
use std::thread::JoinHandle;
use std::time::Duration;

/// Work running off the UI thread, with one result.
#[derive(Debug)]
pub struct Job<T> {
    rx: Receiver<T>,
    thread: Option<JoinHandle<()>>,
}

impl<T> Job<T> {
    /// A job whose result will arrive on `rx` (for work started by others, such as a
    /// screenshot callback).
    pub fn from_receiver(rx: Receiver<T>) -> Self {
        Self { rx, thread: None }
    }

    /// `None` while the job runs; then its result, or, if it ended without one (it panicked),
    /// an error that says `what` stopped.
    pub fn poll(&self, what: &str) -> Option<Result<T, String>> {
        match self.rx.try_recv() {
            Ok(done) => Some(Ok(done)),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => Some(Err(stopped(what))),
        }
    }

    /// As [`Job::poll`], but waits up to `timeout` for the result (for tests and scripted use;
    /// the UI never waits). `None` when the time ran out.
    pub fn wait(&self, timeout: Duration, what: &str) -> Option<Result<T, String>> {
        match self.rx.recv_timeout(timeout) {
            Ok(done) => Some(Ok(done)),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => Some(Err(stopped(what))),
        }
    }

    /// Waits for the thread to end (after asking the work to stop by its own means).
    pub fn join(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn stopped(what: &str) -> String {
    format!("{what} stopped unexpectedly")
}

/// What a [`Stream`]'s thread sent: a message, or its result.
enum Sent<M, T> {
    Message(M),
    Done(T),
}

/// Work running off the UI thread that sends messages as it goes, then one result.
pub struct Stream<M, T> {
    rx: Receiver<Sent<M, T>>,
}

impl<M, T> std::fmt::Debug for Stream<M, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Stream")
    }
}

impl<M, T> Stream<M, T> {
    /// The messages sent since the last poll, and once the work ended its result (or, if it
    /// ended without one, an error that says `what` stopped).
    pub fn poll(&self, what: &str) -> (Vec<M>, Option<Result<T, String>>) {
        let mut messages = Vec::new();
        loop {
            match self.rx.try_recv() {
                Ok(Sent::Message(m)) => messages.push(m),
                Ok(Sent::Done(t)) => return (messages, Some(Ok(t))),
                Err(TryRecvError::Empty) => return (messages, None),
                Err(TryRecvError::Disconnected) => return (messages, Some(Err(stopped(what)))),
            }
        }
    }
}

/// Where a [`Stream`]'s work sends its messages.
pub struct Sink<M> {
    send: Box<dyn Fn(M) + Send>,
}

impl<M> std::fmt::Debug for Sink<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sink")
    }
}

impl<M> Sink<M> {
    /// Sends `message` to the UI (and asks for a repaint). A UI that went away is not an error.
    pub fn send(&self, message: M) {
        (self.send)(message);
    }
}

/// Runs `work` on a thread called `name`, asking `ctx` for a repaint when it ends however it
/// ends.
fn start(
    name: &str,
    ctx: Option<egui::Context>,
    work: impl FnOnce() + Send + 'static,
) -> Result<JoinHandle<()>, String> {
    struct RepaintOnDrop(Option<egui::Context>);
    impl Drop for RepaintOnDrop {
        fn drop(&mut self) {
            if let Some(ctx) = &self.0 {
                ctx.request_repaint();
            }
        }
    }
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let _repaint = RepaintOnDrop(ctx);
            work();
        })
        .map_err(|e| format!("cannot start a worker thread: {e}"))
}

/// Runs `job` on a thread called `name`; poll the returned [`Job`] for its result.
pub fn spawn<T: Send + 'static>(
    name: &str,
    ctx: Option<egui::Context>,
    job: impl FnOnce() -> T + Send + 'static,
) -> Result<Job<T>, String> {
    let (tx, rx) = channel();
    let thread = start(name, ctx, move || {
        // The receiver is gone when the UI stopped waiting: nothing to do.
        let _ = tx.send(job());
    })?;
    Ok(Job {
        rx,
        thread: Some(thread),
    })
}

/// How soon a stream's message asks for a frame: see [`spawn_stream`].
pub const STREAM_REPAINT: Duration = Duration::from_millis(1);

/// Runs `work` on a thread called `name`, handing it a [`Sink`] for its messages; poll the
/// returned [`Stream`] for them and for its result.
pub fn spawn_stream<M: Send + 'static, T: Send + 'static>(
    name: &str,
    ctx: Option<egui::Context>,
    work: impl FnOnce(&Sink<M>) -> T + Send + 'static,
) -> Result<Stream<M, T>, String> {
    let (tx, rx): (Sender<Sent<M, T>>, _) = channel();
    let sink_tx = tx.clone();
    let sink_ctx = ctx.clone();
    let sink = Sink {
        send: Box::new(move |m| {
            let _ = sink_tx.send(Sent::Message(m));
            if let Some(ctx) = &sink_ctx {
                // Not `request_repaint()`: egui answers each immediate request with two
                // frames ("to give some things time to settle"), which doubled every stream's
                // frames (an attached job's 4 batches a second drew 8 frames, ~120% of a core
                // under llvmpipe). A delayed request is one frame, and a millisecond is nothing.
                ctx.request_repaint_after(STREAM_REPAINT);
            }
        }),
    };
    start(name, ctx, move || {
        let done = work(&sink);
        let _ = tx.send(Sent::Done(done));
    })?;
    Ok(Stream { rx })
}

/// Frees `value` on another thread: dropping a large trace takes milliseconds the UI can use.
/// If no thread can start, it is dropped here.
pub fn drop_elsewhere<T: Send + 'static>(value: T) {
    let _ = start("gangway-viewer-drop", None, move || drop(value));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// Polls `stream` until it ends (or 10 s pass), gathering its messages.
    fn drain<M, T>(stream: &Stream<M, T>) -> (Vec<M>, Result<T, String>) {
        let started = Instant::now();
        let mut all = Vec::new();
        loop {
            let (messages, done) = stream.poll("the test's work");
            all.extend(messages);
            if let Some(done) = done {
                return (all, done);
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the stream never ended"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn a_stream_brings_every_message_in_order_then_its_result() {
        let stream = spawn_stream("test-stream", None, |sink| {
            for i in 0..100 {
                sink.send(i);
            }
            "done"
        })
        .unwrap();
        let (messages, done) = drain(&stream);
        assert_eq!(messages, (0..100).collect::<Vec<_>>());
        assert_eq!(done, Ok("done"));
    }

    #[test]
    fn a_panicking_stream_ends_with_an_error_after_what_it_sent() {
        let stream = spawn_stream("test-panic", None, |sink: &Sink<u32>| -> u32 {
            sink.send(1);
            panic!("on purpose");
        })
        .unwrap();
        let (messages, done) = drain(&stream);
        assert_eq!(messages, vec![1]);
        assert_eq!(
            done,
            Err("the test's work stopped unexpectedly".to_string())
        );
    }

    #[test]
    fn a_job_can_be_joined_and_polled_once_done() {
        let mut job = spawn("test-job", None, || 6 * 7).unwrap();
        job.join();
        assert_eq!(job.poll("the job"), Some(Ok(42)));
    }
}
