//! A one-device program run as a client of the process's runtime, each run timed by the run's
//! trace of one of its kernels: the kernel suites (`matmul`, `memory`) run on the same clock as
//! every other workload, the GPU timestamps the workers write around each traced kernel. On an
//! adapter without timestamp queries (or with `GANGWAY_GPU_TIMESTAMPS=off`) the traced kernel
//! times are host times, and the sample falls back to the harness's wall time.

use super::harness::Timed;
use crate::program::{CompileOptions, Executable, Program, Variables};
use crate::sched::{Client, RunHandle, RunOptions, Runtime};
use crate::trace::{Clock, EventKind};
use crate::{Device, Error, Result};
use std::sync::Arc;

pub(super) struct TracedProgram {
    client: Client,
    exec: Arc<Executable>,
    /// The timed kernel's node index.
    node: u32,
    pending: Option<RunHandle>,
    /// The last run's results, one byte vector per program result.
    pub results: Vec<Vec<u8>>,
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
    /// Compiles `program` (with `variables`) on `device`, one of `runtime`'s; runs are timed by
    /// the kernel node named `kernel`.
    pub fn new(
        runtime: &Runtime,
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
        let exec = Arc::new(program.compile_with(
            std::slice::from_ref(device),
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
            pending: None,
            results: Vec::new(),
        })
    }

    /// Submits one traced run.
    pub fn submit(&mut self) -> Result<()> {
        let args: Vec<Vec<f32>> = Vec::new();
        let opts = RunOptions {
            trace: true,
            ..RunOptions::default()
        };
        self.pending = Some(self.client.submit(&self.exec, args, opts)?);
        Ok(())
    }

    /// Waits for the submitted run; its kernel's GPU time when the adapter has timestamps.
    pub fn wait(&mut self) -> Result<Option<Timed>> {
        let handle = self.pending.take().ok_or_else(|| Error::InvalidArgument {
            what: "benchmark",
            reason: format!(
                "{}: waited with no run submitted",
                self.exec.program().name()
            ),
        })?;
        let (results, events) = handle.wait_traced()?;
        self.results = results;
        // Host-timed (no timestamps, or calibration failed): the wall time is as good.
        Ok(events
            .iter()
            .find(|e| e.kind == EventKind::Kernel && e.node == Some(self.node))
            .filter(|e| e.clock == Clock::Gpu)
            .map(|e| Timed::gpu(e.duration_ns() as f64 * 1e-9)))
    }
}
