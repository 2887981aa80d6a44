//! The crate's one error type.

use std::path::{Path, PathBuf};

/// Result type of this crate.
pub type Result<T, E = FilesError> = std::result::Result<T, E>;

/// Everything that can go wrong writing a file atomically or taking a [`crate::FolderLock`];
/// every variant names the path concerned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FilesError {
    /// Writing `path` whole failed (creating, writing, syncing or renaming its temporary file);
    /// `path` is left as it was.
    #[error("could not write {}: {source}", path.display())]
    Write {
        /// The file that was to be written (not its temporary file).
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A value could not be serialized to JSON for `path` (nothing was written).
    #[error("could not serialize {} as JSON: {source}", path.display())]
    Json {
        /// The file that was to be written.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: serde_json::Error,
    },
    /// The lock file at `path` could not be opened, locked or written.
    #[error("could not take the lock {}: {source}", path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Another holder (another process, or another open file of this one) holds the lock at
    /// `path`.
    #[error("{what} is locked by {holder} (lock file {}); wait for it or stop it", path.display())]
    Locked {
        /// The lock file.
        path: PathBuf,
        /// What the lock guards, as the caller named it (e.g. "run").
        what: String,
        /// The holder, as its lock file names it (e.g. "process 4242 on host gpu1 since
        /// 2025-06-01T12:00:00Z"), or "another process" when the file names none.
        holder: String,
    },
}

impl FilesError {
    /// The path the error concerns: the target of a write, or the lock file.
    pub fn path(&self) -> &Path {
        match self {
            Self::Write { path, .. }
            | Self::Json { path, .. }
            | Self::Lock { path, .. }
            | Self::Locked { path, .. } => path,
        }
    }

    /// The error as a path and an [`std::io::Error`], for crates whose own error has an
    /// I/O variant: the underlying error of [`FilesError::Write`] and [`FilesError::Lock`]
    /// as it is, a JSON error as [`std::io::ErrorKind::InvalidData`], and a refusal
    /// ([`FilesError::Locked`]) as [`std::io::ErrorKind::WouldBlock`] carrying its sentence.
    pub fn into_io(self) -> (PathBuf, std::io::Error) {
        match self {
            Self::Write { path, source } | Self::Lock { path, source } => (path, source),
            Self::Json { path, source } => (path, source.into()),
            locked @ Self::Locked { .. } => {
                let message = locked.to_string();
                let Self::Locked { path, .. } = locked else {
                    unreachable!()
                };
                (
                    path,
                    std::io::Error::new(std::io::ErrorKind::WouldBlock, message),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_names_its_path_and_converts_to_io() {
        let p = PathBuf::from("/x/run.json");
        let locked = FilesError::Locked {
            path: p.clone(),
            what: "run".into(),
            holder: "process 7 on host h since 2025-01-01T00:00:00Z".into(),
        };
        let msg = locked.to_string();
        assert!(
            msg.contains("/x/run.json") && msg.contains("process 7"),
            "{msg}"
        );
        assert_eq!(locked.path(), p);
        let (at, e) = locked.into_io();
        assert_eq!(
            (at.as_path(), e.kind()),
            (p.as_path(), std::io::ErrorKind::WouldBlock)
        );
        assert!(e.to_string().contains("run is locked by process 7"), "{e}");
        let write = FilesError::Write {
            path: p.clone(),
            source: std::io::ErrorKind::StorageFull.into(),
        };
        assert!(write.to_string().contains("/x/run.json"));
        assert_eq!(write.into_io().1.kind(), std::io::ErrorKind::StorageFull);
    }
}
