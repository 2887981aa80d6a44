//! Typed errors of the `towers` crate.

/// Everything that can go wrong while building, training or checkpointing a K-tower model.
#[derive(Debug, thiserror::Error)]
pub enum TowersError {
    /// A tensor operation failed (shape, dtype or device problem).
    #[error("candle: {0}")]
    Candle(#[from] candle_core::Error),
    /// File-system failure, with the path involved.
    #[error("io error on {path}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// JSON (de)serialisation failed.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    /// A model or training configuration is inconsistent.
    #[error("invalid config: {0}")]
    Config(String),
    /// A batch does not fit the model (shape, token id out of range, sequence too long).
    #[error("bad batch: {0}")]
    Batch(String),
    /// A batch has no position that carries a label, so it has no loss.
    #[error("batch has no labelled position")]
    NoTargets,
    /// A loss or gradient became NaN or infinite.
    #[error("non-finite value: {0}")]
    NonFinite(String),
    /// A checkpoint is missing, truncated, or does not match the model.
    #[error("checkpoint {path}: {msg}")]
    Checkpoint {
        /// The checkpoint directory or file.
        path: String,
        /// What is wrong with it.
        msg: String,
    },
    /// A data source failed.
    #[error("data source: {0}")]
    Data(String),
    /// A checkpoint file could not be written (no space, no permission, a path under a file):
    /// the new checkpoint was abandoned and the previous one, if any, is left as it was.
    #[error("could not write the checkpoint file {path}: {msg}; the previous checkpoint is left as it was")]
    CheckpointWrite {
        /// The file or directory whose write failed.
        path: String,
        /// The underlying error.
        msg: String,
    },
    /// Training stopped on request (the caller's [`crate::StopToken`], e.g. from a SIGTERM handler) at a
    /// step boundary, after writing its checkpoint: the same run started again resumes from it.
    #[error(
        "stopped on request after update {step}{}",
        match checkpoint {
            Some(c) => format!("; checkpoint written to {c}: run the same command again to resume"),
            None => String::new(),
        }
    )]
    Stopped {
        /// Updates done.
        step: u64,
        /// The checkpoint written (none without an output directory).
        checkpoint: Option<String>,
    },
}

impl From<corpus::CorpusError> for TowersError {
    fn from(e: corpus::CorpusError) -> Self {
        TowersError::Data(e.to_string())
    }
}

/// Result alias of the `towers` crate.
pub type Result<T> = std::result::Result<T, TowersError>;

/// Wraps an [`std::io::Error`] with the path it concerns.
pub(crate) fn io_err(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> TowersError + '_ {
    move |source| TowersError::Io {
        path: path.display().to_string(),
        source,
    }
}
