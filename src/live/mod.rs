//! Watching a job while it runs: a process serves its hello, trace events, metrics and end over
//! TCP ([`LiveServer`]), and watchers read them through one client ([`LiveClient`], with
//! [`Recording`] to keep what arrived and save it as a Chrome trace).
//!
//! The protocol is length-prefixed JSON records ([`protocol`]), specified for other languages
//! in the book's `reference/live-protocol.md`. The job never waits for a watcher: every client
//! has a bounded queue, and what it loses is counted and told to it in a `dropped` record.
//! Plain threads and `std::net`: the producer is synchronous, and a server costs two threads
//! per client, one accepting, and one per tracer it streams ([`LiveServer::attach_tracer`]).
//!
//! A job of several ranks has one address: rank 0 serves, and the other ranks forward their
//! events and metrics to it over the job's transport, on rank 0's clock ([`forward`]).

pub mod client;
mod connection;
pub mod forward;
pub mod protocol;
mod queue;
pub mod server;
mod shared;
#[cfg(test)]
mod tests;

pub use crate::error::LiveError;
pub use client::{LiveClient, Recording};
pub use forward::{ClockEstimate, Forwarder};
pub use protocol::{
    Attach, End, EndStatus, FrameDecoder, Hello, LiveDevice, MAX_FRAME, MeshAxis, Metric,
    PROTOCOL_VERSION, Record,
};
pub use server::{LiveServer, ServeOptions};

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{SystemTime, UNIX_EPOCH};

/// A fresh token: 32 hex digits (128 bits) from std's per-process random hash keys, the clock
/// and the process id. Not a cryptographic generator, but not guessable from outside the
/// machine either; it keeps strangers out of a stream, it does not encrypt it.
pub fn generate_token() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut token = String::with_capacity(32);
    for half in 0..2u8 {
        // Each `RandomState::new()` draws new keys (seeded from the OS once per thread, then
        // stepped), so two halves and two calls differ.
        let mut h = RandomState::new().build_hasher();
        h.write_u128(nanos);
        h.write_u32(std::process::id());
        h.write_u8(half);
        token.push_str(&format!("{:016x}", h.finish()));
    }
    token
}

/// Whether two tokens are equal, in time that does not depend on where they first differ, so
/// a remote guesser learns nothing from how fast a wrong token is refused.
pub(crate) fn tokens_match(expected: &str, given: &str) -> bool {
    let (a, b) = (expected.as_bytes(), given.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
