//! Scoring a whole text as `gangway eval lm` does ([`score_text`]): the evaluation windows of
//! [`crate::train::evaluate`] (sequences of `T` bytes, `T` apart, each byte predicted from the
//! bytes before it in its sequence), then, unless whole windows are asked for, one last window
//! ending at the text's end that scores only the bytes the others left out. So every byte after
//! the first is scored exactly once, as Hugging Face's strided perplexity guide asks of a
//! perplexity, whatever the text's length.

use super::TransformerTrainer;
use crate::Result;
use crate::data::Corpus;
use crate::train::{Batcher, Evaluation, evaluate};

/// What [`score_text`] scored.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct TextScore {
    /// The evaluation windows', and the last window's bytes folded in: `bits_per_byte` and
    /// `bytes` are over every byte scored.
    pub evaluation: Evaluation,
    /// Bytes at the text's end scored by the last window (0: none were left, whole windows were
    /// asked for, or the windows were a sample of the text).
    pub tail_bytes: usize,
}

/// Scores `text` with `trainer`'s model: at most `max_sequences` windows of `T` bytes in
/// batches of `batch` ([`evaluate`]), then, when every window was scored and `whole_windows` is
/// false, the bytes after the last window, by a window that ends at the text's end (its
/// earlier positions, scored already, only give context). The trainer must route in one group.
pub fn score_text(
    trainer: &TransformerTrainer,
    (name, text): (&str, &[u8]),
    max_sequences: usize,
    batch: usize,
    whole_windows: bool,
) -> Result<TextScore> {
    let corpus = Corpus::from_documents(vec![crate::data::Document::new(
        "eval",
        name,
        text.to_vec(),
    )]);
    let mut evaluation = evaluate(trainer, &corpus, max_sequences, batch)?;
    let t = trainer.config().context;
    let every_window = evaluation.scored == evaluation.available;
    let covered = evaluation.available * t;
    let rest = text.len().saturating_sub(1 + covered);
    if whole_windows || !every_window || rest == 0 || trainer.groups() != 1 {
        return Ok(TextScore {
            evaluation,
            tail_bytes: 0,
        });
    }
    let n = text.len();
    let window: Vec<u32> = text[n - 1 - t..n - 1].iter().map(|&b| b.into()).collect();
    let (inputs, targets) = trainer
        .config()
        .batch_from(window, vec![u32::from(text[n - 1])]);
    let pass = trainer.forward(&inputs, &targets)?;
    let tail: f64 = pass.nats[pass.nats.len().saturating_sub(rest)..]
        .iter()
        .sum();
    let nats = evaluation.bits_per_byte * std::f64::consts::LN_2 * evaluation.bytes as f64;
    evaluation.bytes += rest;
    evaluation.bits_per_byte = (nats + tail) / evaluation.bytes as f64 / std::f64::consts::LN_2;
    if let Some(fraction) = evaluation.dropped_fraction {
        // The last window's router choices count whole: its routing is the window's.
        let choices =
            (evaluation.bytes - rest) * trainer.config().top_k * trainer.config().moe_layers();
        let dropped = fraction * choices as f64 + pass.dropped as f64;
        evaluation.dropped_fraction = Some(dropped / (choices + pass.choices).max(1) as f64);
    }
    Ok(TextScore {
        evaluation,
        tail_bytes: rest,
    })
}
