//! Programs over overlapping gangs and their plain-Rust references, shared by the runtime tests
//! and the soak, plus the check that every shared device ran gangs in one order; and the expert
//! exchange's ragged all-to-all with a plain-Rust model of its output buffers.

use gangway::kernels::TensorType;
use gangway::program::{CountsSide, HostData, Program, ProgramBuilder, Ragged, Regroup, RowBlock};
use gangway::sched::GangRecord;
use std::collections::HashMap;

/// `x * 2 + c`, then an all-to-all over the gang: the exchange a client's program does.
pub fn exchange_program(gang: &[usize], shard: usize, c: f32) -> Program {
    let mut p = ProgramBuilder::new(format!("exchange {gang:?}"));
    let x = p.arg(gang, shard);
    let y = p.affine("scale", gang, x, 2.0, c);
    let z = p.all_to_all("a2a", y);
    p.result(z);
    p.build().expect("a valid exchange program")
}

/// [`exchange_program`] on the host: `n` shards of `shard` values each.
pub fn exchange_reference(x: &[f32], n: usize, shard: usize, c: f32) -> Vec<f32> {
    let y: Vec<f32> = x.iter().map(|v| v * 2.0 + c).collect();
    let chunk = shard / n;
    let mut out = vec![0.0; x.len()];
    for src in 0..n {
        for dst in 0..n {
            for k in 0..chunk {
                out[dst * shard + src * chunk + k] = y[src * shard + dst * chunk + k];
            }
        }
    }
    out
}

/// The exchange, then an all-reduce of its shards, moved to the gang rotated by one device:
/// every collective and a transfer in one program. Results: the exchange, the moved sum.
pub fn mixed_program(gang: &[usize], shard: usize, c: f32) -> Program {
    let mut p = ProgramBuilder::new(format!("mixed {gang:?}"));
    let x = p.arg(gang, shard);
    let y = p.affine("scale", gang, x, 2.0, c);
    let z = p.all_to_all("a2a", y);
    let s = p.all_reduce("sum", z);
    let mut rotated = gang.to_vec();
    rotated.rotate_left(1);
    let t = p.transfer(s, &rotated);
    let u = p.relu("relu", &rotated, t);
    p.result(z);
    p.result(u);
    p.build().expect("a valid mixed program")
}

/// [`mixed_program`] on the host.
pub fn mixed_reference(x: &[f32], n: usize, shard: usize, c: f32) -> Vec<Vec<f32>> {
    let z = exchange_reference(x, n, shard, c);
    let mut sum = vec![0.0f32; shard];
    for part in z.chunks(shard) {
        for (s, v) in sum.iter_mut().zip(part) {
            *s += v;
        }
    }
    let relu: Vec<f32> = sum.iter().map(|v| v.max(0.0)).collect();
    vec![z, relu.repeat(n)]
}

/// Every shared device must have seen every pair of gangs in the same order.
pub fn assert_consistent_order(order: &[Vec<GangRecord>]) {
    let mut position: HashMap<(u64, usize), Vec<(usize, usize)>> = HashMap::new();
    for (device, log) in order.iter().enumerate() {
        assert!(
            log.windows(2).all(|w| w[0].seq < w[1].seq),
            "device {device} ran gangs out of sequence order"
        );
        for (pos, r) in log.iter().enumerate() {
            position
                .entry((r.run, r.node))
                .or_default()
                .push((device, pos));
        }
    }
    let gangs: Vec<_> = position.iter().filter(|(_, v)| v.len() > 1).collect();
    let mut pairs = 0;
    for (i, (_, a)) in gangs.iter().enumerate() {
        for (_, b) in &gangs[i + 1..] {
            let mut before = None;
            for &(d, pa) in a.iter() {
                if let Some(&(_, pb)) = b.iter().find(|(db, _)| *db == d) {
                    let now = pa < pb;
                    assert!(
                        before.is_none_or(|x| x == now),
                        "two gangs ran in different orders on shared devices"
                    );
                    before = Some(now);
                    pairs += 1;
                }
            }
        }
    }
    assert!(pairs > 0, "the test must exercise gangs that share devices");
}

/// Submits `runs` runs of [`exchange_program`]`(gang of `n`, shard, c)` (compiled as `exec`)
/// through `client`, two in flight, alternating parallel and sequential dispatch, checking each
/// result against [`exchange_reference`].
pub fn run_exchanges(
    client: &gangway::sched::Client,
    exec: &std::sync::Arc<gangway::program::Executable>,
    n: usize,
    shard: usize,
    c: usize,
    runs: usize,
) {
    use gangway::sched::{DispatchMode, RunOptions};
    let mut rng = gangway::Rng::new(c as u64);
    let mut pending = Vec::new();
    for i in 0..runs {
        let x = rng.vec(shard * n);
        let mode = if i % 2 == 0 {
            DispatchMode::Parallel
        } else {
            DispatchMode::Sequential
        };
        let opts = RunOptions {
            mode,
            ..RunOptions::default()
        };
        let want = exchange_reference(&x, n, shard, c as f32);
        pending.push((client.submit(exec, vec![x], opts).unwrap(), want));
        if pending.len() == 2 {
            let (h, want) = pending.remove(0);
            super::assert_close("exchange", &h.wait().unwrap()[0], &want, 1e-6);
        }
    }
    for (h, want) in pending {
        super::assert_close("exchange", &h.wait().unwrap()[0], &want, 1e-6);
    }
}

/// The expert exchange's all-to-all, ragged, over `devices` devices holding `experts` local
/// experts of `capacity` slots of `words` values: every device's `[expert][capacity]` slot blocks
/// go to the devices of their experts, expert-major, only each block's counted rows, and back.
/// The counts (one record of two words per block, the count first) go first, in an exchange of
/// their own, as the MoE layers' do.
#[derive(Debug, Clone, Copy)]
pub struct RaggedExchange {
    pub devices: usize,
    pub experts: usize,
    pub capacity: usize,
    pub words: usize,
}

impl RaggedExchange {
    /// Values of a shard.
    pub fn shard(&self) -> usize {
        self.devices * self.experts * self.capacity * self.words
    }

    /// The slot-major ↔ expert-major blocks of `rows` rows each: `(there, back)`.
    fn blocks(&self, rows: usize) -> (Vec<RowBlock>, Vec<RowBlock>) {
        let (n, el) = (self.devices, self.experts);
        let mut there = Vec::new();
        let mut back = Vec::new();
        for s in 0..n {
            for e in 0..el {
                let (slot, expert) = ((s * el + e) * rows, (e * n + s) * rows);
                there.push(RowBlock::new(slot, expert, rows));
                back.push(RowBlock::new(expert, slot, rows));
            }
        }
        (there, back)
    }

    /// Arguments: the slots (f32), the counts. Results: the slots at the experts' devices, and
    /// back at their own.
    pub fn program(&self) -> Program {
        let (n, el, cap) = (self.devices, self.experts, self.capacity);
        let rows = n * el * cap;
        let gang: Vec<usize> = (0..n).collect();
        let mut p = ProgramBuilder::new("ragged exchange");
        let x = p.arg(&gang, self.shard());
        let counts = p.typed_arg(&gang[..], TensorType::u32(&[n * el * 2]));
        let (records, _) = self.blocks(1);
        let per_block = Regroup::from_blocks(n * el, 8, &[], &records).unwrap();
        let live = p.all_to_all_regrouped("counts a2a", counts, None, per_block);
        let (there, back) = self.blocks(cap);
        let ragged = |send: &[RowBlock], recv: &[RowBlock], counts| Regroup {
            ragged: Some(Ragged {
                block_rows: cap as u32,
                record_words: 2,
                counts,
            }),
            ..Regroup::from_blocks(rows, self.words * 4, send, recv).unwrap()
        };
        let y = p.all_to_all_ragged(
            "ragged a2a",
            (x, live),
            None,
            ragged(&[], &there, CountsSide::Sent),
        );
        let z = p.all_to_all_ragged(
            "ragged a2a back",
            (y, live),
            None,
            ragged(&back, &[], CountsSide::Received),
        );
        p.result(y);
        p.result(z);
        p.build().expect("a valid ragged exchange")
    }

    /// Run `run`'s counts for source `s`'s block `b`: run 0 counts nothing, run 2 every row,
    /// the others some, different per block.
    pub fn count(&self, run: usize, s: usize, b: usize) -> usize {
        match run {
            0 => 0,
            2 => self.capacity,
            _ => (s * 7 + b * 3 + run) % (self.capacity + 1),
        }
    }

    /// The arguments of run `run` with slots `input`.
    pub fn args(&self, run: usize, input: &[f32]) -> Vec<HostData> {
        let blocks = self.devices * self.experts;
        let records: Vec<u32> = (0..self.devices)
            .flat_map(|s| (0..blocks).flat_map(move |b| [self.count(run, s, b) as u32, 0xDEAD]))
            .collect();
        vec![input.to_vec().into(), records.into()]
    }

    /// Run `run` on the host: writes the counted rows into `held` (the expert side's output
    /// buffers) and `home` (the way back's), whose rows not counted keep what they held;
    /// returns how many rows moved each way.
    pub fn apply(&self, run: usize, input: &[f32], held: &mut [f32], home: &mut [f32]) -> usize {
        let (n, el, cap, words, shard) = (
            self.devices,
            self.experts,
            self.capacity,
            self.words,
            self.shard(),
        );
        let mut live = 0;
        // Source s's block b (expert e of device j) lands on j at block [e][s], and comes back.
        for s in 0..n {
            for b in 0..n * el {
                let (j, e) = (b / el, b % el);
                for r in 0..self.count(run, s, b) {
                    let from = s * shard + (b * cap + r) * words;
                    let to = j * shard + ((e * n + s) * cap + r) * words;
                    held[to..to + words].copy_from_slice(&input[from..from + words]);
                    home[from..from + words].copy_from_slice(&input[from..from + words]);
                    live += 1;
                }
            }
        }
        live
    }
}
