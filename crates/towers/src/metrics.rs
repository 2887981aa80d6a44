//! JSON-lines metrics (one object per line, appended; a resumed run continues the same file).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::io_err;
use crate::Result;

/// Appends JSON objects, one per line, to a file (or nowhere).
#[derive(Debug)]
pub struct MetricsLog {
    file: Option<(PathBuf, File)>,
}

impl MetricsLog {
    /// Appends to `path` (created if missing).
    pub fn open(path: &Path) -> Result<Self> {
        let f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(io_err(path))?;
        Ok(Self {
            file: Some((path.to_path_buf(), f)),
        })
    }

    /// A log that drops everything.
    pub fn none() -> Self {
        Self { file: None }
    }

    /// Writes one line.
    pub fn log(&mut self, v: &Value) -> Result<()> {
        if let Some((p, f)) = &mut self.file {
            writeln!(f, "{v}").map_err(io_err(p))?;
        }
        Ok(())
    }
}
