//! Device utilization: busy time / window length.
//!
//! A device is busy while any of its [`Kernel`](super::EventKind::Kernel) or
//! [`Transfer`](super::EventKind::Transfer) events is running, on any lane. Busy time is the length of
//! the *union* of those intervals, so overlapping kernels and copies are not counted twice and
//! utilization never exceeds 1. Host encoding and waits are host work and never count.
//!
//! [`exposed_wait_ns`] measures the other side: how long a device sat idle while its host waited
//! for other devices (a collective's data), the communication that computation did not hide.

use std::ops::Range;

use super::event::Event;

/// Earliest start to latest end over all events; `None` for no events.
pub fn span(events: &[Event]) -> Option<Range<u64>> {
    let start = events.iter().map(|e| e.start_ns).min()?;
    let end = events.iter().map(Event::clamped_end_ns).max()?;
    Some(start..end)
}

/// Fraction of `window` during which `device` was busy, in `[0, 1]`; 0 for an empty window.
pub fn utilization(events: &[Event], device: usize, window: Range<u64>) -> f64 {
    BusyTime::of(events, device).utilization(window)
}

/// Utilization of `device` in `bins` equal slices of `window`, as `(bin start ns, fraction)`.
/// See [`BusyTime::series`].
pub fn utilization_series(
    events: &[Event],
    device: usize,
    window: Range<u64>,
    bins: usize,
) -> Vec<(u64, f64)> {
    BusyTime::of(events, device).series(window, bins)
}

/// Nanoseconds of `window` during which at least `at_least` of the devices were busy: how much
/// their work overlapped (with 2: the time two or more devices worked at once).
pub fn overlap_ns(devices: &[BusyTime], window: Range<u64>, at_least: usize) -> u64 {
    let mut edges: Vec<(u64, i64)> = Vec::new();
    for busy in devices {
        for &(s, e) in busy.intervals() {
            let (s, e) = (s.max(window.start), e.min(window.end));
            if e > s {
                edges.push((s, 1));
                edges.push((e, -1));
            }
        }
    }
    // Ends before starts at the same instant: touching intervals do not overlap.
    edges.sort_unstable();
    let (mut busy, mut last, mut total) = (0i64, window.start, 0u64);
    for (t, delta) in edges {
        if busy >= at_least as i64 {
            total += t - last;
        }
        busy += delta;
        last = t;
    }
    total
}

/// Nanoseconds `device` sat idle waiting: inside its host's [`Wait`](super::EventKind::Wait)
/// events whose name `waits_on` accepts, the time no kernel of the device ran. A wait while the
/// device still computes (work submitted before, or run ahead of what is awaited) hides the
/// communication and is not counted; this is the exposed part.
pub fn exposed_wait_ns(events: &[Event], device: usize, waits_on: impl Fn(&str) -> bool) -> u64 {
    let kernels: Vec<Event> = events
        .iter()
        .filter(|e| e.device == device && e.kind == super::EventKind::Kernel)
        .cloned()
        .collect();
    let computing = BusyTime::of(&kernels, device);
    events
        .iter()
        .filter(|e| e.device == device && e.kind == super::EventKind::Wait && waits_on(&e.name))
        .map(|w| {
            let window = w.start_ns..w.clamped_end_ns();
            (window.end - window.start).saturating_sub(computing.busy_ns(window))
        })
        .sum()
}

/// One device's busy time as sorted, disjoint, non-empty intervals.
///
/// Building it sorts once (O(n log n)); every query after that is a binary search plus a walk,
/// so a viewer can keep one per device and ask for a series every frame.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BusyTime {
    intervals: Vec<(u64, u64)>,
}

impl BusyTime {
    /// The union of `device`'s kernel and transfer intervals.
    pub fn of(events: &[Event], device: usize) -> Self {
        let mut raw: Vec<(u64, u64)> = events
            .iter()
            .filter(|e| e.device == device && e.is_device_work() && e.end_ns > e.start_ns)
            .map(|e| (e.start_ns, e.end_ns))
            .collect();
        raw.sort_unstable();
        let mut intervals: Vec<(u64, u64)> = Vec::with_capacity(raw.len());
        for (start, end) in raw {
            match intervals.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => intervals.push((start, end)),
            }
        }
        Self { intervals }
    }

    /// The merged busy intervals, `(start_ns, end_ns)`, sorted and disjoint.
    pub fn intervals(&self) -> &[(u64, u64)] {
        &self.intervals
    }

    /// Busy nanoseconds inside `window`.
    pub fn busy_ns(&self, window: Range<u64>) -> u64 {
        let first = self
            .intervals
            .partition_point(|&(_, end)| end <= window.start);
        self.intervals[first..]
            .iter()
            .take_while(|&&(start, _)| start < window.end)
            .map(|&(start, end)| overlap(start, end, &window))
            .sum()
    }

    /// Fraction of `window` that is busy, in `[0, 1]`; 0 for an empty window.
    pub fn utilization(&self, window: Range<u64>) -> f64 {
        let len = window.end.saturating_sub(window.start);
        if len == 0 {
            return 0.0;
        }
        self.busy_ns(window) as f64 / len as f64
    }

    /// Utilization in consecutive slices of `window`, as `(slice start ns, fraction)`.
    ///
    /// The slices cover the window exactly, with lengths differing by at most 1 ns. There are
    /// `bins` of them, but never more than the window has nanoseconds, so none is empty; an
    /// empty window or `bins == 0` gives no points. O(log n + intervals in window + bins).
    pub fn series(&self, window: Range<u64>, bins: usize) -> Vec<(u64, f64)> {
        let len = window.end.saturating_sub(window.start);
        let bins = (bins as u64).min(len);
        if bins == 0 {
            return Vec::new();
        }
        let edge =
            |i: u64| window.start + (u128::from(len) * u128::from(i) / u128::from(bins)) as u64;
        let mut next = self
            .intervals
            .partition_point(|&(_, end)| end <= window.start);
        let mut out = Vec::with_capacity(bins as usize);
        for i in 0..bins {
            let bin = edge(i)..edge(i + 1);
            let mut busy = 0;
            // Intervals ending inside this bin are done with; one reaching past it stays for
            // the next bin, and nothing after it can start inside this one.
            while let Some(&(start, end)) = self.intervals.get(next) {
                if start >= bin.end {
                    break;
                }
                busy += overlap(start, end, &bin);
                if end > bin.end {
                    break;
                }
                next += 1;
            }
            out.push((bin.start, busy as f64 / (bin.end - bin.start) as f64));
        }
        out
    }
}

/// Length of `start..end` inside `window`.
fn overlap(start: u64, end: u64, window: &Range<u64>) -> u64 {
    end.min(window.end).saturating_sub(start.max(window.start))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::trace::event::{EventKind, Lane};
    use crate::trace::meta::EventMeta;

    fn ev(device: usize, lane: Lane, kind: EventKind, start: u64, end: u64) -> Event {
        EventMeta::new(device, lane, kind).event(String::new(), start, end)
    }

    fn kernel(start: u64, end: u64) -> Event {
        ev(0, Lane::Compute, EventKind::Kernel, start, end)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn exposed_waits_are_the_idle_part_of_the_awaited_waits() {
        let mut wait = ev(0, Lane::Host, EventKind::Wait, 10, 50);
        wait.name = "wait: all_to_all data from #1".into();
        let mut other = ev(0, Lane::Host, EventKind::Wait, 60, 90);
        other.name = "wait: data from #1".into();
        let events = [
            ev(0, Lane::Compute, EventKind::Kernel, 0, 20),
            ev(0, Lane::Compute, EventKind::Kernel, 30, 35),
            // Another device's kernel and this device's transfer do not hide the wait.
            ev(1, Lane::Compute, EventKind::Kernel, 20, 50),
            ev(0, Lane::Transfer, EventKind::Transfer, 35, 50),
            wait,
            other,
        ];
        let collective = |n: &str| n.contains("all_to_all");
        // 10..50 waited; kernels cover 10..20 and 30..35: 25 ns idle.
        assert_eq!(exposed_wait_ns(&events, 0, collective), 25);
        assert_eq!(exposed_wait_ns(&events, 0, |_| true), 25 + 30);
        assert_eq!(exposed_wait_ns(&events, 1, collective), 0);
    }

    #[test]
    fn overlapping_intervals_count_once() {
        let events = [
            kernel(0, 40),
            kernel(20, 60),
            ev(0, Lane::Transfer, EventKind::Transfer, 50, 70),
            kernel(80, 90),
        ];
        // Union is [0,70) + [80,90) = 80 ns of 100.
        assert!(close(utilization(&events, 0, 0..100), 0.8));
        assert!(close(utilization(&events, 0, 60..80), 0.5));
    }

    #[test]
    fn host_work_other_devices_and_outside_window_do_not_count() {
        let events = [
            ev(0, Lane::Host, EventKind::HostEncode, 0, 100),
            ev(0, Lane::Host, EventKind::Wait, 0, 100),
            ev(1, Lane::Compute, EventKind::Kernel, 0, 100),
            kernel(200, 300),
            kernel(90, 110),
        ];
        assert!(close(utilization(&events, 0, 0..100), 0.1));
        assert!(close(utilization(&events, 1, 0..100), 1.0));
        assert!(close(utilization(&events, 0, 120..200), 0.0));
    }

    #[test]
    fn empty_inputs_give_zero_or_nothing() {
        assert_eq!(utilization(&[], 0, 0..100), 0.0);
        assert_eq!(utilization(&[kernel(0, 10)], 0, 5..5), 0.0);
        assert_eq!(
            utilization(&[kernel(0, 10)], 0, Range { start: 9, end: 3 }),
            0.0
        );
        assert!(utilization_series(&[kernel(0, 10)], 0, 0..10, 0).is_empty());
        assert!(utilization_series(&[kernel(0, 10)], 0, 10..10, 4).is_empty());
        assert_eq!(span(&[]), None);
        assert_eq!(utilization(&[kernel(10, 5)], 0, 0..20), 0.0);
    }

    #[test]
    fn span_covers_all_events() {
        let events = [kernel(30, 40), ev(2, Lane::Host, EventKind::Wait, 10, 20)];
        assert_eq!(span(&events), Some(10..40));
    }

    #[test]
    fn series_bins_cover_window_exactly() {
        let events = [kernel(0, 15), kernel(35, 40)];
        let series = utilization_series(&events, 0, 0..40, 4);
        let expect = [(0, 1.0), (10, 0.5), (20, 0.0), (30, 0.5)];
        assert_eq!(series.len(), 4);
        for ((t, u), (et, eu)) in series.iter().zip(expect) {
            assert_eq!(*t, et);
            assert!(close(*u, eu), "bin {t}: {u} != {eu}");
        }
        // Never more bins than nanoseconds.
        assert_eq!(utilization_series(&events, 0, 0..3, 10).len(), 3);
    }

    #[test]
    fn series_matches_per_bin_utilization() {
        // Pseudo-random overlapping intervals against the direct per-bin computation.
        let mut x: u64 = 12345;
        let mut rand = |m: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
        let events: Vec<Event> = (0..500)
            .map(|_| {
                let start = rand(100_000);
                kernel(start, start + rand(700))
            })
            .collect();
        let busy = BusyTime::of(&events, 0);
        let window = 1_000..97_003;
        let series = busy.series(window.clone(), 37);
        assert_eq!(series.len(), 37);
        for (i, &(start, u)) in series.iter().enumerate() {
            let end = series.get(i + 1).map_or(window.end, |p| p.0);
            assert!(close(u, utilization(&events, 0, start..end)), "bin {i}");
        }
        let mean: f64 = busy.busy_ns(window.clone()) as f64 / (window.end - window.start) as f64;
        assert!(close(mean, busy.utilization(window)));
    }

    #[test]
    fn overlap_counts_time_when_enough_devices_are_busy() {
        let busy = |iv: &[(u64, u64)]| BusyTime {
            intervals: iv.to_vec(),
        };
        let devices = [
            busy(&[(0, 10), (20, 30)]),
            busy(&[(5, 25)]),
            busy(&[(10, 12)]),
        ];
        // 2+ busy: 5..10, 10..12, 20..25 → 5 + 2 + 5.
        assert_eq!(overlap_ns(&devices, 0..100, 2), 12);
        assert_eq!(overlap_ns(&devices, 0..100, 3), 0);
        assert_eq!(overlap_ns(&devices, 0..100, 1), 30);
        // Clipped to the window.
        assert_eq!(overlap_ns(&devices, 6..22, 2), 4 + 2 + 2);
        // Touching intervals do not overlap.
        assert_eq!(overlap_ns(&[busy(&[(0, 5)]), busy(&[(5, 9)])], 0..10, 2), 0);
    }
}
