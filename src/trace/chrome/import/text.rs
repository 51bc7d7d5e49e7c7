//! A trace file's bytes as JSON text: gunzipped by its magic number, and a top-level array the
//! producer never closed, closed.

use std::borrow::Cow;
use std::io::Read as _;

/// The JSON text of a trace file's bytes, as [`super::read`] takes it: gunzipped, and an unclosed
/// top-level array closed (a trailing comma dropped). Anything else is returned as it is.
pub fn text_of(bytes: &[u8]) -> Result<Cow<'_, [u8]>, String> {
    let text: Cow<'_, [u8]> = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::MultiGzDecoder::new(bytes)
            .read_to_end(&mut out)
            .map_err(|e| format!("not a readable gzip file: {e}"))?;
        Cow::Owned(out)
    } else {
        Cow::Borrowed(bytes)
    };
    let trimmed = text.trim_ascii();
    if trimmed.starts_with(b"[") && !trimmed.ends_with(b"]") {
        return Ok(Cow::Owned(closed(trimmed, b"]")));
    }
    // gangway's streamed trace (`TraceStream`): an object whose `traceEvents` array is last,
    // cut off by a kill.
    if trimmed.starts_with(b"{")
        && !trimmed.ends_with(b"]}")
        && find(&trimmed[..trimmed.len().min(512)], STREAM_ARRAY).is_some()
    {
        return Ok(Cow::Owned(closed(trimmed, b"]}")));
    }
    Ok(text)
}

/// Where a streamed trace's events begin: its header's last key (the export writes
/// `displayTimeUnit` after the events, so a whole trace never has this).
const STREAM_ARRAY: &[u8] = b"\"displayTimeUnit\":\"ms\",\"traceEvents\":[";

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// `body` (an array left open) closed with `end`: a trailing comma dropped, and an element cut
/// off mid-way (the text after the last `,\n` that does not end an element) left out.
fn closed(body: &[u8], end: &[u8]) -> Vec<u8> {
    let mut body = body.strip_suffix(b",").unwrap_or(body);
    if !(body.ends_with(b"}") || body.ends_with(b"[")) {
        if let Some(cut) = body.windows(2).rposition(|w| w == b",\n") {
            body = &body[..cut];
        } else if let Some(cut) = body.windows(2).rposition(|w| w == b"},") {
            body = &body[..=cut];
        }
    }
    let mut out = Vec::with_capacity(body.len() + end.len());
    out.extend_from_slice(body);
    out.extend_from_slice(end);
    out
}
