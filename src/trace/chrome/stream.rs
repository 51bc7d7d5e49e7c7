//! A trace file written as the events come ([`TraceStream`]), so that a job killed, interrupted
//! or crashed leaves a trace of what ran: gangway's layout (the export's `otherData` marker,
//! a process per track, overflow threads for overlapping slices, flow points), one element a
//! line, each preceded by `,\n` after the first, in an object whose `traceEvents` array is
//! closed only by [`TraceStream::close`]. [`super::text_of`] closes a file that never was, so
//! the import (and Perfetto, which reads unclosed traces) opens it.
//!
//! Overlapping slices of a lane go to overflow threads as the export puts them, but online: an
//! event takes the lowest slot whose last slice ended by its start (events arrive roughly, not
//! exactly, in start order, so a stream may use a slot more than the export would). Flow points
//! are written for each end as it comes; the utilization counters are the export's alone. A
//! finished job's trace is rewritten whole by the export (its caller's choice), so the stream
//! is what is left only when the job did not finish.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::export::{self, Element};
use crate::trace::event::{Event, FlowRole, Lane};
use crate::trace::track::Track;
use crate::{Error, Result};

/// The first bytes of a streamed trace, up to its events.
fn header() -> String {
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Head {
        other_data: export::OtherData,
        display_time_unit: &'static str,
    }
    let head = serde_json::to_string(&Head {
        other_data: export::other_data(),
        display_time_unit: "ms",
    })
    .unwrap_or_else(|_| "{".into());
    // `{...}` opened again for the array: `{"otherData":…,"displayTimeUnit":"ms","traceEvents":[`
    format!(
        "{},\"traceEvents\":[\n",
        head.strip_suffix('}').unwrap_or(&head)
    )
}

/// A Chrome trace file being written event by event.
pub struct TraceStream {
    path: PathBuf,
    out: BufWriter<File>,
    /// Whether an element was written (the next needs a comma first).
    any: bool,
    tracks: Vec<Track>,
    /// Devices whose process metadata is written.
    processes: BTreeSet<usize>,
    /// Per (device, lane), each slot's latest end.
    slots: BTreeMap<(usize, Lane), Vec<u64>>,
    /// Threads whose metadata is written.
    threads: BTreeSet<(usize, Lane, usize)>,
    events: u64,
}

impl std::fmt::Debug for TraceStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceStream")
            .field("path", &self.path)
            .field("events", &self.events)
            .finish_non_exhaustive()
    }
}

fn io(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl TraceStream {
    /// Starts the file at `path` (replacing it: the caller was asked for it), its header
    /// written and flushed.
    pub fn create(path: &Path) -> Result<TraceStream> {
        let file = File::create(path).map_err(|e| io(path, e))?;
        let mut out = BufWriter::with_capacity(64 << 10, file);
        out.write_all(header().as_bytes())
            .and_then(|()| out.flush())
            .map_err(|e| io(path, e))?;
        Ok(TraceStream {
            path: path.to_path_buf(),
            out,
            any: false,
            tracks: Vec::new(),
            processes: BTreeSet::new(),
            slots: BTreeMap::new(),
            threads: BTreeSet::new(),
            events: 0,
        })
    }

    /// What each device's process is; a device seen before its track is "device N".
    pub fn set_tracks(&mut self, tracks: &[Track]) -> Result<()> {
        self.tracks = tracks.to_vec();
        for track in tracks {
            if self.processes.insert(track.id) {
                for e in export::process(track.clone()) {
                    self.element(&e)?;
                }
            }
        }
        Ok(())
    }

    /// Events written so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Appends `e` (to the buffer: [`flush`](Self::flush) puts it in the file).
    pub fn push(&mut self, e: &Event) -> Result<()> {
        if self.processes.insert(e.device) {
            let track = self
                .tracks
                .iter()
                .find(|t| t.id == e.device)
                .cloned()
                .unwrap_or_else(|| Track::unnamed(e.device));
            for m in export::process(track) {
                self.element(&m)?;
            }
        }
        let ends = self.slots.entry((e.device, e.lane)).or_default();
        let slot = match ends.iter().position(|&end| end <= e.start_ns) {
            Some(slot) => slot,
            None => {
                ends.push(0);
                ends.len() - 1
            }
        };
        ends[slot] = e.clamped_end_ns();
        if self.threads.insert((e.device, e.lane, slot)) {
            for m in export::thread(e.device, e.lane, slot) {
                self.element(&m)?;
            }
        }
        self.element(&export::complete(e, slot))?;
        if let Some(flow) = e.flow {
            let ph = match flow.role {
                FlowRole::Out => "s",
                FlowRole::In => "f",
            };
            self.element(&export::flow_point(flow.id, ph, e, slot))?;
        }
        self.events += 1;
        Ok(())
    }

    fn element(&mut self, e: &Element<'_>) -> Result<()> {
        // One write of the whole element: the buffer is written out at element boundaries
        // only, so a killed process leaves whole elements in the file.
        let mut line = if self.any {
            b",\n".to_vec()
        } else {
            Vec::new()
        };
        serde_json::to_writer(&mut line, e).map_err(|e| io(&self.path, e.into()))?;
        self.any = true;
        self.out.write_all(&line).map_err(|e| io(&self.path, e))
    }

    /// Puts what is buffered into the file.
    pub fn flush(&mut self) -> Result<()> {
        self.out.flush().map_err(|e| io(&self.path, e))
    }

    /// Closes the array and the object, and flushes: a complete trace.
    pub fn close(mut self) -> Result<()> {
        self.out
            .write_all(b"\n]}\n")
            .and_then(|()| self.out.flush())
            .map_err(|e| io(&self.path, e))
    }
}
