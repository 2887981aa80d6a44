//! The crate's error type.

use std::path::PathBuf;

/// Everything that can go wrong while writing a table or drawing a plot.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing `path` failed.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The plotting backend failed (font, encoder, drawing).
    #[error("plot error: {0}")]
    Plot(String),
    /// The caller passed inconsistent or unusable input (shape mismatch, empty data, bad extension).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

/// Result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An [`Error::Io`] for `path`.
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// An [`Error::InvalidArgument`] from anything printable.
    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        Error::InvalidArgument(msg.into())
    }
}
