//! Recording the command buffer of one role: the host work that parallel dispatch does up front
//! and sequential dispatch does just in time. Each buffer carries the callbacks that report its
//! completion to the device's worker. Parallel dispatch records a device's whole part of an
//! untraced run into one buffer where nothing in it waits ([`record_together`]).

use super::mailbox::{Completion, Inbox};
use super::run::{Recorded, Role, RunState};
use crate::program::{Op, Regroup};
use crate::trace::EventMeta;
use crate::{Device, Error, Result};
use std::sync::Arc;

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
    traced(run, node, device, || {
        record_commands(run, node, role, device, inbox)
    })
}

/// Records a ragged all-to-all member's stage ([`Role::StageLive`]) once its counts are on the
/// host: `live`, its blocks' live rows ([`super::ragged::live`]), alone are copied out, one copy
/// per run of rows, and their counts' header goes with the completion.
pub(crate) fn record_live(
    run: &Arc<RunState>,
    node: usize,
    role: Role,
    (device, inbox): (&Device, &Arc<Inbox>),
    live: &[usize],
) -> Result<Option<Recorded>> {
    traced(run, node, device, || {
        let mut encoder = device.encoder(&run.exec.program().nodes()[node].name);
        let callbacks = stage(run, node, role, inbox, &mut encoder, Some(live))?;
        Ok(Some(Recorded {
            commands: Some(encoder.finish()),
            callbacks,
            stamp: None,
        }))
    })
}

/// `record`'s commands, the host's encoding traced.
fn traced(
    run: &Arc<RunState>,
    node: usize,
    device: &Device,
    record: impl FnOnce() -> Result<Option<Recorded>>,
) -> Result<Option<Recorded>> {
    let start = run.trace.span();
    let recorded = record()?;
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
    if !role.records_commands() {
        return Ok(None);
    }
    let mut encoder = device.encoder(&run.exec.program().nodes()[node].name);
    let (callbacks, stamp) = encode(run, node, role, device, inbox, &mut encoder)?;
    Ok(Some(Recorded {
        commands: Some(encoder.finish()),
        callbacks,
        stamp,
    }))
}

/// Whether a device's part of a run (`work`, its roles in order) may go in one command buffer,
/// submitted at its first recorded role: nothing in it waits for other devices (a receive, a
/// gather) or writes a buffer from the host after that role (uploads come first), and the run
/// is not traced (each kernel's own submission times it).
pub(crate) fn may_record_together(run: &RunState, work: &[(usize, Role)]) -> bool {
    let first = work.iter().position(|(_, r)| r.records_commands());
    !run.trace.is_on()
        && !run.gpu_timed
        && first.is_some_and(|f| {
            work[..f]
                .iter()
                .all(|(_, r)| matches!(r, Role::Upload { .. }))
                && work[f..].iter().all(|(_, r)| r.records_commands())
        })
}

/// Records `work` (see [`may_record_together`]) into one command buffer: each role that
/// records with what [`record`] would give it, the first carrying the buffer and every
/// callback, the rest empty. One encoder and one submission where a run of many small
/// kernels made as many of each.
pub(crate) fn record_together(
    run: &Arc<RunState>,
    work: &[(usize, Role)],
    device: &Device,
    inbox: &Arc<Inbox>,
) -> Result<Vec<(usize, Role, Recorded)>> {
    let mut encoder = device.encoder(run.exec.program().name());
    let mut out = Vec::new();
    let mut callbacks = 0;
    for &(node, role) in work.iter().filter(|(_, r)| r.records_commands()) {
        callbacks += encode(run, node, role, device, inbox, &mut encoder)?.0;
        out.push((
            node,
            role,
            Recorded {
                commands: None,
                callbacks: 0,
                stamp: None,
            },
        ));
    }
    if let Some((_, _, first)) = out.first_mut() {
        first.commands = Some(encoder.finish());
        first.callbacks = callbacks;
    }
    Ok(out)
}

/// Encodes `role`'s commands and completion callbacks: how many callbacks, and the timestamp
/// pair a kernel writes.
fn encode(
    run: &Arc<RunState>,
    node: usize,
    role: Role,
    device: &Device,
    inbox: &Arc<Inbox>,
    encoder: &mut wgpu::CommandEncoder,
) -> Result<(usize, Option<u32>)> {
    let shard = role.shard();
    let res = &run.exec.slots[run.slot].nodes[node][shard];
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
                encoder,
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
            callbacks += stage(run, node, role, inbox, encoder, None)?;
        }
        // Recorded only with its counts ([`record_live`]).
        Role::StageLive { .. } => return Err(missing(run, node, "counts")),
        Role::Upload { .. } | Role::Recv { .. } | Role::Gather { .. } => {}
    }
    Ok((callbacks, stamp))
}

/// Copies `node`'s input shard to staging and maps it (one callback); with `live`, a ragged
/// stage's live rows alone, packed, their counts' header carried to the completion.
fn stage(
    run: &Arc<RunState>,
    node: usize,
    role: Role,
    inbox: &Arc<Inbox>,
    encoder: &mut wgpu::CommandEncoder,
    live: Option<&[usize]>,
) -> Result<usize> {
    let prog = run.exec.program();
    let n = &prog.nodes()[node];
    let shard = role.shard();
    let input = prog.value(n.inputs[0]);
    let src = run.exec.slots[run.slot].nodes[input.producer][shard]
        .outputs
        .get(input.output)
        .ok_or_else(|| missing(run, input.producer, "output"))?;
    let staging = run.exec.slots[run.slot].nodes[node][shard]
        .staging
        .as_ref()
        .ok_or_else(|| missing(run, node, "staging"))?;
    let (ranges, head): (Vec<std::ops::Range<usize>>, Vec<u8>) = match (live, &n.op) {
        (Some(live), Op::AllToAll(_, regroup)) => {
            (regroup.live_ranges(live), Regroup::packed(live, &[]))
        }
        (Some(_), _) => return Err(missing(run, node, "ragged all-to-all")),
        (None, _) => (
            std::iter::once(0..input.shard_bytes() as usize).collect(),
            Vec::new(),
        ),
    };
    let mut len = 0u64;
    for r in ranges {
        let bytes = (r.end - r.start) as u64;
        encoder.copy_buffer_to_buffer(src, r.start as u64, staging, len, bytes);
        len += bytes;
    }
    let (inbox, run, buffer) = (inbox.clone(), run.clone(), staging.clone());
    encoder.map_buffer_on_submit(staging, wgpu::MapMode::Read, .., move |r| {
        inbox.push(Completion::Mapped {
            run,
            node,
            shard,
            role,
            buffer,
            len,
            head,
            result: r,
        });
    });
    Ok(1)
}
