//! Paths of the shared data (`/work/shared/data`, i.e. `../shared/data` from the repo root).
#![allow(dead_code)]

use std::path::PathBuf;

/// A file or folder under the shared data directory; panics with the path when it is missing
/// (a missing data set is an environment bug, never a silent skip).
pub fn path(rel: &str) -> PathBuf {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data")).join(rel);
    assert!(p.exists(), "shared data missing: {}", p.display());
    p
}

/// The bert-base-uncased `tokenizer.json` (older format, no model type).
pub fn bert_json() -> PathBuf {
    path("bert-base-uncased/bert_base_uncased.json")
}

/// The bert-base-uncased `vocab.txt`.
pub fn bert_vocab() -> PathBuf {
    path("bert-base-uncased/vocab.txt")
}

/// The BERT uncased tokenizer, loaded once per test binary.
pub fn bert() -> &'static corpus::Tokenizer {
    static TOK: std::sync::OnceLock<corpus::Tokenizer> = std::sync::OnceLock::new();
    TOK.get_or_init(|| corpus::Tokenizer::from_file(bert_json()).expect("load BERT tokenizer"))
}

/// The first `n` documents of WikiText-2 `split` (`train`, `valid`, `test`).
pub fn wikitext2_docs(split: &str, n: usize) -> Vec<corpus::Document> {
    let p = path(&format!("wikitext-2/{split}.txt"));
    corpus::Documents::open(p, corpus::Format::WikiText)
        .expect("open WikiText-2")
        .take(n)
        .collect::<corpus::Result<Vec<_>>>()
        .expect("read WikiText-2")
}
