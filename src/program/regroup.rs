//! How an all-to-all's rows travel: [`Regroup`] puts them in the order their consumer wants while
//! the host gathers the staged shards (no permute kernel on either side), and its [`Ragged`] form
//! moves only each block's live rows (the slots that hold routed tokens), their counts riding
//! with them.
//!
//! A ragged exchange, as the runtime runs it on each member:
//! - **stage**: the counts went first, in an exchange of their own whose host copy the member
//!   reads ([`CountsSide`]); from them ([`Regroup::live`]) it copies only the live rows out of
//!   its device ([`Regroup::live_ranges`]), one copy per run of rows, into its staging buffer;
//! - **pack** ([`Regroup::packed`]): a header of every block's live rows, then those rows: what
//!   crosses to the other devices (the mailbox, and MPI between ranks);
//! - **place** ([`Regroup::place`]): each member writes the live rows of its chunk of every
//!   member's packed shard where the plain exchange and `recv` put them, a write per run of
//!   rows. Rows past a block's count are not written: the output keeps what it held (zeros
//!   before the first run), and its consumers read only the counted rows.

use crate::{Error, Result};
use std::ops::Range;

/// Move `rows` rows from row `src_row` of one side to row `dst_row` of the other: how
/// [`Regroup::from_blocks`] is told which rows move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowBlock {
    pub src_row: u32,
    pub dst_row: u32,
    pub rows: u32,
}

impl RowBlock {
    pub fn new(src_row: usize, dst_row: usize, rows: usize) -> Self {
        Self {
            src_row: src_row as u32,
            dst_row: dst_row as u32,
            rows: rows as u32,
        }
    }
}

/// Rows an all-to-all moves in another order than the plain exchange, placed by the host while
/// it gathers the staged shards (so no permute kernel runs before or after it on any device).
/// Each map lists, for every row of its side, the row it comes from: `send[i]` is the row of a
/// member's input shard that stands at row `i` before the shard is cut into chunks, and `recv[f]`
/// the row of the plain exchange's output that lands at row `f` of the output shard. An empty map
/// moves nothing. Rows are `row_bytes` bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Regroup {
    pub row_bytes: usize,
    pub send: Vec<u32>,
    pub recv: Vec<u32>,
    /// Only each block's live rows move ([`Ragged`]); `None`: every row.
    pub ragged: Option<Ragged>,
}

impl Regroup {
    /// The regroup of `rows`-row shards whose input rows move by `send` and output rows by
    /// `recv` (row blocks: every row of a side is written exactly once, or the side is empty and
    /// moves nothing).
    pub fn from_blocks(
        rows: usize,
        row_bytes: usize,
        send: &[RowBlock],
        recv: &[RowBlock],
    ) -> Result<Self> {
        let map = |side: &str, blocks: &[RowBlock]| {
            if blocks.is_empty() {
                return Ok(Vec::new());
            }
            let mut from = vec![u32::MAX; rows];
            for b in blocks {
                let (src, dst, n) = (b.src_row as usize, b.dst_row as usize, b.rows as usize);
                if src + n > rows || dst + n > rows {
                    return Err(Error::InvalidArgument {
                        what: "all-to-all regroup",
                        reason: format!("{side} block {b:?} is outside the shard's {rows} rows"),
                    });
                }
                for j in 0..n {
                    if from[dst + j] != u32::MAX {
                        return Err(Error::InvalidArgument {
                            what: "all-to-all regroup",
                            reason: format!("{side} row {} is written twice", dst + j),
                        });
                    }
                    from[dst + j] = (src + j) as u32;
                }
            }
            if let Some(row) = from.iter().position(|&r| r == u32::MAX) {
                return Err(Error::InvalidArgument {
                    what: "all-to-all regroup",
                    reason: format!("{side} row {row} of {rows} is never written"),
                });
            }
            Ok(from)
        };
        Ok(Self {
            row_bytes,
            send: map("send", send)?,
            recv: map("receive", recv)?,
            ragged: None,
        })
    }

    /// Whether it moves every row where the plain exchange puts it (both maps empty, not
    /// ragged).
    pub fn is_plain(&self) -> bool {
        self.send.is_empty() && self.recv.is_empty() && self.ragged.is_none()
    }

    /// The output shard of the member at `place` of its group, from the group's input shards
    /// in member order: chunk `k` of the plain exchange is chunk `place` of member `k`'s
    /// (regrouped) shard.
    pub fn gather(&self, place: usize, shards: &[&[u8]], out_bytes: usize) -> Vec<u8> {
        let mut out = vec![0u8; out_bytes];
        let members = shards.len().max(1);
        let chunk = out_bytes / members;
        let row = self.row_bytes.max(1);
        if self.is_plain() || !chunk.is_multiple_of(row) {
            for (k, bytes) in shards.iter().enumerate() {
                let piece = bytes.get(place * chunk..(place + 1) * chunk).unwrap_or(&[]);
                out[k * chunk..k * chunk + piece.len()].copy_from_slice(piece);
            }
            return out;
        }
        let (rows, chunk_rows) = (out_bytes / row, chunk / row);
        for f in 0..rows {
            let s = self.recv.get(f).map_or(f, |&r| r as usize);
            let (k, i) = (s / chunk_rows, place * chunk_rows + s % chunk_rows);
            let raw = self.send.get(i).map_or(i, |&r| r as usize);
            let src = shards
                .get(k)
                .and_then(|b| b.get(raw * row..(raw + 1) * row));
            if let Some(src) = src {
                out[f * row..(f + 1) * row].copy_from_slice(src);
            }
        }
        out
    }
}

/// An all-to-all that moves only the live rows of each block. The input shard is blocks of
/// `block_rows` rows, with one record of `record_words` u32 words per block, in the input's own
/// (pre-`send`) block order, whose first word is how many of the block's first rows are live.
/// The records come from the node's second input, the output of a plain all-to-all over the
/// same group that ran first (the counts' own exchange), whose host copy the runtime reads as
/// `counts` says; so the counts are on the host before the rows are copied out. A chunk is whole
/// blocks, and `send` moves whole blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ragged {
    pub block_rows: u32,
    pub record_words: u32,
    pub counts: CountsSide,
}

/// Which side of the counts' exchange holds a ragged exchange's records for a member's shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CountsSide {
    /// What the member sent in it: its own records (the token side's router statistics).
    Sent,
    /// What the member received from it: every source's records for its blocks (the expert
    /// side's).
    Received,
}

/// One write of a ragged gather: the bytes `from` of member `member`'s packed shard go to byte
/// `at` of the output shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    pub at: usize,
    pub member: usize,
    pub from: Range<usize>,
}

fn malformed(reason: String) -> Error {
    Error::InvalidArgument {
        what: "ragged all-to-all",
        reason,
    }
}

fn word(bytes: &[u8], i: usize) -> Option<u32> {
    let w = bytes.get(4 * i..4 * i + 4)?;
    Some(u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
}

impl Regroup {
    /// The input row that stands at row `i` after the send map.
    fn sent_row(&self, i: usize) -> usize {
        self.send.get(i).map_or(i, |&r| r as usize)
    }

    /// The blocks of a shard of `shard_bytes` bytes under `ragged`.
    fn blocks(&self, ragged: Ragged, shard_bytes: usize) -> usize {
        shard_bytes / self.row_bytes.max(1) / (ragged.block_rows as usize).max(1)
    }

    /// Checks that a ragged exchange fits shards of `rows` rows cut into `members` chunks, with
    /// `count_words` u32 words of counts a shard; the reason when it does not.
    pub fn check_ragged(&self, rows: usize, members: usize, count_words: usize) -> Option<String> {
        let ragged = self.ragged?;
        let br = ragged.block_rows as usize;
        if br == 0 || !rows.is_multiple_of(br * members.max(1)) {
            return Some(format!(
                "{rows} rows in {members} chunks are not whole blocks of {br} rows"
            ));
        }
        let blocks = rows / br;
        if count_words != blocks * ragged.record_words as usize || ragged.record_words == 0 {
            return Some(format!(
                "{blocks} blocks need {blocks} records of {} words, the counts have {count_words} words",
                ragged.record_words
            ));
        }
        let whole = (0..blocks).all(|j| {
            let first = self.sent_row(j * br);
            first.is_multiple_of(br) && (1..br).all(|r| self.sent_row(j * br + r) == first + r)
        });
        (!whole).then(|| "its send map does not move whole blocks".to_string())
    }

    /// The live rows of each block of a shard of `shard_bytes` bytes, in the sent order, from
    /// the shard's counts (one record per block in the shard's own order). A count past its
    /// block is an error.
    pub fn live(&self, counts: &[u8], shard_bytes: usize) -> Result<Vec<usize>> {
        let Some(ragged) = self.ragged else {
            return Err(malformed("the exchange is not ragged".into()));
        };
        let br = ragged.block_rows as usize;
        (0..self.blocks(ragged, shard_bytes))
            .map(|j| {
                let block = self.sent_row(j * br) / br.max(1);
                let n = word(counts, block * ragged.record_words as usize)
                    .ok_or_else(|| malformed(format!("no count for block {block}")))?;
                if n as usize > br {
                    return Err(malformed(format!(
                        "block {block} counts {n} live rows of {br}"
                    )));
                }
                Ok(n as usize)
            })
            .collect()
    }

    /// The byte ranges of a shard that hold its `live` rows, in the sent order, joined where
    /// they touch: what a member copies out of its device.
    pub fn live_ranges(&self, live: &[usize]) -> Vec<Range<usize>> {
        let row = self.row_bytes.max(1);
        let br = self.ragged.map_or(1, |r| r.block_rows as usize);
        let mut ranges: Vec<Range<usize>> = Vec::new();
        for (j, &n) in live.iter().enumerate().filter(|(_, n)| **n > 0) {
            // A block moves whole (`check_ragged`): its live rows are one range.
            let at = self.sent_row(j * br) * row;
            match ranges.last_mut() {
                Some(last) if last.end == at => last.end += n * row,
                _ => ranges.push(at..at + n * row),
            }
        }
        ranges
    }

    /// What crosses to the other devices: one u32 of live rows per block in the sent order,
    /// then `rows`, the live rows block by block (the bytes of [`Self::live_ranges`]).
    pub fn packed(live: &[usize], rows: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 * live.len() + rows.len());
        for &n in live {
            out.extend_from_slice(&(n as u32).to_le_bytes());
        }
        out.extend_from_slice(rows);
        out
    }

    /// The writes the member at `place` of its group makes from the group's packed shards
    /// (member order) into its output shard of `out_bytes` bytes: the live rows of chunk `place`
    /// of each, where the plain exchange and `recv` put them, joined where they touch. A packed
    /// shard whose header or length does not add up (another rank's bad data) is an error.
    pub fn place(&self, place: usize, packed: &[&[u8]], out_bytes: usize) -> Result<Vec<Placed>> {
        let Some(ragged) = self.ragged else {
            return Err(malformed("the exchange is not ragged".into()));
        };
        let (row, br) = (self.row_bytes.max(1), ragged.block_rows as usize);
        let members = packed.len().max(1);
        let blocks = self.blocks(ragged, out_bytes);
        let (chunk_blocks, chunk_rows) = (blocks / members, out_bytes / row / members);
        // The output row each plain-exchange row lands at.
        let mut to_out: Vec<usize> = (0..out_bytes / row).collect();
        for (f, &plain) in self.recv.iter().enumerate() {
            if let Some(slot) = to_out.get_mut(plain as usize) {
                *slot = f;
            }
        }
        let mut writes: Vec<Placed> = Vec::new();
        for (k, shard) in packed.iter().enumerate() {
            let mut live = Vec::with_capacity(blocks);
            for j in 0..blocks {
                let n = word(shard, j)
                    .ok_or_else(|| malformed(format!("member {k}'s header is cut short")))?;
                if n as usize > br {
                    return Err(malformed(format!(
                        "member {k} says block {j} has {n} live rows of {br}"
                    )));
                }
                live.push(n as usize);
            }
            let total: usize = live.iter().sum();
            if shard.len() != 4 * blocks + total * row {
                return Err(malformed(format!(
                    "member {k} sent {} bytes; its header counts {total} rows of {row} bytes",
                    shard.len()
                )));
            }
            let mut at = 4 * blocks + live[..place * chunk_blocks].iter().sum::<usize>() * row;
            for t in 0..chunk_blocks {
                for r in 0..live[place * chunk_blocks + t] {
                    let out = to_out[k * chunk_rows + t * br + r] * row;
                    match writes.last_mut() {
                        Some(w)
                            if w.member == k && w.at + w.from.len() == out && w.from.end == at =>
                        {
                            w.from.end += row;
                        }
                        _ => writes.push(Placed {
                            at: out,
                            member: k,
                            from: at..at + row,
                        }),
                    }
                    at += row;
                }
            }
        }
        Ok(writes)
    }
}

#[cfg(test)]
mod tests {
    use super::{CountsSide, Ragged, Regroup, RowBlock};

    /// What a member sends, as the runtime makes it: its live rows out of `shard`, packed.
    fn pack(regroup: &Regroup, shard: &[u8], counts: &[u8]) -> crate::Result<Vec<u8>> {
        let live = regroup.live(counts, shard.len())?;
        let rows: Vec<u8> = (regroup.live_ranges(&live).into_iter())
            .flat_map(|r| shard[r].to_vec())
            .collect();
        Ok(Regroup::packed(&live, &rows))
    }

    /// Each member's shard: `rows` rows of one byte, row `i` of member `k` holding `k·rows + i`.
    fn shards(members: usize, rows: usize) -> Vec<Vec<u8>> {
        (0..members)
            .map(|k| (0..rows).map(|i| (k * rows + i) as u8).collect())
            .collect()
    }

    /// The plain exchange, then `recv` applied as a permute kernel would, for `send`-permuted
    /// inputs: what a regrouped gather must equal.
    fn by_hand(send: &[RowBlock], recv: &[RowBlock], place: usize, shards: &[Vec<u8>]) -> Vec<u8> {
        let permute = |x: &[u8], blocks: &[RowBlock]| {
            if blocks.is_empty() {
                return x.to_vec();
            }
            let mut y = vec![0u8; x.len()];
            for b in blocks {
                for j in 0..b.rows as usize {
                    y[b.dst_row as usize + j] = x[b.src_row as usize + j];
                }
            }
            y
        };
        let chunk = shards[0].len() / shards.len();
        let mut plain = Vec::new();
        for s in shards {
            plain.extend_from_slice(&permute(s, send)[place * chunk..(place + 1) * chunk]);
        }
        permute(&plain, recv)
    }

    #[test]
    fn a_regrouped_gather_is_the_plain_exchange_with_its_permutes() {
        // 3 members, 2 local experts of capacity 2: blocks [source][expert] <-> [expert][source].
        let (d, el, cap) = (3usize, 2usize, 2usize);
        let rows = d * el * cap;
        let mut to_expert_major = Vec::new();
        let mut to_slot_major = Vec::new();
        for s in 0..d {
            for e in 0..el {
                let (slot, expert) = ((s * el + e) * cap, (e * d + s) * cap);
                to_expert_major.push(RowBlock::new(slot, expert, cap));
                to_slot_major.push(RowBlock::new(expert, slot, cap));
            }
        }
        let shards = shards(d, rows);
        let views: Vec<&[u8]> = shards.iter().map(Vec::as_slice).collect();
        for (send, recv) in [
            (&[][..], &to_expert_major[..]),
            (&to_slot_major[..], &[][..]),
            (&to_slot_major[..], &to_expert_major[..]),
            (&[][..], &[][..]),
        ] {
            let regroup = Regroup::from_blocks(rows, 1, send, recv).unwrap();
            for place in 0..d {
                let want = by_hand(send, recv, place, &shards);
                assert_eq!(regroup.gather(place, &views, rows), want, "place {place}");
            }
        }
    }

    #[test]
    fn a_regroup_that_is_no_permutation_is_refused() {
        let rows = 4;
        let gap = [RowBlock::new(0, 0, 3)];
        let twice = [RowBlock::new(0, 0, 2), RowBlock::new(2, 1, 2)];
        let outside = [RowBlock::new(2, 0, 4)];
        for (blocks, says) in [
            (&gap[..], "never written"),
            (&twice[..], "written twice"),
            (&outside[..], "outside"),
        ] {
            let err = Regroup::from_blocks(rows, 4, blocks, &[]).unwrap_err();
            assert!(err.to_string().contains(says), "{err}");
            let err = Regroup::from_blocks(rows, 4, &[], blocks).unwrap_err();
            assert!(err.to_string().contains(says), "{err}");
        }
    }

    /// The expert exchange's blocks for `d` members, `el` local experts of capacity `cap`:
    /// slot-major → expert-major, and back.
    fn expert_blocks(d: usize, el: usize, cap: usize) -> (Vec<RowBlock>, Vec<RowBlock>) {
        let (mut there, mut back) = (Vec::new(), Vec::new());
        for s in 0..d {
            for e in 0..el {
                let (slot, expert) = ((s * el + e) * cap, (e * d + s) * cap);
                there.push(RowBlock::new(slot, expert, cap));
                back.push(RowBlock::new(expert, slot, cap));
            }
        }
        (there, back)
    }

    /// Counts as u32 records of `words` words, the count first.
    fn records(counts: &[u32], words: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for &c in counts {
            out.extend_from_slice(&c.to_le_bytes());
            out.extend(std::iter::repeat_n(0xEE, 4 * (words - 1)));
        }
        out
    }

    /// A ragged exchange writes what the full regrouped exchange writes at every live row, and
    /// nothing else; it moves the live rows and a word of header per block.
    #[test]
    fn a_ragged_exchange_moves_the_live_rows_where_the_full_one_puts_them() {
        let (d, el, cap, row) = (3usize, 2usize, 4usize, 8usize);
        let rows = d * el * cap;
        let (there, back) = expert_blocks(d, el, cap);
        let mut seed = 7u32;
        let mut next = || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            seed >> 8
        };
        let shards: Vec<Vec<u8>> = (0..d)
            .map(|_| (0..rows * row).map(|_| next() as u8).collect())
            .collect();
        // Counts per block of each member's input, in its own order; 0 and full included.
        let counts: Vec<Vec<u32>> = (0..d)
            .map(|k| {
                (0..d * el)
                    .map(|j| {
                        if (j + k) % 5 == 0 {
                            0
                        } else {
                            next() % (cap as u32 + 1)
                        }
                    })
                    .collect()
            })
            .collect();
        for (send, recv) in [(&[][..], &there[..]), (&back[..], &[][..])] {
            let full = Regroup::from_blocks(rows, row, send, recv).unwrap();
            let ragged = Regroup {
                ragged: Some(Ragged {
                    block_rows: cap as u32,
                    record_words: 3,
                    counts: CountsSide::Sent,
                }),
                ..full.clone()
            };
            assert_eq!(ragged.check_ragged(rows, d, 3 * d * el), None);
            let packed: Vec<Vec<u8>> = (0..d)
                .map(|k| pack(&ragged, &shards[k], &records(&counts[k], 3)).unwrap())
                .collect();
            let live: usize = counts.iter().flatten().map(|&c| c as usize).sum();
            let moved: usize = packed.iter().map(Vec::len).sum();
            assert_eq!(moved, live * row + 4 * d * d * el);
            let views: Vec<&[u8]> = shards.iter().map(Vec::as_slice).collect();
            let packed_views: Vec<&[u8]> = packed.iter().map(Vec::as_slice).collect();
            for place in 0..d {
                let want = full.gather(place, &views, rows * row);
                let placed = ragged.place(place, &packed_views, rows * row).unwrap();
                let mut out = vec![0xABu8; rows * row];
                for w in &placed {
                    let from = &packed[w.member][w.from.clone()];
                    out[w.at..w.at + from.len()].copy_from_slice(from);
                }
                // Which output rows are live: mark the inputs' live rows and gather the marks.
                let marks: Vec<Vec<u8>> = (0..d)
                    .map(|k| {
                        let mut m = vec![0u8; rows];
                        for (b, &c) in counts[k].iter().enumerate() {
                            m[b * cap..b * cap + c as usize].fill(1);
                        }
                        m
                    })
                    .collect();
                let mark_views: Vec<&[u8]> = marks.iter().map(Vec::as_slice).collect();
                let mark_map = Regroup {
                    row_bytes: 1,
                    ..full.clone()
                };
                let is_live = mark_map.gather(place, &mark_views, rows);
                for f in 0..rows {
                    let got = &out[f * row..(f + 1) * row];
                    if is_live[f] == 1 {
                        assert_eq!(got, &want[f * row..(f + 1) * row], "place {place} row {f}");
                    } else {
                        assert!(
                            got.iter().all(|&b| b == 0xAB),
                            "place {place} row {f} written"
                        );
                    }
                }
                // A run per block at most.
                assert!(placed.len() <= d * el, "{} writes", placed.len());
            }
        }
    }

    #[test]
    fn bad_ragged_data_is_an_error() {
        let (d, el, cap, row) = (2usize, 1usize, 2usize, 4usize);
        let rows = d * el * cap;
        let ragged = Regroup {
            row_bytes: row,
            ragged: Some(Ragged {
                block_rows: cap as u32,
                record_words: 1,
                counts: CountsSide::Received,
            }),
            ..Regroup::default()
        };
        let shard = vec![1u8; rows * row];
        let err = pack(&ragged, &shard, &records(&[3, 0], 1)).unwrap_err();
        assert!(err.to_string().contains("3 live rows of 2"), "{err}");
        assert!(pack(&ragged, &shard, &records(&[1], 1)).is_err());
        let good = pack(&ragged, &shard, &records(&[1, 2], 1)).unwrap();
        assert_eq!(good.len(), 8 + 3 * row);
        for (bad, says) in [
            (&good[..6], "cut short"),
            (&good[..good.len() - 1], "header counts 3 rows"),
        ] {
            let err = ragged.place(0, &[&good, bad], rows * row).unwrap_err();
            assert!(err.to_string().contains(says), "{err}");
        }
        let mut lying = good.clone();
        lying[0] = 9;
        let err = ragged.place(1, &[&lying, &good], rows * row).unwrap_err();
        assert!(err.to_string().contains("9 live rows of 2"), "{err}");
        // Shapes that cannot be ragged.
        assert!(ragged.check_ragged(rows, d, 2).is_none());
        assert!(ragged.check_ragged(rows, d, 3).unwrap().contains("records"));
        assert!(
            ragged
                .check_ragged(rows, 3, 2)
                .unwrap()
                .contains("whole blocks")
        );
        let halves = Regroup {
            send: vec![1, 2, 3, 0],
            ..ragged.clone()
        };
        assert!(
            halves
                .check_ragged(rows, d, 2)
                .unwrap()
                .contains("send map")
        );
    }
}
