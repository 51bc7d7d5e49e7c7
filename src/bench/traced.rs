//! A one-device program on a runtime of its own, each run timed by the runtime's trace of one of
//! its kernels: the kernel suites (`matmul`, `memory`) run on the same clock as every other
//! workload, the GPU timestamps the workers write around each traced kernel. On an adapter
//! without timestamp queries (or with `GANGWAY_GPU_TIMESTAMPS=off`) the traced kernel times are
//! host times, and the sample falls back to the harness's wall time.

use super::harness::Timed;
use crate::program::{CompileOptions, Executable, Program, Variables};
use crate::sched::{Client, RunHandle, RunOptions, Runtime, RuntimeOptions};
use crate::trace::{Clock, Event, EventKind, Tracer};
use crate::{Device, Error, Result};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How long after a run finished its kernel's GPU times may still arrive: the workers resolve
/// timestamps in batches, a partial batch within about 100 ms of going idle.
const STAMP_GRACE: Duration = Duration::from_secs(2);

pub(super) struct TracedProgram {
    client: Client,
    exec: Arc<Executable>,
    /// The timed kernel's node index.
    node: u32,
    /// Kernel events of the runtime's tracer; `None` once GPU times are known not to come.
    events: Option<Receiver<Event>>,
    pending: Option<RunHandle>,
    /// The last run's results, one byte vector per program result.
    pub results: Vec<Vec<u8>>,
    // Dropped last: shuts the device's worker down after the handles above are gone.
    _runtime: Runtime,
}

impl std::fmt::Debug for TracedProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TracedProgram")
            .field("program", &self.exec.program().name())
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl TracedProgram {
    /// Compiles `program` (with `variables`) on `device` and starts a traced runtime for it; runs
    /// are timed by the kernel node named `kernel`.
    pub fn new(
        device: &Device,
        program: Program,
        variables: &Variables,
        kernel: &str,
    ) -> Result<Self> {
        let node = program
            .nodes()
            .iter()
            .position(|n| n.name == kernel)
            .and_then(|i| u32::try_from(i).ok())
            .ok_or_else(|| Error::Program {
                program: program.name().to_string(),
                reason: format!("no kernel node named {kernel:?} to time"),
            })?;
        let devices = vec![device.clone()];
        let opts = RuntimeOptions {
            tracer: Tracer::new(),
            ..RuntimeOptions::default()
        };
        let gpu_timed = opts.gpu_timestamps && device.info().features.timestamp_query;
        let runtime = Runtime::new(devices.clone(), opts)?;
        let events = gpu_timed.then(|| runtime.tracer().subscribe());
        let exec = Arc::new(program.compile_with(
            &devices,
            CompileOptions {
                in_flight: 1,
                ..CompileOptions::default()
            },
            variables,
        )?);
        Ok(Self {
            client: runtime.client(exec.program().name(), 1),
            exec,
            node,
            events,
            pending: None,
            results: Vec::new(),
            _runtime: runtime,
        })
    }

    /// Submits one run.
    pub fn submit(&mut self) -> Result<()> {
        let args: Vec<Vec<f32>> = Vec::new();
        self.pending = Some(
            self.client
                .submit(&self.exec, args, RunOptions::default())?,
        );
        Ok(())
    }

    /// Waits for the submitted run; its kernel's GPU time when the trace has one.
    pub fn wait(&mut self) -> Result<Option<Timed>> {
        let handle = self.pending.take().ok_or_else(|| Error::InvalidArgument {
            what: "benchmark",
            reason: format!(
                "{}: waited with no run submitted",
                self.exec.program().name()
            ),
        })?;
        self.results = handle.wait_bytes()?;
        let Some(events) = &self.events else {
            return Ok(None);
        };
        let deadline = Instant::now() + STAMP_GRACE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match events.recv_timeout(left) {
                Ok(e) if e.kind == EventKind::Kernel && e.node == Some(self.node) => {
                    if e.clock != Clock::Gpu {
                        // Host-timed after all (calibration failed): wall time is as good.
                        self.events = None;
                        return Ok(None);
                    }
                    return Ok(Some(Timed::gpu(e.duration_ns() as f64 * 1e-9)));
                }
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                    // No GPU time came: stop expecting them, so a late one is never taken for
                    // a later run's.
                    self.events = None;
                    return Ok(None);
                }
            }
        }
    }
}
