//! Per-device memory accounting, Pathways' object store in miniature: every tensor and every
//! compiled program reserves its bytes here first, so going over the budget is a clear error (or a
//! wait for memory to be freed), never an out-of-memory crash inside the driver.
//!
//! WebGPU does not report how much memory an adapter has, so the budget is a setting
//! ([`DiscoveryOptions::memory_budget`](super::DiscoveryOptions)), not a measurement.

use crate::{Error, Result};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// What to do when a reservation does not fit right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenFull {
    /// Fail at once with [`Error::MemoryBudget`].
    Fail,
    /// Wait up to this long for other reservations to be released, then fail.
    Wait(Duration),
}

/// Bytes in use and the high-water mark of one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct MemoryStats {
    pub budget: u64,
    pub in_use: u64,
    pub peak: u64,
}

#[derive(Debug)]
pub(crate) struct MemoryPool {
    device: String,
    budget: u64,
    used: Mutex<(u64, u64)>,
    freed: Condvar,
}

/// Bytes held in a device's pool; released when dropped.
#[derive(Debug)]
pub struct Reservation {
    pool: Arc<MemoryPool>,
    bytes: u64,
}

impl Reservation {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut used = self.pool.lock();
        used.0 = used.0.saturating_sub(self.bytes);
        drop(used);
        self.pool.freed.notify_all();
    }
}

impl MemoryPool {
    pub(crate) fn new(device: String, budget: u64) -> Arc<Self> {
        Arc::new(Self {
            device,
            budget,
            used: Mutex::new((0, 0)),
            freed: Condvar::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, u64)> {
        self.used.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn stats(&self) -> MemoryStats {
        let (in_use, peak) = *self.lock();
        MemoryStats {
            budget: self.budget,
            in_use,
            peak,
        }
    }

    pub(crate) fn reserve(
        self: &Arc<Self>,
        bytes: u64,
        when_full: WhenFull,
    ) -> Result<Reservation> {
        let error = |in_use: u64, hint: &'static str| Error::MemoryBudget {
            device: self.device.clone(),
            requested: bytes,
            in_use,
            budget: self.budget,
            hint,
        };
        if bytes > self.budget {
            return Err(error(0, "; it can never fit: raise GANGWAY_MEMORY_BUDGET"));
        }
        let deadline = match when_full {
            WhenFull::Fail => None,
            WhenFull::Wait(d) => Some(Instant::now() + d),
        };
        let mut used = self.lock();
        while used.0 + bytes > self.budget {
            let Some(deadline) = deadline else {
                return Err(error(used.0, ""));
            };
            let now = Instant::now();
            if now >= deadline {
                return Err(error(used.0, "; waited for memory to be freed, none was"));
            }
            used = self
                .freed
                .wait_timeout(used, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        used.0 += bytes;
        used.1 = used.1.max(used.0);
        Ok(Reservation {
            pool: self.clone(),
            bytes,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn over_budget_fails_or_waits_for_a_release() {
        let pool = MemoryPool::new("d".into(), 100);
        let a = pool.reserve(60, WhenFull::Fail).unwrap();
        assert!(matches!(
            pool.reserve(50, WhenFull::Fail),
            Err(Error::MemoryBudget { in_use: 60, .. })
        ));
        assert!(
            pool.reserve(101, WhenFull::Wait(Duration::from_secs(9)))
                .is_err()
        );
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(a);
        });
        let b = pool
            .reserve(50, WhenFull::Wait(Duration::from_secs(10)))
            .unwrap();
        releaser.join().unwrap();
        assert_eq!(pool.stats().in_use, 50);
        assert_eq!(pool.stats().peak, 60);
        drop(b);
        assert_eq!(pool.stats().in_use, 0);
        assert!(
            pool.reserve(80, WhenFull::Fail).is_ok(),
            "released bytes are reusable"
        );
    }

    #[test]
    fn a_wait_times_out_with_a_clear_error() {
        let pool = MemoryPool::new("d".into(), 10);
        let _held = pool.reserve(10, WhenFull::Fail).unwrap();
        let err = pool
            .reserve(5, WhenFull::Wait(Duration::from_millis(30)))
            .unwrap_err();
        assert!(err.to_string().contains("waited"), "{err}");
    }
}
