//! A seeded synthetic English-like corpus with gold UPOS tags: the embedded default corpus of
//! the examples and a test bed where the truth is known.
//!
//! A small probabilistic grammar (see `grammar.rs`) writes sentences from twelve word classes
//! (DET, NOUN, PROPN, VERB, AUX, ADP, ADJ, ADV, PRON, CCONJ, NUM, PUNCT) of real English words,
//! each a whole token of the BERT uncased vocabulary. Inside a class, words are drawn with Zipfian
//! probabilities (the `r`-th word of a class list has weight `r^(-s)`). Document `i` is generated
//! from its own random stream of the seed, so documents can be produced lazily, in any order,
//! always the same.

mod grammar;
mod words;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::error::{CorpusError, Result};
use crate::pos::{TaggedSentence, Upos};
use grammar::{Tables, Writer, Zipf};
use words::*;

/// Settings of the synthetic corpus.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SyntheticConfig {
    /// Seed of every random choice.
    pub seed: u64,
    /// Number of documents.
    pub n_documents: usize,
    /// Inclusive range `(min, max)` of sentences per document (uniform).
    pub sentences_per_document: (usize, usize),
    /// Zipf exponent `s` of the word frequencies inside each class (0 = uniform); sentence-final
    /// punctuation always uses exponent 3 (`.` about 86%).
    pub zipf_exponent: f64,
    /// Optional caps on the number of distinct words of a class (the most frequent ones are
    /// kept; for classes with several lists, e.g. DET singular/plural, each list is capped).
    /// Classes not named use every embedded word.
    pub class_sizes: BTreeMap<Upos, usize>,
}

impl Default for SyntheticConfig {
    /// 300 documents of 5-15 sentences (about 3,000 sentences, 30,000 words), exponent 1.
    fn default() -> Self {
        Self {
            seed: 0,
            n_documents: 300,
            sentences_per_document: (5, 15),
            zipf_exponent: 1.0,
            class_sizes: BTreeMap::new(),
        }
    }
}

/// A generated document: its running text and its tagged sentences.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaggedDocument {
    /// The sentences' texts joined by single spaces (punctuation attached to the word before).
    pub text: String,
    /// The sentences with their gold tags.
    pub sentences: Vec<TaggedSentence>,
}

/// The corpus generator (cheap to build; documents are generated on demand).
#[derive(Clone, Debug)]
pub struct SyntheticCorpus {
    cfg: SyntheticConfig,
    tables: Tables,
}

/// The word classes the grammar writes.
pub const SYNTHETIC_CLASSES: [Upos; 12] = [
    Upos::Det,
    Upos::Noun,
    Upos::Propn,
    Upos::Verb,
    Upos::Aux,
    Upos::Adp,
    Upos::Adj,
    Upos::Adv,
    Upos::Pron,
    Upos::Cconj,
    Upos::Num,
    Upos::Punct,
];

impl SyntheticCorpus {
    /// Validates the configuration and builds the Zipf tables.
    ///
    /// Errors: no documents, an empty or reversed sentence range, a negative or non-finite
    /// exponent, a class size of 0 or for a class the grammar does not write.
    pub fn new(cfg: SyntheticConfig) -> Result<Self> {
        let bad = |m: String| Err(CorpusError::InvalidArgument(m));
        if cfg.n_documents == 0 {
            return bad("synthetic corpus needs n_documents >= 1".into());
        }
        let (lo, hi) = cfg.sentences_per_document;
        if lo == 0 || lo > hi {
            return bad(format!(
                "sentences_per_document must be 1 <= min <= max, got ({lo}, {hi})"
            ));
        }
        if !(cfg.zipf_exponent.is_finite() && cfg.zipf_exponent >= 0.0) {
            return bad(format!(
                "zipf_exponent must be finite and >= 0, got {}",
                cfg.zipf_exponent
            ));
        }
        for (&tag, &n) in &cfg.class_sizes {
            if !SYNTHETIC_CLASSES.contains(&tag) {
                return bad(format!("the synthetic grammar writes no {tag} words"));
            }
            if n == 0 {
                return bad(format!("class size of {tag} must be >= 1"));
            }
        }
        let s = cfg.zipf_exponent;
        let size = |tag: Upos, len: usize| {
            Zipf::new(
                len.min(cfg.class_sizes.get(&tag).copied().unwrap_or(len)),
                s,
            )
        };
        let tables = Tables {
            det_sg: size(Upos::Det, DET_SINGULAR.len()),
            det_pl: size(Upos::Det, DET_PLURAL.len()),
            noun: size(Upos::Noun, NOUNS.len()),
            verb: size(Upos::Verb, VERBS.len()),
            modal: size(Upos::Aux, MODALS.len()),
            adj: size(Upos::Adj, ADJECTIVES.len()),
            adv: size(Upos::Adv, ADVERBS.len()),
            pron_subj: size(Upos::Pron, PRONOUNS_SUBJECT.len()),
            pron_obj: size(Upos::Pron, PRONOUNS_OBJECT.len()),
            propn: size(Upos::Propn, PROPER_NOUNS.len()),
            num: size(Upos::Num, NUMERALS.len()),
            adp: size(Upos::Adp, ADPOSITIONS.len()),
            cconj: size(Upos::Cconj, CONJUNCTIONS.len()),
            // Final punctuation is not a vocabulary class: a fixed steep exponent keeps `.`
            // at ~86% (`?` 11%, `!` 3%) whatever the words' exponent.
            punct: Zipf::new(
                FINAL_PUNCT.len().min(
                    cfg.class_sizes
                        .get(&Upos::Punct)
                        .copied()
                        .unwrap_or(usize::MAX),
                ),
                3.0,
            ),
        };
        Ok(Self { cfg, tables })
    }

    /// The configuration.
    pub fn config(&self) -> &SyntheticConfig {
        &self.cfg
    }

    /// Number of documents.
    pub fn len(&self) -> usize {
        self.cfg.n_documents
    }

    /// Always false (a corpus has at least one document).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Document `i` (`None` when `i >= len()`); the same for the same seed and index.
    pub fn document(&self, i: usize) -> Option<TaggedDocument> {
        if i >= self.cfg.n_documents {
            return None;
        }
        let mut rng = ChaCha8Rng::seed_from_u64(self.cfg.seed);
        rng.set_stream(i as u64);
        let (lo, hi) = self.cfg.sentences_per_document;
        let n = rng.random_range(lo..=hi);
        let sentences: Vec<TaggedSentence> = (0..n)
            .map(|_| {
                Writer {
                    rng: &mut rng,
                    t: &self.tables,
                    out: TaggedSentence::default(),
                }
                .sentence()
            })
            .collect();
        let text = sentences
            .iter()
            .map(TaggedSentence::text)
            .collect::<Vec<_>>()
            .join(" ");
        Some(TaggedDocument { text, sentences })
    }

    /// Every document, generated lazily in order.
    pub fn documents(&self) -> impl Iterator<Item = TaggedDocument> + '_ {
        (0..self.cfg.n_documents).filter_map(|i| self.document(i))
    }

    /// Every document, collected.
    pub fn to_documents(&self) -> Vec<TaggedDocument> {
        self.documents().collect()
    }

    /// Every sentence of every document, in order.
    pub fn sentences(&self) -> impl Iterator<Item = TaggedSentence> + '_ {
        self.documents().flat_map(|d| d.sentences)
    }

    /// Writes the corpus as plain text: one document per line, documents separated by a blank
    /// line (the layout of the plain-text reader's "documents split by blank lines" mode).
    pub fn write_text_to(&self, mut w: impl Write) -> std::io::Result<()> {
        for (i, doc) in self.documents().enumerate() {
            if i > 0 {
                w.write_all(b"\n")?;
            }
            w.write_all(doc.text.as_bytes())?;
            w.write_all(b"\n")?;
        }
        w.flush()
    }

    /// [`SyntheticCorpus::write_text_to`] a file (written to a temporary file, then renamed).
    pub fn write_text(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        Ok(files::write_atomic_with(path, |w| self.write_text_to(w))?)
    }

    /// The whole corpus as one string (the content of [`SyntheticCorpus::write_text`]).
    pub fn text(&self) -> String {
        let mut out = Vec::new();
        self.write_text_to(&mut out).expect("writing to memory");
        String::from_utf8(out).expect("the word lists are UTF-8")
    }

    /// The gold tag of every word form the configured corpus can contain, as written in
    /// running text except for sentence-initial capitalisation (proper nouns are capitalised,
    /// everything else is lower case). Each form has exactly one tag.
    pub fn gold_lexicon(&self) -> BTreeMap<String, Upos> {
        let t = &self.tables;
        let mut lex = BTreeMap::new();
        let mut add = |list: &mut dyn Iterator<Item = &str>, table: &Zipf, tag: Upos| {
            for w in list.take(table.len()) {
                lex.insert(w.to_string(), tag);
            }
        };
        add(&mut DET_SINGULAR.iter().copied(), &t.det_sg, Upos::Det);
        add(&mut DET_PLURAL.iter().copied(), &t.det_pl, Upos::Det);
        add(&mut NOUNS.iter().map(|n| n.0), &t.noun, Upos::Noun);
        add(&mut NOUNS.iter().map(|n| n.1), &t.noun, Upos::Noun);
        add(&mut VERBS.iter().map(|v| v.0), &t.verb, Upos::Verb);
        add(&mut VERBS.iter().map(|v| v.1), &t.verb, Upos::Verb);
        add(&mut MODALS.iter().copied(), &t.modal, Upos::Aux);
        add(&mut COPULA.iter().copied(), &Zipf::new(2, 0.0), Upos::Aux);
        add(&mut ADJECTIVES.iter().copied(), &t.adj, Upos::Adj);
        add(&mut ADVERBS.iter().copied(), &t.adv, Upos::Adv);
        add(
            &mut PRONOUNS_SUBJECT.iter().map(|p| p.0),
            &t.pron_subj,
            Upos::Pron,
        );
        add(
            &mut PRONOUNS_OBJECT.iter().copied(),
            &t.pron_obj,
            Upos::Pron,
        );
        add(&mut PROPER_NOUNS.iter().copied(), &t.propn, Upos::Propn);
        add(&mut NUMERALS.iter().copied(), &t.num, Upos::Num);
        add(&mut ADPOSITIONS.iter().copied(), &t.adp, Upos::Adp);
        add(&mut CONJUNCTIONS.iter().copied(), &t.cconj, Upos::Cconj);
        add(&mut FINAL_PUNCT.iter().copied(), &t.punct, Upos::Punct);
        add(&mut [COMMA].into_iter(), &Zipf::new(1, 0.0), Upos::Punct);
        if DET_SINGULAR[..t.det_sg.len()].contains(&"a") {
            lex.insert("an".to_string(), Upos::Det);
        }
        lex
    }

    /// The words of a single-list class (ADJ, ADV, PROPN, NUM, ADP, CCONJ) in Zipf rank order,
    /// most probable first, as the configuration limits them; `None` for classes drawn from
    /// several lists (DET, NOUN, VERB, AUX, PRON, PUNCT) or not written at all.
    pub fn ranked_words(&self, tag: Upos) -> Option<Vec<&'static str>> {
        let t = &self.tables;
        let (list, table): (&[&'static str], &Zipf) = match tag {
            Upos::Adj => (ADJECTIVES, &t.adj),
            Upos::Adv => (ADVERBS, &t.adv),
            Upos::Propn => (PROPER_NOUNS, &t.propn),
            Upos::Num => (NUMERALS, &t.num),
            Upos::Adp => (ADPOSITIONS, &t.adp),
            Upos::Cconj => (CONJUNCTIONS, &t.cconj),
            _ => return None,
        };
        Some(list[..table.len()].to_vec())
    }
}
