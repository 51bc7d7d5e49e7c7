//! Recording the command buffer of one role: the host work that parallel dispatch does up front
//! and sequential dispatch does just in time. Each buffer carries the callbacks that report its
//! completion to the device's worker.

use super::run::{Role, RunState};
use super::worker::{Completion, Inbox};
use crate::trace::EventMeta;
use crate::{Device, Error, Result};
use std::sync::Arc;

/// A recorded command buffer and the number of completion callbacks it will fire.
#[derive(Debug)]
pub(crate) struct Recorded {
    pub commands: wgpu::CommandBuffer,
    pub callbacks: usize,
    /// The timestamp pair the kernel writes, resolved later by the device's worker.
    pub stamp: Option<u32>,
}

fn missing(run: &RunState, node: usize, what: &str) -> Error {
    Error::Program {
        program: run.exec.program().name().to_string(),
        reason: format!("node {node} has no {what} buffer"),
    }
}

/// Records `role` of `node` for `device`, tracing the host's encoding; `None` when the role has
/// no GPU commands.
pub(crate) fn record(
    run: &Arc<RunState>,
    node: usize,
    role: Role,
    device: &Device,
    inbox: &Arc<Inbox>,
) -> Result<Option<Recorded>> {
    let start = run.trace.span();
    let recorded = record_commands(run, node, role, device, inbox)?;
    if recorded.is_some() {
        let name = &run.exec.program().nodes()[node].name;
        run.trace.finish(
            start,
            run.event_meta(EventMeta::host_encode(device.id()), node),
            || format!("encode {name}"),
        );
    }
    Ok(recorded)
}

fn record_commands(
    run: &Arc<RunState>,
    node: usize,
    role: Role,
    device: &Device,
    inbox: &Arc<Inbox>,
) -> Result<Option<Recorded>> {
    let prog = run.exec.program();
    let n = &prog.nodes()[node];
    if !role.records_commands() {
        return Ok(None);
    }
    let shard = role.shard();
    let res = &run.exec.slots[run.slot].nodes[node][shard];
    let mut encoder = device.encoder(&n.name);
    let mut callbacks = 0;
    let mut stamp = None;
    match role {
        Role::Kernel { .. } => {
            let dispatch = res
                .dispatch
                .as_ref()
                .ok_or_else(|| missing(run, node, "kernel"))?;
            // GPU timestamps only while tracing, into the device's ring (resolved in batches).
            let ring = inbox
                .ring
                .as_ref()
                .filter(|_| run.gpu_timed && inbox.clock(device).is_some());
            stamp = ring.map(|r| r.allocate());
            dispatch.encode(
                &mut encoder,
                ring.zip(stamp).map(|(r, pair)| (&r.queries, 2 * pair)),
            );
            let (inbox2, run2) = (inbox.clone(), run.clone());
            let host_timed = stamp.is_none();
            encoder.on_submitted_work_done(move || {
                let at_ns = run2.trace.now_ns();
                inbox2.push(Completion::WorkDone {
                    run: run2,
                    node,
                    shard,
                    at_ns,
                    host_timed,
                });
            });
            callbacks += 1;
        }
        Role::Send { .. } | Role::Stage { .. } | Role::Download { .. } => {
            let input = n.inputs[0];
            let producer = prog.value(input).producer;
            let src = run.exec.slots[run.slot].nodes[producer][shard]
                .outputs
                .get(prog.value(input).output)
                .ok_or_else(|| missing(run, producer, "output"))?;
            let staging = res
                .staging
                .as_ref()
                .ok_or_else(|| missing(run, node, "staging"))?;
            let len = prog.value(input).shard_bytes();
            encoder.copy_buffer_to_buffer(src, 0, staging, 0, len);
            let (inbox, run, buffer) = (inbox.clone(), run.clone(), staging.clone());
            encoder.map_buffer_on_submit(staging, wgpu::MapMode::Read, .., move |r| {
                inbox.push(Completion::Mapped {
                    run,
                    node,
                    shard,
                    role,
                    buffer,
                    len,
                    result: r,
                });
            });
            callbacks += 1;
        }
        Role::Upload { .. } | Role::Recv { .. } | Role::Gather { .. } => return Ok(None),
    }
    Ok(Some(Recorded {
        commands: encoder.finish(),
        callbacks,
        stamp,
    }))
}
