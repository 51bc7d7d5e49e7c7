//! Issue 55: `eval lm`'s rule (`transformer::score::score_text`) scores every byte after the
//! first exactly once on a text whose length is no multiple of the context: the sequences of `T`
//! bytes, then a last window ending at the text's end for the bytes after them. Bits per byte
//! against the plain-Rust reference's logits over the same windows, on each adapter; and
//! `whole_windows` leaves those last bytes out, as before.
#![allow(clippy::unwrap_used)]

mod common;

use common::case;
use gangway::Device;
use gangway::kernels::optim::AdamConfig;
use gangway::kernels::router::dropless_factor;
use gangway::transformer::generate::routed_for_generation;
use gangway::transformer::reference::logits;
use gangway::transformer::score::score_text;
use gangway::transformer::{TransformerConfig, TransformerParams, TransformerTrainer, VOCAB};

fn main() -> std::process::ExitCode {
    common::run(vec![case!(
        device: every_byte_after_the_first_is_scored_once_as_the_reference_scores_it
    )])
}

/// The reference's nats for predicting `text[i]`, for each `i` in `scored`, from the window
/// `text[from..to]` (`to` is the last target's index).
fn reference_nats(
    p: &TransformerParams,
    text: &[u8],
    from: usize,
    scored: std::ops::Range<usize>,
) -> f64 {
    let to = scored.end;
    let ids: Vec<u32> = text[from..to - 1].iter().map(|&b| b.into()).collect();
    let rows = logits(p, &ids).unwrap();
    scored
        .map(|i| {
            let row = &rows[(i - 1 - from) * VOCAB..(i - from) * VOCAB];
            common::cross_entropy(row, text[i] as usize)
        })
        .sum()
}

fn every_byte_after_the_first_is_scored_once_as_the_reference_scores_it(device: &Device) {
    let (_runtime, client) = common::runtime_client(std::slice::from_ref(device), "test");
    let cfg = TransformerConfig {
        context: 5,
        model: 8,
        heads: 2,
        layers: 2,
        hidden: 12,
        moe_every: 2,
        experts: 2,
        top_k: 1,
        seed: 4,
        ..TransformerConfig::default()
    };
    let params = TransformerParams::init(cfg).unwrap();
    // 7 whole sequences of 5 cover bytes 1..=35; 3 more bytes follow.
    let text: Vec<u8> = (0..39)
        .map(|i| b"gangway scores every byte "[i % 26])
        .collect();
    let mut trainer = TransformerTrainer::new(
        &client,
        &gangway::Mesh::line(std::slice::from_ref(device)),
        &params,
        AdamConfig::new(1e-3),
        1,
    )
    .unwrap();
    // Dropless, so a window's routing is its own and the reference's windows match.
    trainer
        .set_eval_capacity(Some(dropless_factor(cfg.experts, cfg.top_k)))
        .unwrap();
    let all = score_text(&trainer, ("text", &text), 100, 3, false).unwrap();
    assert_eq!(all.evaluation.scored, 7);
    assert_eq!(all.tail_bytes, 3);
    assert_eq!(
        all.evaluation.bytes,
        text.len() - 1,
        "every byte after the first"
    );
    let routed = routed_for_generation(&params);
    let t = cfg.context;
    let mut nats: f64 = (0..7)
        .map(|w| reference_nats(&routed, &text, w * t, w * t + 1..w * t + t + 1))
        .sum();
    let whole = nats / (7 * t) as f64 / std::f64::consts::LN_2;
    // The last window: the text's last T + 1 bytes, its last 3 targets scored.
    let n = text.len();
    nats += reference_nats(&routed, &text, n - 1 - t, n - 3..n);
    let want = nats / (n - 1) as f64 / std::f64::consts::LN_2;
    let got = all.evaluation.bits_per_byte;
    assert!(
        (got - want).abs() < 1e-4 * want,
        "{got} bits per byte, the reference {want}"
    );
    let old = score_text(&trainer, ("text", &text), 100, 3, true).unwrap();
    assert_eq!((old.tail_bytes, old.evaluation.bytes), (0, 35));
    let got = old.evaluation.bits_per_byte;
    assert!((got - whole).abs() < 1e-4 * whole, "{got} against {whole}");
    // A sample of the sequences leaves the tail out too: only a whole pass ends at the end.
    let some = score_text(&trainer, ("text", &text), 3, 3, false).unwrap();
    assert_eq!((some.tail_bytes, some.evaluation.scored), (0, 3));
}
