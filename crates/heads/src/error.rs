//! Typed errors of the `heads` crate.

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
    /// Heads and model (or inputs) do not fit together.
    #[error("mismatch: {0}")]
    Mismatch(String),
    /// A stop was requested ([`towers::request_stop`], e.g. SIGTERM) during an evaluation
    /// ([`crate::evaluate`] keeps nothing: scoring is short beside training).
    #[error("stopped on request while scoring the heads, after {done} of {total} batches; run the same command again to score them")]
    Stopped {
        /// Batches evaluated before the stop.
        done: usize,
        /// Batches of the evaluation.
        total: usize,
    },
}

/// Result alias of the `heads` crate.
pub type Result<T> = std::result::Result<T, HeadsError>;
