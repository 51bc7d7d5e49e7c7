//! Lowering a program onto devices: pipelines, buffers and bind groups are made once here, for
//! `in_flight` runs at a time (slots), and every run reuses them.

use super::ir::{Op, Program};
use crate::device::{Reservation, WhenFull, padded_size};
use crate::kernels::PreparedDispatch;
use crate::kernels::elementwise::{self, ElementwiseOp};
use crate::{Device, Error, Result};
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
    /// The shard of the node's output value, on the node's gang.
    pub output: Option<wgpu::Buffer>,
    /// Readback buffer on the device that sends (transfer source, collective member, result).
    pub staging: Option<wgpu::Buffer>,
    /// The kernel (all-reduce: its row sum).
    pub dispatch: Option<PreparedDispatch>,
    /// All-reduce: every member's shard side by side, summed by `dispatch`.
    pub gather: Option<wgpu::Buffer>,
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
    pub(crate) devices: Vec<Device>,
    pub(crate) slots: Vec<Slot>,
    free: Mutex<Vec<bool>>,
    freed: Condvar,
    _memory: Vec<Reservation>,
}

static NEXT_PROGRAM_ID: AtomicU64 = AtomicU64::new(1);

impl Program {
    /// Compiles the program for `devices` (logical device i is `devices[i]`).
    pub fn compile(&self, devices: &[Device], opts: CompileOptions) -> Result<Executable> {
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
        let mut bytes = vec![0u64; devices.len()];
        for node in 0..self.nodes.len() {
            for (logical, b) in self.shard_buffers(node) {
                bytes[logical] += padded_size(b);
            }
        }
        let mut memory = Vec::new();
        for (device, &b) in devices.iter().zip(&bytes) {
            if b > 0 {
                memory.push(device.reserve(b * opts.in_flight as u64, opts.when_full)?);
            }
        }
        let slots = (0..opts.in_flight)
            .map(|_| self.build_slot(devices))
            .collect::<Result<Vec<_>>>()?;
        Ok(Executable {
            id: NEXT_PROGRAM_ID.fetch_add(1, Ordering::Relaxed),
            program: self.clone(),
            devices: devices.to_vec(),
            free: Mutex::new(vec![true; slots.len()]),
            slots,
            freed: Condvar::new(),
            _memory: memory,
        })
    }

    /// `(logical device, bytes)` of every buffer one slot needs for `node`.
    fn shard_buffers(&self, node: usize) -> Vec<(usize, u64)> {
        let n = &self.nodes[node];
        let out_len = n.output.map(|v| self.values[v.0].shard_len).unwrap_or(0) as u64 * 4;
        let in_len = n
            .inputs
            .first()
            .map(|v| self.values[v.0].shard_len)
            .unwrap_or(0) as u64
            * 4;
        n.gang
            .iter()
            .enumerate()
            .flat_map(|(i, &d)| match n.op {
                Op::Arg { .. } | Op::Constant { .. } | Op::Elementwise(_) => vec![(d, out_len)],
                Op::Transfer => {
                    let src = self.values[n.inputs[0].0].gang[i];
                    vec![(d, out_len), (src, in_len)]
                }
                Op::AllToAll => vec![(d, out_len), (d, in_len)],
                Op::AllReduce => vec![(d, out_len), (d, in_len), (d, in_len * n.gang.len() as u64)],
                Op::Result { .. } => vec![(d, in_len)],
            })
            .collect()
    }

    fn build_slot(&self, devices: &[Device]) -> Result<Slot> {
        let mut nodes: Vec<Vec<ShardRes>> = Vec::with_capacity(self.nodes.len());
        for n in &self.nodes {
            let out_len = n.output.map(|v| self.values[v.0].shard_len).unwrap_or(0);
            let mut shards = Vec::with_capacity(n.gang.len());
            for (i, &d) in n.gang.iter().enumerate() {
                let device = &devices[d];
                let label = format!("{}/{} shard {i}", self.name, n.name);
                let input = |k: usize| -> Result<&wgpu::Buffer> {
                    let v = n.inputs[k];
                    let producer = self.values[v.0].producer;
                    nodes[producer][i]
                        .output
                        .as_ref()
                        .ok_or_else(|| Error::Program {
                            program: self.name.clone(),
                            reason: format!("{}: input {k} has no buffer", n.name),
                        })
                };
                let mut res = ShardRes::default();
                match &n.op {
                    Op::Arg { .. } => {
                        res.output = Some(device.storage_buffer(&label, out_len as u64 * 4)?);
                    }
                    Op::Constant { data } => {
                        let shard = &data[i * out_len..(i + 1) * out_len];
                        res.output =
                            Some(device.storage_buffer_init(&label, bytemuck::cast_slice(shard))?);
                    }
                    Op::Elementwise(op) => {
                        let y = device.storage_buffer(&label, out_len as u64 * 4)?;
                        let x = input(0)?;
                        let z = if n.inputs.len() > 1 {
                            Some(input(1)?)
                        } else {
                            None
                        };
                        res.dispatch = Some(elementwise::prepare(device, *op, x, z, &y, out_len)?);
                        res.output = Some(y);
                    }
                    Op::Transfer => {
                        let src = &devices[self.values[n.inputs[0].0].gang[i]];
                        res.staging = Some(src.readback_buffer(&label, out_len as u64 * 4));
                        res.output = Some(device.storage_buffer(&label, out_len as u64 * 4)?);
                    }
                    Op::AllToAll => {
                        res.staging = Some(device.readback_buffer(&label, out_len as u64 * 4));
                        res.output = Some(device.storage_buffer(&label, out_len as u64 * 4)?);
                    }
                    Op::AllReduce => {
                        let members = n.gang.len();
                        let gather =
                            device.storage_buffer(&label, (out_len * members) as u64 * 4)?;
                        let y = device.storage_buffer(&label, out_len as u64 * 4)?;
                        let sum = ElementwiseOp::SumRows {
                            rows: members as u32,
                        };
                        res.dispatch = Some(elementwise::prepare(
                            device, sum, &gather, None, &y, out_len,
                        )?);
                        res.staging = Some(device.readback_buffer(&label, out_len as u64 * 4));
                        res.gather = Some(gather);
                        res.output = Some(y);
                    }
                    Op::Result { .. } => {
                        let len = self.values[n.inputs[0].0].shard_len;
                        res.staging = Some(device.readback_buffer(&label, len as u64 * 4));
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
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }
    /// A process-unique id, used in trace events.
    pub fn id(&self) -> u64 {
        self.id
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
