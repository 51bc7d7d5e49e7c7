//! Which threads of the process are the runtime's own: every thread gangway starts (device
//! workers, transports) registers itself here, so that a measurement can tell them from the
//! driver's threads. Names cannot: a driver thread started from gangway's thread takes its name
//! (lavapipe's queue threads are called after the binary).

use std::sync::Mutex;

static RUNTIME_THREADS: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// The calling thread's kernel id, where the system says it (Linux's `/proc/thread-self`).
pub fn current_thread_id() -> Option<u64> {
    std::fs::read_link("/proc/thread-self")
        .ok()?
        .file_name()?
        .to_str()?
        .parse()
        .ok()
}

/// Records the calling thread as one of the runtime's.
pub(crate) fn register_current() {
    if let Some(tid) = current_thread_id() {
        RUNTIME_THREADS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(tid);
    }
}

/// The ids of the threads the runtime started (ended ones included).
pub fn runtime_thread_ids() -> Vec<u64> {
    RUNTIME_THREADS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}
