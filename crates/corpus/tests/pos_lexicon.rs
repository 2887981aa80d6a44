//! `PosLexicon`: majority tags per first word piece, on a hand-made example and on the
//! synthetic corpus (where the truth is known).

use std::collections::HashMap;

use corpus::{
    CorpusError, DocSource, Document, PerceptronTagger, PosLexicon, SentenceSplitter,
    SyntheticConfig, SyntheticCorpus, TaggedSentence, TaggerConfig, TokenTag, Upos,
};

/// A toy "tokenizer": the first piece of a word is its first three letters (ids by a table).
fn first_piece(word: &str) -> Option<u32> {
    let table: HashMap<&str, u32> =
        HashMap::from([("run", 1), ("the", 2), ("dog", 3), ("fas", 4), ("sle", 5)]);
    let lower = word.to_lowercase();
    table.get(&lower[..lower.len().min(3)]).copied()
}

fn sent(pairs: &[(&str, Upos)]) -> TaggedSentence {
    TaggedSentence {
        words: pairs.iter().map(|p| p.0.to_string()).collect(),
        tags: pairs.iter().map(|p| p.1).collect(),
    }
}

#[test]
fn majority_vote_on_a_hand_made_example() {
    use Upos::*;
    let sentences = [
        // "run"-piece: runner NOUN, run VERB, running VERB, runs VERB -> VERB 3 of 4.
        sent(&[
            ("The", Det),
            ("runner", Noun),
            ("runs", Verb),
            ("fast", Adv),
        ]),
        sent(&[("Dogs", Noun), ("run", Verb), ("fast", Adj), ("!", Punct)]),
        sent(&[
            ("the", Det),
            ("dog", Noun),
            ("running", Verb),
            ("sleeps", Verb),
        ]),
        // "sle"-piece: sleeps VERB once, sleep NOUN once: a tie -> NOUN (alphabetically first).
        sent(&[("sleep", Noun)]),
    ];
    let lex = PosLexicon::from_tagged(&sentences, first_piece).unwrap();
    let run = lex.majority(1).unwrap();
    assert_eq!(
        run,
        TokenTag {
            token: 1,
            tag: Verb,
            count: 3,
            total: 4
        }
    );
    assert_eq!(lex.majority(2).unwrap().tag, Det);
    assert_eq!(lex.majority(2).unwrap().count, 2);
    // "Dogs" and "dog".
    assert_eq!(lex.majority(3).unwrap().total, 2);
    // "fast": ADV once, ADJ once: tie -> ADJ comes first alphabetically.
    assert_eq!(lex.majority(4).unwrap().tag, Adj);
    assert_eq!(lex.majority(5).unwrap().tag, Noun);
    assert_eq!(lex.majority(99), None);
    assert_eq!(lex.counts(1).unwrap()[Verb.index()], 3);
    assert_eq!(lex.counts(1).unwrap()[Noun.index()], 1);
    // "!" has no piece in the toy table.
    assert_eq!(lex.unmapped_words(), 1);
    assert_eq!(lex.mapped_words(), 12);
    assert_eq!(lex.len(), 5);
    let ids: Vec<u32> = lex.majority_tags().iter().map(|t| t.token).collect();
    assert_eq!(ids, [1, 2, 3, 4, 5]);
    let dense = lex.to_dense(7);
    assert_eq!(dense[0], None);
    assert_eq!(dense[1], Some(Verb));
    assert_eq!(dense[6], None);

    // The same counts in another order give the same lexicon (deterministic ties).
    let mut reversed = sentences.to_vec();
    reversed.reverse();
    assert_eq!(
        PosLexicon::from_tagged(&reversed, first_piece).unwrap(),
        lex
    );
    // Merging two halves equals counting everything at once.
    let mut merged = PosLexicon::from_tagged(&sentences[..2], first_piece).unwrap();
    merged.merge(&PosLexicon::from_tagged(&sentences[2..], first_piece).unwrap());
    assert_eq!(merged, lex);
}

#[test]
fn save_load_round_trip_and_corrupt_files() {
    let sentences = [sent(&[("the", Upos::Det), ("dog", Upos::Noun)])];
    let lex = PosLexicon::from_tagged(&sentences, first_piece).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lexicon.json");
    lex.save(&path).unwrap();
    assert_eq!(PosLexicon::load(&path).unwrap(), lex);

    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, &text[..text.len() / 2]).unwrap();
    assert!(matches!(
        PosLexicon::load(&path),
        Err(CorpusError::Parse { .. })
    ));
    // Valid JSON whose counts do not add up.
    let bad = text.replace("\"mapped_words\":2", "\"mapped_words\":5");
    assert_ne!(bad, text, "the saved JSON has the expected field");
    std::fs::write(&path, bad).unwrap();
    assert!(matches!(
        PosLexicon::load(&path),
        Err(CorpusError::Corrupt { .. })
    ));
}

#[test]
fn mismatched_lengths_are_an_error() {
    let mut lex = PosLexicon::new();
    assert!(matches!(
        lex.add_tagged(&["a", "b"], &[Upos::Det], first_piece),
        Err(CorpusError::InvalidArgument(_))
    ));
    assert!(lex.is_empty());
}

/// Known truth: a tagger trained on one synthetic corpus tags another seed's corpus almost
/// perfectly, and the lexicon from its predictions agrees with the gold lexicon on every
/// word (each synthetic word has exactly one tag).
#[test]
fn tagged_synthetic_corpus_recovers_the_gold_lexicon() {
    let train_corpus = SyntheticCorpus::new(SyntheticConfig::default()).unwrap();
    let train: Vec<TaggedSentence> = train_corpus.sentences().collect();
    let tagger = PerceptronTagger::train(
        &train,
        &TaggerConfig {
            epochs: 3,
            ..TaggerConfig::default()
        },
    )
    .unwrap();
    let test_corpus = SyntheticCorpus::new(SyntheticConfig {
        seed: 99,
        n_documents: 100,
        ..SyntheticConfig::default()
    })
    .unwrap();
    let test: Vec<TaggedSentence> = test_corpus.sentences().collect();
    let acc = tagger.evaluate(&test);
    assert!(
        acc.accuracy() > 0.995,
        "synthetic accuracy {}",
        acc.accuracy()
    );

    // Word ids: position in the gold lexicon (lower-cased forms).
    let gold = train_corpus.gold_lexicon();
    let ids: HashMap<String, u32> = gold
        .keys()
        .enumerate()
        .map(|(i, w)| (w.to_lowercase(), i as u32))
        .collect();
    let piece = |w: &str| ids.get(&w.to_lowercase()).copied();
    let words: Vec<Vec<String>> = test.iter().map(|s| s.words.clone()).collect();
    let predicted = PosLexicon::tag_corpus(&tagger, &words, piece);
    let from_gold = PosLexicon::from_tagged(&test, piece).unwrap();
    assert_eq!(predicted.unmapped_words(), 0);
    assert_eq!(predicted.mapped_words(), acc.total as u64);
    let mut checked = 0;
    for (w, tag) in &gold {
        if let Some(t) = predicted.majority(ids[&w.to_lowercase()]) {
            assert_eq!(t.tag, *tag, "{w}");
            assert_eq!(from_gold.majority(t.token).unwrap().tag, *tag);
            checked += 1;
        }
    }
    assert!(checked > 400, "{checked} words checked");
}

/// With the real BERT uncased tokenizer (helper of this crate) as `first_piece`: every synthetic
/// word is one piece, so the lexicon's majority tags are exactly the gold lexicon's tags.
#[test]
fn bert_first_piece_on_the_synthetic_corpus() {
    let vocab = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/bert-base-uncased/vocab.txt"
    );
    assert!(
        std::path::Path::new(vocab).exists(),
        "missing shared data file {vocab}"
    );
    let tok = corpus::Tokenizer::load(vocab).unwrap();
    let synthetic = SyntheticCorpus::new(SyntheticConfig {
        n_documents: 100,
        ..SyntheticConfig::default()
    })
    .unwrap();
    let sentences: Vec<TaggedSentence> = synthetic.sentences().collect();
    let lex = PosLexicon::from_tagged(&sentences, |w| tok.first_piece(w)).unwrap();
    assert_eq!(lex.unmapped_words(), 0);
    let mut checked = 0;
    for (word, tag) in synthetic.gold_lexicon() {
        let id = tok.token_to_id(&word.to_lowercase()).unwrap();
        assert_eq!(tok.first_piece(&word), Some(id), "{word}");
        if let Some(t) = lex.majority(id) {
            assert_eq!(t.tag, tag, "{word}");
            assert_eq!(t.count, t.total, "{word} has one tag");
            checked += 1;
        }
    }
    assert!(checked > 300, "{checked}");
}

/// Tagging documents counts what tagging their sentences (split, then cut at whitespace) does,
/// and reports each document once.
#[test]
fn tag_documents_counts_the_sentences_of_every_document() {
    use Upos::*;
    let train = [
        sent(&[("the", Det), ("dog", Noun), ("runs", Verb), (".", Punct)]),
        sent(&[
            ("the", Det),
            ("fast", Adj),
            ("dog", Noun),
            ("sleeps", Verb),
            (".", Punct),
        ]),
    ];
    let tagger = PerceptronTagger::train(&train, &TaggerConfig::default()).unwrap();
    let texts = ["The dog runs. The fast dog sleeps.", "", "The dog sleeps ."];
    let docs: Vec<Document> = texts
        .iter()
        .enumerate()
        .map(|(index, t)| Document {
            index,
            text: t.to_string(),
            title: None,
            source: DocSource {
                path: "inline.txt".into(),
                line: index + 1,
            },
        })
        .collect();
    let mut seen = 0;
    let lex = PosLexicon::tag_documents(&tagger, &docs, first_piece, || seen += 1);
    assert_eq!(seen, docs.len());
    let splitter = SentenceSplitter::default();
    let words: Vec<Vec<&str>> = texts
        .iter()
        .flat_map(|t| splitter.split(t))
        .map(|s| s.split_whitespace().collect())
        .collect();
    assert_eq!(lex, PosLexicon::tag_corpus(&tagger, &words, first_piece));
    assert!(lex.mapped_words() > 0);
}
