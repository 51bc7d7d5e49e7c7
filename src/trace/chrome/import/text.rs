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
        let body = trimmed.strip_suffix(b",").unwrap_or(trimmed);
        let mut closed = Vec::with_capacity(body.len() + 1);
        closed.extend_from_slice(body);
        closed.push(b']');
        return Ok(Cow::Owned(closed));
    }
    Ok(text)
}
