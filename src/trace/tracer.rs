//! The event sink handed to everything that does traced work.
//!
//! Off by default: an off tracer is a `None`, so every call is one branch with no clock read,
//! lock or allocation, which keeps tracing-off overhead out of dispatch benchmarks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Instant;

use super::event::Event;
use super::meta::EventMeta;

/// The one instant every trace time of this process counts from: the first time anything asked.
/// Every tracer and every run's own trace use it, so events of different tracers, runtimes and
/// runs line up without shifting.
pub fn process_epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// `t` as nanoseconds since [`process_epoch`], saturating to 0 before it.
pub fn ns_since_epoch(t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(process_epoch()).as_nanos()).unwrap_or(u64::MAX)
}

/// A trace time moved by `by_ns` (onto another process's clock: a rank's onto rank 0's),
/// clamped to the trace's range: the one shift every merge of several clocks uses.
pub fn shifted_ns(t_ns: u64, by_ns: i64) -> u64 {
    (i128::from(t_ns) + i128::from(by_ns)).clamp(0, i128::from(u64::MAX)) as u64
}

/// Records events and streams them to subscribers. Clones share one recording.
#[derive(Clone, Default)]
pub struct Tracer {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    epoch: Instant,
    /// Whether emitted events are kept for [`Tracer::events`] (a streaming tracer only hands
    /// them to its subscribers, so a long job's memory does not grow with its events).
    keeps: bool,
    next_flow_id: AtomicU64,
    state: Mutex<State>,
    /// Where every event also goes ([`Tracer::forwarding_to`]).
    forward: Tracer,
}

#[derive(Default)]
struct State {
    events: Vec<Event>,
    subscribers: Vec<Sender<Event>>,
}

/// The start of a host-timed span, from [`Tracer::span`]; 0 when the tracer is off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[must_use = "pass the span start to Tracer::finish"]
pub struct SpanStart(pub u64);

impl Tracer {
    /// A tracer that records every event and streams it to subscribers; its times count from
    /// the [`process_epoch`].
    pub fn new() -> Self {
        Self::forwarding_to(&Self::off())
    }

    /// A tracer of its own (recording, with its own subscribers) that also hands every event to
    /// `to`: a run keeps its events this way while they still reach the process's stream.
    pub fn forwarding_to(to: &Tracer) -> Self {
        Self::with(to, true)
    }

    /// A tracer that hands every event to its subscribers (and `to`) and keeps none: what a job
    /// served live without `--trace` uses, so its memory stays flat however long it runs.
    pub fn streaming() -> Self {
        Self::with(&Self::off(), false)
    }

    fn with(to: &Tracer, keeps: bool) -> Self {
        Self {
            inner: Some(Arc::new(Inner {
                keeps,
                epoch: process_epoch(),
                next_flow_id: AtomicU64::new(0),
                state: Mutex::new(State::default()),
                forward: to.clone(),
            })),
        }
    }

    /// A tracer that ignores everything (the default).
    pub const fn off() -> Self {
        Self { inner: None }
    }

    pub fn is_on(&self) -> bool {
        self.inner.is_some()
    }

    /// The instant event times count from; `None` when off.
    pub fn epoch(&self) -> Option<Instant> {
        self.inner.as_ref().map(|inner| inner.epoch)
    }

    /// Nanoseconds since the epoch; 0 when off (and the clock is not read).
    pub fn now_ns(&self) -> u64 {
        match &self.inner {
            Some(_) => self.ns_at(Instant::now()),
            None => 0,
        }
    }

    /// `t` as nanoseconds since the epoch, saturating to 0 before it; 0 when off.
    pub fn ns_at(&self, t: Instant) -> u64 {
        self.inner.as_ref().map_or(0, |inner| {
            let ns = t.saturating_duration_since(inner.epoch).as_nanos();
            u64::try_from(ns).unwrap_or(u64::MAX)
        })
    }

    /// Records `e` and sends a copy to every live subscriber; drops subscribers that hung up.
    pub fn emit(&self, e: Event) {
        if let Some(inner) = &self.inner {
            inner.forward.emit_with(|| e.clone());
            let mut state = inner.lock();
            state.subscribers.retain(|tx| tx.send(e.clone()).is_ok());
            if inner.keeps {
                state.events.push(e);
            }
        }
    }

    /// Like [`emit`](Self::emit), but builds the event only when on.
    pub fn emit_with(&self, make: impl FnOnce() -> Event) {
        if self.is_on() {
            self.emit(make());
        }
    }

    /// Records `meta` over `start_ns..end_ns`; `name` runs only when on.
    pub fn record(
        &self,
        meta: EventMeta,
        name: impl FnOnce() -> String,
        start_ns: u64,
        end_ns: u64,
    ) {
        if self.is_on() {
            self.emit(meta.event(name(), start_ns, end_ns));
        }
    }

    /// Starts a host-timed span; pair with [`finish`](Self::finish).
    pub fn span(&self) -> SpanStart {
        SpanStart(self.now_ns())
    }

    /// Records `meta` from `start` to now; `name` runs only when on.
    pub fn finish(&self, start: SpanStart, meta: EventMeta, name: impl FnOnce() -> String) {
        if self.is_on() {
            let end = self.now_ns();
            self.emit(meta.event(name(), start.0, end));
        }
    }

    /// A receiver of every event emitted from now on (use [`events`](Self::events) for the
    /// past). When off, the receiver is already disconnected.
    pub fn subscribe(&self) -> Receiver<Event> {
        let (tx, rx) = channel();
        if let Some(inner) = &self.inner {
            inner.lock().subscribers.push(tx);
        }
        rx
    }

    /// A copy of everything recorded so far, in emission order (nothing for a
    /// [`streaming`](Self::streaming) tracer).
    pub fn events(&self) -> Vec<Event> {
        self.inner
            .as_ref()
            .map_or_else(Vec::new, |inner| inner.lock().events.clone())
    }

    /// Everything recorded so far, leaving the recording empty (subscribers stay).
    pub fn take_events(&self) -> Vec<Event> {
        self.inner
            .as_ref()
            .map_or_else(Vec::new, |inner| std::mem::take(&mut inner.lock().events))
    }

    pub fn event_count(&self) -> usize {
        self.inner
            .as_ref()
            .map_or(0, |inner| inner.lock().events.len())
    }

    /// A flow id unique within this tracer (and its clones), for pairing transfer ends.
    /// When off, always 0: nothing is recorded, so nothing can collide.
    pub fn next_flow_id(&self) -> u64 {
        self.inner.as_ref().map_or(0, |inner| {
            inner.next_flow_id.fetch_add(1, Ordering::Relaxed)
        })
    }
}

impl Inner {
    /// The state, even if a thread panicked while holding it: events are plain data, and
    /// losing the trace on top of the panic would only hide what happened.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl std::fmt::Debug for Tracer {
    /// Terse: a tracer may hold a hundred thousand events.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracer")
            .field("on", &self.is_on())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::trace::event::{EventKind, Lane};
    use std::collections::HashSet;

    fn kernel(tracer: &Tracer, name: &str, start: u64) {
        tracer.record(EventMeta::kernel(0), || name.to_string(), start, start + 5);
    }

    #[test]
    fn a_forwarding_tracer_keeps_its_events_and_hands_them_on() {
        let process = Tracer::new();
        let run = Tracer::forwarding_to(&process);
        let quiet = Tracer::forwarding_to(&Tracer::off());
        kernel(&run, "a", 0);
        kernel(&quiet, "b", 0);
        assert_eq!(run.take_events().len(), 1);
        assert_eq!(quiet.event_count(), 1);
        let names: Vec<_> = process.events().into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["a"]);
    }

    #[test]
    fn records_in_emission_order() {
        let t = Tracer::new();
        for (i, name) in ["a", "b", "c"].iter().enumerate() {
            kernel(&t, name, i as u64 * 10);
        }
        let names: Vec<_> = t.events().into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(t.event_count(), 3);
        assert_eq!(t.take_events().len(), 3);
        assert_eq!(t.event_count(), 0);
    }

    #[test]
    fn every_subscriber_gets_every_later_event() {
        let t = Tracer::new();
        kernel(&t, "before", 0);
        let (a, b) = (t.subscribe(), t.clone().subscribe());
        kernel(&t, "x", 10);
        kernel(&t, "y", 20);
        for rx in [a, b] {
            let got: Vec<_> = rx.try_iter().map(|e| e.name).collect();
            assert_eq!(got, ["x", "y"]);
        }
    }

    #[test]
    fn dropped_subscriber_does_not_break_emit() {
        let t = Tracer::new();
        let kept = t.subscribe();
        drop(t.subscribe());
        kernel(&t, "x", 0);
        kernel(&t, "y", 10);
        assert_eq!(kept.try_iter().count(), 2);
        assert_eq!(t.event_count(), 2);
    }

    #[test]
    fn off_records_nothing_and_never_builds_names() {
        let t = Tracer::default();
        assert!(!t.is_on());
        assert_eq!(t.epoch(), None);
        let rx = t.subscribe();
        let start = t.span();
        t.finish(start, EventMeta::host_encode(0), || {
            unreachable!("name built when off")
        });
        t.record(EventMeta::kernel(0), || unreachable!(), 0, 1);
        t.emit_with(|| unreachable!());
        t.emit(EventMeta::kernel(0).event("e".into(), 0, 1));
        assert_eq!(start, SpanStart(0));
        assert_eq!((t.now_ns(), t.event_count(), t.next_flow_id()), (0, 0, 0));
        assert!(t.events().is_empty() && t.take_events().is_empty());
        assert!(
            rx.recv().is_err(),
            "off tracer's receiver must be disconnected"
        );
    }

    #[test]
    fn span_is_host_timed_and_ordered() {
        let t = Tracer::new();
        let start = t.span();
        t.finish(start, EventMeta::wait(1), || "wait".into());
        let e = &t.events()[0];
        assert_eq!((e.device, e.lane, e.kind), (1, Lane::Host, EventKind::Wait));
        assert!(e.start_ns <= e.end_ns && e.end_ns <= t.now_ns());
        assert_eq!(t.ns_at(t.epoch().unwrap()), 0);
    }

    #[test]
    fn flow_ids_unique_across_threads() {
        let t = Tracer::new();
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let t = t.clone();
                std::thread::spawn(move || (0..1000).map(|_| t.next_flow_id()).collect::<Vec<_>>())
            })
            .collect();
        let ids: HashSet<u64> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        assert_eq!(ids.len(), 4000);
    }

    #[test]
    fn tracer_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Tracer>();
    }
}
