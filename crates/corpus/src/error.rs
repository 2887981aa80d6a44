//! The crate's one error type.

use std::path::PathBuf;

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, CorpusError>;

/// Everything that can go wrong when reading, tokenizing or sampling text.
///
/// Variants that come from a file name it (and the 1-based line where one applies).
#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    /// An I/O error on a named file.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder being read or written.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A file the call needs that is not there: `path` is the file, or the folder it was looked
    /// for in; `what` says what the file is for.
    #[error("{path}: missing {what}")]
    Missing {
        /// The file (or folder) looked at.
        path: PathBuf,
        /// What is missing there ("the CoNLL-U file that trains the POS tagger ...").
        what: String,
    },
    /// A line that is not valid UTF-8.
    #[error("{path}:{line}: invalid UTF-8")]
    InvalidUtf8 {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
    },
    /// A file (or folder, or stream) with no usable text.
    #[error("{path}: no text (empty input)")]
    Empty {
        /// The file or folder.
        path: PathBuf,
    },
    /// A malformed line in a structured file (JSONL, CoNLL-U, saved counts ...).
    #[error("{path}:{line}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// An error from the `tokenizers` crate.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// A tokenizer that lacks a special token the caller needs.
    #[error("tokenizer has no special token {0:?}")]
    MissingSpecialToken(String),
    /// A saved binary file (e.g. a tagger model) that is truncated, corrupt or of another format.
    #[error("{path}: corrupt or truncated file: {message}")]
    Corrupt {
        /// The file (or `<bytes>` for an in-memory buffer).
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// An argument outside its valid range (the message says which and why).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Not enough text for what was asked (e.g. sequences of T pieces from too few documents).
    #[error("not enough data: {0}")]
    NotEnoughData(String),
}

impl From<files::FilesError> for CorpusError {
    /// A failed atomic write ([`files`]) as a [`CorpusError::Io`] naming the file.
    fn from(e: files::FilesError) -> Self {
        let (path, source) = e.into_io();
        Self::Io { path, source }
    }
}

impl CorpusError {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
}
