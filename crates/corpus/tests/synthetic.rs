//! The synthetic corpus: determinism, gold tags, Zipf shape, classes, vocabulary coverage.

use std::collections::{BTreeMap, HashMap, HashSet};

use corpus::synthetic::SYNTHETIC_CLASSES;
use corpus::{CorpusError, SyntheticConfig, SyntheticCorpus, Upos};

fn corpus(cfg: SyntheticConfig) -> SyntheticCorpus {
    SyntheticCorpus::new(cfg).unwrap()
}

#[test]
fn same_seed_same_text_different_seed_different_text() {
    let a = corpus(SyntheticConfig::default());
    let b = corpus(SyntheticConfig::default());
    assert_eq!(a.text(), b.text());
    assert_eq!(a.to_documents(), b.to_documents());
    let c = corpus(SyntheticConfig {
        seed: 1,
        ..SyntheticConfig::default()
    });
    assert_ne!(a.text(), c.text());
    // Documents are generated independently: document 7 does not depend on the corpus size.
    let small = corpus(SyntheticConfig {
        n_documents: 8,
        ..SyntheticConfig::default()
    });
    assert_eq!(small.document(7), a.document(7));
    assert_eq!(small.document(8), None);
}

#[test]
fn default_size_and_every_class_present() {
    let c = corpus(SyntheticConfig::default());
    let sentences: Vec<_> = c.sentences().collect();
    assert!(
        (2000..=5000).contains(&sentences.len()),
        "{} sentences",
        sentences.len()
    );
    let tags: HashSet<Upos> = sentences
        .iter()
        .flat_map(|s| s.tags.iter().copied())
        .collect();
    let want: HashSet<Upos> = SYNTHETIC_CLASSES.into_iter().collect();
    assert_eq!(tags, want);
}

#[test]
fn gold_tags_align_with_words_and_text() {
    let c = corpus(SyntheticConfig {
        n_documents: 50,
        ..SyntheticConfig::default()
    });
    let lex = c.gold_lexicon();
    for doc in c.documents() {
        let joined: Vec<String> = doc.sentences.iter().map(|s| s.text()).collect();
        assert_eq!(doc.text, joined.join(" "));
        for s in &doc.sentences {
            assert_eq!(s.words.len(), s.tags.len());
            assert!(s.words[0].chars().next().unwrap().is_uppercase(), "{s:?}");
            assert_eq!(*s.tags.last().unwrap(), Upos::Punct);
            for (i, (w, t)) in s.words.iter().zip(&s.tags).enumerate() {
                // Sentence-initial words are capitalised; the lexicon has the running-text form.
                let form = match lex.get(w.as_str()) {
                    Some(_) => w.clone(),
                    None if i == 0 => w.to_lowercase(),
                    None => panic!("{w:?} not in the gold lexicon"),
                };
                assert_eq!(lex.get(&form), Some(t), "{w:?} in {s:?}");
            }
        }
    }
    // "an" only before vowels, "a" never before vowels.
    for s in c.sentences() {
        for pair in s.words.windows(2) {
            let vowel = pair[1].starts_with(['a', 'e', 'i', 'o', 'u']);
            let first = pair[0].to_lowercase();
            if first == "a" || first == "an" {
                assert_eq!(first == "an", vowel, "{pair:?}");
            }
        }
    }
}

/// Least-squares slope of log(count) against log(rank) over the first `k` ranks.
fn rank_frequency_slope(counts: &[f64], k: usize) -> f64 {
    let pts: Vec<(f64, f64)> = counts[..k]
        .iter()
        .enumerate()
        .map(|(r, &c)| (((r + 1) as f64).ln(), c.ln()))
        .collect();
    let n = pts.len() as f64;
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    sxy / sxx
}

#[test]
fn zipf_rank_frequency_slope_matches_the_exponent() {
    for s in [0.0, 1.0, 1.5] {
        let c = corpus(SyntheticConfig {
            seed: 3,
            n_documents: 1500,
            sentences_per_document: (20, 20),
            zipf_exponent: s,
            ..SyntheticConfig::default()
        });
        let mut counts: HashMap<String, f64> = HashMap::new();
        for sent in c.sentences() {
            for (w, t) in sent.words.iter().zip(&sent.tags) {
                if *t == Upos::Adj {
                    *counts.entry(w.to_lowercase()).or_default() += 1.0;
                }
            }
        }
        // Counts in the configured rank order (not re-sorted by frequency, which would bias
        // the slope of a flat distribution).
        let ranked: Vec<f64> = c
            .ranked_words(Upos::Adj)
            .unwrap()
            .iter()
            .map(|w| counts.get(*w).copied().unwrap_or(0.0))
            .collect();
        let total: f64 = ranked.iter().sum();
        assert!(total > 5000.0, "{total} adjectives");
        let slope = rank_frequency_slope(&ranked, 20);
        eprintln!("zipf exponent {s}: slope {slope:.3} over {total} adjectives");
        assert!((slope + s).abs() < 0.1, "exponent {s}: slope {slope}");
    }
}

#[test]
fn class_sizes_limit_the_distinct_words() {
    let c = corpus(SyntheticConfig {
        n_documents: 100,
        class_sizes: BTreeMap::from([(Upos::Adj, 3), (Upos::Propn, 1)]),
        ..SyntheticConfig::default()
    });
    let mut seen: BTreeMap<Upos, HashSet<String>> = BTreeMap::new();
    for s in c.sentences() {
        for (w, t) in s.words.iter().zip(&s.tags) {
            seen.entry(*t).or_default().insert(w.to_lowercase());
        }
    }
    assert_eq!(seen[&Upos::Adj].len(), 3);
    assert_eq!(seen[&Upos::Propn].len(), 1);
    assert_eq!(c.ranked_words(Upos::Adj).unwrap().len(), 3);
    assert!(seen[&Upos::Noun].len() > 50);
    let lex = c.gold_lexicon();
    assert_eq!(lex.values().filter(|&&t| t == Upos::Adj).count(), 3);
}

/// Every word form is a whole token of the BERT uncased WordPiece vocabulary, so the BERT
/// tokenizer maps each synthetic word to exactly one piece.
#[test]
fn every_word_is_a_bert_uncased_token() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/bert-base-uncased/vocab.txt"
    );
    let vocab = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("missing shared data file {path}: {e}"));
    let vocab: HashSet<&str> = vocab.lines().collect();
    let lex = corpus(SyntheticConfig::default()).gold_lexicon();
    assert!(lex.len() > 500, "{} word forms", lex.len());
    let missing: Vec<&String> = lex
        .keys()
        .filter(|w| !vocab.contains(w.to_lowercase().as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "not in the BERT vocabulary: {missing:?}"
    );
}

#[test]
fn writes_documents_separated_by_blank_lines() {
    let c = corpus(SyntheticConfig {
        n_documents: 12,
        ..SyntheticConfig::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("synthetic.txt");
    c.write_text(&path).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text, c.text());
    let paragraphs: Vec<&str> = text.trim_end().split("\n\n").collect();
    let docs = c.to_documents();
    assert_eq!(paragraphs.len(), 12);
    for (p, d) in paragraphs.iter().zip(&docs) {
        assert_eq!(*p, d.text);
    }
}

#[test]
fn invalid_configs_are_typed_errors() {
    let d = SyntheticConfig::default;
    let bad = [
        SyntheticConfig {
            n_documents: 0,
            ..d()
        },
        SyntheticConfig {
            sentences_per_document: (0, 3),
            ..d()
        },
        SyntheticConfig {
            sentences_per_document: (5, 2),
            ..d()
        },
        SyntheticConfig {
            zipf_exponent: -1.0,
            ..d()
        },
        SyntheticConfig {
            zipf_exponent: f64::NAN,
            ..d()
        },
        SyntheticConfig {
            class_sizes: BTreeMap::from([(Upos::Noun, 0)]),
            ..d()
        },
        SyntheticConfig {
            class_sizes: BTreeMap::from([(Upos::Intj, 3)]),
            ..d()
        },
    ];
    for cfg in bad {
        assert!(
            matches!(
                SyntheticCorpus::new(cfg.clone()),
                Err(CorpusError::InvalidArgument(_))
            ),
            "{cfg:?}"
        );
    }
}

#[test]
fn config_round_trips_through_json() {
    let cfg = SyntheticConfig {
        seed: 5,
        class_sizes: BTreeMap::from([(Upos::Adj, 10), (Upos::Propn, 4)]),
        ..SyntheticConfig::default()
    };
    let json = serde_json::to_string(&cfg).unwrap();
    assert!(json.contains("\"ADJ\":10"), "{json}");
    let back: SyntheticConfig = serde_json::from_str(&json).unwrap();
    assert_eq!(back, cfg);
}

/// The crate's sentence splitter recovers the generated sentences from a document's text.
#[test]
fn sentence_splitter_recovers_the_sentences() {
    let c = corpus(SyntheticConfig {
        n_documents: 40,
        ..SyntheticConfig::default()
    });
    for doc in c.documents() {
        let split = corpus::split_sentences(&doc.text);
        let want: Vec<String> = doc.sentences.iter().map(|s| s.text()).collect();
        assert_eq!(split, want);
    }
}
