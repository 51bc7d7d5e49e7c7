//! Lowering a program onto devices: pipelines, buffers and bind groups are made once here, for
//! `in_flight` runs at a time (slots), and every run reuses them.

use super::access::NodeAccess;
use super::ir::{Op, Program};
use super::variables::Variables;
use crate::device::{DeviceList, MeshDevice, Reservation, WhenFull, padded_size};
use crate::kernels::Prepared;
use crate::{Error, Result, Tensor};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How to compile.
#[derive(Debug, Clone, Copy)]
pub struct CompileOptions {
    /// Runs that may be in flight at once, each with its own buffers. More lets successive runs
    /// overlap across devices (a chain of S stages can use S); each costs memory.
    pub in_flight: usize,
    /// What to do when the buffers do not fit the device budgets right now.
    pub when_full: WhenFull,
}

impl Default for CompileOptions {
    fn default() -> Self {
        Self {
            in_flight: 2,
            when_full: WhenFull::Wait(Duration::from_secs(30)),
        }
    }
}

/// The GPU objects of one shard of one node, in one slot.
#[derive(Debug, Default)]
pub(crate) struct ShardRes {
    /// The shards of the node's output values, on the node's gang, in output order.
    pub outputs: Vec<wgpu::Buffer>,
    /// Readback buffer on the device that sends (transfer source, collective member, result).
    pub staging: Option<wgpu::Buffer>,
    /// The kernel.
    pub dispatch: Option<Prepared>,
}

#[derive(Debug)]
pub(crate) struct Slot {
    /// `[node][shard]`.
    pub nodes: Vec<Vec<ShardRes>>,
}

/// A program compiled for a list of devices (logical device i of the program is `devices[i]`).
#[derive(Debug)]
pub struct Executable {
    pub(crate) id: u64,
    pub(crate) program: Program,
    pub(crate) devices: Vec<MeshDevice>,
    pub(crate) slots: Vec<Slot>,
    /// What each node reads and writes, for running independent nodes ahead of a waiting one.
    pub(crate) access: Vec<NodeAccess>,
    /// [`Program::fingerprint`], computed once.
    fingerprint: u64,
    free: Mutex<Vec<bool>>,
    freed: Condvar,
    _memory: Vec<Reservation>,
}

static NEXT_PROGRAM_ID: AtomicU64 = AtomicU64::new(1);

impl Program {
    /// Compiles the program for `devices` (logical device i is `devices[i]`): this process's
    /// devices, or a job's mesh, whose other ranks' devices get no buffers here (their ranks
    /// compile the same program for theirs).
    pub fn compile(
        &self,
        devices: &(impl DeviceList + ?Sized),
        opts: CompileOptions,
    ) -> Result<Executable> {
        self.compile_with(devices, opts, &Variables::default())
    }

    /// Compiles the program for `devices`, binding its variables to those of `variables` (which
    /// hold this process's shards).
    pub fn compile_with(
        &self,
        devices: &(impl DeviceList + ?Sized),
        opts: CompileOptions,
        variables: &Variables,
    ) -> Result<Executable> {
        let devices = devices.mesh_devices();
        let fail = |reason: String| Error::Program {
            program: self.name.clone(),
            reason,
        };
        if devices.len() < self.devices_needed() {
            return Err(fail(format!(
                "it uses {} devices, the slice has {}",
                self.devices_needed(),
                devices.len()
            )));
        }
        if opts.in_flight == 0 {
            return Err(fail("in_flight must be at least 1".into()));
        }
        for (i, a) in devices.iter().enumerate() {
            if devices[..i].contains(a) {
                return Err(fail(format!(
                    "device {} appears twice in the slice",
                    a.label()
                )));
            }
        }
        // Reserve every slot's bytes first: all or nothing, in device order.
        let bytes = self.slot_bytes();
        let mut memory = Vec::new();
        for (device, &b) in devices.iter().zip(&bytes) {
            if let Some(device) = device.local().filter(|_| b > 0) {
                memory.push(device.reserve(b * opts.in_flight as u64, opts.when_full)?);
            }
        }
        let slots = (0..opts.in_flight)
            .map(|_| self.build_slot(&devices, variables))
            .collect::<Result<Vec<_>>>()?;
        Ok(Executable {
            id: NEXT_PROGRAM_ID.fetch_add(1, Ordering::Relaxed),
            program: self.clone(),
            devices,
            access: super::access::accesses(self),
            fingerprint: self.fingerprint(),
            free: Mutex::new(vec![true; slots.len()]),
            slots,
            freed: Condvar::new(),
            _memory: memory,
        })
    }

    /// The bytes of the buffers one slot of runs needs on each logical device, as allocated
    /// (padded): everything a run writes, and the staging it reads back through, but not the
    /// variables (parameters, optimizer moments), which outlive runs.
    pub fn slot_bytes(&self) -> Vec<u64> {
        let mut bytes = vec![0u64; self.devices_needed()];
        for node in 0..self.nodes.len() {
            for (logical, b) in self.shard_buffers(node) {
                if let Some(total) = bytes.get_mut(logical) {
                    *total += padded_size(b);
                }
            }
        }
        bytes
    }

    /// `(logical device, bytes)` of every buffer one slot needs for `node`.
    fn shard_buffers(&self, node: usize) -> Vec<(usize, u64)> {
        let n = &self.nodes[node];
        let bytes = |v: Option<&super::Value>| v.map_or(0, |v| self.values[v.0].shard_bytes());
        let out_len = bytes(n.outputs.first());
        let in_len = bytes(n.inputs.first());
        let kernel_out: u64 = match &n.op {
            Op::Kernel(k) => {
                let in_place: Vec<usize> = k.0.in_place().iter().map(|&(o, _)| o).collect();
                n.outputs
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| !in_place.contains(i))
                    .map(|(_, v)| bytes(Some(v)))
                    .sum()
            }
            _ => 0,
        };
        n.gang
            .iter()
            .enumerate()
            .flat_map(|(i, &d)| match &n.op {
                Op::Arg { .. } | Op::Constant { .. } => vec![(d, out_len)],
                Op::Variable { .. } => vec![],
                Op::Kernel(_) => vec![(d, kernel_out)],
                Op::Transfer => {
                    let src = self.values[n.inputs[0].0].gang[i];
                    vec![(d, out_len), (src, in_len)]
                }
                Op::Send => vec![(d, in_len)],
                Op::Recv => vec![(d, out_len)],
                Op::AllToAll(..) => vec![(d, out_len), (d, in_len)],
                Op::AllReduce(_) => vec![(d, out_len), (d, in_len)],
                Op::Result { .. } => vec![(d, in_len)],
            })
            .collect()
    }

    fn build_slot(&self, devices: &[MeshDevice], variables: &Variables) -> Result<Slot> {
        let fail = |reason: String| Error::Program {
            program: self.name.clone(),
            reason,
        };
        let mut nodes: Vec<Vec<ShardRes>> = Vec::with_capacity(self.nodes.len());
        for n in &self.nodes {
            let out_info = n.output().map(|v| &self.values[v.0]);
            let out_len = out_info.map_or(0, |v| v.shard_len);
            let out_bytes = out_info.map_or(0, |v| v.shard_bytes());
            let mut shards = Vec::with_capacity(n.gang.len());
            for (i, &d) in n.gang.iter().enumerate() {
                let mut res = ShardRes::default();
                if let Op::Transfer = &n.op
                    && let Some(src) = devices[self.values[n.inputs[0].0].gang[i]].local()
                {
                    // The sending half lives on the source device, whoever receives.
                    let label = format!("{}/{} shard {i}", self.name, n.name);
                    res.staging = Some(src.readback_buffer(&label, out_bytes));
                }
                let Some(device) = devices[d].local() else {
                    // Another rank's device: its rank makes its buffers.
                    shards.push(res);
                    continue;
                };
                let label = format!("{}/{} shard {i}", self.name, n.name);
                let input = |k: usize| -> Result<&wgpu::Buffer> {
                    let v = &self.values[n.inputs[k].0];
                    nodes[v.producer][i]
                        .outputs
                        .get(v.output)
                        .ok_or_else(|| fail(format!("{}: input {k} has no buffer", n.name)))
                };
                match &n.op {
                    Op::Arg { .. } => {
                        res.outputs = vec![device.storage_buffer(&label, out_bytes)?];
                    }
                    Op::Constant { data } => {
                        let shard = &data[i * out_len..(i + 1) * out_len];
                        res.outputs =
                            vec![device.storage_buffer_init(&label, bytemuck::cast_slice(shard))?];
                    }
                    Op::Variable { name } => {
                        let info = out_info.ok_or_else(|| fail(format!("{name}: no value")))?;
                        let t = variables.shard(name, i, device, &info.ty)?;
                        res.outputs = vec![t.buffer().clone()];
                    }
                    Op::Kernel(k) => {
                        let tensor = |v: &super::Value, b: wgpu::Buffer| -> Result<Tensor> {
                            let info = &self.values[v.0];
                            Tensor::from_buffer(device, b, &info.ty.shape, info.ty.dtype)
                        };
                        let inputs = (0..n.inputs.len())
                            .map(|k| tensor(&n.inputs[k], input(k)?.clone()))
                            .collect::<Result<Vec<_>>>()?;
                        let in_place = k.0.in_place();
                        let mut outputs = Vec::with_capacity(n.outputs.len());
                        for (o, v) in n.outputs.iter().enumerate() {
                            let buffer = match in_place.iter().find(|&&(out, _)| out == o) {
                                Some(&(_, inp)) => inputs[inp].buffer().clone(),
                                None => {
                                    device.storage_buffer(&label, self.values[v.0].shard_bytes())?
                                }
                            };
                            outputs.push(tensor(v, buffer)?);
                        }
                        // An idle shard keeps its (zeroed) outputs and records nothing.
                        if n.runs_on(i) {
                            let mut prepared = Prepared::new();
                            k.0.prepare(&inputs, &outputs, &mut prepared)
                                .map_err(|e| fail(format!("{}: {e}", n.name)))?;
                            res.dispatch = Some(prepared);
                        }
                        res.outputs = outputs.iter().map(|t| t.buffer().clone()).collect();
                    }
                    Op::Transfer => {
                        res.outputs = vec![device.storage_buffer(&label, out_bytes)?];
                    }
                    Op::Send => {
                        let bytes = self.values[n.inputs[0].0].shard_bytes();
                        res.staging = Some(device.readback_buffer(&label, bytes));
                    }
                    Op::Recv => {
                        res.outputs = vec![device.storage_buffer(&label, out_bytes)?];
                    }
                    Op::AllToAll(..) => {
                        res.staging = Some(device.readback_buffer(&label, out_bytes));
                        res.outputs = vec![device.storage_buffer(&label, out_bytes)?];
                    }
                    Op::AllReduce(_) => {
                        // The host adds the staged shards (`sched::reduce`); the device gets the
                        // sum written into its output.
                        res.staging = Some(device.readback_buffer(&label, out_bytes));
                        res.outputs = vec![device.storage_buffer(&label, out_bytes)?];
                    }
                    Op::Result { .. } => {
                        let bytes = self.values[n.inputs[0].0].shard_bytes();
                        res.staging = Some(device.readback_buffer(&label, bytes));
                    }
                }
                shards.push(res);
            }
            nodes.push(shards);
        }
        Ok(Slot { nodes })
    }
}

impl Executable {
    pub fn program(&self) -> &Program {
        &self.program
    }
    /// Logical device i of the program is `devices()[i]`.
    pub fn devices(&self) -> &[MeshDevice] {
        &self.devices
    }
    /// [`Program::fingerprint`] of its program.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// A process-unique id, used in trace events.
    pub fn id(&self) -> u64 {
        self.id
    }
    /// The bytes of its runs' buffers on each logical device: [`Program::slot_bytes`] for every
    /// run it can hold in flight.
    pub fn buffer_bytes(&self) -> Vec<u64> {
        let slots = self.slots.len() as u64;
        self.program
            .slot_bytes()
            .iter()
            .map(|b| b * slots)
            .collect()
    }

    pub fn in_flight(&self) -> usize {
        self.slots.len()
    }

    /// Takes a free slot, waiting up to `timeout` for a run in flight to finish.
    pub(crate) fn acquire_slot(&self, timeout: Duration) -> Result<usize> {
        let deadline = Instant::now() + timeout;
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(i) = free.iter().position(|&f| f) {
                free[i] = false;
                return Ok(i);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Timeout {
                    what: format!(
                        "a free run slot of program {:?} (all {} in flight)",
                        self.program.name,
                        self.slots.len()
                    ),
                    waited_ms: timeout.as_millis() as u64,
                });
            }
            free = self
                .freed
                .wait_timeout(free, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    pub(crate) fn release_slot(&self, slot: usize) {
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(f) = free.get_mut(slot) {
            *f = true;
        }
        drop(free);
        self.freed.notify_all();
    }
}
