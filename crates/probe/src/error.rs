//! The crate's one error type.

use std::path::PathBuf;

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, ProbeError>;

/// Everything that can go wrong when building states, training or scoring probes.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// A parameter outside its valid range (the message says which and why).
    #[error("invalid parameter: {0}")]
    InvalidParams(String),
    /// Inputs that do not fit together (sentences and states of different sizes, ...).
    #[error("mismatch: {0}")]
    Mismatch(String),
    /// A hidden-states file of the wrong layout.
    #[error("{path}: {message}")]
    StatesFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A word that gets no piece from the tokenizer (it would have no vector).
    #[error("sentence {sentence}: word {word} ({text:?}) gets no piece from the tokenizer")]
    Unaligned {
        /// 0-based sentence index.
        sentence: usize,
        /// 0-based word index.
        word: usize,
        /// The word.
        text: String,
    },
    /// A sentence with more pieces than the model's position table.
    #[error("sentence {sentence} has {pieces} pieces, the model takes at most {max}")]
    TooLong {
        /// 0-based sentence index.
        sentence: usize,
        /// Its pieces, special tokens included.
        pieces: usize,
        /// The model's limit.
        max: usize,
    },
    /// Nothing to train or score on.
    #[error("no data: {0}")]
    Empty(String),
    /// A non-finite loss during training (the learning rate is too high for these states).
    #[error("non-finite training loss at epoch {epoch}: lower the learning rate")]
    NonFinite {
        /// 0-based epoch.
        epoch: usize,
    },
    /// An I/O error on a named path.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A tensor error from candle.
    #[error("candle: {0}")]
    Candle(#[from] candle_core::Error),
    /// A reading or tokenizing error from `corpus`.
    #[error(transparent)]
    Corpus(#[from] corpus::CorpusError),
    /// A model loading error from `lmd`.
    #[error(transparent)]
    Lmd(#[from] lmd::LmdError),
    /// A table or figure error from `report`.
    #[error(transparent)]
    Report(#[from] report::ReportError),
    /// A failed atomic write.
    #[error(transparent)]
    Files(#[from] files::FilesError),
}
