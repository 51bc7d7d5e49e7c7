//! Programs over overlapping gangs and their plain-Rust references, shared by the runtime tests
//! and the soak, plus the check that every shared device ran gangs in one order.

use gangway::program::{Program, ProgramBuilder};
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
