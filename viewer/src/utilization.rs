//! Each device's utilization over a sliding window, sampled into a short history: the Live tab's
//! measure, and an attached job's ([`Utilization`]): busy time (the union of the device's work
//! events) over the [`WINDOW_NS`] before now, about 2 minutes of samples kept.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use gangway::trace::{BusyTime, Event};

/// Length of the utilization window.
pub const WINDOW_NS: u64 = 1_000_000_000;
/// Samples kept per device (about 2 minutes at 4 per second).
const MAX_SAMPLES: usize = 480;

/// The device work of the last window, and each device's samples.
#[derive(Debug, Default)]
pub struct Utilization {
    /// Device work of the last window.
    recent: VecDeque<Event>,
    /// Per device, `(seconds on the sampling clock, utilization)`.
    pub series: BTreeMap<usize, VecDeque<[f64; 2]>>,
}

impl Utilization {
    /// Takes `e` in, when it is device work.
    pub fn push(&mut self, e: &Event) {
        if e.is_device_work() {
            self.recent.push_back(e.clone());
        }
    }

    /// One sample a device at `now` (ns on the events' clock): work ended before the window is
    /// forgotten first.
    pub fn sample(&mut self, now: u64, devices: impl IntoIterator<Item = usize>) {
        let from = now.saturating_sub(WINDOW_NS);
        while self.recent.front().is_some_and(|e| e.end_ns < from) {
            self.recent.pop_front();
        }
        let recent = self.recent.make_contiguous();
        for d in devices.into_iter().collect::<BTreeSet<_>>() {
            let u = BusyTime::of(recent, d).utilization(from..now);
            let s = self.series.entry(d).or_default();
            s.push_back([now as f64 / 1e9, u]);
            if s.len() > MAX_SAMPLES {
                s.pop_front();
            }
        }
    }

    /// Latest utilization of `device`, in `[0, 1]`.
    pub fn current(&self, device: usize) -> Option<f64> {
        self.series
            .get(&device)
            .and_then(|s| s.back())
            .map(|p| p[1])
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.recent.clear();
        self.series.clear();
    }
}
