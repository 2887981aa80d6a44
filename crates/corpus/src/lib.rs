//! `corpus`: text in, token ids out.
//!
//! Streaming readers (plain text, WikiText, folders of `.txt`, JSONL), sentence splitting, a
//! tokenizer wrapper over `tokenizers`, token frequencies, training data for the three model styles
//! (BERT windows with MLM masks, contiguous causal blocks), deterministic shuffled batches with a
//! resumable cursor, document-level splits, the LMD `SequenceSampler` and the LMD reference's
//! chunking ([`reference_chunks()`]), a seeded synthetic corpus with gold UPOS tags, a UPOS tagger
//! with the per-token `PosLexicon`, and the [`Vocabulary`] choice of a study.
//!
//! This crate has no candle dependency: everything is plain Rust data.

#![deny(missing_docs)]

pub mod batch;
pub mod error;
pub mod freq;
pub mod labels;
pub mod mlm;
pub mod pos;
pub mod read;
pub mod reference_chunks;
pub mod sampler;
pub mod sentence;
pub mod split;
pub mod synthetic;
pub mod tokenizer;
pub mod vocabulary;
pub mod windows;

pub use batch::{
    BatchCursor, BatchIter, Batcher, BatcherConfig, Objective, OrderCache, TokenBatch, IGNORE_LABEL,
};
pub use error::{CorpusError, Result};
pub use freq::{CountSummary, TokenCounts};
pub use mlm::{mask_sequence, MaskingConfig};
pub use pos::{
    read_conllu, read_conllu_trees, Accuracy, ConlluReader, ConlluTreeReader, ParsedSentence,
    PerceptronTagger, PosLexicon, TaggedSentence, TaggerConfig, TokenTag, Upos,
};
pub use read::{read_documents, DocSource, Document, Documents, Format};
pub use reference_chunks::{reference_chunks, text_rows, REFERENCE_GROUP_ROWS};
pub use sampler::{Sample, SampleText, SampledSplits, SamplerConfig, SequenceSampler};
pub use sentence::{split_sentences, SentenceSplitter};
pub use split::{fnv1a, DocumentSplitter, Split, SplitFractions, SplitKey};
pub use synthetic::{SyntheticConfig, SyntheticCorpus, TaggedDocument};
pub use tokenizer::{ChunkMemo, Encoded, SpecialTokens, Tokenizer, BERT_SPECIAL_TOKENS};
pub use vocabulary::{tokenizer_file, Vocabulary, TOKENIZER_FILES};
pub use windows::{
    bert_windows, causal_blocks, pack_bert_windows, pack_causal_blocks, pad_sequence, TrainingData,
    DEFAULT_MAX_LEN,
};
