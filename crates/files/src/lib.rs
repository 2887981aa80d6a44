//! `files`: the file handling every lmsplit crate shares.
//!
//! - Writes whole or not at all: [`write_atomic`] (bytes), [`write_atomic_with`] (a streamed
//!   writer), [`write_json_atomic`] (pretty JSON) and [`replace_with`] (an API that saves to a
//!   path, e.g. safetensors). The new content goes to a uniquely named hidden temporary file
//!   beside the target (`.<name>.XXXXXX.tmp`), is synced to disk and renamed over the target:
//!   a reader in another process sees the old file or the new one, and a failed or killed write
//!   leaves the old file and at most that temporary file.
//! - One writer per folder: [`FolderLock`], an exclusive lock on a lock file held with the
//!   operating system's file lock ([`std::fs::File::try_lock`]). The kernel releases it when
//!   its holder dies, however it dies, so there are no stale locks to take over; a refusal
//!   ([`FilesError::Locked`]) names the holder the lock file records.
//!
//! Every error is a [`FilesError`] naming the path concerned.

#![deny(missing_docs)]

mod atomic;
mod error;
mod lock;

pub use atomic::{replace_with, write_atomic, write_atomic_with, write_json_atomic};
pub use error::{FilesError, Result};
pub use lock::FolderLock;

/// The README's Rust blocks, compiled as doctests so that its examples stay true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
