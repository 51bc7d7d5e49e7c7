//! A caller driving its own one-device run on the device's worker, instead of waking the
//! worker's thread and being woken by it.

use super::super::run::RunState;
use super::super::state::Shared;
use super::{POLL, TAKE_OVER, Turn, Worker};
use std::sync::TryLockError;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The caller of a one-device run drives the device's worker itself, until the run is done,
/// when the worker's thread is idle (its `Core` is free): the commands are recorded,
/// submitted and waited for on the caller's thread, as a plain wgpu loop would, instead of
/// waking the worker's thread and being woken by it. That hand-off was most of the ~100 µs a
/// small run cost over wgpu's own submit-and-wait. A busy worker keeps the run: its doorbell is
/// rung, and the caller waits as usual. Tasks of other runs the caller met on the way, or GPU
/// callbacks still owed, go back to the worker's thread.
pub(crate) fn drive(shared: &Shared, index: usize, run: &RunState, timeout: Duration) {
    // A worker's thread often still ends the turn that finished the caller's previous run
    // when the caller submits its next one: a moment's retrying finds it idle.
    let tried = Instant::now();
    let mut core = loop {
        match shared.cores[index].try_lock() {
            Ok(core) => break core,
            Err(TryLockError::Poisoned(p)) => break p.into_inner(),
            Err(TryLockError::WouldBlock) if tried.elapsed() < TAKE_OVER => {
                std::thread::yield_now();
            }
            Err(TryLockError::WouldBlock) => {
                // Left to the worker, which may take its tasks now.
                run.caller_drives.store(false, Ordering::Release);
                shared.bells[index].ring();
                return;
            }
        }
    };
    // Held: no worker can take the run's tasks now, nor after, should the caller leave them.
    run.caller_drives.store(false, Ordering::Release);
    let done =
        || run.failed() || (run.results_ready() && run.tasks_left.load(Ordering::Acquire) == 0);
    while !done() && run.idle_for() <= timeout {
        match Worker::new(shared, index, &mut core).turn_caught() {
            Turn::Again => {}
            Turn::Poll => {
                if let Err(e) = shared.devices[index].poll(POLL) {
                    core.lose(e);
                }
            }
            Turn::Exit | Turn::Sleep => break,
        }
    }
    // What is left (another run's tasks met on the way, this one's after a timeout, GPU
    // callbacks owed) is the worker thread's.
    let queued = {
        let mut state = shared.lock();
        if done()
            && let Some(c) = state.clients.get_mut(run.client)
        {
            c.driven += 1;
        }
        !state.queues[index].is_empty()
    };
    let left_over = queued
        || !core.active.is_empty()
        || !core.unsubmitted.is_empty()
        || !core.stamps.is_empty()
        || shared.inboxes[index].outstanding.load(Ordering::Acquire) > 0;
    drop(core);
    if left_over {
        shared.bells[index].ring();
    }
}
