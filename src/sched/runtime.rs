//! The runtime (one per process) and the handles its users hold: [`Runtime`], [`Client`],
//! [`RunHandle`]. It owns the devices' workers and the gang scheduler (Pathways §4.4), whose
//! shared state and admission live in `state.rs`.
//!
//! Clients submit runs of compiled programs. Admission picks the next run (FIFO, or by
//! proportional shares) and, under one lock, gives each of its nodes a global sequence number and
//! appends the node's work to the queue of every device in its gang. Each device's worker takes
//! its queue in that order (running a run's later independent gangs ahead of one that waits, see
//! [`super::worker`]), so two gangs that share devices run in the same order on all of them and
//! collectives of concurrent programs can never deadlock or interleave wrongly.
//!
//! Under parallel dispatch the submitting thread records the run's command buffers first (one
//! per device where nothing in the run waits). A run its caller waits for at once
//! ([`Client::run`], [`Client::submit_and_drive`]) on one of this process's devices is driven on
//! the caller's thread while that device's worker is idle, in the same gang order;
//! [`Client::submit`] leaves every run to the workers.

use super::clients::ClientTable;
use super::mailbox::Inbox;
use super::options::{ClientStats, Policy, RuntimeOptions};
use super::record::{may_record_together, record, record_together};
use super::remote::Remote;
use super::run::{Role, RunEnv, RunOptions, RunState};
use super::state::{GangRecord, SchedState, Shared};
use super::worker;
use crate::device::MeshDevice;
use crate::job::Job;
use crate::mesh::Mesh;
use crate::program::{Executable, HostData};
use crate::trace::{Event, Tracer};
use crate::{Device, Error, Result};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

static NEXT_RUN: AtomicU64 = AtomicU64::new(1);

/// The devices' workers and the gang scheduler in front of them: one per process, handed to
/// every workload. Clones are handles to the same runtime; the workers stop when the last one is
/// dropped (after the runs already queued).
#[derive(Debug, Clone)]
pub struct Runtime(Arc<Owner>);

/// Quiets a runtime from another thread ([`Runtime::quieter`]).
#[derive(Debug, Clone)]
pub struct Quieter(Weak<Shared>);

impl Quieter {
    /// Stops admitting runs and waits, at most `timeout`, until none is in flight; true when
    /// none is (or the runtime is gone). A process about to exit on a signal calls it first:
    /// `exit` runs the drivers' own teardown (Mesa's EGL display among them), and a device
    /// thread still in a driver call meanwhile can crash the exit (a Ctrl-C'd job on the GL
    /// adapter ended by SIGABRT about once in twenty). Queued runs stay queued.
    pub fn quiet(&self, timeout: Duration) -> bool {
        let Some(shared) = self.0.upgrade() else {
            return true;
        };
        shared.lock().paused = true;
        let until = Instant::now() + timeout;
        loop {
            if shared.lock().in_flight == 0 {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// What the last [`Runtime`] handle shuts down.
#[derive(Debug)]
struct Owner {
    shared: Arc<Shared>,
    workers: Vec<std::thread::JoinHandle<()>>,
}

/// One client of a runtime; runs it submits are admitted by its share. Clones are the same
/// client; when the last is dropped and its runs are done, the runtime forgets it (its counts
/// stay in [`Runtime::client_stats`], by name).
#[derive(Debug, Clone)]
pub struct Client(Arc<ClientSlot>);

/// A client's slot in its runtime, freed when the last handle to it goes.
#[derive(Debug)]
struct ClientSlot {
    shared: Arc<Shared>,
    index: usize,
    /// Its name: what keys its runs spanning ranks, the same on every rank.
    name: String,
    /// Every rank submits its runs ([`Runtime::client`] in a job of several ranks).
    job_wide: bool,
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        self.shared.lock().clients.release(self.index);
    }
}

/// A submitted run: wait for its results.
#[derive(Debug)]
pub struct RunHandle {
    run: Arc<RunState>,
    timeout: Duration,
}

impl Runtime {
    /// Starts one worker thread per device.
    pub fn new(devices: Vec<Device>, opts: RuntimeOptions) -> Result<Self> {
        if devices.is_empty() {
            return Err(Error::InvalidArgument {
                what: "runtime",
                reason: "no devices".into(),
            });
        }
        let n = devices.len();
        // The job's mesh: a collective, every rank's runtime forms it at once.
        let mesh = if opts.job.size() > 1 {
            opts.job.mesh(&devices)?
        } else {
            Mesh::line(&devices[..])
        };
        let remote = opts.job.transport().map(|t| Remote::new(t.clone()));
        let shared = Arc::new(Shared {
            inboxes: devices.iter().map(|d| Arc::new(Inbox::new(d))).collect(),
            injected_panics: (0..n).map(|_| Mutex::default()).collect(),
            devices,
            mesh,
            remote,
            bells: (0..n).map(|_| Default::default()).collect(),
            cores: (0..n).map(|_| Default::default()).collect(),
            state: Mutex::new(SchedState {
                policy: opts.policy,
                max_in_flight: opts.max_in_flight,
                next_seq: 0,
                arrivals: 0,
                vtime: 0.0,
                in_flight: 0,
                clients: ClientTable::default(),
                queues: (0..n).map(|_| VecDeque::new()).collect(),
                order: vec![Vec::new(); n],
                shutdown: false,
                paused: false,
            }),
            gpu_timestamps: AtomicBool::new(opts.gpu_timestamps),
            opts,
        });
        let workers = (0..n)
            .map(|i| worker::spawn(shared.clone(), i))
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(|e| Error::InvalidArgument {
                what: "runtime",
                reason: format!("cannot start a worker thread: {e}"),
            })?;
        if let Some(remote) = &shared.remote {
            // Weak: the transport outlives no runtime through its sink.
            let weak = Arc::downgrade(&shared);
            remote.transport.set_sink(Arc::new(move |from, message| {
                if let Some(shared) = weak.upgrade() {
                    shared.receive(from, message);
                }
            }));
        }
        Ok(Self(Arc::new(Owner { shared, workers })))
    }

    /// The job's mesh, one axis ([`crate::mesh::LINE_AXIS`]): every rank's devices in rank order
    /// (this process's as in [`Self::devices`]); just this process's devices when it is alone.
    /// [`Mesh::reshape`] lays it out on other axes; [`crate::MeshDevice::local`] says which
    /// devices are this process's.
    pub fn mesh(&self) -> &Mesh {
        &self.0.shared.mesh
    }

    /// The job this runtime is part of.
    pub fn job(&self) -> &Job {
        &self.0.shared.opts.job
    }

    pub fn devices(&self) -> &[Device] {
        &self.0.shared.devices
    }

    /// The process-wide event stream: every run's events go here when it is on.
    pub fn tracer(&self) -> &Tracer {
        &self.0.shared.opts.tracer
    }

    /// Times the kernels of later traced runs with GPU timestamps (where the adapter has them)
    /// or on the host ([`RuntimeOptions::gpu_timestamps`]); for benchmarks of the two.
    pub fn set_gpu_timestamps(&self, on: bool) {
        self.0.shared.gpu_timestamps.store(on, Ordering::Relaxed);
    }

    /// Whether traced kernels are timed with GPU timestamps now.
    pub fn gpu_timestamps(&self) -> bool {
        self.0.shared.gpu_timestamps.load(Ordering::Relaxed)
    }

    /// A new client with a proportional `share` (ignored under FIFO).
    ///
    /// In a job of several ranks the client is the job's: every rank makes it (by the same
    /// name, unique among such clients) and submits the same runs through it in the same order
    /// (SPMD), whichever ranks' devices they run on; each run is sequenced by rank 0 and every
    /// rank gets its results. [`Self::local_client`] is for work of this rank alone.
    pub fn client(&self, name: &str, share: u32) -> Client {
        self.new_client(name, share, self.0.shared.remote.is_some())
    }

    /// A client for runs of this rank alone, on its own devices: no other rank submits them or
    /// hears of them (each Branch-Train-Merge branch under mpirun is one). In a job of one it is
    /// [`Self::client`].
    pub fn local_client(&self, name: &str, share: u32) -> Client {
        self.new_client(name, share, false)
    }

    fn new_client(&self, name: &str, share: u32, job_wide: bool) -> Client {
        let mut state = self.0.shared.lock();
        let vtime = state.vtime;
        let index = state.clients.add(name, share, vtime);
        Client(Arc::new(ClientSlot {
            shared: self.0.shared.clone(),
            index,
            name: name.to_string(),
            job_wide,
        }))
    }

    /// The order in which every device ran its gangs, per device: the last
    /// [`RuntimeOptions::gang_order_keep`] to half of it (older ones are forgotten in halves, so
    /// a long-lived runtime's memory stays bounded); nothing where that is 0.
    pub fn gang_order(&self) -> Vec<Vec<GangRecord>> {
        self.0.shared.lock().order.clone()
    }

    /// Stops admitting runs: submissions queue up, in flight ones finish. To line clients up.
    pub fn pause_admission(&self) {
        self.0.shared.lock().paused = true;
    }

    /// Changes how later runs are admitted: the policy between clients and the window of runs
    /// in flight. Runs already admitted are not affected. (One runtime serves the whole
    /// process, so a benchmark of the policies changes them here rather than starting its own.)
    pub fn set_admission(&self, policy: Policy, max_in_flight: usize) {
        let mut state = self.0.shared.lock();
        state.policy = policy;
        state.max_in_flight = max_in_flight;
        self.0.shared.admit(&mut state);
    }

    /// The admission policy and window now in force.
    pub fn admission(&self) -> (Policy, usize) {
        let state = self.0.shared.lock();
        (state.policy, state.max_in_flight)
    }

    /// A handle that quiets this runtime from another thread (a Ctrl-C handler) without
    /// keeping it alive: see [`Quieter::quiet`].
    pub fn quieter(&self) -> Quieter {
        Quieter(Arc::downgrade(&self.0.shared))
    }

    pub fn resume_admission(&self) {
        let mut state = self.0.shared.lock();
        state.paused = false;
        self.0.shared.admit(&mut state);
    }

    /// Fault injection, for tests of failure containment: `device`'s worker panics with
    /// `message` when it next serves a task. That run fails at once with [`Error::Panic`] naming
    /// the device; so does every later run that needs the device, while other devices go on.
    #[doc(hidden)]
    pub fn inject_panic(&self, device: &Device, message: &str) -> Result<()> {
        let worker = self
            .0
            .shared
            .worker_of(device)
            .ok_or_else(|| Error::InvalidArgument {
                what: "inject_panic",
                reason: format!("device {} is not in this runtime", device.label()),
            })?;
        *self.0.shared.injected_panics[worker]
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(message.to_string());
        Ok(())
    }

    pub fn clear_gang_order(&self) {
        for o in &mut self.0.shared.lock().order {
            o.clear();
        }
    }

    /// What every client was given: the live ones, then those gone, summed by name.
    pub fn client_stats(&self) -> Vec<ClientStats> {
        self.0.shared.lock().clients.stats()
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.shared.lock().shutdown = true;
        self.shared.ring_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl Client {
    /// The runtime's process-wide event stream (see [`Runtime::tracer`]).
    pub fn tracer(&self) -> &Tracer {
        &self.0.shared.opts.tracer
    }

    /// Every device of the client's runtime, in its order.
    pub fn devices(&self) -> &[Device] {
        &self.0.shared.devices
    }

    /// The job's mesh ([`Runtime::mesh`]).
    pub fn mesh(&self) -> &Mesh {
        &self.0.shared.mesh
    }

    /// The job the client's runtime is part of.
    pub fn job(&self) -> &Job {
        &self.0.shared.opts.job
    }

    /// Submits a run of `exec` with `args` (argument i: every shard's values, one after another).
    ///
    /// Waits for a free run slot of `exec`; in parallel dispatch, records every command buffer of
    /// the run before it is admitted, one thread per device.
    pub fn submit<A: Into<HostData>>(
        &self,
        exec: &Arc<Executable>,
        args: Vec<A>,
        opts: RunOptions,
    ) -> Result<RunHandle> {
        Ok(self.submit_as(exec, args, opts, false)?.0)
    }

    /// [`Self::submit`]; with `drive`, a run on one of this process's devices that is admitted at
    /// once rings no worker, and its worker's index comes back: the caller drives the run itself
    /// ([`worker::drive`]), or rings that worker.
    fn submit_as<A: Into<HostData>>(
        &self,
        exec: &Arc<Executable>,
        args: Vec<A>,
        opts: RunOptions,
        drive: bool,
    ) -> Result<(RunHandle, Option<usize>)> {
        let prog = exec.program();
        let fail = |reason: String| Error::Program {
            program: prog.name().to_string(),
            reason,
        };
        let args: Vec<HostData> = args.into_iter().map(Into::into).collect();
        prog.check_args(&args)?;
        let shared = &self.0.shared;
        let workers: Vec<Option<usize>> = exec
            .devices()
            .iter()
            .map(|d| match d.local() {
                Some(local) => shared.worker_of(local).map(Some),
                None => shared.mesh.contains(d).then_some(None),
            })
            .map(|w| w.ok_or_else(|| fail("a device of it is not in this runtime's mesh".into())))
            .collect::<Result<_>>()?;
        if shared.lock().shutdown {
            return Err(fail("the runtime is shutting down".into()));
        }
        let timeout = exec
            .devices()
            .iter()
            .filter_map(MeshDevice::local)
            .chain(&shared.devices)
            .map(Device::wait_timeout)
            .max()
            .unwrap_or(Duration::from_secs(60));
        // The job's runs are keyed the same on every rank, for the data and the gang order.
        if !self.0.job_wide && exec.devices().iter().any(|d| !d.is_local()) {
            return Err(fail(format!(
                "client {:?} is this rank's alone (Runtime::local_client), but the program runs \
                 on other ranks' devices too: submit it through a client of the job",
                self.0.name
            )));
        }
        let key = shared
            .remote
            .as_ref()
            .filter(|_| self.0.job_wide)
            .map(|r| r.next_key(&self.0.name));
        let slot = exec.acquire_slot(timeout)?;
        // Process-unique, so trace flow ids stay unique across runtimes sharing a tracer.
        let id = NEXT_RUN.fetch_add(1, Ordering::Relaxed);
        let run = Arc::new(RunState::new(
            id,
            exec.clone(),
            slot,
            opts,
            args,
            RunEnv {
                client: self.0.index,
                workers,
                key,
                ranks: shared
                    .remote
                    .as_ref()
                    .filter(|_| key.is_some())
                    .map(|r| r.transport.clone()),
                tracer: self.0.shared.opts.tracer.clone(),
                gpu_timestamps: self.0.shared.gpu_timestamps.load(Ordering::Relaxed),
            },
        ));
        if opts.mode == super::DispatchMode::Parallel
            && let Err(e) = self.record_up_front(&run)
        {
            run.release_if_idle();
            return Err(e);
        }
        if let (Some(remote), Some(key)) = (&shared.remote, key) {
            remote.register(key, &run);
        }
        let driver = {
            let mut state = self.0.shared.lock();
            state.arrivals += 1;
            let arrival = state.arrivals;
            let vtime = state.vtime;
            let Some(client) = state.clients.get_mut(self.0.index) else {
                // A handle keeps its slot: this cannot happen while `self` lives.
                return Err(fail("the client is gone".into()));
            };
            if client.pending.is_empty() {
                // An idle client re-enters at the current virtual time, with no banked credit.
                client.pass = client.pass.max(vtime);
            }
            client.pending.push_back((arrival, run.clone()));
            let driver = run
                .only_device()
                .and_then(|d| run.workers[d])
                .filter(|_| drive && key.is_none());
            run.caller_drives.store(driver.is_some(), Ordering::Release);
            self.0.shared.admit(&mut state);
            // Admitted later (by a finishing run), the run's workers are rung as usual.
            let driver = driver.filter(|_| run.admitted.load(Ordering::Acquire));
            run.caller_drives.store(driver.is_some(), Ordering::Release);
            driver
        };
        Ok((RunHandle { run, timeout }, driver))
    }

    /// Submits and waits.
    pub fn run<A: Into<HostData>>(
        &self,
        exec: &Arc<Executable>,
        args: Vec<A>,
        opts: RunOptions,
    ) -> Result<Vec<Vec<f32>>> {
        self.submit_and_drive(exec, args, opts)?.wait()
    }

    /// Submits and waits, with the results as bytes.
    pub fn run_bytes<A: Into<HostData>>(
        &self,
        exec: &Arc<Executable>,
        args: Vec<A>,
        opts: RunOptions,
    ) -> Result<Vec<Vec<u8>>> {
        self.submit_and_drive(exec, args, opts)?.wait_bytes()
    }

    /// Submits a run that the caller waits for at once: a run on one of this process's devices
    /// is driven to its end on the caller's thread when the device's worker is idle, which
    /// saves two thread hand-offs a run (see `worker::drive`); its results are then in when this
    /// returns (a traced run's GPU times may still be on their way, as `wait_traced` waits for).
    /// Otherwise the run goes as [`Self::submit`]'s would. A run submitted to overlap with the
    /// caller's own work should use [`Self::submit`]: its worker starts at once.
    pub fn submit_and_drive<A: Into<HostData>>(
        &self,
        exec: &Arc<Executable>,
        args: Vec<A>,
        opts: RunOptions,
    ) -> Result<RunHandle> {
        let (handle, driver) = self.submit_as(exec, args, opts, true)?;
        if let Some(w) = driver {
            worker::drive(&self.0.shared, w, &handle.run, handle.timeout);
        }
        Ok(handle)
    }

    /// Parallel dispatch's host work: every command buffer of the run, one thread per device.
    fn record_up_front(&self, run: &Arc<RunState>) -> Result<()> {
        let exec = &run.exec;
        let mut per_device: Vec<Vec<(usize, Role)>> = vec![Vec::new(); exec.devices().len()];
        for (node, node_devices) in run.roles.iter().enumerate() {
            for (logical, node_roles) in node_devices {
                per_device[*logical].extend(node_roles.iter().map(|&r| (node, r)));
            }
        }
        let record_device = |logical: usize, work: &[(usize, Role)]| -> Result<()> {
            // Roles are only ever this process's devices'.
            let (Some(device), Some(worker)) =
                (exec.devices()[logical].local(), run.workers[logical])
            else {
                return Ok(());
            };
            let inbox = &self.0.shared.inboxes[worker];
            if may_record_together(run, work) {
                for (node, role, r) in record_together(run, work, device, inbox)? {
                    run.put_prepared(node, role, r);
                }
                return Ok(());
            }
            // A ragged stage waits for its counts, and records then.
            for &(node, role) in work.iter().filter(|(_, r)| r.records_commands()) {
                if let Some(r) = record(run, node, role, device, inbox)? {
                    run.put_prepared(node, role, r);
                }
            }
            Ok(())
        };
        let busy: Vec<usize> = (0..per_device.len())
            .filter(|&d| !per_device[d].is_empty())
            .collect();
        if busy.len() <= 1 {
            return busy
                .iter()
                .try_for_each(|&d| record_device(d, &per_device[d]));
        }
        std::thread::scope(|s| {
            let handles: Vec<_> = busy
                .iter()
                .map(|&d| {
                    let work = &per_device[d];
                    s.spawn(move || record_device(d, work))
                })
                .collect();
            handles.into_iter().zip(&busy).try_for_each(|(h, &d)| {
                h.join().unwrap_or_else(|p| {
                    let device = exec.devices()[d].label();
                    Err(Error::panicked(
                        format!("recording for device {device}"),
                        &*p,
                    ))
                })
            })
        })
    }
}

impl RunHandle {
    /// The run's results (result i: every shard, one after another), or its error.
    pub fn wait(self) -> Result<Vec<Vec<f32>>> {
        Ok(self
            .wait_bytes()?
            .iter()
            .map(|b| bytemuck::pod_collect_to_vec::<u8, f32>(b))
            .collect())
    }

    /// The run's results as bytes (result i: every shard, one after another), for results that
    /// are not f32.
    pub fn wait_bytes(self) -> Result<Vec<Vec<u8>>> {
        self.run.wait(self.timeout)
    }

    /// The run's results as bytes, and its trace events by start time: empty unless the run
    /// was submitted with [`RunOptions::trace`]. Times count from the process's trace epoch
    /// ([`crate::trace::process_epoch`]).
    pub fn wait_traced(self) -> Result<(Vec<Vec<u8>>, Vec<Event>)> {
        let results = self.run.wait(self.timeout)?;
        let events = self.run.wait_events(self.timeout)?;
        Ok((results, events))
    }

    pub fn id(&self) -> u64 {
        self.run.id
    }
}
