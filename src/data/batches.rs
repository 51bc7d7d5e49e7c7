//! Context windows and the byte after each: random batches for training, a sequential walk for
//! evaluation. Windows never cross a document boundary, so no window mixes two sources (or a
//! training and a validation part).

use super::{Corpus, Document};
use crate::{Error, Result, Rng};

/// One context window (byte ids) and the byte after it.
pub type Window = (Vec<u32>, u32);

/// Endless batches of `batch` windows drawn uniformly over every window position in a corpus,
/// deterministic from the seed. Each item is `(inputs, targets)`: `inputs` holds `batch × context`
/// byte ids (row-major, one window per row), `targets` the `batch` bytes that follow them.
#[derive(Debug, Clone)]
pub struct Batches<'a> {
    /// Borrowed, or owned by batches that outlive their caller's corpus ([`Batches::owned`]).
    corpus: std::borrow::Cow<'a, Corpus>,
    /// `ends[i]`: windows in documents `0..=i`; a draw below it and above `ends[i - 1]` lands in `i`.
    ends: Vec<u64>,
    context: usize,
    batch: usize,
    rng: Rng,
}

/// The most context bytes one batch may hold (`batch × context`): 2^26, whose ids fill 256 MiB as
/// the `u32`s a trainer uploads, twice WebGPU's default storage-binding limit. A larger batch is a
/// typo; it is refused before any memory is spent on it, not left to abort the process.
pub const MAX_BATCH_BYTES: usize = 1 << 26;

/// Errors unless `context` and `batch` are positive and `batch × context` is at most
/// [`MAX_BATCH_BYTES`]: every user of a batch size checks it here before allocating for it.
pub fn check_batch(what: &'static str, context: usize, batch: usize) -> Result<()> {
    if context == 0 || batch == 0 {
        return Err(Error::InvalidArgument {
            what,
            reason: format!("context and batch must be positive, got {context} and {batch}"),
        });
    }
    if batch
        .checked_mul(context)
        .is_none_or(|n| n > MAX_BATCH_BYTES)
    {
        return Err(Error::InvalidArgument {
            what,
            reason: format!(
                "a batch of {batch} windows of {context} bytes exceeds {MAX_BATCH_BYTES} bytes"
            ),
        });
    }
    Ok(())
}

impl<'a> Batches<'a> {
    /// Errors when [`check_batch`] does, or no document is longer than `context`.
    pub fn new(corpus: &'a Corpus, context: usize, batch: usize, seed: u64) -> Result<Self> {
        check_batch("Batches::new", context, batch)?;
        let mut total = 0u64;
        let ends = corpus
            .documents()
            .iter()
            .map(|d| {
                total += d.len().saturating_sub(context) as u64;
                total
            })
            .collect();
        if total == 0 {
            return Err(too_short("Batches::new", corpus, context));
        }
        Ok(Self {
            corpus: std::borrow::Cow::Borrowed(corpus),
            ends,
            context,
            batch,
            rng: Rng::new(seed),
        })
    }

    /// [`Batches::new`] over a corpus the batches keep.
    pub fn owned(
        corpus: Corpus,
        context: usize,
        batch: usize,
        seed: u64,
    ) -> Result<Batches<'static>> {
        let (ends, rng) = {
            let b = Batches::new(&corpus, context, batch, seed)?;
            (b.ends, b.rng)
        };
        Ok(Batches {
            corpus: std::borrow::Cow::Owned(corpus),
            ends,
            context,
            batch,
            rng,
        })
    }

    /// How many distinct windows the batches draw from.
    pub fn positions(&self) -> u64 {
        self.ends.last().copied().unwrap_or(0)
    }

    fn draw(&mut self, inputs: &mut Vec<u32>, targets: &mut Vec<u32>) {
        let total = self.positions();
        let r = self.rng.next_u64() % total;
        let doc = self.ends.partition_point(|&end| end <= r);
        let before = match doc {
            0 => 0,
            i => self.ends.get(i - 1).copied().unwrap_or(0),
        };
        let start = (r - before) as usize;
        if let Some(d) = self.corpus.documents().get(doc) {
            push_window(d, start, self.context, inputs, targets);
        }
    }
}

impl Iterator for Batches<'_> {
    type Item = (Vec<u32>, Vec<u32>);

    fn next(&mut self) -> Option<Self::Item> {
        let mut inputs = Vec::with_capacity(self.batch * self.context);
        let mut targets = Vec::with_capacity(self.batch);
        for _ in 0..self.batch {
            self.draw(&mut inputs, &mut targets);
        }
        Some((inputs, targets))
    }
}

/// Every `stride`-th window of every document, in order, as `(inputs [context], target)`;
/// documents no longer than `context` contribute none. See [`Corpus::windows`].
#[derive(Debug, Clone)]
pub struct Windows<'a> {
    corpus: &'a Corpus,
    context: usize,
    stride: usize,
    doc: usize,
    start: usize,
}

impl Corpus {
    /// How many windows of `context` bytes [`Corpus::windows`] yields with stride 1.
    pub fn window_count(&self, context: usize) -> usize {
        self.documents()
            .iter()
            .map(|d| d.len().saturating_sub(context))
            .sum()
    }

    /// Sequential windows for evaluation: with `stride` 1 every byte after the first `context`
    /// of each document is a target once. Errors when `context` or `stride` is 0, or no
    /// document is longer than `context`.
    pub fn windows(&self, context: usize, stride: usize) -> Result<Windows<'_>> {
        if context == 0 || stride == 0 {
            return Err(Error::InvalidArgument {
                what: "Corpus::windows",
                reason: format!("context and stride must be positive, got {context} and {stride}"),
            });
        }
        if !self.documents().iter().any(|d| d.len() > context) {
            return Err(too_short("Corpus::windows", self, context));
        }
        Ok(Windows {
            corpus: self,
            context,
            stride,
            doc: 0,
            start: 0,
        })
    }
}

impl Iterator for Windows<'_> {
    type Item = Window;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let d = self.corpus.documents().get(self.doc)?;
            if self.start + self.context < d.len() {
                let mut inputs = Vec::with_capacity(self.context);
                let mut target = Vec::with_capacity(1);
                push_window(d, self.start, self.context, &mut inputs, &mut target);
                self.start += self.stride;
                return target.first().map(|&t| (inputs, t));
            }
            self.doc += 1;
            self.start = 0;
        }
    }
}

fn push_window(
    d: &Document,
    start: usize,
    context: usize,
    inputs: &mut Vec<u32>,
    targets: &mut Vec<u32>,
) {
    if let (Some(window), Some(&next)) = (
        d.bytes.get(start..start + context),
        d.bytes.get(start + context),
    ) {
        inputs.extend(window.iter().map(|&b| u32::from(b)));
        targets.push(u32::from(next));
    }
}

/// A model with a context of `context` bytes reads `context + 1` bytes at least (a window and
/// the byte after it): the error names the longest document and the length it needs.
fn too_short(what: &'static str, corpus: &Corpus, context: usize) -> Error {
    let longest = corpus.documents().iter().max_by_key(|d| d.len());
    let had = longest.map_or("no document at all".into(), |d| {
        format!("the longest, {}, has {} bytes", d.name, d.len())
    });
    Error::InvalidArgument {
        what,
        reason: format!(
            "no document is longer than the context of {context} bytes: {had}, and a document \
             needs at least {} bytes",
            context + 1
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus() -> Corpus {
        Corpus::from_documents(vec![
            Document::new("a", "0", b"abcdefgh".to_vec()),
            Document::new("a", "short", b"xy".to_vec()),
            Document::new("b", "1", b"0123456789".to_vec()),
        ])
    }

    #[test]
    fn batches_are_real_windows_and_seeded() -> Result<()> {
        let c = corpus();
        let mut b = Batches::new(&c, 3, 4, 9)?;
        assert_eq!(b.positions(), 5 + 7);
        let texts = ["abcdefgh", "0123456789"];
        let mut seen_docs = [false; 2];
        for _ in 0..50 {
            let Some((inputs, targets)) = b.next() else {
                panic!("batches ended");
            };
            assert_eq!((inputs.len(), targets.len()), (12, 4));
            for (row, &t) in inputs.chunks(3).zip(&targets) {
                let s: String = row.iter().chain([&t]).map(|&x| x as u8 as char).collect();
                let hit = texts.iter().position(|text| text.contains(&s));
                let Some(hit) = hit else {
                    panic!("{s:?} is not in any document");
                };
                seen_docs[hit] = true;
            }
        }
        assert_eq!(seen_docs, [true, true]);
        let a: Vec<_> = Batches::new(&c, 3, 4, 9)?.take(5).collect();
        let again: Vec<_> = Batches::new(&c, 3, 4, 9)?.take(5).collect();
        let other: Vec<_> = Batches::new(&c, 3, 4, 10)?.take(5).collect();
        assert_eq!(a, again);
        assert_ne!(a, other);
        Ok(())
    }

    #[test]
    fn windows_walk_every_target_once() -> Result<()> {
        let c = corpus();
        let w: Vec<_> = c.windows(6, 1)?.collect();
        // "abcdefgh" gives targets g, h; "xy" none; "0123456789" gives 6..=9.
        let targets: String = w.iter().map(|&(_, t)| t as u8 as char).collect();
        assert_eq!(targets, "gh6789");
        assert_eq!(w[0].0, b"abcdef".map(u32::from));
        assert_eq!(c.windows(3, 4)?.count(), 2 + 2);
        assert_eq!(c.window_count(6), w.len());
        assert_eq!(c.window_count(3), c.windows(3, 1)?.count());
        Ok(())
    }

    #[test]
    fn impossible_shapes_are_errors() {
        let c = corpus();
        assert!(Batches::new(&c, 0, 1, 0).is_err());
        assert!(Batches::new(&c, 1, 0, 0).is_err());
        assert!(Batches::new(&c, 10, 1, 0).is_err());
        assert!(Batches::new(&Corpus::default(), 1, 1, 0).is_err());
        assert!(c.windows(10, 1).is_err());
        assert!(c.windows(1, 0).is_err());
    }
}
