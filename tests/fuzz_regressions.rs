//! Inputs the fuzz targets (`fuzz/`) found crashing, kept as plain tests so `cargo test` holds the
//! fixes without nightly. Each test decodes its input the way its target does.
#![allow(clippy::unwrap_used)]

use gangway::data::{Batches, Corpus, Document, MAX_BATCH_BYTES};

/// The `corpus` target's decoding: 16 bytes of sizes and seeds, then documents cut at 0xff.
fn corpus_case(data: &[u8]) -> (Corpus, usize, usize, u64) {
    let size = |b: u8| match b {
        0xf0..=0xff => 1usize << (b - 0xc0),
        _ => usize::from(b),
    };
    let (head, rest) = data.split_at(16);
    let seed = u64::from_le_bytes(head[5..13].try_into().unwrap());
    let docs = rest
        .split(|&b| b == 0xff)
        .enumerate()
        .map(|(i, d)| Document::new(format!("d{}", i % 3), format!("doc{i}"), d.to_vec()))
        .collect();
    (
        Corpus::from_documents(docs),
        size(head[1]),
        size(head[2]),
        seed,
    )
}

/// `fuzz/artifacts/corpus/crash-89326ee0…`: `--batch 2^56` with a context of 4 bytes made
/// `Batches::next` ask for 2^58 ids at once (an abort, not an error).
#[test]
fn a_huge_batch_is_an_error_not_an_abort() {
    let input: &[u8] = b"\x20\x04\xf8\xfe\xf7\x00\xfd\xfc\xfc\x00\x06other one with more \
        \x96\x06othein it\xff\x04\x00\x00\x00\x00\x00\x00\x00\xd0\x9f\xd1\x80\xd0\xb8";
    let (corpus, context, batch, seed) = corpus_case(input);
    assert_eq!((context, batch), (4, 1 << 56));
    let split = corpus.split(f64::from(input[0]) / 256.0).unwrap();
    let err = Batches::new(&split.train, context, batch, seed)
        .unwrap_err()
        .to_string();
    assert!(err.contains("exceeds") && !err.contains('\n'), "{err}");
    // The cap itself is allowed; one more window is not; an overflowing product is refused.
    let text = Corpus::from_documents(vec![Document::new("d", "d", vec![b'x'; 16])]);
    assert!(Batches::new(&text, 4, MAX_BATCH_BYTES / 4, 1).is_ok());
    assert!(Batches::new(&text, 4, MAX_BATCH_BYTES / 4 + 1, 1).is_err());
    assert!(Batches::new(&text, 2, usize::MAX / 2 + 1, 1).is_err());
}
