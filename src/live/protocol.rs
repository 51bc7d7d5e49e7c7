//! The records of the live stream and their framing: a 4-byte big-endian length, then that many
//! bytes of UTF-8 JSON holding one record, tagged by its `type` field. The book's page
//! `reference/live-protocol.md` is the specification; this file is its one implementation.
//!
//! Decoding never panics: a length of 0 or over [`MAX_FRAME`], text that is not UTF-8 or not a
//! JSON object, or an unknown `type` is a [`LiveError::BadFrame`], and the fuzz target
//! `live_frame` feeds the decoder arbitrary bytes to keep it so.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::error::{LiveError, Result};
use crate::trace::{Event, Track, process_epoch};

/// The protocol's major version: a client and a server of different majors do not talk.
/// Fields may be added within a major (readers ignore fields they do not know); removing or
/// retyping a field, or adding a record type, takes a new major.
pub const PROTOCOL_VERSION: u32 = 1;

/// The longest frame payload either side sends or accepts, in bytes (1 MiB): a length above it
/// is a bad frame, so a hostile or broken peer cannot make a reader allocate more.
pub const MAX_FRAME: usize = 1 << 20;

/// The bytes of a frame's length prefix.
pub const HEADER: usize = 4;

/// The `producer` of gangway's hellos.
pub const PRODUCER: &str = "gangway";

/// One record of the stream, either way: a client sends one [`Record::Attach`] and nothing
/// else; a server sends every other kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Record {
    /// Client → server, first and only: the protocol it speaks and the token, if any.
    Attach(Attach),
    /// Server → client, instead of the hello: why the attach was not accepted. The server
    /// closes the connection after it.
    Refused { reason: String },
    /// Server → client, first after a valid attach: what is running.
    Hello(Hello),
    /// One trace event from `rank`.
    Event { rank: usize, event: Event },
    /// One measured value.
    Metric(Metric),
    /// How many records this client has lost so far, in total (each count only grows).
    Dropped {
        events: u64,
        #[serde(default)]
        metrics: u64,
    },
    /// The job ended; the last record of a stream.
    End(End),
    /// Sent when the server had nothing else to send for about a second: the job is alive.
    Heartbeat { t_ns: u64 },
}

/// What a client sends first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attach {
    /// The client's [`PROTOCOL_VERSION`].
    pub protocol: u32,
    /// The server's token; required when the server has one, ignored when it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Who is attaching ("gangway watch 0.1.0"), for the server's log only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
}

/// What is running: the first record a client receives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// The server's [`PROTOCOL_VERSION`].
    pub protocol: u32,
    /// Which program serves the stream: [`PRODUCER`] for gangway.
    pub producer: String,
    /// The producer's version (gangway's crate version).
    pub version: String,
    /// The git commit the producer was built from, when known.
    #[serde(default)]
    pub commit: Option<String>,
    /// The process's command line, program name first.
    #[serde(default)]
    pub command: Vec<String>,
    /// The process id of the server.
    #[serde(default)]
    pub pid: u32,
    /// How many processes (ranks) the job has.
    pub ranks: usize,
    /// Each rank's host name, by rank (may be empty when unknown).
    #[serde(default)]
    pub hosts: Vec<String>,
    /// The job's mesh axes, outermost first.
    #[serde(default)]
    pub mesh: Vec<MeshAxis>,
    /// Every device of the job; an event's `device` is a device's `track.id`.
    #[serde(default)]
    pub devices: Vec<LiveDevice>,
    /// The wall-clock time of the trace epoch, in nanoseconds since the Unix epoch: every
    /// `*_ns` time of the stream counts from it.
    pub epoch_unix_ns: u64,
    /// Whether the stream carries trace events; false for a job served metrics only (`gangway
    /// --live-metrics-only`), which then runs without a tracer. Absent means true.
    #[serde(default = "carries_events")]
    pub events: bool,
}

fn carries_events() -> bool {
    true
}

/// One named axis of the job's mesh.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeshAxis {
    pub name: String,
    pub size: usize,
}

/// One device of the job, as a hello lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveDevice {
    /// Its index in the job's mesh.
    pub id: usize,
    /// The rank that drives it.
    pub rank: usize,
    /// That rank's host.
    #[serde(default)]
    pub host: String,
    /// The adapter's name as the driver gives it.
    pub adapter: String,
    /// The wgpu backend ("vulkan", "metal", "dx12", "gl").
    pub backend: String,
    /// The trace lane its events are on (the events' `device` is `track.id`).
    pub track: Track,
}

/// One value a producer measured, named as it chooses ("train/loss").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    pub name: String,
    /// The training step (or other counter) it belongs to, if any.
    #[serde(default)]
    pub step: Option<u64>,
    /// The value; NaN and the infinities travel as the strings "NaN", "Infinity", "-Infinity".
    #[serde(with = "finite_or_text")]
    pub value: f64,
    /// When it was measured, in ns since the trace epoch.
    pub t_ns: u64,
    /// What else tells it apart (`expert` = "3"); usually empty.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// How the job ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct End {
    pub status: EndStatus,
    /// The process's exit code.
    pub exit_code: i32,
    /// The error that ended it, for `status` = `error`.
    #[serde(default)]
    pub error: Option<String>,
}

/// Whether the job succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndStatus {
    Ok,
    Error,
}

impl Hello {
    /// This process's hello: gangway's version and commit, its command line and pid, the
    /// epoch of [`process_epoch`], one rank on no named host, and no devices yet.
    pub fn for_this_process() -> Hello {
        let commit = env!("GANGWAY_GIT_HASH");
        Hello {
            protocol: PROTOCOL_VERSION,
            producer: PRODUCER.into(),
            version: env!("CARGO_PKG_VERSION").into(),
            commit: (commit != "unknown").then(|| commit.to_string()),
            command: std::env::args().collect(),
            pid: std::process::id(),
            ranks: 1,
            hosts: Vec::new(),
            mesh: Vec::new(),
            devices: Vec::new(),
            epoch_unix_ns: epoch_unix_ns(),
            events: true,
        }
    }

    /// The lanes of the devices, for a trace of the stream's events; in a job of several ranks
    /// each titled by its rank, as the trace gathered at a job's end titles them.
    pub fn tracks(&self) -> Vec<Track> {
        self.devices
            .iter()
            .map(|d| {
                let mut track = d.track.clone();
                if self.ranks > 1 {
                    track.label = format!("rank {}: {}", d.rank, track.label);
                    track.rank = Some(d.rank);
                }
                track
            })
            .collect()
    }
}

impl Metric {
    /// A metric of no step and no labels measured now.
    pub fn now(name: impl Into<String>, value: f64) -> Metric {
        Metric {
            name: name.into(),
            step: None,
            value,
            t_ns: crate::trace::ns_since_epoch(std::time::Instant::now()),
            labels: BTreeMap::new(),
        }
    }

    /// The same metric at `step`.
    pub fn at_step(mut self, step: u64) -> Metric {
        self.step = Some(step);
        self
    }

    /// The same metric with one more label.
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Metric {
        self.labels.insert(key.into(), value.into());
        self
    }
}

impl End {
    /// A successful end (exit code 0).
    pub fn ok() -> End {
        End {
            status: EndStatus::Ok,
            exit_code: 0,
            error: None,
        }
    }

    /// A failed end with the error's text.
    pub fn error(exit_code: i32, error: impl Into<String>) -> End {
        End {
            status: EndStatus::Error,
            exit_code,
            error: Some(error.into()),
        }
    }
}

/// The wall-clock time of [`process_epoch`] in ns since the Unix epoch: the wall clock less
/// the time since the epoch, read back to back (good to about a µs) the first time anything
/// asks, then the same for the life of the process, so every hello of it agrees.
pub fn epoch_unix_ns() -> u64 {
    static EPOCH_UNIX_NS: OnceLock<u64> = OnceLock::new();
    *EPOCH_UNIX_NS.get_or_init(read_epoch_unix_ns)
}

fn read_epoch_unix_ns() -> u64 {
    let since_epoch = process_epoch().elapsed();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(now.saturating_sub(since_epoch).as_nanos()).unwrap_or(u64::MAX)
}

impl Record {
    /// The record's `type` tag, as it is on the wire.
    pub fn kind(&self) -> &'static str {
        match self {
            Record::Attach(_) => "attach",
            Record::Refused { .. } => "refused",
            Record::Hello(_) => "hello",
            Record::Event { .. } => "event",
            Record::Metric(_) => "metric",
            Record::Dropped { .. } => "dropped",
            Record::End(_) => "end",
            Record::Heartbeat { .. } => "heartbeat",
        }
    }
}

/// An `event` record borrowing its event, so a server serialises what it publishes without
/// copying it first; it writes the same JSON as [`Record::Event`].
#[derive(Serialize)]
#[serde(tag = "type", rename = "event")]
pub(crate) struct EventRef<'a> {
    pub rank: usize,
    pub event: &'a Event,
}

/// `record` as one frame: its length prefix and its JSON.
pub fn encode(record: &Record) -> Result<Vec<u8>> {
    encode_any(record)
}

/// Any record-shaped value as one frame (see [`EventRef`]).
pub(crate) fn encode_any(record: &impl Serialize) -> Result<Vec<u8>> {
    let mut frame = vec![0; HEADER];
    serde_json::to_writer(&mut frame, record).map_err(|e| bad(format!("cannot encode: {e}")))?;
    let len = frame.len() - HEADER;
    if len > MAX_FRAME {
        return Err(bad(format!(
            "a {len}-byte record exceeds the {MAX_FRAME}-byte frame limit"
        )));
    }
    // `len` ≤ MAX_FRAME fits a u32.
    frame[..HEADER].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(frame)
}

/// The record in one frame's payload (the bytes after the length prefix).
pub fn decode_payload(payload: &[u8]) -> Result<Record> {
    let text =
        std::str::from_utf8(payload).map_err(|e| bad(format!("the payload is not UTF-8: {e}")))?;
    serde_json::from_str(text)
        .map_err(|e| bad(format!("not a record of protocol {PROTOCOL_VERSION}: {e}")))
}

/// The payload length a frame's prefix declares, checked against the limits.
pub fn frame_len(header: [u8; HEADER]) -> Result<usize> {
    let len = u32::from_be_bytes(header) as usize;
    if len == 0 {
        return Err(bad("a zero-length frame".into()));
    }
    if len > MAX_FRAME {
        return Err(bad(format!(
            "a frame of {len} bytes exceeds the {MAX_FRAME}-byte limit"
        )));
    }
    Ok(len)
}

/// Cuts frames out of a byte stream that arrives in pieces: [`push`](Self::push) what was read,
/// then take records with [`next_record`](Self::next_record) until it says it needs more. After
/// an error the stream cannot be resynchronised; the connection is to be closed.
#[derive(Default)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    /// Where the next frame starts in `buf`; the bytes before it were decoded.
    start: usize,
}

impl FrameDecoder {
    pub fn new() -> FrameDecoder {
        FrameDecoder::default()
    }

    /// Appends bytes read from the connection.
    pub fn push(&mut self, bytes: &[u8]) {
        // Drop what was decoded before growing, so the buffer holds at most one partial frame
        // and what arrived since.
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole record, `None` when the buffered bytes end inside a frame. A bad length
    /// is an error as soon as its 4 bytes are in, before any of its payload.
    pub fn next_record(&mut self) -> Result<Option<Record>> {
        let rest = &self.buf[self.start..];
        let Some(header) = rest.first_chunk::<HEADER>() else {
            return Ok(None);
        };
        let len = frame_len(*header)?;
        let Some(payload) = rest.get(HEADER..HEADER + len) else {
            return Ok(None);
        };
        let record = decode_payload(payload)?;
        self.start += HEADER + len;
        Ok(Some(record))
    }

    /// Bytes buffered and not yet decoded: a partial frame.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.start
    }
}

impl std::fmt::Debug for FrameDecoder {
    /// The count, not the bytes: up to a frame's worth may be buffered.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameDecoder")
            .field("pending", &self.pending())
            .finish()
    }
}

fn bad(reason: String) -> crate::Error {
    LiveError::BadFrame { reason }.into()
}

/// A metric's value as a JSON number, or as text where JSON has no number for it.
mod finite_or_text {
    use serde::{Deserialize, Deserializer, Serializer, de::Error as _};

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        if v.is_finite() {
            s.serialize_f64(*v)
        } else if v.is_nan() {
            s.serialize_str("NaN")
        } else if *v > 0.0 {
            s.serialize_str("Infinity")
        } else {
            s.serialize_str("-Infinity")
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum NumberOrText {
        Number(f64),
        Text(String),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        match NumberOrText::deserialize(d)? {
            NumberOrText::Number(v) => Ok(v),
            NumberOrText::Text(t) => match t.as_str() {
                "NaN" => Ok(f64::NAN),
                "Infinity" => Ok(f64::INFINITY),
                "-Infinity" => Ok(f64::NEG_INFINITY),
                _ => Err(D::Error::custom(format!(
                    "a metric value is a number, \"NaN\", \"Infinity\" or \"-Infinity\", not {t:?}"
                ))),
            },
        }
    }
}
