//! The job: the processes (ranks) one program runs on, and this process's place among them.
//!
//! One process alone is a job of one ([`Job::single`]). Under `mpirun` (with the `mpi` feature)
//! every rank joins one job ([`Job::from_env`]) and the job's mesh is every rank's devices, rank
//! by rank, the same list on every rank ([`Job::mesh`]). [`Job::in_process`] makes a job whose
//! ranks are threads of one process, joined in memory, for tests and for trying multi-rank
//! programs without MPI. A runtime over a job ([`crate::sched::RuntimeOptions::job`]) runs
//! programs over the whole mesh: each rank runs its own devices' part, and the data between ranks
//! goes over the job's transport: [`transport`] is the seam (the mailbox messages and the
//! [`transport::Transport`] trait), [`loopback`] carries them between ranks in one process, and
//! `mpi` (with the `mpi` feature) with OpenMPI across processes and hosts. Within a process,
//! programs move data with the runtime's transfer and collective nodes (`Op::Transfer`,
//! `Op::AllToAll`, `Op::AllReduce`), staged through the host mailbox.
//!
//! Programs over several ranks are SPMD, as in JAX's multi-controller model: every rank builds the
//! same programs and submits the same runs spanning ranks in the same order, each client of a
//! unique name. Ranks agree on their settings before they run ([`Job::agree`], `settings.rs`).

pub mod loopback;
#[cfg(feature = "mpi")]
pub mod mpi;
mod settings;
pub mod transport;

pub use settings::Settings;

use crate::device::{MeshDevice, RemoteDevice};
use crate::mesh::Mesh;
use crate::trace::{Event, Track, ns_since_epoch};
use crate::{Device, DeviceInfo, Error, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Instant;
use transport::Transport;

/// The environment variables a launcher sets in every rank (OpenMPI, PMIx, PMI/Slurm).
const LAUNCHER_ENV: [&str; 3] = ["OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"];

/// This process's place in its job. Cheap to clone.
#[derive(Clone)]
pub struct Job(Option<Arc<dyn Transport>>);

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("rank", &self.rank())
            .field("size", &self.size())
            .finish()
    }
}

impl Default for Job {
    fn default() -> Self {
        Self::single()
    }
}

/// What each rank tells the others when the mesh is formed.
#[derive(Serialize, Deserialize)]
struct RankDevices {
    host: String,
    devices: Vec<DeviceInfo>,
}

/// A whole job's trace: every rank's events, and a name per (rank, device) process.
pub type JobTrace = (Vec<Event>, Vec<Track>);

/// One rank's trace clock against rank 0's.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClockOffset {
    /// Add to this rank's trace times to get rank 0's: the difference of the two processes'
    /// trace epochs on the wall clock (exact for ranks of one host; across hosts as good as
    /// their wall clocks agree).
    pub to_root_ns: i64,
    /// The same offset measured around barriers (every rank notes its trace clock as it leaves
    /// each of several barriers) minus `to_root_ns`: how far the hosts' wall clocks disagree,
    /// within the barriers' release time.
    pub skew_ns: i64,
    /// Half the spread of the barrier measurements: how far `skew_ns` itself may be off.
    pub uncertainty_ns: u64,
}

impl Job {
    /// A job of one process.
    pub fn single() -> Self {
        Self(None)
    }

    /// `n` ranks as threads of this process, joined in memory: give `jobs[i]` to rank `i`'s
    /// thread.
    pub fn in_process(n: usize) -> Result<Vec<Job>> {
        if n == 0 {
            return Err(Error::InvalidArgument {
                what: "job",
                reason: "a job needs at least one rank".into(),
            });
        }
        Ok(crate::job::loopback::transports(n)?
            .into_iter()
            .map(|t| Job(Some(t)))
            .collect())
    }

    /// Whether a launcher (`mpirun`, `srun`) started this process as one rank of several.
    pub fn launched() -> bool {
        LAUNCHER_ENV.iter().any(|v| std::env::var_os(v).is_some())
    }

    /// The job this process was launched into: every rank's under `mpirun` (initialising MPI),
    /// else a job of one.
    pub fn from_env() -> Result<Self> {
        if !Self::launched() {
            return Ok(Self::single());
        }
        #[cfg(feature = "mpi")]
        {
            Ok(Self(Some(crate::job::mpi::Mpi::start()?)))
        }
        #[cfg(not(feature = "mpi"))]
        {
            // The launcher's word for this rank, for the message.
            let rank = ["OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"]
                .iter()
                .find_map(|v| std::env::var(v).ok()?.parse().ok())
                .unwrap_or(0);
            Err(Error::Job {
                rank,
                reason: "started by an MPI launcher, but this gangway was built without the `mpi` \
                         feature: build it with `cargo build --release --features mpi`"
                    .into(),
            })
        }
    }

    pub(crate) fn transport(&self) -> Option<&Arc<dyn Transport>> {
        self.0.as_ref()
    }

    pub fn rank(&self) -> usize {
        self.0.as_ref().map_or(0, |t| t.rank())
    }

    pub fn size(&self) -> usize {
        self.0.as_ref().map_or(1, |t| t.size())
    }

    /// Rank 0: the one that sequences the gangs spanning ranks, prints and writes files.
    pub fn is_root(&self) -> bool {
        self.rank() == 0
    }

    /// This process's host name.
    pub fn host(&self) -> String {
        match &self.0 {
            Some(t) => t.host(),
            None => local_host(),
        }
    }

    /// The job's mesh, one axis ([`crate::mesh::LINE_AXIS`]): every rank's `local` devices in
    /// rank order, this rank's as [`MeshDevice::Local`]. Every rank calls it (a collective).
    pub fn mesh(&self, local: &[Device]) -> Result<Mesh> {
        let mine = RankDevices {
            host: self.host(),
            devices: local.iter().map(|d| d.info().clone()).collect(),
        };
        let all: Vec<RankDevices> = self.all_gather(&mine)?;
        let mut mesh = Vec::new();
        for (rank, r) in all.into_iter().enumerate() {
            if rank == self.rank() {
                mesh.extend(local.iter().map(MeshDevice::from));
                continue;
            }
            for (index, info) in r.devices.into_iter().enumerate() {
                mesh.push(MeshDevice::Remote(Box::new(RemoteDevice {
                    rank,
                    host: r.host.clone(),
                    index,
                    info,
                })));
            }
        }
        Ok(Mesh::line(&mesh))
    }

    /// Every rank's `value`, in rank order (a collective: every rank calls it, between runs).
    pub fn all_gather<T: Serialize + DeserializeOwned>(&self, value: &T) -> Result<Vec<T>> {
        let bytes = to_bytes(self.rank(), value)?;
        match &self.0 {
            None => Ok(vec![from_bytes(0, &bytes)?]),
            Some(t) => t
                .all_gather(bytes)?
                .iter()
                .enumerate()
                .map(|(rank, b)| from_bytes(rank, b))
                .collect(),
        }
    }

    /// Every rank's `bytes`, in rank order, as they are (no encoding): the job's wire as it is,
    /// for measuring it. A collective.
    pub fn all_gather_bytes(&self, bytes: Vec<u8>) -> Result<Vec<Vec<u8>>> {
        match &self.0 {
            None => Ok(vec![bytes]),
            Some(t) => t.all_gather(bytes),
        }
    }

    /// Every rank's `value` on rank 0 (`None` on the others); a collective, between runs.
    pub fn gather<T: Serialize + DeserializeOwned>(&self, value: &T) -> Result<Option<Vec<T>>> {
        let bytes = to_bytes(self.rank(), value)?;
        match &self.0 {
            None => Ok(Some(vec![from_bytes(0, &bytes)?])),
            Some(t) => t
                .gather(bytes)?
                .map(|all| {
                    all.iter()
                        .enumerate()
                        .map(|(rank, b)| from_bytes(rank, b))
                        .collect()
                })
                .transpose(),
        }
    }

    /// Returns once every rank called it.
    pub fn barrier(&self) -> Result<()> {
        self.0.as_ref().map_or(Ok(()), |t| t.barrier())
    }

    /// Every rank's trace clock against rank 0's, in rank order (see [`ClockOffset`]). A
    /// collective: `rounds` barriers, then a gather.
    pub fn clock_offsets(&self, rounds: usize) -> Result<Vec<ClockOffset>> {
        let mut left = Vec::with_capacity(rounds.max(1));
        for _ in 0..rounds.max(1) {
            self.barrier()?;
            left.push(ns_since_epoch(Instant::now()) as i64);
        }
        let all: Vec<(i128, Vec<i64>)> = self.all_gather(&(epoch_on_wall_clock(), left))?;
        let (root_epoch, root) = &all[0];
        Ok(all
            .iter()
            .map(|(epoch, mine)| {
                let to_root = i64::try_from(epoch - root_epoch).unwrap_or(0);
                let mut d: Vec<i64> = root.iter().zip(mine).map(|(r, m)| r - m).collect();
                d.sort_unstable();
                let spread = d.last().copied().unwrap_or(0) - d.first().copied().unwrap_or(0);
                ClockOffset {
                    to_root_ns: to_root,
                    skew_ns: d[d.len() / 2] - to_root,
                    uncertainty_ns: (spread / 2).unsigned_abs(),
                }
            })
            .collect())
    }

    /// One trace of the whole job on rank 0 (`None` on the others): every rank's `events`, its
    /// devices renumbered rank by rank (rank r's device i after every device of ranks before r)
    /// so that each (rank, device) is one process of the Chrome trace, its [`Track`] `tracks`'
    /// (each rank's own, with its rank set when there are several), and every time moved onto rank 0's clock by
    /// `offsets` ([`Self::clock_offsets`], taken on every rank alike). A collective.
    pub fn gather_trace(
        &self,
        events: Vec<Event>,
        tracks: &[Track],
        offsets: &[ClockOffset],
    ) -> Result<Option<JobTrace>> {
        let mine = (events, tracks.to_vec());
        let Some(all) = self.gather(&mine)? else {
            return Ok(None);
        };
        let (mut events, mut named) = (Vec::new(), Vec::new());
        let mut base = 0;
        for (rank, (rank_events, rank_names)) in all.into_iter().enumerate() {
            let shift = offsets.get(rank).map_or(0, |o| o.to_root_ns);
            let at = |t: u64| crate::trace::shifted_ns(t, shift);
            let devices = rank_names
                .iter()
                .map(|t| t.id + 1)
                .chain(rank_events.iter().map(|e| e.device + 1))
                .max()
                .unwrap_or(0);
            for mut e in rank_events {
                e.device += base;
                (e.start_ns, e.end_ns) = (at(e.start_ns), at(e.end_ns));
                events.push(e);
            }
            let prefix = if self.size() > 1 {
                format!("rank {rank}: ")
            } else {
                String::new()
            };
            let several = self.size() > 1;
            named.extend(rank_names.into_iter().map(|mut t| {
                t.id += base;
                t.label = format!("{prefix}{}", t.label);
                t.rank = several.then_some(rank);
                t
            }));
            base += devices;
        }
        events.sort_by_key(|e| (e.start_ns, e.end_ns));
        Ok(Some((events, named)))
    }

    /// The job's end on this rank: waits for every rank (so none finalises while another still
    /// needs it), then closes the link (MPI_Finalize). Call it once, after the last run and the
    /// last collective; a job of one has nothing to do.
    pub fn finish(&self) -> Result<()> {
        if let Some(t) = &self.0 {
            t.barrier()?;
            t.shutdown();
        }
        Ok(())
    }

    /// Ends the whole job now, every rank, printing `message` (one line) first. In a job of one
    /// it ends the process.
    pub fn abort(&self, message: &str) -> ! {
        match &self.0 {
            Some(t) => t.abort(1, message),
            None => {
                eprintln!("{message}");
                std::process::exit(1)
            }
        }
    }
}

/// This process's trace epoch on the wall clock, in nanoseconds since 1970.
fn epoch_on_wall_clock() -> i128 {
    let since_epoch = Instant::now().saturating_duration_since(crate::trace::process_epoch());
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    wall.as_nanos() as i128 - since_epoch.as_nanos() as i128
}

fn to_bytes<T: Serialize>(rank: usize, value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| Error::Job {
        rank,
        reason: format!("cannot encode what it shares: {e}"),
    })
}

fn from_bytes<T: DeserializeOwned>(rank: usize, bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| Error::Job {
        rank,
        reason: format!("shared something this rank cannot read: {e}"),
    })
}

/// The host name, from the kernel (no libc call: the library forbids unsafe code).
pub(crate) fn local_host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into())
}

/// Runs `f` on every rank of an in-process job of `n`, each on its own thread; the results in
/// rank order.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) fn on_each_rank<T: Send>(n: usize, f: impl Fn(Job) -> T + Sync) -> Vec<T> {
    let jobs = Job::in_process(n).unwrap();
    std::thread::scope(|s| {
        let handles: Vec<_> = jobs.into_iter().map(|job| s.spawn(|| f(job))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_in_process_job_gathers_in_rank_order_and_aligns_clocks() {
        let ranks = on_each_rank(3, |job| {
            let r = job.rank();
            let all: Vec<String> = job.all_gather(&format!("r{r}")).unwrap();
            let root: Option<Vec<usize>> = job.gather(&(r * 10)).unwrap();
            let offsets = job.clock_offsets(5).unwrap();
            (r, job.size(), all, root, offsets)
        });
        for (r, size, all, root, offsets) in ranks {
            assert_eq!(size, 3);
            assert_eq!(all, ["r0", "r1", "r2"]);
            assert_eq!(root, (r == 0).then(|| vec![0, 10, 20]));
            // One process, one clock and one epoch: no offset; the barriers' disagreement is
            // their release time only.
            assert_eq!(offsets.len(), 3);
            for o in offsets {
                assert!(o.to_root_ns.unsigned_abs() < 1_000_000, "{o:?}");
                assert!(o.skew_ns.unsigned_abs() < 50_000_000, "{o:?}");
            }
        }
        let single = Job::single();
        assert_eq!((single.rank(), single.size()), (0, 1));
        assert_eq!(single.all_gather(&7u32).unwrap(), vec![7]);
        assert!(Job::in_process(0).is_err());
    }
}
