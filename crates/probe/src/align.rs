//! Words from pieces: which tokenizer pieces make up each treebank word, and a word's vector
//! from its pieces' vectors.

use serde::{Deserialize, Serialize};

use crate::error::{ProbeError, Result};

/// How a word's vector is made from its pieces' vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum PiecePooling {
    /// The mean of the word's pieces (the default).
    #[default]
    Mean,
    /// The first piece alone.
    First,
}

/// The pieces of a sentence (special tokens included) and, per word, the pieces it is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WordAlignment {
    /// The text that was tokenized: the words joined by single spaces.
    pub text: String,
    /// Piece ids, with the tokenizer's special tokens.
    pub ids: Vec<u32>,
    /// For each word, the indices into `ids` of its pieces (at least one, ascending).
    pub pieces: Vec<Vec<usize>>,
}

/// Tokenizes `words` joined by spaces (with special tokens) and gives each word the pieces
/// whose byte span overlaps its own. `sentence` only names the sentence in errors; a word
/// without a piece is [`ProbeError::Unaligned`].
pub fn align_words(
    tokenizer: &corpus::Tokenizer,
    words: &[String],
    sentence: usize,
) -> Result<WordAlignment> {
    let mut text = String::new();
    let mut spans = Vec::with_capacity(words.len());
    for w in words {
        if !text.is_empty() {
            text.push(' ');
        }
        spans.push((text.len(), text.len() + w.len()));
        text.push_str(w);
    }
    let enc = tokenizer.encode(&text, true)?;
    let mut pieces = vec![Vec::new(); words.len()];
    let mut next_word = 0;
    for (p, &(start, end)) in enc.offsets.iter().enumerate() {
        if start == end {
            continue; // special tokens have an empty span
        }
        // Spans are ascending: move past the words that end before this piece starts.
        while next_word < spans.len() && spans[next_word].1 <= start {
            next_word += 1;
        }
        if let Some(&(ws, _)) = spans.get(next_word) {
            if ws < end {
                pieces[next_word].push(p);
            }
        }
        // Otherwise the piece covers only separating space (byte-level BPE without trimmed
        // offsets): no word owns it.
    }
    if let Some(k) = pieces.iter().position(Vec::is_empty) {
        return Err(ProbeError::Unaligned {
            sentence,
            word: k,
            text: words[k].clone(),
        });
    }
    Ok(WordAlignment {
        text,
        ids: enc.ids,
        pieces,
    })
}

/// The word vectors [n_words × h] of one sentence from its piece vectors [n_pieces × h]
/// (row-major), pooled as `pooling` says.
pub fn pool_words(
    piece_states: &[f32],
    h: usize,
    alignment: &WordAlignment,
    pooling: PiecePooling,
) -> Vec<f32> {
    let mut out = vec![0.0f32; alignment.pieces.len() * h];
    for (w, pieces) in alignment.pieces.iter().enumerate() {
        let dst = &mut out[w * h..(w + 1) * h];
        let used: &[usize] = match pooling {
            PiecePooling::Mean => pieces,
            PiecePooling::First => &pieces[..1],
        };
        for &p in used {
            for (d, s) in dst.iter_mut().zip(&piece_states[p * h..(p + 1) * h]) {
                *d += s;
            }
        }
        let k = used.len() as f32;
        dst.iter_mut().for_each(|d| *d /= k);
    }
    out
}
