//! A worker's GPU callbacks turned into results: mapped readbacks into ready outputs, finished
//! work into kernel events, resolved timestamp batches into GPU-timed events.

use super::super::mailbox::Completion;
use super::super::run::{DispatchMode, Role, RunState};
use super::super::timestamps::BATCH;
use super::Worker;
use crate::trace::{Clock, EventMeta, FlowRole};
use crate::{Error, Result};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;

impl Worker<'_> {
    /// Resolves the pending timestamp pairs, one resolve per contiguous range of the ring.
    pub(super) fn resolve_stamps(&mut self) {
        self.flush();
        let Some(ring) = self.inbox.ring.as_ref() else {
            for (_, run, _) in self.core.stamps.drain(..) {
                run.stamp_done();
            }
            return;
        };
        self.core.stamps_since = None;
        let mut stamps = std::mem::take(&mut self.core.stamps);
        if stamps.is_empty() {
            return;
        }
        stamps.sort_by_key(|s| s.0);
        // A batch holds at most BATCH pairs: more (never expected) go in further batches.
        while !stamps.is_empty() {
            let rest = stamps.split_off(stamps.len().min(BATCH));
            let pairs: Vec<u32> = stamps.iter().map(|s| s.0).collect();
            let kernels: Vec<(Arc<RunState>, usize)> = stamps
                .into_iter()
                .map(|(_, run, node)| (run, node))
                .collect();
            let mut encoder = self.device.encoder("resolve timestamps");
            let readback = ring.resolve(self.device, &mut encoder, &pairs);
            let (inbox, buffer) = (self.inbox.clone(), readback.clone());
            encoder.map_buffer_on_submit(&readback, wgpu::MapMode::Read, .., move |r| {
                inbox.push(Completion::Timestamps {
                    kernels,
                    buffer,
                    result: r,
                });
            });
            self.inbox.outstanding.fetch_add(1, Ordering::AcqRel);
            self.device.submit(encoder);
            stamps = rest;
        }
    }

    pub(super) fn drain_completions(&mut self) {
        // Other workers sleep in `idle` until what they wait for may be there: a mapped
        // read-back fills a mailbox, a failed run lets them skip its tasks, and under sequential
        // dispatch a node's completion lets the next node start on its device. Waking them for
        // every kernel's completion of a parallel run too cost a 4-device step hundreds of
        // futile thread switches on CPU-backed adapters.
        let mut news: Vec<Arc<RunState>> = Vec::new();
        for c in self.inbox.take() {
            match &c {
                Completion::Mapped { run, .. } => news.push(run.clone()),
                Completion::WorkDone { run, .. } if run.opts.mode == DispatchMode::Sequential => {
                    news.push(run.clone())
                }
                Completion::WorkDone { .. } | Completion::Timestamps { .. } => {}
            }
            // Timestamp batches belong to the device, not to one run's slot.
            let (run, stamped) = match &c {
                Completion::Mapped { run, .. } | Completion::WorkDone { run, .. } => {
                    (Some(run.clone()), Vec::new())
                }
                Completion::Timestamps { kernels, .. } => {
                    (None, kernels.iter().map(|(r, _)| r.clone()).collect())
                }
            };
            // A panic while completing one callback fails that callback's run only.
            let outcome = catch_unwind(AssertUnwindSafe(|| self.complete(c))).unwrap_or_else(|p| {
                Err(Error::panicked(
                    format!("device {} completing a GPU callback", self.device.label()),
                    &*p,
                ))
            });
            self.inbox.outstanding.fetch_sub(1, Ordering::AcqRel);
            // Recorded or lost, these GPU times are no longer pending.
            for r in stamped {
                r.stamp_done();
            }
            if let Some(run) = run {
                if let Err(e) = outcome {
                    run.fail(e);
                    news.push(run.clone());
                }
                run.callbacks.fetch_sub(1, Ordering::AcqRel);
                run.release_if_idle();
            }
        }
        news.dedup_by(|a, b| Arc::ptr_eq(a, b));
        for run in news {
            self.shared.ring_run(&run, self.index);
        }
    }

    fn complete(&mut self, c: Completion) -> Result<()> {
        match c {
            Completion::Mapped {
                run,
                node,
                shard,
                role,
                buffer,
                len,
                mut head,
                result,
            } => {
                result.map_err(|e| self.gpu_error(e))?;
                let mut bytes = self.device.take_mapped(&buffer, len)?;
                let moved = bytes.len();
                if !head.is_empty() {
                    // A ragged stage's live rows, behind their counts: what goes on.
                    head.append(&mut bytes);
                    bytes = head;
                }
                self.post(&run, node, shard, bytes);
                let start = run.submitted_ns[node][shard].load(Ordering::Acquire);
                let op = &run.exec.program().nodes()[node].op;
                let meta = run.event_meta(EventMeta::transfer(self.device.id()), node);
                let mut meta = super::moved(meta, role, op, moved);
                if role == (Role::Send { shard })
                    && let Some(id) = run.flow_id(node, shard)
                {
                    meta = meta.flow(id, FlowRole::Out);
                }
                let name = &run.exec.program().nodes()[node].name;
                run.trace.record(
                    meta,
                    || format!("read back {name}"),
                    start,
                    run.trace.now_ns(),
                );
                run.role_done(node);
            }
            Completion::WorkDone {
                run,
                node,
                shard,
                at_ns,
                host_timed,
            } => {
                if host_timed && run.trace.is_on() {
                    let submitted = run.submitted_ns[node][shard].load(Ordering::Acquire);
                    let start = submitted.max(self.core.last_kernel_end).min(at_ns);
                    self.core.last_kernel_end = at_ns;
                    let name = &run.exec.program().nodes()[node].name;
                    run.trace.record(
                        run.event_meta(EventMeta::kernel(self.device.id()), node),
                        || name.clone(),
                        start,
                        at_ns,
                    );
                }
                run.role_done(node);
            }
            Completion::Timestamps {
                kernels,
                buffer,
                result,
            } => {
                result.map_err(|e| self.gpu_error(e))?;
                let bytes = self
                    .device
                    .take_mapped(&buffer, kernels.len() as u64 * 16)?;
                if let Some(ring) = &self.inbox.ring {
                    ring.give_back(buffer);
                }
                let ticks: Vec<u64> = bytemuck::pod_collect_to_vec(&bytes);
                let Some(clock) = self.inbox.clock(self.device) else {
                    return Ok(());
                };
                for ((run, node), t) in kernels.iter().zip(ticks.chunks_exact(2)) {
                    let (start, end) = (
                        clock.host_ns(&run.trace, t[0]),
                        clock.host_ns(&run.trace, t[1]),
                    );
                    let name = &run.exec.program().nodes()[*node].name;
                    run.trace.record(
                        run.event_meta(EventMeta::kernel(self.device.id()), *node)
                            .clock(Clock::Gpu),
                        || name.clone(),
                        start,
                        end.max(start),
                    );
                }
            }
        }
        Ok(())
    }
}
