//! [`PosLexicon`]: the majority UPOS tag of every vocabulary token over a tagged corpus.
//!
//! Each word's tag goes to its first word piece (as the two-tower paper did with Stanza tags):
//! the caller supplies `first_piece(word) -> Option<token id>`, e.g. the tokenizer wrapper's
//! `first_piece`, so this module depends on no tokenizer.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::tagger::{PerceptronTagger, TagScratch};
use super::{TaggedSentence, Upos};
use crate::error::{CorpusError, Result};
use crate::read::Document;
use crate::sentence::SentenceSplitter;

/// The majority tag of one token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenTag {
    /// Token id.
    pub token: u32,
    /// Its most frequent tag; ties go to the alphabetically first tag ([`Upos`] order).
    pub tag: Upos,
    /// How often the token received `tag`.
    pub count: u64,
    /// How often the token received any tag.
    pub total: u64,
}

/// Tag counts per vocabulary token, accumulated over tagged sentences.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PosLexicon {
    counts: BTreeMap<u32, [u64; Upos::COUNT]>,
    mapped_words: u64,
    unmapped_words: u64,
}

impl PosLexicon {
    /// An empty lexicon.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts the tags of one sentence: word `i`'s tag goes to `first_piece(words[i])`; words
    /// without a piece (`None`) are counted in [`PosLexicon::unmapped_words`] only.
    pub fn add_tagged<S: AsRef<str>>(
        &mut self,
        words: &[S],
        tags: &[Upos],
        first_piece: impl Fn(&str) -> Option<u32>,
    ) -> Result<()> {
        if words.len() != tags.len() {
            return Err(CorpusError::InvalidArgument(format!(
                "{} words but {} tags",
                words.len(),
                tags.len()
            )));
        }
        for (w, t) in words.iter().zip(tags) {
            match first_piece(w.as_ref()) {
                Some(id) => {
                    self.counts.entry(id).or_insert([0; Upos::COUNT])[t.index()] += 1;
                    self.mapped_words += 1;
                }
                None => self.unmapped_words += 1,
            }
        }
        Ok(())
    }

    /// A lexicon from gold-tagged sentences (e.g. the synthetic corpus or CoNLL-U).
    pub fn from_tagged(
        sentences: &[TaggedSentence],
        first_piece: impl Fn(&str) -> Option<u32>,
    ) -> Result<Self> {
        let mut lex = Self::new();
        for s in sentences {
            lex.add_tagged(&s.words, &s.tags, &first_piece)?;
        }
        Ok(lex)
    }

    /// Tags every sentence (a sequence of words) with `tagger` and counts the predicted tags.
    pub fn tag_corpus<I, W, S>(
        tagger: &PerceptronTagger,
        sentences: I,
        first_piece: impl Fn(&str) -> Option<u32>,
    ) -> Self
    where
        I: IntoIterator<Item = W>,
        W: AsRef<[S]>,
        S: AsRef<str>,
    {
        let mut lex = Self::new();
        let mut scratch = TagScratch::default();
        let mut tags = Vec::new();
        for words in sentences {
            let words = words.as_ref();
            tagger.tag_into(words, &mut scratch, &mut tags);
            lex.add_tagged(words, &tags, &first_piece)
                .expect("the tagger returns one tag per word");
        }
        lex
    }

    /// Tags every sentence of the documents (split by [`SentenceSplitter::default`], words at
    /// whitespace) with `tagger` and counts the predicted tags, calling `on_document()` after
    /// each document (e.g. to advance a progress bar).
    pub fn tag_documents(
        tagger: &PerceptronTagger,
        docs: &[Document],
        first_piece: impl Fn(&str) -> Option<u32>,
        mut on_document: impl FnMut(),
    ) -> Self {
        let splitter = SentenceSplitter::default();
        let mut lex = Self::new();
        for d in docs {
            let sentences = splitter
                .split(&d.text)
                .into_iter()
                .map(|s| s.split_whitespace().collect::<Vec<_>>())
                .filter(|w| !w.is_empty());
            lex.merge(&Self::tag_corpus(tagger, sentences, &first_piece));
            on_document();
        }
        lex
    }

    /// Adds another lexicon's counts (e.g. from a corpus tagged in parts).
    pub fn merge(&mut self, other: &PosLexicon) {
        for (&id, c) in &other.counts {
            let mine = self.counts.entry(id).or_insert([0; Upos::COUNT]);
            for (m, o) in mine.iter_mut().zip(c) {
                *m += o;
            }
        }
        self.mapped_words += other.mapped_words;
        self.unmapped_words += other.unmapped_words;
    }

    /// Tag counts of one token, indexed by [`Upos::index`].
    pub fn counts(&self, token: u32) -> Option<&[u64; Upos::COUNT]> {
        self.counts.get(&token)
    }

    /// The majority tag of one token (`None` if it was never seen).
    pub fn majority(&self, token: u32) -> Option<TokenTag> {
        self.counts.get(&token).map(|c| majority_of(token, c))
    }

    /// The majority tag of every seen token, by increasing token id.
    pub fn majority_tags(&self) -> Vec<TokenTag> {
        self.counts
            .iter()
            .map(|(&id, c)| majority_of(id, c))
            .collect()
    }

    /// A dense table `tags[token]` for tokens `0..vocab_size` (`None` for unseen tokens).
    pub fn to_dense(&self, vocab_size: usize) -> Vec<Option<Upos>> {
        let mut out = vec![None; vocab_size];
        for t in self.majority_tags() {
            if let Some(slot) = out.get_mut(t.token as usize) {
                *slot = Some(t.tag);
            }
        }
        out
    }

    /// Number of distinct tokens seen.
    pub fn len(&self) -> usize {
        self.counts.len()
    }

    /// Whether no token was seen.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// Words whose first piece was found (each counted once).
    pub fn mapped_words(&self) -> u64 {
        self.mapped_words
    }

    /// Words for which `first_piece` returned `None`.
    pub fn unmapped_words(&self) -> u64 {
        self.unmapped_words
    }

    /// Saves as JSON, atomically (temporary file, then rename).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let json = serde_json::to_vec(self).expect("a lexicon serializes to JSON");
        Ok(files::write_atomic(path, &json)?)
    }

    /// Loads a lexicon saved by [`PosLexicon::save`]; malformed JSON gives
    /// [`CorpusError::Parse`] with its line, inconsistent counts [`CorpusError::Corrupt`].
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| CorpusError::io(path, e))?;
        let lex: Self = serde_json::from_slice(&bytes).map_err(|e| CorpusError::Parse {
            path: path.to_path_buf(),
            line: e.line(),
            message: e.to_string(),
        })?;
        let sum = lex
            .counts
            .values()
            .flatten()
            .try_fold(0u64, |a, &n| a.checked_add(n));
        if sum != Some(lex.mapped_words) || lex.counts.values().any(|c| c.iter().all(|&n| n == 0)) {
            return Err(CorpusError::Corrupt {
                path: path.to_path_buf(),
                message: "tag counts do not add up to the mapped word count".into(),
            });
        }
        Ok(lex)
    }
}

fn majority_of(token: u32, c: &[u64; Upos::COUNT]) -> TokenTag {
    let mut best = 0;
    for i in 1..Upos::COUNT {
        if c[i] > c[best] {
            best = i; // strictly greater: ties keep the earlier (alphabetical) tag
        }
    }
    TokenTag {
        token,
        tag: Upos::ALL[best],
        count: c[best],
        total: c.iter().sum(),
    }
}
