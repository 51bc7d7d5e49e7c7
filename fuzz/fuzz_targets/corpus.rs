//! Corpus files, which may hold any bytes, through everything training does with them: split,
//! the unigram baseline, random batches, evaluation windows and random groups. The first 16
//! bytes pick the sizes and seeds (any value, as a user's flags may); the rest, cut at 0xff, are
//! the documents.
#![no_main]

use gangway::data::{Corpus, Document, unigram_bits_per_byte};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((head, rest)) = data.split_first_chunk::<16>() else {
        return;
    };
    let fraction = f64::from(head[0]) / 256.0;
    // Mostly small sizes, sometimes huge ones: both must be handled.
    let size = |b: u8| match b {
        0xf0..=0xff => 1usize << (b - 0xc0),
        _ => usize::from(b),
    };
    let (context, batch, stride, k) = (size(head[1]), size(head[2]), size(head[3]), size(head[4]));
    let seed = u64::from_le_bytes([
        head[5], head[6], head[7], head[8], head[9], head[10], head[11], head[12],
    ]);
    let docs = rest
        .split(|&b| b == 0xff)
        .enumerate()
        .map(|(i, d)| Document::new(format!("d{}", i % 3), format!("doc{i}"), d.to_vec()))
        .collect();
    let corpus = Corpus::from_documents(docs);
    let _ = corpus.domains();
    let _ = corpus.by_domain();
    let Ok(split) = corpus.split(fraction) else {
        return;
    };
    let _ = unigram_bits_per_byte(&split.train, &split.valid);
    if let Ok(mut batches) = gangway::data::Batches::new(&split.train, context, batch, seed) {
        for _ in 0..2 {
            let (inputs, targets) = batches.next().expect("batches never end");
            assert_eq!(inputs.len(), batch * context);
            assert_eq!(targets.len(), batch);
        }
    }
    if let Ok(windows) = split.valid.windows(context, stride) {
        for _ in windows.take(64) {}
    }
    if let Ok(groups) = corpus.random_split(k, seed) {
        let bytes: usize = groups.iter().map(Corpus::len_bytes).sum();
        assert_eq!(bytes, corpus.len_bytes());
    }
});
