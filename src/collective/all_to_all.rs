//! Expert-parallel all-to-all, as in MegaBlocks: every device sends each other device the tokens
//! routed to that device's experts, in variable-size segments, and gets them back the same way.
//!
//! Forward, on D devices holding `experts / D` experts each:
//! 1. counts first: each source's per-expert kept counts (on its GPU) are read back;
//! 2. pack, on each source GPU: the kept rows of its `[experts × capacity, d]` dispatch buffer are
//!    compacted into one segment per destination;
//! 3. exchange the segments (host-staged between devices);
//! 4. unpack, on each destination GPU: the received rows become expert-major, so each local expert's
//!    rows are contiguous ([`ExpertBatch::offsets`]) and feed the grouped matmul directly.
//!
//! [`AllToAll::reverse`] runs the same steps backwards, so a round trip is bit-identical.

use super::transfer::copy_bytes;
use crate::kernels::copy_blocks::{self, Block};
use crate::{DType, Device, Error, Result, Tensor};

/// One destination device's tokens after the exchange.
#[derive(Debug)]
pub struct ExpertBatch {
    /// `[rows, d]`: local expert 0's tokens (from source 0, then 1, ...), then local expert 1's...
    pub tokens: Tensor,
    /// `local_experts + 1` row offsets into `tokens`.
    pub offsets: Vec<u32>,
}

impl ExpertBatch {
    /// Rows of the largest local expert: the grouped matmul's `max_group_rows`.
    pub fn max_group_rows(&self) -> usize {
        self.offsets
            .windows(2)
            .map(|w| (w[1] - w[0]) as usize)
            .max()
            .unwrap_or(0)
    }
}

/// The exchange plan of one all-to-all: who sent how many rows to which expert. Kept to run the
/// reverse exchange.
#[derive(Debug, Clone)]
pub struct AllToAll {
    devices: Vec<Device>,
    experts: usize,
    capacity: usize,
    /// `counts[s][e]`: rows source `s` sends to expert `e`.
    counts: Vec<Vec<usize>>,
}

impl AllToAll {
    /// Exchanges `inputs[s]` (`[experts × capacity, d]`, expert-major, on device s) whose first
    /// `counts[s][e]` rows of each expert block are real tokens (`counts[s]`: u32 `[experts]`).
    pub fn forward(
        inputs: &[Tensor],
        counts: &[Tensor],
        experts: usize,
        capacity: usize,
    ) -> Result<(Self, Vec<ExpertBatch>)> {
        const WHAT: &str = "all-to-all";
        let d_n = inputs.len();
        if d_n == 0 || counts.len() != d_n {
            return Err(Error::InvalidArgument {
                what: WHAT,
                reason: format!("{} inputs and {} count vectors", d_n, counts.len()),
            });
        }
        if experts == 0 || !experts.is_multiple_of(d_n) {
            return Err(Error::InvalidArgument {
                what: WHAT,
                reason: format!("{experts} experts cannot be split evenly over {d_n} devices"),
            });
        }
        let d = inputs[0].shape().get(1).copied().unwrap_or(0);
        let dtype = inputs[0].dtype();
        let devices: Vec<Device> = inputs.iter().map(|t| t.device().clone()).collect();
        for (s, (x, c)) in inputs.iter().zip(counts).enumerate() {
            x.expect_shape("all-to-all input", &[experts * capacity, d])?;
            x.expect_dtype(WHAT, dtype)?;
            c.expect_shape("all-to-all counts", &[experts])?;
            c.expect_device(WHAT, &devices[s])?;
        }
        let words = row_words(d, dtype)?;
        // 1. Counts first.
        let mut host_counts = Vec::with_capacity(d_n);
        for c in counts {
            let v: Vec<usize> = c.to_u32()?.into_iter().map(|n| n as usize).collect();
            if let Some(&bad) = v.iter().find(|&&n| n > capacity) {
                return Err(Error::InvalidArgument {
                    what: WHAT,
                    reason: format!("a count of {bad} exceeds the capacity {capacity}"),
                });
            }
            host_counts.push(v);
        }
        let plan = Self {
            devices,
            experts,
            capacity,
            counts: host_counts,
        };
        let packed = plan.pack_sources(inputs, d, dtype)?;
        let received = plan.exchange(&packed, d, dtype, false)?;
        let mut batches = Vec::with_capacity(d_n);
        for (j, recv) in received.iter().enumerate() {
            let device = &plan.devices[j];
            let out = Tensor::zeros(device, &[plan.dest_rows(j), d], dtype)?;
            let mut encoder = device.encoder("all-to-all unpack");
            copy_blocks::encode(
                &mut encoder,
                device,
                &plan.dest_blocks(j),
                words,
                recv.buffer(),
                out.buffer(),
            )?;
            device.submit(encoder);
            batches.push(ExpertBatch {
                tokens: out,
                offsets: plan.dest_offsets(j),
            });
        }
        for device in &plan.devices {
            device.wait()?;
        }
        Ok((plan, batches))
    }

    /// Sends expert outputs (`outputs[j]`: `[rows of batch j, d']` in [`ExpertBatch`] layout) back
    /// to their sources, as `[experts × capacity, d']` expert-major tensors with zeros in unused slots.
    pub fn reverse(&self, outputs: &[Tensor]) -> Result<Vec<Tensor>> {
        const WHAT: &str = "reverse all-to-all";
        if outputs.len() != self.devices.len() {
            return Err(Error::InvalidArgument {
                what: WHAT,
                reason: format!(
                    "{} outputs for {} devices",
                    outputs.len(),
                    self.devices.len()
                ),
            });
        }
        let d = outputs[0].shape().get(1).copied().unwrap_or(0);
        let dtype = outputs[0].dtype();
        let words = row_words(d, dtype)?;
        for (j, y) in outputs.iter().enumerate() {
            y.expect_device(WHAT, &self.devices[j])?;
            y.expect_shape("reverse all-to-all input", &[self.dest_rows(j), d])?;
            y.expect_dtype(WHAT, dtype)?;
        }
        // Pack on each expert device back into source-major segments (the inverse of unpack).
        let mut packed = Vec::with_capacity(outputs.len());
        for (j, y) in outputs.iter().enumerate() {
            let device = &self.devices[j];
            let seg = Tensor::zeros(device, &[self.dest_rows(j), d], dtype)?;
            let mut encoder = device.encoder("reverse all-to-all pack");
            let blocks: Vec<Block> = self.dest_blocks(j).iter().map(swap).collect();
            copy_blocks::encode(
                &mut encoder,
                device,
                &blocks,
                words,
                y.buffer(),
                seg.buffer(),
            )?;
            device.submit(encoder);
            packed.push(seg);
        }
        let received = self.exchange(&packed, d, dtype, true)?;
        // Unpack on each source into the capacity layout (the inverse of pack).
        let mut results = Vec::with_capacity(received.len());
        for (s, recv) in received.iter().enumerate() {
            let device = &self.devices[s];
            let out = Tensor::zeros(device, &[self.experts * self.capacity, d], dtype)?;
            let mut encoder = device.encoder("reverse all-to-all unpack");
            let blocks: Vec<Block> = self.source_blocks(s).iter().map(swap).collect();
            copy_blocks::encode(
                &mut encoder,
                device,
                &blocks,
                words,
                recv.buffer(),
                out.buffer(),
            )?;
            device.submit(encoder);
            results.push(out);
        }
        for device in &self.devices {
            device.wait()?;
        }
        Ok(results)
    }

    /// `counts[s][e]`: rows source `s` sent to expert `e`.
    pub fn counts(&self) -> &[Vec<usize>] {
        &self.counts
    }

    pub fn experts_per_device(&self) -> usize {
        self.experts / self.devices.len()
    }

    fn local_experts(&self, j: usize) -> std::ops::Range<usize> {
        let el = self.experts_per_device();
        j * el..(j + 1) * el
    }

    /// Rows source `s` sends to device `j`.
    fn segment_rows(&self, s: usize, j: usize) -> usize {
        self.local_experts(j).map(|e| self.counts[s][e]).sum()
    }

    /// Rows source `s` sends in all.
    fn source_rows(&self, s: usize) -> usize {
        self.counts[s].iter().sum()
    }

    /// Rows device `j` receives in all.
    fn dest_rows(&self, j: usize) -> usize {
        (0..self.devices.len())
            .map(|s| self.segment_rows(s, j))
            .sum()
    }

    /// Pack on source `s`: capacity layout → segments for destination 0, 1, ... back to back.
    /// Experts of one destination are contiguous, so the segments follow expert order.
    fn source_blocks(&self, s: usize) -> Vec<Block> {
        let mut row = 0;
        (0..self.experts)
            .map(|e| {
                let b = Block::new(e * self.capacity, row, self.counts[s][e]);
                row += self.counts[s][e];
                b
            })
            .collect()
    }

    /// Unpack on destination `j`: source-major received rows → local-expert-major rows.
    fn dest_blocks(&self, j: usize) -> Vec<Block> {
        let sources = self.devices.len();
        let recv_start: Vec<usize> = (0..sources)
            .scan(0, |acc, s| {
                let start = *acc;
                *acc += self.segment_rows(s, j);
                Some(start)
            })
            .collect();
        let mut blocks = Vec::new();
        let mut dst = 0;
        for e in self.local_experts(j) {
            for (s, &start) in recv_start.iter().enumerate() {
                let before: usize = (self.local_experts(j).start..e)
                    .map(|e2| self.counts[s][e2])
                    .sum();
                blocks.push(Block::new(start + before, dst, self.counts[s][e]));
                dst += self.counts[s][e];
            }
        }
        blocks
    }

    fn dest_offsets(&self, j: usize) -> Vec<u32> {
        let mut offsets = vec![0u32];
        for e in self.local_experts(j) {
            let rows: usize = (0..self.devices.len()).map(|s| self.counts[s][e]).sum();
            offsets.push(offsets.last().copied().unwrap_or(0) + rows as u32);
        }
        offsets
    }

    /// Packs every source's kept rows into its segments (step 2).
    fn pack_sources(&self, inputs: &[Tensor], d: usize, dtype: DType) -> Result<Vec<Tensor>> {
        let words = row_words(d, dtype)?;
        let mut packed = Vec::with_capacity(inputs.len());
        for (s, x) in inputs.iter().enumerate() {
            let device = &self.devices[s];
            let seg = Tensor::zeros(device, &[self.source_rows(s), d], dtype)?;
            let mut encoder = device.encoder("all-to-all pack");
            copy_blocks::encode(
                &mut encoder,
                device,
                &self.source_blocks(s),
                words,
                x.buffer(),
                seg.buffer(),
            )?;
            device.submit(encoder);
            packed.push(seg);
        }
        Ok(packed)
    }

    /// Step 3: moves segment (from, to) of every packed buffer, staged through the host. Forward,
    /// `packed[s]` holds source-major segments per destination; reversed, `packed[j]` holds
    /// per-source segments that go home.
    fn exchange(
        &self,
        packed: &[Tensor],
        d: usize,
        dtype: DType,
        reverse: bool,
    ) -> Result<Vec<Tensor>> {
        let n = self.devices.len();
        let row_bytes = (d * dtype.size()) as u64;
        // Rows of segment (s → j) in the forward direction.
        let seg = |s: usize, j: usize| self.segment_rows(s, j);
        let mut received = Vec::with_capacity(n);
        for to in 0..n {
            let rows = if reverse {
                self.source_rows(to)
            } else {
                self.dest_rows(to)
            };
            received.push(Tensor::zeros(&self.devices[to], &[rows, d], dtype)?);
        }
        for (from, sent) in packed.iter().enumerate() {
            let total = sent.shape()[0] as u64 * row_bytes;
            // Segments that stay on their device are copied on the GPU; only the others go
            // through the host.
            let crosses = self.devices.iter().any(|d| d != &self.devices[from]);
            let host = if crosses {
                self.devices[from].read_buffer(sent.buffer(), 0, total)?
            } else {
                Vec::new()
            };
            let mut src_row = 0;
            for (to, (device, dst)) in self.devices.iter().zip(&received).enumerate() {
                // Forward: sender `from` is source s, receiver `to` is expert device j.
                // Reverse: sender `from` is expert device j, receiver `to` is source s.
                let (s, j) = if reverse { (to, from) } else { (from, to) };
                let rows = seg(s, j);
                // Where the segment lands: after the segments from lower senders (forward), or in
                // the source's expert order, which is destination order (reverse).
                let dst_row: usize = if reverse {
                    (0..j).map(|j2| seg(s, j2)).sum()
                } else {
                    (0..s).map(|s2| seg(s2, j)).sum()
                };
                if device == &self.devices[from] {
                    copy_bytes(
                        sent,
                        src_row as u64 * row_bytes,
                        dst,
                        dst_row as u64 * row_bytes,
                        rows as u64 * row_bytes,
                    )?;
                } else {
                    let bytes = &host[(src_row as u64 * row_bytes) as usize
                        ..((src_row + rows) as u64 * row_bytes) as usize];
                    device.write_buffer(dst.buffer(), dst_row as u64 * row_bytes, bytes);
                }
                src_row += rows;
            }
        }
        Ok(received)
    }
}

fn swap(b: &Block) -> Block {
    Block::new(b.dst_row as usize, b.src_row as usize, b.rows as usize)
}

/// 32-bit words per row; rows must be whole words so every copy stays 4-byte aligned.
fn row_words(d: usize, dtype: DType) -> Result<usize> {
    let bytes = d * dtype.size();
    if !bytes.is_multiple_of(4) {
        return Err(Error::InvalidArgument {
            what: "all-to-all",
            reason: format!(
                "rows of {d} {} values are not a whole number of 32-bit words",
                dtype.name()
            ),
        });
    }
    Ok(bytes / 4)
}
