//! Part-of-speech tagging: UPOS tags, a CoNLL-U reader, an averaged-perceptron tagger and the
//! per-token [`PosLexicon`] (each vocabulary token's majority tag, used for the two-tower
//! preference by word class).

pub mod conllu;
mod features;
pub mod lexicon;
pub mod tagger;
pub mod upos;

pub use conllu::{read_conllu, ConlluReader};
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
