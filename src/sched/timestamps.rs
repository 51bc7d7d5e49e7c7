//! GPU timestamps in batches. Every traced kernel writes its begin/end timestamps into the next
//! pair of a per-device ring of queries; the device's worker resolves the pairs of submitted
//! kernels 64 at a time (or when it goes idle). Resolving is what costs: lavapipe drains its
//! queue for each resolve, which cost a third of the dispatch rate of tiny kernels when every
//! kernel resolved its own pair.
//!
//! The ring holds [`PAIRS`] pairs; a pair is reused after that many kernels were recorded on the
//! device, long after its batch was resolved unless thousands of runs are recorded ahead.
//!
//! A resolve goes through buffers the ring keeps, so traced runs create no GPU objects once the
//! first batches have run: one resolve buffer (each contiguous range of pairs at its own
//! 256-byte-aligned offset, as wgpu requires), and read-back buffers of a batch each, returned to
//! the ring once their batch has been read.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};

/// Query pairs per device: wgpu allows 4096 queries per set.
pub(crate) const PAIRS: u32 = 2048;
/// Submitted pairs that trigger a resolve.
pub(crate) const BATCH: usize = 64;

/// Bytes of one resolved pair.
const PAIR_BYTES: u64 = 16;

#[derive(Debug)]
pub(crate) struct TimestampRing {
    pub queries: wgpu::QuerySet,
    next: AtomicU32,
    /// Where a batch's pairs are resolved: range `k` of the batch at `k * ALIGN`.
    resolve: wgpu::Buffer,
    /// Read-back buffers of [`BATCH`] pairs, free for the next batch.
    free: Mutex<Vec<wgpu::Buffer>>,
}

/// wgpu's alignment of a query resolve's destination.
const ALIGN: u64 = wgpu::QUERY_RESOLVE_BUFFER_ALIGNMENT;

impl TimestampRing {
    /// `None` when the device has no timestamp queries.
    pub fn new(device: &crate::Device) -> Option<Self> {
        let queries = device.timestamp_queries("gangway timestamps", 2 * PAIRS)?;
        Some(Self {
            queries,
            next: AtomicU32::new(0),
            // A batch has at most BATCH ranges (one pair each at worst).
            resolve: device.query_resolve_buffer("gangway timestamps", BATCH as u64 * ALIGN),
            free: Mutex::default(),
        })
    }

    /// The next pair: its begin query is `2 * pair`, its end `2 * pair + 1`.
    pub fn allocate(&self) -> u32 {
        self.next.fetch_add(1, Ordering::Relaxed) % PAIRS
    }

    /// Records the resolve of `pairs` (sorted, at most [`BATCH`]) and their copy, in that order,
    /// into a read-back buffer of the ring's, which it returns: pair `i` of `pairs` at `16 * i`.
    pub fn resolve(
        &self,
        device: &crate::Device,
        encoder: &mut wgpu::CommandEncoder,
        pairs: &[u32],
    ) -> wgpu::Buffer {
        let readback = self
            .free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
            .unwrap_or_else(|| device.readback_buffer("timestamps", BATCH as u64 * PAIR_BYTES));
        let mut copied = 0;
        for (k, (first, count)) in contiguous(pairs).into_iter().enumerate() {
            let bytes = u64::from(count) * PAIR_BYTES;
            let at = k as u64 * ALIGN;
            encoder.resolve_query_set(
                &self.queries,
                2 * first..2 * (first + count),
                &self.resolve,
                at,
            );
            encoder.copy_buffer_to_buffer(&self.resolve, at, &readback, copied, bytes);
            copied += bytes;
        }
        readback
    }

    /// A read-back buffer from [`Self::resolve`], read and unmapped: free for the next batch.
    pub fn give_back(&self, readback: wgpu::Buffer) {
        self.free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(readback);
    }
}

/// Splits sorted pair indices into contiguous `(first, count)` runs, one resolve each.
fn contiguous(pairs: &[u32]) -> Vec<(u32, u32)> {
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
