//! Expert parallelism's exchange, as program nodes: one way for every program that sends routed
//! slots to their experts' devices and back (the MoE training step and the `gangway moe` layer).
//!
//! Device `s` holds its tokens' slots slot-major, `[expert][capacity]` for every expert, and each
//! device holds `E/D` experts. The all-to-all sends each device the `[E/D · capacity]` block of
//! its experts, so every shape is static; on device `j` the plain exchange would leave them
//! `[source][local expert][capacity]`, and the exchange regroups them on the way ([`Regroup`]:
//! the host places each block as it writes the gathered shards) into
//! `[local expert][source][capacity]`, the groups of `D · capacity` rows the grouped matmul
//! wants. The way back is the inverse, regrouped as each source's block is
//! read. No device runs a permute kernel on either side.
//!
//! The same exchange with one record per expert ([`ExpertExchange::per_expert`]) takes the
//! router's per-expert statistics to the experts' devices in the slot blocks' order, so the expert
//! kernels know each block's kept rows and skip its empty slots.
//!
//! Given those records ([`Kept`]), the exchange is ragged ([`crate::program::Ragged`]): only each
//! block's kept rows cross between devices and are written on the other side, its counts riding
//! with them, so what moves is the tokens routed, not `E/K` times them when the capacity is
//! dropless. The empty slots on the receiving side are not written; every kernel after the
//! exchange reads only the kept rows (the grouped matmuls' limits, the combine's and the router
//! backward's kept choices). The counts' exchange goes first, so each device has its counts on
//! the host before it copies its kept rows out (one copy per block). The shapes stay static: the
//! buffers are still sized by the slots.

use crate::kernels::router::STAT_WORDS;
use crate::program::{CountsSide, ProgramBuilder, Ragged, Regroup, RowBlock, Value};

/// The kept counts of the slot blocks an exchange moves: the output of the counts' own exchange
/// ([`ExpertExchange::per_expert`] of the router's `[E, STAT_WORDS]` u32 statistics, whose first
/// word is the kept rows), which went first, and which side of it holds them. With them, only
/// the kept rows move, and each device knows its counts before it copies its rows out.
#[derive(Debug, Clone, Copy)]
pub struct Kept {
    pub counts: Value,
    pub side: CountsSide,
}

impl Kept {
    /// The token side's counts: what each device sent in the counts' exchange.
    pub fn sent(counts: Value) -> Self {
        Self {
            counts,
            side: CountsSide::Sent,
        }
    }

    /// The expert side's counts: what each device received in it, `[E/D][source]`.
    pub fn received(counts: Value) -> Self {
        Self {
            counts,
            side: CountsSide::Received,
        }
    }
}

/// Slots on their way to the experts' devices ([`ExpertExchange::send_to_experts`]), to be used
/// no earlier than [`ExpertExchange::arrived`] says: the nodes a caller adds in between run while
/// they travel.
#[derive(Debug, Clone)]
pub struct Moving {
    value: Value,
}

/// The exchange's shape: devices, experts per device, slots per expert per source, row width.
#[derive(Debug, Clone, Copy)]
pub struct ExpertExchange {
    pub devices: usize,
    pub local_experts: usize,
    pub capacity: usize,
    /// Words (4-byte elements) of one slot row.
    pub row_words: usize,
    /// The gang axis the experts are split over, when the gang has more than one (a
    /// `{data, expert}` mesh: the all-to-all runs within each data row); `None`: the whole gang.
    pub axis: Option<&'static str>,
}

impl ExpertExchange {
    /// Row offsets of the local experts' groups after [`Self::to_experts`]: `D · capacity` rows
    /// each.
    pub fn expert_offsets(&self) -> Vec<u32> {
        let rows = (self.devices * self.capacity) as u32;
        (0..=self.local_experts).map(|e| e as u32 * rows).collect()
    }

    /// Row offsets of the slot blocks after [`Self::to_experts`], `[local expert][source]`, of
    /// `capacity` rows each: `D` row groups per local expert, for a grouped matmul that skips each
    /// block's empty slots ([`crate::kernels::matmul::Limits`]).
    pub fn block_offsets(&self) -> Vec<u32> {
        let blocks = self.local_experts * self.devices;
        (0..=blocks).map(|j| (j * self.capacity) as u32).collect()
    }

    /// The exchange of one `words`-word record per expert (the router's per-expert statistics):
    /// after [`Self::to_experts`] a device holds its local experts' records from every source,
    /// in the slot blocks' order.
    pub fn per_expert(&self, words: usize) -> Self {
        Self {
            capacity: 1,
            row_words: words,
            ..*self
        }
    }

    /// The slot-major ↔ expert-major block moves (`back`: expert-major to slot-major).
    fn blocks(&self, back: bool) -> Vec<RowBlock> {
        let (d, el, cap) = (self.devices, self.local_experts, self.capacity);
        let mut blocks = Vec::with_capacity(d * el);
        for s in 0..d {
            for e in 0..el {
                let (slot_major, expert_major) = ((s * el + e) * cap, (e * d + s) * cap);
                blocks.push(if back {
                    RowBlock::new(expert_major, slot_major, cap)
                } else {
                    RowBlock::new(slot_major, expert_major, cap)
                });
            }
        }
        blocks
    }

    /// The exchange, regrouped: `back` (to the tokens) reads each source's expert-major blocks
    /// slot-major; otherwise the arrived slots are laid out expert-major. With `kept`, only the
    /// kept rows of each block move.
    fn all_to_all(
        &self,
        b: &mut ProgramBuilder,
        name: &str,
        (x, kept): (Value, Option<Kept>),
        back: bool,
    ) -> Value {
        let rows = self.devices * self.local_experts * self.capacity;
        let blocks = self.blocks(back);
        let (send, recv): (&[RowBlock], &[RowBlock]) =
            if back { (&blocks, &[]) } else { (&[], &blocks) };
        let mut regroup = match Regroup::from_blocks(rows, self.row_words * 4, send, recv) {
            Ok(regroup) => regroup,
            Err(e) => {
                b.fail(format!("{name}: {e}"));
                return x;
            }
        };
        match kept {
            Some(Kept { counts, side }) => {
                regroup.ragged = Some(Ragged {
                    block_rows: self.capacity as u32,
                    record_words: STAT_WORDS as u32,
                    counts: side,
                });
                b.all_to_all_ragged(name, (x, counts), self.axis, regroup)
            }
            None => b.all_to_all_regrouped(name, x, self.axis, regroup),
        }
    }

    /// Every device's slots to the devices of their experts, expert-major (nothing to move on
    /// one device): [`Self::send_to_experts`], then [`Self::arrived`].
    pub fn to_experts(
        &self,
        b: &mut ProgramBuilder,
        name: &str,
        slots: Value,
        kept: Option<Kept>,
    ) -> Value {
        let moving = self.send_to_experts(b, name, slots, kept);
        self.arrived(moving)
    }

    /// The all-to-all of [`Self::to_experts`] alone (only the kept rows, given the router's
    /// statistics). Nodes added before [`Self::arrived`] that do not need the slots run while
    /// they travel: a device runs later nodes while one waits on other devices, up to the first
    /// that needs the awaited data.
    pub fn send_to_experts(
        &self,
        b: &mut ProgramBuilder,
        name: &str,
        slots: Value,
        kept: Option<Kept>,
    ) -> Moving {
        let value = if self.devices == 1 {
            slots
        } else {
            self.all_to_all(b, name, (slots, kept), false)
        };
        Moving { value }
    }

    /// The slots [`Self::send_to_experts`] sent, expert-major: the nodes that use them come
    /// after the caller's independent work.
    pub fn arrived(&self, moving: Moving) -> Value {
        moving.value
    }

    /// The expert devices' rows back to the devices of their tokens, slot-major (only the kept
    /// rows, given the exchanged statistics).
    pub fn to_tokens(
        &self,
        b: &mut ProgramBuilder,
        name: &str,
        rows: Value,
        kept: Option<Kept>,
    ) -> Value {
        if self.devices == 1 {
            return rows;
        }
        self.all_to_all(b, name, (rows, kept), true)
    }
}
