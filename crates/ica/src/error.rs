//! The crate's one error type.

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, IcaError>;

/// Everything that can go wrong in PCA, ICA and the analysis of components.
#[derive(Debug, thiserror::Error)]
pub enum IcaError {
    /// Fewer samples (rows) than the dimension asked for: the second moment is rank deficient.
    #[error("{samples} samples are fewer than the {dim} dimensions asked for")]
    TooFewSamples {
        /// Number of samples (rows) given.
        samples: usize,
        /// Dimension asked for (PCA output width or ICA width).
        dim: usize,
    },
    /// A NaN or infinite value in the input.
    #[error("non-finite value {value} at row {row}, column {col}")]
    NonFinite {
        /// Row of the first offending value.
        row: usize,
        /// Column of the first offending value.
        col: usize,
        /// The value itself.
        value: f32,
    },
    /// A retained principal direction whose variance is (numerically) zero: whitening would
    /// divide by it.
    #[error(
        "principal direction {index} has variance {variance:e} (largest {largest:e}): \
         the data has fewer than {dim} independent directions"
    )]
    ZeroVariance {
        /// Rank of the direction (0 = largest variance).
        index: usize,
        /// Its variance (eigenvalue of the second moment).
        variance: f64,
        /// The largest variance, for scale.
        largest: f64,
        /// The dimension asked for.
        dim: usize,
    },
    /// The unmixing matrix blew up (non-finite or above the divergence limit).
    #[error("ICA diverged at step {step}: |W|_F = {norm:e} (learning rate {learning_rate})")]
    Diverged {
        /// 1-based step at which it was detected.
        step: usize,
        /// Frobenius norm of W at that step (may be NaN or infinite).
        norm: f64,
        /// The learning rate in use then.
        learning_rate: f64,
    },
    /// Matrix dimensions that do not fit together.
    #[error("shape mismatch: {0}")]
    Shape(String),
    /// An invalid setting (zero dimension, non-positive learning rate, empty batch, ...).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The eigen-decomposition did not converge.
    #[error("eigen-decomposition failed: {0}")]
    Eigen(String),
    /// An error from candle's device (tensor creation, matmul, copy).
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}
