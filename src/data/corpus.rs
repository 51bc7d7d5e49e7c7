//! Documents with domain labels, and the ways a trainer cuts them: train/validation, by domain,
//! into random groups.

use std::fmt;

use crate::{Error, Result, Rng};

/// A run of bytes from one source file, labelled with the domain it was loaded under.
#[derive(Clone, PartialEq, Eq)]
pub struct Document {
    /// Domain label (e.g. `prose`, `code`, `persian`): what Branch-Train-Merge splits by.
    pub domain: String,
    /// Where the bytes came from, for messages and for pairing a train part with its validation.
    pub name: String,
    /// Byte offset of `bytes` within the source, so a split's parts say which range they hold.
    pub offset: usize,
    pub bytes: Vec<u8>,
}

impl Document {
    pub fn new(domain: impl Into<String>, name: impl Into<String>, bytes: Vec<u8>) -> Self {
        Self {
            domain: domain.into(),
            name: name.into(),
            offset: 0,
            bytes,
        }
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// A piece of this document: `bytes`, found `start` bytes into it.
    fn part(&self, start: usize, bytes: &[u8]) -> Document {
        Document {
            domain: self.domain.clone(),
            name: self.name.clone(),
            offset: self.offset + start,
            bytes: bytes.to_vec(),
        }
    }
}

// The bytes would flood any log; their length says enough.
impl fmt::Debug for Document {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Document")
            .field("domain", &self.domain)
            .field("name", &self.name)
            .field("offset", &self.offset)
            .field("len", &self.bytes.len())
            .finish()
    }
}

/// An ordered set of documents. Loading ([`Corpus::from_paths`], [`Corpus::bundled`]) never
/// yields an empty one; the parts of a split or a grouping may be empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Corpus {
    documents: Vec<Document>,
}

/// A corpus cut into what a model trains on and what it is scored on.
#[derive(Debug, Clone)]
pub struct TrainValid {
    pub train: Corpus,
    pub valid: Corpus,
}

impl Corpus {
    /// Keeps the non-empty documents, in order.
    pub fn from_documents(documents: Vec<Document>) -> Self {
        Self {
            documents: documents.into_iter().filter(|d| !d.is_empty()).collect(),
        }
    }

    pub fn documents(&self) -> &[Document] {
        &self.documents
    }

    /// Total bytes over all documents.
    pub fn len_bytes(&self) -> usize {
        self.documents.iter().map(Document::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.documents.is_empty()
    }

    /// The distinct domain labels, in order of first appearance.
    pub fn domains(&self) -> Vec<String> {
        let mut seen: Vec<String> = Vec::new();
        for d in &self.documents {
            if !seen.contains(&d.domain) {
                seen.push(d.domain.clone());
            }
        }
        seen
    }

    /// The documents labelled `domain` (empty if none are).
    pub fn domain(&self, domain: &str) -> Corpus {
        Corpus::from_documents(
            self.documents
                .iter()
                .filter(|d| d.domain == domain)
                .cloned()
                .collect(),
        )
    }

    /// One corpus per domain, in order of first appearance: Branch-Train-Merge's domain split.
    pub fn by_domain(&self) -> Vec<(String, Corpus)> {
        self.domains()
            .into_iter()
            .map(|name| {
                let part = self.domain(&name);
                (name, part)
            })
            .collect()
    }

    /// Cuts every document in two: the last `valid_fraction` of its bytes (rounded) is
    /// validation, the rest training. Per document, so every domain is scored and no validation
    /// byte is ever trained on; deterministic, so runs compare. `valid_fraction` ∈ `[0, 1)`.
    pub fn split(&self, valid_fraction: f64) -> Result<TrainValid> {
        if !(0.0..1.0).contains(&valid_fraction) {
            return Err(Error::InvalidArgument {
                what: "Corpus::split",
                reason: format!("valid_fraction must be in [0, 1), got {valid_fraction}"),
            });
        }
        let mut train = Vec::with_capacity(self.documents.len());
        let mut valid = Vec::with_capacity(self.documents.len());
        for d in &self.documents {
            let valid_len = ((d.len() as f64) * valid_fraction).round() as usize;
            let cut = d.len().saturating_sub(valid_len);
            let (head, tail) = d.bytes.split_at(cut);
            train.push(d.part(0, head));
            valid.push(d.part(cut, tail));
        }
        Ok(TrainValid {
            train: Corpus::from_documents(train),
            valid: Corpus::from_documents(valid),
        })
    }

    /// Deals the documents into `k` groups of similar byte count, at random from `seed`:
    /// Branch-Train-Merge's random-split baseline, which ignores the domain labels (each
    /// document keeps its own). Documents are shuffled, then each goes to the lightest group.
    pub fn random_split(&self, k: usize, seed: u64) -> Result<Vec<Corpus>> {
        if k == 0 || k > self.documents.len() {
            return Err(Error::InvalidArgument {
                what: "Corpus::random_split",
                reason: format!(
                    "k must be in 1..={} (the number of documents), got {k}",
                    self.documents.len()
                ),
            });
        }
        let mut order: Vec<usize> = (0..self.documents.len()).collect();
        let mut rng = Rng::new(seed);
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i + 1));
        }
        let mut groups: Vec<Vec<Document>> = vec![Vec::new(); k];
        let mut sizes = vec![0usize; k];
        for i in order {
            let Some(doc) = self.documents.get(i) else {
                continue;
            };
            // Ties go to the lowest index, so the first k documents seed the k groups.
            let lightest = (0..k).min_by_key(|&g| (sizes[g], g)).unwrap_or(0);
            sizes[lightest] += doc.len();
            groups[lightest].push(doc.clone());
        }
        Ok(groups.into_iter().map(Corpus::from_documents).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus() -> Corpus {
        Corpus::from_documents(vec![
            Document::new("a", "a1", b"hello world, this is a".to_vec()),
            Document::new("b", "b1", b"fn main() {}".to_vec()),
            Document::new("a", "a2", b"another document here".to_vec()),
            Document::new("b", "empty", Vec::new()),
            Document::new("c", "c1", "Привет, мир".as_bytes().to_vec()),
        ])
    }

    #[test]
    fn empty_documents_are_dropped_and_domains_kept_in_order() {
        let c = corpus();
        assert_eq!(c.documents().len(), 4);
        assert_eq!(c.domains(), ["a", "b", "c"]);
        let by = c.by_domain();
        assert_eq!(by[0].1.documents().len(), 2);
        assert_eq!(
            by.iter().map(|(_, c)| c.len_bytes()).sum::<usize>(),
            c.len_bytes()
        );
    }

    #[test]
    fn split_parts_tile_each_document() -> Result<()> {
        let c = corpus();
        let s = c.split(0.25)?;
        for d in c.documents() {
            let t = s.train.documents().iter().find(|x| x.name == d.name);
            let v = s.valid.documents().iter().find(|x| x.name == d.name);
            let (Some(t), Some(v)) = (t, v) else {
                panic!("{} lost a part", d.name);
            };
            assert_eq!(t.offset, 0);
            assert_eq!(v.offset, t.len());
            assert_eq!([t.bytes.as_slice(), v.bytes.as_slice()].concat(), d.bytes);
            assert_eq!(v.len(), (d.len() as f64 * 0.25).round() as usize);
        }
        assert_eq!(c.split(0.0)?.valid.len_bytes(), 0);
        assert!(c.split(1.0).is_err());
        assert!(c.split(f64::NAN).is_err());
        Ok(())
    }

    #[test]
    fn random_split_is_a_seeded_partition() -> Result<()> {
        let c = corpus();
        let groups = c.random_split(2, 7)?;
        assert_eq!(groups.len(), 2);
        let mut names: Vec<_> = groups
            .iter()
            .flat_map(|g| g.documents().iter().map(|d| d.name.clone()))
            .collect();
        names.sort();
        assert_eq!(names, ["a1", "a2", "b1", "c1"]);
        assert_eq!(groups, c.random_split(2, 7)?);
        assert!(c.random_split(0, 1).is_err());
        assert!(c.random_split(5, 1).is_err());
        Ok(())
    }

    #[test]
    fn random_split_balances_bytes() -> Result<()> {
        let docs = (0..40)
            .map(|i| Document::new("d", format!("{i}"), vec![b'x'; 100 + 37 * i]))
            .collect();
        let c = Corpus::from_documents(docs);
        let sizes: Vec<usize> = c
            .random_split(4, 3)?
            .iter()
            .map(Corpus::len_bytes)
            .collect();
        let (lo, hi) = (sizes.iter().min(), sizes.iter().max());
        let (Some(&lo), Some(&hi)) = (lo, hi) else {
            panic!("no groups");
        };
        // Greedy to the lightest group: groups differ by at most the largest document.
        assert!(hi - lo <= 100 + 37 * 39, "{sizes:?}");
        Ok(())
    }
}
