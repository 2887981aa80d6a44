//! Typed errors of the `heads` crate.

use std::path::PathBuf;

/// Everything that can go wrong while retraining or evaluating per-tower heads.
#[derive(Debug, thiserror::Error)]
pub enum HeadsError {
    /// An error from the towers crate (model, training loop, checkpoint).
    #[error(transparent)]
    Towers(#[from] towers::TowersError),
    /// A tensor operation failed.
    #[error("candle: {0}")]
    Candle(#[from] candle_core::Error),
    /// JSON (de)serialisation failed.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    /// File-system failure, with the path involved.
    #[error("io error on {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Heads and model (or inputs) do not fit together, e.g. a head set scored on other
    /// positions than a [`crate::ScoresFile`]'s.
    #[error("mismatch: {0}")]
    Mismatch(String),
    /// A file, or something a file should hold (a head set of a [`crate::ScoresFile`]), is
    /// missing.
    #[error("{} is missing ({what})", path.display())]
    Missing {
        /// The file that was looked for (or looked in).
        path: PathBuf,
        /// What is missing ("the head set retest in the scores file", ...).
        what: String,
    },
    /// A file is foreign or damaged: not what it should have been.
    #[error("{} is not {expected}", path.display())]
    NotA {
        /// The file.
        path: PathBuf,
        /// What it should have been ("a scores file of version 1 (...)", ...).
        expected: String,
    },
    /// A stop was requested (the caller's [`towers::StopToken`], e.g. on SIGTERM) during an evaluation
    /// ([`crate::evaluate`] keeps nothing: scoring is short beside training).
    #[error("stopped on request while scoring the heads, after {done} of {total} batches; run the same command again to score them")]
    Stopped {
        /// Batches evaluated before the stop.
        done: usize,
        /// Batches of the evaluation.
        total: usize,
    },
}

impl From<files::FilesError> for HeadsError {
    /// A failed atomic write ([`files`]) as a [`HeadsError::Io`] naming the file.
    fn from(e: files::FilesError) -> Self {
        let (path, source) = e.into_io();
        Self::Io {
            path: path.display().to_string(),
            source,
        }
    }
}

/// Result alias of the `heads` crate.
pub type Result<T> = std::result::Result<T, HeadsError>;
