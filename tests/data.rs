#![allow(clippy::unwrap_used)]
//! The shipped corpora and the loader a Branch-Train-Merge trainer reads them with: sizes and
//! domains as promised, splits that never leak validation text, seeded batches, a sane baseline.

use std::path::PathBuf;

use gangway::Error;
use gangway::data::{Batches, Corpus, unigram_bits_per_byte};

const KB: usize = 1024;

fn non_ascii_fraction(c: &Corpus) -> f64 {
    let high: usize = c
        .documents()
        .iter()
        .map(|d| d.bytes.iter().filter(|&&b| b >= 0x80).count())
        .sum();
    high as f64 / c.len_bytes() as f64
}

#[test]
fn bundled_corpora_are_small_varied_and_labelled() {
    let domains = Corpus::bundled_domains().unwrap();
    assert!(domains.len() >= 3, "{domains:?}");
    let all = Corpus::bundled_all().unwrap();
    assert!(all.len_bytes() <= 2 * KB * KB, "{} bytes", all.len_bytes());
    assert_eq!(all.domains(), domains);
    let mut non_latin = Vec::new();
    for domain in &domains {
        let c = Corpus::bundled(domain).unwrap();
        assert!(
            c.len_bytes() >= 100 * KB,
            "{domain}: {} bytes",
            c.len_bytes()
        );
        assert!(c.documents().iter().all(|d| &d.domain == domain));
        assert!(
            c.documents()
                .iter()
                .all(|d| std::str::from_utf8(&d.bytes).is_ok()),
            "{domain} is not UTF-8"
        );
        if non_ascii_fraction(&c) > 0.5 {
            non_latin.push(domain.clone());
        }
    }
    assert_eq!(non_latin, ["persian"]);
    assert!(Corpus::bundled("prose").unwrap().documents().len() > 10);
}

#[test]
fn splits_are_disjoint_and_deterministic() {
    let all = Corpus::bundled_all().unwrap();
    let s = all.split(0.1).unwrap();
    assert_eq!(s.train.len_bytes() + s.valid.len_bytes(), all.len_bytes());
    for d in all.documents() {
        let t = s
            .train
            .documents()
            .iter()
            .find(|x| x.name == d.name)
            .unwrap();
        let v = s.valid.documents().iter().find(|x| x.name == d.name);
        let v_len = v.map_or(0, |v| v.len());
        // Training holds [0, cut), validation [cut, len): the tail, never seen in training.
        assert_eq!(t.offset, 0);
        assert_eq!(t.len() + v_len, d.len());
        if let Some(v) = v {
            assert_eq!(v.offset, t.len());
            assert_eq!(&d.bytes[v.offset..], v.bytes.as_slice());
        }
        assert_eq!(&d.bytes[..t.len()], t.bytes.as_slice());
    }
    let frac = s.valid.len_bytes() as f64 / all.len_bytes() as f64;
    assert!((frac - 0.1).abs() < 0.001, "{frac}");
    let again = all.split(0.1).unwrap();
    assert_eq!((again.train, again.valid), (s.train, s.valid));
}

#[test]
fn random_split_partitions_the_documents_evenly() {
    let all = Corpus::bundled_all().unwrap();
    let groups = all.random_split(3, 42).unwrap();
    assert_eq!(groups, all.random_split(3, 42).unwrap());
    assert_ne!(groups, all.random_split(3, 43).unwrap());
    let docs: usize = groups.iter().map(|g| g.documents().len()).sum();
    assert_eq!(docs, all.documents().len());
    let sizes: Vec<usize> = groups.iter().map(Corpus::len_bytes).collect();
    assert_eq!(sizes.iter().sum::<usize>(), all.len_bytes());
    let largest_doc = all.documents().iter().map(|d| d.len()).max().unwrap();
    let spread = sizes.iter().max().unwrap() - sizes.iter().min().unwrap();
    assert!(spread <= largest_doc, "{sizes:?}");
    // Random groups mix domains, unlike the domain split.
    assert!(groups.iter().all(|g| g.domains().len() >= 2));
}

#[test]
fn batches_are_deterministic_for_a_seed() {
    let s = Corpus::bundled_all().unwrap().split(0.1).unwrap();
    let (context, batch) = (64, 8);
    let a: Vec<_> = Batches::new(&s.train, context, batch, 5)
        .unwrap()
        .take(4)
        .collect();
    let b: Vec<_> = Batches::new(&s.train, context, batch, 5)
        .unwrap()
        .take(4)
        .collect();
    let c: Vec<_> = Batches::new(&s.train, context, batch, 6)
        .unwrap()
        .take(4)
        .collect();
    assert_eq!(a, b);
    assert_ne!(a, c);
    for (inputs, targets) in &a {
        assert_eq!(inputs.len(), context * batch);
        assert_eq!(targets.len(), batch);
        assert!(inputs.iter().chain(targets).all(|&x| x < 256));
    }
    let windows = s.valid.windows(context, context).unwrap();
    let expected: usize = s
        .valid
        .documents()
        .iter()
        .map(|d| d.len().saturating_sub(context).div_ceil(context))
        .sum();
    assert_eq!(windows.count(), expected);
}

#[test]
fn unigram_baseline_is_between_3_and_8_bits_on_every_domain() {
    for domain in Corpus::bundled_domains().unwrap() {
        let s = Corpus::bundled(&domain).unwrap().split(0.1).unwrap();
        let bpb = unigram_bits_per_byte(&s.train, &s.valid).unwrap();
        println!("{domain}: unigram {bpb:.3} bits/byte");
        assert!((3.0..8.0).contains(&bpb), "{domain}: {bpb}");
    }
}

#[test]
fn bad_paths_are_errors_not_panics() {
    let missing = PathBuf::from("/nonexistent/gangway/corpus.txt");
    match Corpus::from_paths(std::slice::from_ref(&missing)) {
        Err(Error::Io { path, .. }) => assert_eq!(path, missing),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        Corpus::from_paths(&[]),
        Err(Error::InvalidArgument { .. })
    ));
    let err = Corpus::bundled("klingon").unwrap_err();
    assert!(err.to_string().contains("prose"), "{err}");
    assert!(Corpus::bundled("../corpora").is_err());
}

#[test]
fn named_files_and_directories_load() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/corpora");
    let c = Corpus::from_paths(&[
        root.join("code"),
        root.join("prose/persuasion/chapter-01.txt"),
    ])
    .unwrap();
    assert_eq!(c.domains(), ["code", "persuasion"]);
    assert_eq!(
        c.domain("code").len_bytes(),
        Corpus::bundled("code").unwrap().len_bytes()
    );
}
