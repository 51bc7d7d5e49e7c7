//! The `scaleout` suite: the job's wire, and a training step over every rank's devices. Run it
//! in one process and under `mpirun -np 2` and `-np 4` with the same total device count
//! (`scripts/bench-scaleout.sh` does all three and puts them side by side):
//!
//! - **`exchange B B over R ranks`**: every rank hands every other rank `B` bytes through the
//!   job's transport and waits for theirs (one all-gather: what an all-to-all or all-reduce of
//!   the MoE step does, at the sizes it sends). The figure is the bytes each rank sent per
//!   second; the median time of one exchange is the latency at that size; the metrics give the
//!   message's bytes and the ranks, from which `gangway plan` fits a link. Skipped in one
//!   process.
//! - **`moe step: R ranks × D devices`** (`1 rank × 4 devices` in one process): the MoE LM's training step at `train moe`'s defaults
//!   over the whole mesh (experts over every rank's devices, one routing group per device), as
//!   in [`super::moe`]'s `parallel` section: tokens/s, and from the trace the collectives'
//!   exposed share, the all-to-all and all-reduce shares and the overlap, on rank 0's devices.
//!
//! Every rank runs every case (the job's runs are SPMD); rank 0 writes the report.

use super::harness::{Blocking, BlockingRun};
use super::moe::{MoeBenchOptions, train_case};
use super::planned::Planned;
use super::work::{Work, WorkUnit};
use crate::sched::Runtime;
use crate::{Job, Result};

/// Sizes of the suite.
#[derive(Debug, Clone)]
pub struct ScaleoutOptions {
    /// Bytes each rank sends every other rank in one exchange.
    pub sizes: Vec<usize>,
}

impl ScaleoutOptions {
    /// 1 KiB; what a device of the MoE step at `train moe`'s defaults sends in an all-to-all
    /// (E·capacity·d·4 = 8·10·64·4 bytes with 4 devices) and in the all-reduce (its 41,472 dense
    /// gradients); 4 MiB.
    pub fn standard() -> Self {
        Self {
            sizes: vec![1 << 10, 20_480, 165_888, 4 << 20],
        }
    }

    pub fn quick() -> Self {
        Self {
            sizes: vec![1 << 10, 64 << 10],
        }
    }
}

struct Exchange {
    job: Job,
    bytes: usize,
}

impl BlockingRun for Exchange {
    fn run(&mut self) -> Result<()> {
        let all = self.job.all_gather_bytes(vec![0x5a; self.bytes])?;
        let whole = all.len() == self.job.size() && all.iter().all(|b| b.len() == self.bytes);
        if !whole {
            return Err(crate::Error::Job {
                rank: self.job.rank(),
                reason: format!("an exchange of {} bytes came back short", self.bytes),
            });
        }
        Ok(())
    }

    /// The message's size and the ranks, for fitting a link to the exchanges (`gangway plan`).
    fn extras(&mut self) -> Result<super::harness::Extras> {
        let mut extras = super::harness::Extras::default();
        extras
            .metrics
            .insert(MESSAGE_BYTES.into(), self.bytes as f64);
        extras.metrics.insert(RANKS.into(), self.job.size() as f64);
        Ok(extras)
    }
}

/// The exchange cases' metrics: the bytes of one message (rank to rank), and the ranks.
pub const MESSAGE_BYTES: &str = "message bytes";
pub const RANKS: &str = "ranks";

/// The exchanges, then the step over the mesh (see the module docs).
pub fn plan(runtime: &Runtime, o: &ScaleoutOptions, moe: &MoeBenchOptions) -> Result<Vec<Planned>> {
    let job = runtime.job();
    let ranks = job.size();
    let mut out = Vec::new();
    for &bytes in &o.sizes {
        let name = format!("exchange {bytes} B over {}", plural(ranks, "rank"));
        if ranks < 2 {
            out.push(Planned::skip(
                name,
                "needs 2 or more ranks: run under mpirun (built with --features mpi)".into(),
            ));
            continue;
        }
        let sent = (bytes * (ranks - 1)) as f64;
        let job = job.clone();
        out.push(Planned::Run(Box::new(Blocking::new(
            name,
            Work::new(sent, WorkUnit::Byte),
            move || Ok(Exchange { job, bytes }),
        ))));
    }
    let (cfg, tokens) = moe.parallel;
    let mesh = runtime.mesh();
    let per_rank = mesh.len() / ranks.max(1);
    let name = format!(
        "moe step: {} × {}",
        plural(ranks, "rank"),
        plural(per_rank, "device")
    );
    if !cfg.experts.is_multiple_of(mesh.len()) || !tokens.is_multiple_of(mesh.len()) {
        out.push(Planned::skip(
            name,
            format!(
                "{} experts and {tokens} tokens must split evenly over the mesh's {} devices",
                cfg.experts,
                mesh.len()
            ),
        ));
    } else {
        let sized = MoeBenchOptions {
            tokens,
            ..moe.clone()
        };
        out.push(Planned::Run(Box::new(train_case(
            runtime, name, mesh, cfg, &sized, true,
        ))));
    }
    Ok(out)
}

/// `1 rank`, `2 ranks`.
fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}
