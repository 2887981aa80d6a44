//! The LMD sequence sampler on WikiText: exactly T pieces after re-tokenization in both text
//! modes, disjoint documents across splits, determinism, and NotEnoughData.

mod shared_data;

use std::collections::HashSet;

use corpus::{CorpusError, SampleText, SamplerConfig, SequenceSampler, Split};

const T: usize = 64;

fn run(text: SampleText, seed: u64, n: [usize; 3]) -> corpus::Result<corpus::SampledSplits> {
    let docs = shared_data::wikitext2_docs("valid", 12);
    let mut cfg = SamplerConfig::new(T, n[0], n[1], n[2], seed);
    cfg.text = text;
    SequenceSampler::new(shared_data::bert().clone(), cfg)?.sample(docs.into_iter().map(Ok))
}

#[test]
fn both_modes_give_exactly_t_pieces_from_disjoint_documents() {
    let tok = shared_data::bert();
    let docs = shared_data::wikitext2_docs("valid", 12);
    let full: Vec<Vec<u32>> = docs
        .iter()
        .map(|d| tok.encode(&d.text, false).unwrap().ids)
        .collect();
    for mode in [SampleText::OriginalSpan, SampleText::UncasedRoundTrip] {
        let s = run(mode, 5, [30, 8, 8]).unwrap();
        let mut doc_sets = Vec::new();
        for split in Split::ALL {
            let samples = s.get(split);
            assert_eq!(samples.len(), [30, 8, 8][split as usize]);
            for x in samples {
                let e = tok.encode(&x.text, false).unwrap();
                assert_eq!(e.len(), T, "{mode:?} {split:?}: {:?}", x.text);
                let doc = &docs[x.document];
                match mode {
                    SampleText::OriginalSpan => assert!(doc.text.contains(&x.text)),
                    SampleText::UncasedRoundTrip => {
                        assert_eq!(x.text, x.text.to_lowercase());
                        // The pieces are those of the document at that place.
                        let ids = &full[x.document];
                        assert_eq!(e.ids, ids[x.piece_start..x.piece_start + T]);
                    }
                }
            }
            doc_sets.push(samples.iter().map(|x| x.document).collect::<HashSet<_>>());
        }
        assert!(doc_sets[0].is_disjoint(&doc_sets[1]));
        assert!(doc_sets[0].is_disjoint(&doc_sets[2]));
        assert!(doc_sets[1].is_disjoint(&doc_sets[2]));
        // No sample is drawn twice.
        let keys: HashSet<_> = s
            .train
            .iter()
            .map(|x| (x.document, x.piece_start))
            .collect();
        assert_eq!(keys.len(), s.train.len());
    }
}

#[test]
fn original_span_keeps_case_and_accents() {
    let s = run(SampleText::OriginalSpan, 5, [30, 8, 8]).unwrap();
    assert!(s
        .train
        .iter()
        .any(|x| x.text.chars().any(|c| c.is_uppercase())));
    let r = run(SampleText::UncasedRoundTrip, 5, [30, 8, 8]).unwrap();
    // Same seed, same positions whatever the text mode.
    let pos = |v: &[corpus::Sample]| {
        v.iter()
            .map(|x| (x.document, x.piece_start))
            .collect::<Vec<_>>()
    };
    assert_eq!(pos(&s.train), pos(&r.train));
}

#[test]
fn deterministic_from_the_seed() {
    let a = run(SampleText::OriginalSpan, 1, [20, 5, 5]).unwrap();
    assert_eq!(a, run(SampleText::OriginalSpan, 1, [20, 5, 5]).unwrap());
    // With every document in train, another seed draws other sequences.
    let b = run(SampleText::OriginalSpan, 1, [20, 0, 0]).unwrap();
    let c = run(SampleText::OriginalSpan, 2, [20, 0, 0]).unwrap();
    assert_eq!(b.train.len(), 20);
    assert!(b.valid.is_empty() && b.test.is_empty());
    assert_ne!(b.train, c.train);
}

#[test]
fn not_enough_data_is_a_clear_error() {
    match run(SampleText::OriginalSpan, 1, [100_000, 5, 5]) {
        Err(CorpusError::NotEnoughData(m)) => assert!(m.contains("Train"), "{m}"),
        other => panic!("expected NotEnoughData, got {other:?}"),
    }
    assert!(matches!(
        run(SampleText::OriginalSpan, 1, [0, 0, 0]),
        Err(CorpusError::InvalidArgument(_))
    ));
}
