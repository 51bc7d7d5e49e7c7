//! The one way the viewer runs work off the UI thread: a named thread whose result comes back
//! over a channel, with a repaint requested when it is done (even if the job panicked, so the
//! UI wakes up and sees the channel closed).

use std::sync::mpsc::{Receiver, channel};

/// Runs `job` on a thread called `name`; its result arrives on the returned receiver. The UI
/// polls it with `try_recv`; a disconnected channel means the job panicked.
pub fn spawn<T: Send + 'static>(
    name: &str,
    ctx: Option<egui::Context>,
    job: impl FnOnce() -> T + Send + 'static,
) -> Result<Receiver<T>, String> {
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
    Ok(rx)
}
