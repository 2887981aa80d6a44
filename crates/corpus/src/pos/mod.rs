//! Part-of-speech tagging: UPOS tags, a CoNLL-U reader (with the dependency trees for probing), an averaged-perceptron tagger and the
//! per-token [`PosLexicon`] (each vocabulary token's majority tag, used for the two-tower
//! preference by word class).

pub mod conllu;
mod features;
pub mod lexicon;
pub mod tagger;
pub mod upos;

pub use conllu::{read_conllu, read_conllu_trees, ConlluReader, ConlluTreeReader};
pub use lexicon::{PosLexicon, TokenTag};
pub use tagger::{Accuracy, PerceptronTagger, TagScratch, TaggerConfig};
pub use upos::Upos;

use serde::{Deserialize, Serialize};

/// One sentence of words with one UPOS tag per word (`words.len() == tags.len()`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaggedSentence {
    /// The words (CoNLL-U FORM, or the synthetic grammar's words), punctuation as separate words.
    pub words: Vec<String>,
    /// The gold (or predicted) tag of each word.
    pub tags: Vec<Upos>,
}

impl TaggedSentence {
    /// Number of words.
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// Whether the sentence has no words.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// The sentence as running text: words joined by spaces, except that closing punctuation
    /// (`. , ! ? ; : ) '`-initial) attaches to the word before it.
    pub fn text(&self) -> String {
        let mut out = String::with_capacity(self.words.iter().map(|w| w.len() + 1).sum());
        for (i, w) in self.words.iter().enumerate() {
            let attach = w
                .chars()
                .next()
                .is_some_and(|c| matches!(c, '.' | ',' | '!' | '?' | ';' | ':' | ')' | '\''));
            if i > 0 && !attach {
                out.push(' ');
            }
            out.push_str(w);
        }
        out
    }
}

/// One sentence of a treebank: words, UPOS tags and the basic dependency tree (CoNLL-U columns
/// 2, 4, 7 and 8), as [`ConlluTreeReader`] gives it. All four vectors have one entry per word.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParsedSentence {
    /// The words (CoNLL-U FORM), multiword tokens and empty nodes left out.
    pub words: Vec<String>,
    /// The gold UPOS tag of each word.
    pub tags: Vec<Upos>,
    /// The head of each word: 0 for the root, else the 1-based index of the head word.
    pub heads: Vec<usize>,
    /// The dependency relation of each word to its head (DEPREL, e.g. `nsubj`, `root`).
    pub deprels: Vec<String>,
}

impl ParsedSentence {
    /// Number of words.
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// Whether the sentence has no words.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// The 0-based index of the root word (the one whose head is 0), if there is one.
    pub fn root(&self) -> Option<usize> {
        self.heads.iter().position(|&h| h == 0)
    }

    /// The words and tags alone.
    pub fn into_tagged(self) -> TaggedSentence {
        TaggedSentence {
            words: self.words,
            tags: self.tags,
        }
    }
}
