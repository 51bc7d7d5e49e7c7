//! GPU timestamps in batches. Every traced kernel writes its begin/end timestamps into the next
//! pair of a per-device ring of queries; the device's worker resolves the pairs of submitted
//! kernels 64 at a time (or when it goes idle). Resolving is what costs: lavapipe drains its
//! queue for each resolve, which cost a third of the dispatch rate of tiny kernels when every
//! kernel resolved its own pair.
//!
//! The ring holds [`PAIRS`] pairs; a pair is reused after that many kernels were recorded on the
//! device, long after its batch was resolved unless thousands of runs are recorded ahead.

use std::sync::atomic::{AtomicU32, Ordering};

/// Query pairs per device: wgpu allows 4096 queries per set.
pub(crate) const PAIRS: u32 = 2048;
/// Submitted pairs that trigger a resolve.
pub(crate) const BATCH: usize = 64;

#[derive(Debug)]
pub(crate) struct TimestampRing {
    pub queries: wgpu::QuerySet,
    next: AtomicU32,
}

impl TimestampRing {
    /// `None` when the device has no timestamp queries.
    pub fn new(device: &crate::Device) -> Option<Self> {
        Some(Self {
            queries: device.timestamp_queries("gangway timestamps", 2 * PAIRS)?,
            next: AtomicU32::new(0),
        })
    }

    /// The next pair: its begin query is `2 * pair`, its end `2 * pair + 1`.
    pub fn allocate(&self) -> u32 {
        self.next.fetch_add(1, Ordering::Relaxed) % PAIRS
    }
}

/// Splits sorted pair indices into contiguous `(first, count)` runs, one resolve each.
pub(crate) fn contiguous(pairs: &[u32]) -> Vec<(u32, u32)> {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for &p in pairs {
        match runs.last_mut() {
            Some((first, count)) if *first + *count == p => *count += 1,
            _ => runs.push((p, 1)),
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::contiguous;

    #[test]
    fn pairs_group_into_contiguous_resolves() {
        assert_eq!(contiguous(&[]), vec![]);
        assert_eq!(
            contiguous(&[3, 4, 5, 9, 10, 2047]),
            vec![(3, 3), (9, 2), (2047, 1)]
        );
    }
}
