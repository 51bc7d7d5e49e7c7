//! The one way the viewer runs work off the UI thread: a named thread whose result comes back
//! as a [`Job`] the UI polls each frame, with a repaint requested when it is done (even if the
//! job panicked, so the UI wakes up and sees it gone). Streams of many messages (the live
//! timeline's events, training progress) keep their own channels.

use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError, channel};
use std::time::Duration;

/// Work running off the UI thread, with one result.
#[derive(Debug)]
pub struct Job<T> {
    rx: Receiver<T>,
}

impl<T> Job<T> {
    /// A job whose result will arrive on `rx` (for work started by others, such as a
    /// screenshot callback).
    pub fn from_receiver(rx: Receiver<T>) -> Self {
        Self { rx }
    }

    /// `None` while the job runs; then its result, or, if it ended without one (it panicked),
    /// an error that says `what` stopped.
    pub fn poll(&self, what: &str) -> Option<Result<T, String>> {
        match self.rx.try_recv() {
            Ok(done) => Some(Ok(done)),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => Some(Err(format!("{what} stopped unexpectedly"))),
        }
    }

    /// As [`Job::poll`], but waits up to `timeout` for the result (for tests and scripted use;
    /// the UI never waits). `None` when the time ran out.
    pub fn wait(&self, timeout: Duration, what: &str) -> Option<Result<T, String>> {
        match self.rx.recv_timeout(timeout) {
            Ok(done) => Some(Ok(done)),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                Some(Err(format!("{what} stopped unexpectedly")))
            }
        }
    }
}

/// Runs `job` on a thread called `name`; poll the returned [`Job`] for its result.
pub fn spawn<T: Send + 'static>(
    name: &str,
    ctx: Option<egui::Context>,
    job: impl FnOnce() -> T + Send + 'static,
) -> Result<Job<T>, String> {
    struct RepaintOnDrop(Option<egui::Context>);
    impl Drop for RepaintOnDrop {
        fn drop(&mut self) {
            if let Some(ctx) = &self.0 {
                ctx.request_repaint();
            }
        }
    }
    let (tx, rx) = channel();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let _repaint = RepaintOnDrop(ctx);
            // The receiver is gone when the UI stopped waiting: nothing to do.
            let _ = tx.send(job());
        })
        .map_err(|e| format!("cannot start a worker thread: {e}"))?;
    Ok(Job { rx })
}
