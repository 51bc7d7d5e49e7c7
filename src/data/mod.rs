//! Real text for byte-level language models: corpora on disk, train/validation splits, batches
//! of context windows, and the unigram baseline a model has to beat.
//!
//! Everything is bytes, not characters: ids are `0..256` ([`VOCAB`]), so any file is a corpus
//! and UTF-8 text in any script costs more ids per character, not a bigger vocabulary.
//!
//! - [`Corpus`]: documents (one per file) with the domain label each was loaded under, so
//!   Branch-Train-Merge can train one expert per domain ([`Corpus::by_domain`]) or per random
//!   group ([`Corpus::random_split`], its baseline).
//! - [`Corpus::bundled`]: the small license-clean corpora shipped in `assets/corpora`
//!   (English prose, Rust source, Persian poetry; origins and licences in its README).
//! - [`Corpus::split`]: the tail of every document is validation, so no validation byte is ever
//!   trained on.
//! - [`Batches`]: seeded random context windows and their next byte; [`Windows`]: the same,
//!   sequentially, for evaluation.
//! - [`unigram_bits_per_byte`]: the floor a model must get under to have learned anything.

mod baseline;
mod batches;
mod corpus;
mod load;

pub use baseline::{bits_per_byte, unigram_bits_per_byte};
pub use batches::{Batches, MAX_BATCH_BYTES, Window, Windows, check_batch};
pub use corpus::{Corpus, Document, TrainValid};
pub(crate) use load::files_under;
pub use load::{CORPORA_DIR_VAR, corpora_dir};

/// Ids a byte-level model predicts: one per byte value.
pub const VOCAB: usize = 256;
