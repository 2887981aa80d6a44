//! The LMD reference's text pipeline (`haozhg/lmd`, `cli.py`), beside [`crate::SequenceSampler`]:
//! every row of the dataset (for WikiText: every line, empty lines included) is tokenized with
//! its special tokens (`[CLS] … [SEP]`), the ids of each group of `group_rows` consecutive rows
//! (the `datasets.map(batched=True)` default of 1000) are concatenated and cut into T-token
//! chunks, the remainder of each group dropped (a group shorter than T gives one short chunk),
//! and each chunk is decoded back to text without its special tokens, with the tokenizer's
//! clean-up of tokenization spaces (`" ."` → `"."`, `" n't"` → `"n't"`, …). Those texts are
//! what every model of the study then re-tokenizes.
//!
//! Unlike the sampler, chunks cross sentence, paragraph and document boundaries and a chunk
//! may hold `[CLS]`/`[SEP]` positions that decode to nothing, so a decoded text re-tokenizes to
//! about, not exactly, T pieces.

use crate::error::{CorpusError, Result};
use crate::tokenizer::Tokenizer;

/// Rows per concatenation group in the reference (`datasets.map`'s default batch size).
pub const REFERENCE_GROUP_ROWS: usize = 1000;

/// The rows of a WikiText-style file as the `datasets` library reads them: one per line,
/// empty lines kept.
pub fn text_rows(text: &str) -> Vec<String> {
    text.lines().map(str::to_string).collect()
}

/// The T-token chunks of `rows`, decoded, as the reference builds its sequences (module docs).
/// `t` and `group_rows` must be positive.
pub fn reference_chunks(
    tok: &Tokenizer,
    rows: &[String],
    t: usize,
    group_rows: usize,
) -> Result<Vec<String>> {
    if t == 0 || group_rows == 0 {
        return Err(CorpusError::InvalidArgument(format!(
            "reference chunks need T > 0 and group_rows > 0 (got {t}, {group_rows})"
        )));
    }
    let mut out = Vec::new();
    for group in rows.chunks(group_rows) {
        let ids: Vec<u32> = tok.encode_ids_batch(group, true)?.concat();
        let total = if ids.len() >= t {
            ids.len() / t * t
        } else {
            ids.len()
        };
        for chunk in ids[..total].chunks(t) {
            out.push(clean_up_tokenization(&tok.decode(chunk, true)?));
        }
    }
    Ok(out)
}

/// transformers' `clean_up_tokenization`, applied by `decode` after the tokenizer's own
/// decoder: spaces before `.`, `?`, `!`, `,` and English contractions removed, in this order
/// (`" ' "` becomes `"'"`, which the `tokenizers` WordPiece decoder leaves alone).
pub fn clean_up_tokenization(text: &str) -> String {
    const RULES: [(&str, &str); 10] = [
        (" .", "."),
        (" ?", "?"),
        (" !", "!"),
        (" ,", ","),
        (" ' ", "'"),
        (" n't", "n't"),
        (" 'm", "'m"),
        (" 's", "'s"),
        (" 've", "'ve"),
        (" 're", "'re"),
    ];
    RULES
        .iter()
        .fold(text.to_string(), |s, (from, to)| s.replace(from, to))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bert() -> Tokenizer {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/data/bert-base-uncased/bert_base_uncased.json");
        assert!(p.is_file(), "shared test input {} is missing", p.display());
        Tokenizer::load(&p).unwrap()
    }

    #[test]
    fn clean_up_follows_transformers_order() {
        assert_eq!(
            clean_up_tokenization("< unk > ' s way , isn ' t it ?"),
            "< unk >'s way, isn't it?"
        );
        assert_eq!(clean_up_tokenization("a ' b ' c"), "a'b'c");
    }

    #[test]
    fn groups_are_cut_into_t_token_chunks_and_remainders_dropped() {
        let tok = bert();
        // Each row "a b c" is [CLS] a b c [SEP]: 5 ids.
        let rows: Vec<String> = (0..7).map(|_| "a b c".to_string()).collect();
        // Groups of 3 rows = 15 ids -> three chunks of 4 (3 ids dropped); last group of one
        // row = 5 ids -> one chunk of 4 (1 dropped).
        let chunks = reference_chunks(&tok, &rows, 4, 3).unwrap();
        assert_eq!(chunks.len(), 3 + 3 + 1);
        // [CLS] a b c | [SEP] [CLS] a b | c [SEP] [CLS] a
        assert_eq!(chunks[..3], ["a b c", "a b", "c a"]);
        // A group shorter than T gives one short chunk.
        assert_eq!(
            reference_chunks(&tok, &rows[..1], 64, 3).unwrap(),
            ["a b c"]
        );
        assert!(reference_chunks(&tok, &rows, 0, 3).is_err());
    }

    /// The reference's texts for the first 120 rows of WikiText-2 test, made by transformers
    /// (`scripts/reference_chunks_fixture.py`): ours must be identical, string for string.
    #[test]
    fn chunks_equal_the_texts_transformers_produces() {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/reference_chunks.json");
        let fx: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        let rows: Vec<String> = serde_json::from_value(fx["rows"].clone()).unwrap();
        let group = fx["group_rows"].as_u64().unwrap() as usize;
        let tok = bert();
        let chunks = fx["chunks"].as_object().unwrap();
        assert_eq!(chunks.len(), 2);
        for (t, want) in chunks {
            let want: Vec<String> = serde_json::from_value(want.clone()).unwrap();
            let got = reference_chunks(&tok, &rows, t.parse().unwrap(), group).unwrap();
            assert_eq!(got.len(), want.len(), "T = {t}");
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g, w, "T = {t}, chunk {i}");
            }
        }
    }
}
