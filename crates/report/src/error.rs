//! The crate's error type.

use std::path::PathBuf;

/// Everything that can go wrong while writing a table or drawing a plot.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
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
pub type Result<T, E = ReportError> = std::result::Result<T, E>;

impl From<files::FilesError> for ReportError {
    /// A failed atomic write ([`files`]) as a [`ReportError::Io`] naming the file.
    fn from(e: files::FilesError) -> Self {
        let (path, source) = e.into_io();
        Self::Io { path, source }
    }
}

impl ReportError {
    /// A [`ReportError::Io`] for `path`.
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }

    /// A [`ReportError::InvalidArgument`] from anything printable.
    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        Self::InvalidArgument(msg.into())
    }
}
