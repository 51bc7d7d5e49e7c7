//! The runtime's clients: their shares, queues of runs waiting for admission and counts.
//!
//! A client's slot lives as long as a handle to it does, or its runs are unfinished, whichever
//! is longer; then it is freed for the next client. A long-lived runtime that makes a client per
//! request (the viewer's live workload made one every 8 runs) would otherwise keep every client
//! it ever had, in memory and in every admission's scan. The counts of freed clients are kept
//! per name, so [`ClientTable::stats`] still covers every run.

use super::options::ClientStats;
use super::run::RunState;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

#[derive(Debug)]
pub(crate) struct ClientState {
    pub name: String,
    pub share: u32,
    /// Virtual time of proportional shares.
    pub pass: f64,
    /// Submitted runs waiting for admission, with their arrival numbers.
    pub pending: VecDeque<(u64, Arc<RunState>)>,
    pub admitted: u64,
    /// Runs that finished without an error.
    pub finished: u64,
    /// Runs their caller drove.
    pub driven: u64,
    /// Admitted runs not finished yet (with or without an error).
    pub running: u64,
    /// Every handle to the client is gone: free the slot once its runs are done.
    released: bool,
}

impl ClientState {
    fn idle(&self) -> bool {
        self.pending.is_empty() && self.running == 0
    }
}

#[derive(Debug, Default)]
pub(crate) struct ClientTable {
    slots: Vec<Option<ClientState>>,
    free: Vec<usize>,
    /// Counts of freed clients, by name.
    departed: BTreeMap<String, ClientStats>,
}

impl ClientTable {
    /// A new client entering at virtual time `vtime`: its slot.
    pub fn add(&mut self, name: &str, share: u32, vtime: f64) -> usize {
        let state = ClientState {
            name: name.to_string(),
            share: share.max(1),
            pass: vtime,
            pending: VecDeque::new(),
            admitted: 0,
            finished: 0,
            driven: 0,
            running: 0,
            released: false,
        };
        match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(state);
                i
            }
            None => {
                self.slots.push(Some(state));
                self.slots.len() - 1
            }
        }
    }

    pub fn get_mut(&mut self, i: usize) -> Option<&mut ClientState> {
        self.slots.get_mut(i).and_then(Option::as_mut)
    }

    /// The live clients with their slots.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &ClientState)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.as_ref().map(|c| (i, c)))
    }

    /// Slot `i`'s run finished (`ok`: without an error).
    pub fn finished(&mut self, i: usize, ok: bool) {
        if let Some(c) = self.get_mut(i) {
            c.running = c.running.saturating_sub(1);
            c.finished += u64::from(ok);
        }
        self.free_if_done(i);
    }

    /// The last handle to slot `i` is gone.
    pub fn release(&mut self, i: usize) {
        if let Some(c) = self.get_mut(i) {
            c.released = true;
        }
        self.free_if_done(i);
    }

    fn free_if_done(&mut self, i: usize) {
        let Some(slot) = self.slots.get_mut(i) else {
            return;
        };
        if !slot.as_ref().is_some_and(|c| c.released && c.idle()) {
            return;
        }
        if let Some(c) = slot.take() {
            let gone = self
                .departed
                .entry(c.name.clone())
                .or_insert_with(|| ClientStats {
                    name: c.name,
                    share: c.share,
                    admitted: 0,
                    finished: 0,
                    driven: 0,
                });
            gone.share = c.share;
            gone.admitted += c.admitted;
            gone.finished += c.finished;
            gone.driven += c.driven;
            self.free.push(i);
        }
    }

    /// Every live client, then the freed ones' counts by name.
    pub fn stats(&self) -> Vec<ClientStats> {
        self.iter()
            .map(|(_, c)| ClientStats {
                name: c.name.clone(),
                share: c.share,
                admitted: c.admitted,
                finished: c.finished,
                driven: c.driven,
            })
            .chain(self.departed.values().cloned())
            .collect()
    }

    /// Slots in use or free: the table's size.
    #[cfg(test)]
    fn capacity(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_released_idle_client_frees_its_slot_for_the_next() {
        let mut t = ClientTable::default();
        for _ in 0..1_000 {
            let i = t.add("viewer", 1, 0.0);
            let c = t.get_mut(i).map(|c| {
                c.admitted += 8;
                c.running += 8;
            });
            assert!(c.is_some());
            for _ in 0..8 {
                t.finished(i, true);
            }
            t.release(i);
        }
        assert_eq!(t.capacity(), 1);
        assert_eq!(t.iter().count(), 0);
        let stats = t.stats();
        assert_eq!(stats.len(), 1);
        assert_eq!(
            (stats[0].name.as_str(), stats[0].admitted, stats[0].finished),
            ("viewer", 8_000, 8_000)
        );
    }

    #[test]
    fn a_released_client_stays_until_its_runs_finish() {
        let mut t = ClientTable::default();
        let a = t.add("a", 2, 0.0);
        if let Some(c) = t.get_mut(a) {
            c.admitted = 2;
            c.running = 2;
        }
        t.release(a);
        assert_eq!(t.iter().count(), 1, "freed with runs in flight");
        t.finished(a, true);
        assert_eq!(t.iter().count(), 1);
        // A failed run counts as done, not as finished.
        t.finished(a, false);
        assert_eq!(t.iter().count(), 0);
        let b = t.add("b", 1, 0.0);
        assert_eq!(b, a, "the slot is reused");
        let stats = t.stats();
        assert_eq!(stats.len(), 2);
        assert_eq!((stats[0].name.as_str(), stats[0].finished), ("b", 0));
        assert_eq!(
            (stats[1].name.as_str(), stats[1].share, stats[1].finished),
            ("a", 2, 1)
        );
    }
}
