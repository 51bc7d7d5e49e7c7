//! Where the lab's schedule study runs: on the UI thread when it is small, and off it
//! ([`crate::background`]) when it is large enough to take a visible part of a second. ZB-V at
//! p = 16 and m = 64 takes 1.2 s in a release build, and the V-Half search 0.5 s; on the UI
//! thread every step of a slider would freeze the window that long. While a study runs, the
//! last figure stays up, and the lab says what it is computing. Controls moved meanwhile are
//! studied when it ends: the newest settings win.

use super::LabParams;
use super::simulate::{LabResult, compute};
use crate::background::{self, Job};

/// Compute ops (stages × microbatches × chunks) from which a study runs off the UI thread.
/// The lab's own settings and the tests' stay under it (p = 4, m = 8: 32); p = 16 and m = 16
/// reach it.
pub const BACKGROUND_OPS: usize = 256;

/// The study the lab shows, and the one it may be computing.
#[derive(Debug, Default)]
pub struct Studying {
    /// The settings the shown result is for.
    shown: Option<LabParams>,
    running: Option<(LabParams, Job<Result<LabResult, String>>)>,
}

impl Studying {
    /// Brings `result` up to `params`: at once when the study is small or there is no window
    /// to wake (`ctx`), else by starting it off the UI thread and taking it when it ends. True
    /// when `result` changed.
    pub fn update(
        &mut self,
        params: LabParams,
        result: &mut Result<LabResult, String>,
        ctx: Option<&egui::Context>,
    ) -> bool {
        let mut changed = false;
        if let Some((done_for, job)) = &self.running
            && let Some(done) = job.poll("the schedule study")
        {
            *result = done.and_then(|r| r);
            self.shown = Some(*done_for);
            self.running = None;
            changed = true;
        }
        if self.shown == Some(params) || self.running.is_some() {
            return changed;
        }
        let ops = params.stages * params.microbatches * params.effective_chunks();
        let Some(ctx) = ctx.filter(|_| ops >= BACKGROUND_OPS) else {
            *result = compute(&params);
            self.shown = Some(params);
            return true;
        };
        match background::spawn("gangway-lab-study", Some(ctx.clone()), move || {
            compute(&params)
        }) {
            Ok(job) => self.running = Some((params, job)),
            Err(e) => {
                *result = Err(e);
                self.shown = Some(params);
                changed = true;
            }
        }
        changed
    }

    /// The settings being studied off the UI thread, while one is.
    pub fn computing(&self) -> Option<LabParams> {
        self.running.as_ref().map(|(p, _)| *p)
    }
}
