//! The unigram byte baseline, in bits per byte: a model that has learned nothing about context
//! scores about this, so a trained one must land well under it.

use super::{Corpus, VOCAB};
use crate::{Error, Result};

/// Bits per byte from a loss in nats per byte (the usual cross-entropy): divide by ln 2.
pub fn bits_per_byte(nats_per_byte: f64) -> f64 {
    nats_per_byte / std::f64::consts::LN_2
}

/// Fits byte frequencies on `train` with add-one smoothing over all 256 values (so an unseen
/// byte still costs finite bits) and returns the mean bits per byte on `valid`. Errors when
/// `valid` is empty, where a mean means nothing.
pub fn unigram_bits_per_byte(train: &Corpus, valid: &Corpus) -> Result<f64> {
    let mut counts = [1u64; VOCAB];
    for d in train.documents() {
        for &b in &d.bytes {
            counts[usize::from(b)] += 1;
        }
    }
    let total: u64 = counts.iter().sum();
    let bits: [f64; VOCAB] = std::array::from_fn(|b| -(counts[b] as f64 / total as f64).log2());
    let mut sum = 0.0;
    let mut n = 0u64;
    for d in valid.documents() {
        for &b in &d.bytes {
            sum += bits[usize::from(b)];
            n += 1;
        }
    }
    if n == 0 {
        return Err(Error::InvalidArgument {
            what: "unigram_bits_per_byte",
            reason: "the validation corpus is empty".into(),
        });
    }
    Ok(sum / n as f64)
}

#[cfg(test)]
mod tests {
    use super::super::Document;
    use super::*;

    fn corpus(bytes: &[u8]) -> Corpus {
        Corpus::from_documents(vec![Document::new("t", "t", bytes.to_vec())])
    }

    #[test]
    fn untrained_is_eight_bits_and_skew_is_cheaper() -> Result<()> {
        let empty = Corpus::default();
        let v = corpus(b"anything at all");
        assert!((unigram_bits_per_byte(&empty, &v)? - 8.0).abs() < 1e-12);
        let a = corpus(&[b'a'; 1000]);
        let bpb = unigram_bits_per_byte(&a, &corpus(b"aaaa"))?;
        // p(a) = 1001 / 1256.
        assert!((bpb - -(1001.0f64 / 1256.0).log2()).abs() < 1e-12);
        assert!(unigram_bits_per_byte(&a, &corpus(b"b"))? > 10.0);
        assert!(unigram_bits_per_byte(&a, &empty).is_err());
        Ok(())
    }

    #[test]
    fn nats_convert_to_bits() {
        assert!((bits_per_byte(std::f64::consts::LN_2) - 1.0).abs() < 1e-12);
        assert!((bits_per_byte(256f64.ln()) - 8.0).abs() < 1e-12);
    }
}
