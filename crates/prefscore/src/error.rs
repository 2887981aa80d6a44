//! The crate's error type.

/// Everything the statistics can refuse.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PrefscoreError {
    /// Inconsistent or unusable arguments (length mismatch, token id out of range, K < 2 ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A NaN or infinite input value (or a log-probability above 0).
    #[error("bad value {value} at {what}")]
    BadValue {
        /// Where it was found (e.g. "tower 1, position 17").
        what: String,
        /// The offending value.
        value: f64,
    },
    /// Too few data points for the statistic (e.g. a correlation of fewer than 3 pairs).
    #[error("not enough data: {0}")]
    NotEnoughData(String),
    /// The statistic is undefined for this input (e.g. a correlation with a constant variable).
    #[error("undefined statistic: {0}")]
    Undefined(String),
}

/// Result type of this crate.
pub type Result<T, E = PrefscoreError> = std::result::Result<T, E>;

impl PrefscoreError {
    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        Self::InvalidArgument(msg.into())
    }
}
