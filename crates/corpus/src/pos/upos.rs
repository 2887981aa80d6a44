//! The 17 universal part-of-speech tags of Universal Dependencies.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::CorpusError;

/// A Universal Dependencies universal POS tag (UPOS, CoNLL-U column 4).
///
/// The discriminants follow the alphabetical order of [`Upos::ALL`], so `tag as usize` is a dense
/// index in `0..Upos::COUNT` and comparisons (`Ord`) are alphabetical, which makes tie-breaking
/// deterministic wherever tags are compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Upos {
    /// Adjective.
    #[serde(rename = "ADJ")]
    Adj,
    /// Adposition (preposition, postposition).
    #[serde(rename = "ADP")]
    Adp,
    /// Adverb.
    #[serde(rename = "ADV")]
    Adv,
    /// Auxiliary (modals, copula, tense/aspect auxiliaries).
    #[serde(rename = "AUX")]
    Aux,
    /// Coordinating conjunction.
    #[serde(rename = "CCONJ")]
    Cconj,
    /// Determiner.
    #[serde(rename = "DET")]
    Det,
    /// Interjection.
    #[serde(rename = "INTJ")]
    Intj,
    /// Noun.
    #[serde(rename = "NOUN")]
    Noun,
    /// Numeral.
    #[serde(rename = "NUM")]
    Num,
    /// Particle.
    #[serde(rename = "PART")]
    Part,
    /// Pronoun.
    #[serde(rename = "PRON")]
    Pron,
    /// Proper noun.
    #[serde(rename = "PROPN")]
    Propn,
    /// Punctuation.
    #[serde(rename = "PUNCT")]
    Punct,
    /// Subordinating conjunction.
    #[serde(rename = "SCONJ")]
    Sconj,
    /// Symbol.
    #[serde(rename = "SYM")]
    Sym,
    /// Verb.
    #[serde(rename = "VERB")]
    Verb,
    /// Other (foreign words, typos, unanalysable).
    #[serde(rename = "X")]
    X,
}

impl Upos {
    /// Number of tags (17).
    pub const COUNT: usize = 17;

    /// Every tag, in index (alphabetical) order.
    pub const ALL: [Upos; Upos::COUNT] = [
        Upos::Adj,
        Upos::Adp,
        Upos::Adv,
        Upos::Aux,
        Upos::Cconj,
        Upos::Det,
        Upos::Intj,
        Upos::Noun,
        Upos::Num,
        Upos::Part,
        Upos::Pron,
        Upos::Propn,
        Upos::Punct,
        Upos::Sconj,
        Upos::Sym,
        Upos::Verb,
        Upos::X,
    ];

    /// The dense index of the tag, `0..Upos::COUNT`.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The tag with a given dense index, `None` when `index >= Upos::COUNT`.
    pub fn from_index(index: usize) -> Option<Upos> {
        Upos::ALL.get(index).copied()
    }

    /// The CoNLL-U spelling (`"ADJ"`, `"PROPN"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Upos::Adj => "ADJ",
            Upos::Adp => "ADP",
            Upos::Adv => "ADV",
            Upos::Aux => "AUX",
            Upos::Cconj => "CCONJ",
            Upos::Det => "DET",
            Upos::Intj => "INTJ",
            Upos::Noun => "NOUN",
            Upos::Num => "NUM",
            Upos::Part => "PART",
            Upos::Pron => "PRON",
            Upos::Propn => "PROPN",
            Upos::Punct => "PUNCT",
            Upos::Sconj => "SCONJ",
            Upos::Sym => "SYM",
            Upos::Verb => "VERB",
            Upos::X => "X",
        }
    }
}

impl fmt::Display for Upos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl FromStr for Upos {
    type Err = CorpusError;

    /// Parses the exact CoNLL-U spelling (upper case).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Upos::ALL
            .iter()
            .copied()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| CorpusError::InvalidArgument(format!("unknown UPOS tag {s:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_order_matches_all() {
        for (i, t) in Upos::ALL.iter().enumerate() {
            assert_eq!(t.index(), i);
            assert_eq!(Upos::from_index(i), Some(*t));
        }
        assert_eq!(Upos::from_index(Upos::COUNT), None);
        let mut names: Vec<&str> = Upos::ALL.iter().map(|t| t.as_str()).collect();
        let unsorted = names.clone();
        names.sort_unstable();
        assert_eq!(names, unsorted, "ALL is alphabetical");
    }
}
