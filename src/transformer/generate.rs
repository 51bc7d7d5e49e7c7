//! Text from a trained Transformer ([`generate`]), and the targets of its training sequences
//! ([`shifted_targets`]: a sequence is a context window of [`crate::data::Batches`] with the byte
//! after it, its targets the window shifted by one).

use super::TransformerCheckpoint;
use crate::{Error, Result};

/// The targets of sequences cut from context windows: each window shifted by one, then the byte
/// after it.
pub fn shifted_targets(inputs: &[u32], next: &[u32], seq: usize) -> Vec<u32> {
    inputs
        .chunks_exact(seq)
        .zip(next)
        .flat_map(|(w, &y)| w[1..].iter().copied().chain([y]))
        .collect()
}

/// Bytes sampled after `prompt`, one at a time from the logits of the last `T` bytes (the
/// reference forward on the host: one sequence is far too little work to pay for a GPU round
/// trip per byte at these sizes). `temperature` 0 takes the most likely byte.
pub fn generate(
    checkpoint: &TransformerCheckpoint,
    prompt: &[u8],
    max_bytes: usize,
    temperature: f32,
    seed: u64,
) -> Result<Vec<u8>> {
    if !(temperature.is_finite() && temperature >= 0.0) {
        return Err(Error::InvalidArgument {
            what: "generate",
            reason: format!("temperature must be finite and >= 0, got {temperature}"),
        });
    }
    let params = &checkpoint.params;
    let t = params.config.context;
    let mut rng = crate::Rng::new(seed);
    let mut text: Vec<u32> = prompt.iter().map(|&b| u32::from(b)).collect();
    if text.is_empty() {
        // Start from a newline, as a document would.
        text.push(u32::from(b'\n'));
    }
    let mut out = Vec::with_capacity(max_bytes);
    for _ in 0..max_bytes {
        let window = &text[text.len().saturating_sub(t)..];
        let logits = super::reference::logits(params, window)?;
        let row = &logits[(window.len() - 1) * super::VOCAB..];
        let byte = sample(row, temperature, &mut rng);
        out.push(byte as u8);
        text.push(byte);
    }
    Ok(out)
}

/// A draw from `softmax(row / temperature)`, or the argmax at temperature 0.
fn sample(row: &[f32], temperature: f32, rng: &mut crate::Rng) -> u32 {
    let argmax = row
        .iter()
        .enumerate()
        .fold(0, |best, (i, &v)| if v > row[best] { i } else { best });
    if temperature == 0.0 {
        return argmax as u32;
    }
    let m = f64::from(row[argmax]);
    let weights: Vec<f64> = row
        .iter()
        .map(|&v| ((f64::from(v) - m) / f64::from(temperature)).exp())
        .collect();
    let mut r = f64::from(rng.unit()) * weights.iter().sum::<f64>();
    for (i, w) in weights.iter().enumerate() {
        r -= w;
        if r <= 0.0 {
            return i as u32;
        }
    }
    argmax as u32
}
