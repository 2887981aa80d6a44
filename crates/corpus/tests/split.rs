//! Document splits: deterministic, disjoint, complete, stable, fractions respected.

use std::collections::HashSet;

use corpus::{CorpusError, DocSource, Document, DocumentSplitter, Split, SplitFractions};

fn docs(n: usize) -> Vec<Document> {
    (0..n)
        .map(|i| Document {
            index: i,
            text: format!("document number {i} with some text"),
            title: None,
            source: DocSource {
                path: "mem".into(),
                line: i + 1,
            },
        })
        .collect()
}

#[test]
fn partition_is_disjoint_complete_and_near_the_fractions() {
    let all = docs(5000);
    for splitter in [
        DocumentSplitter::new(9, SplitFractions::default()).unwrap(),
        DocumentSplitter::new(9, SplitFractions::default())
            .unwrap()
            .by_content(),
    ] {
        let parts = splitter.partition(all.iter().cloned().map(Ok)).unwrap();
        let sets: Vec<HashSet<usize>> = parts
            .iter()
            .map(|p| p.iter().map(|d| d.index).collect())
            .collect();
        assert_eq!(
            sets.iter().map(|s| s.len()).sum::<usize>(),
            5000,
            "complete"
        );
        assert!(sets[0].is_disjoint(&sets[1]) && sets[0].is_disjoint(&sets[2]));
        assert!(sets[1].is_disjoint(&sets[2]));
        for (set, f) in sets.iter().zip([0.8, 0.1, 0.1]) {
            let got = set.len() as f64 / 5000.0;
            assert!((got - f).abs() < 0.02, "fraction {got} for {f}");
        }
        // filter() agrees with partition().
        for (k, split) in Split::ALL.into_iter().enumerate() {
            let got: Vec<usize> = splitter
                .filter(split, all.iter().cloned().map(Ok))
                .map(|d| d.unwrap().index)
                .collect();
            assert_eq!(got, parts[k].iter().map(|d| d.index).collect::<Vec<_>>());
        }
    }
}

#[test]
fn index_keyed_splits_are_balanced_on_every_prefix() {
    let all = docs(2000);
    for seed in 0..20 {
        let s = DocumentSplitter::new(seed, SplitFractions::default()).unwrap();
        let mut counts = [0usize; 3];
        for (n, d) in all.iter().enumerate() {
            counts[s.assign(d) as usize] += 1;
            for (c, f) in counts.iter().zip([0.8, 0.1, 0.1]) {
                let expect = f * (n + 1) as f64;
                assert!(
                    (*c as f64 - expect).abs() <= 3.0,
                    "seed {seed}, prefix {n}: {counts:?}"
                );
            }
        }
    }
}

#[test]
fn splits_are_deterministic_and_stable() {
    let all = docs(300);
    let f = SplitFractions::default();
    let a = DocumentSplitter::new(1, f).unwrap();
    let b = DocumentSplitter::new(1, f).unwrap();
    let c = DocumentSplitter::new(2, f).unwrap();
    let assign = |s: &DocumentSplitter| all.iter().map(|d| s.assign(d)).collect::<Vec<_>>();
    assert_eq!(assign(&a), assign(&b));
    assert_ne!(assign(&a), assign(&c), "the seed matters");
    // By content: a document keeps its split when the corpus is reordered.
    let by_content = a.by_content();
    let mut shuffled = all.clone();
    shuffled.reverse();
    for (i, d) in shuffled.iter_mut().enumerate() {
        let before = by_content.assign(d);
        d.index = i;
        assert_eq!(by_content.assign(d), before);
    }
}

#[test]
fn fractions_are_validated() {
    let bad = SplitFractions {
        train: 0.9,
        valid: 0.2,
        test: 0.1,
    };
    assert!(matches!(
        DocumentSplitter::new(0, bad),
        Err(CorpusError::InvalidArgument(_))
    ));
    let p = SplitFractions::proportional(8.0, 1.0, 1.0).unwrap();
    assert!((p.train - 0.8).abs() < 1e-12 && (p.test - 0.1).abs() < 1e-12);
    assert!(SplitFractions::proportional(0.0, 0.0, 0.0).is_err());
    assert!(SplitFractions::proportional(-1.0, 1.0, 1.0).is_err());
    // A zero fraction never receives a document.
    let only_train =
        DocumentSplitter::new(3, SplitFractions::proportional(1.0, 0.0, 0.0).unwrap()).unwrap();
    assert!(docs(200)
        .iter()
        .all(|d| only_train.assign(d) == Split::Train));
}
