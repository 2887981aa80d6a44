//! JSON-lines metrics (one object per line, appended; a resumed run continues the same file).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::io_err;
use crate::Result;

/// File name of a training's metrics log in its output folder.
pub const METRICS_FILE: &str = "metrics.jsonl";

/// The newest update a training logged: its metrics log gets a line every few updates, so it
/// runs ahead of the last checkpoint (from which a stopped training resumes).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LoggedUpdate {
    /// Updates done.
    pub step: u64,
    /// Token positions consumed.
    pub tokens: u64,
    /// The schedule's total updates, where known (logs written before 27 Nov 2026 do not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_steps: Option<u64>,
    /// Tokens per second of the logging call so far: wall clock since that call (the process's
    /// start or resume) began, its validations and checkpoints included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_s: Option<f64>,
}

/// The text of the metrics log at `path`; `None` when there is none.
fn read_log(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(path)(e)),
    }
}

/// The newest update line (one with `step` and `tokens`) of the metrics log at `path`; `None`
/// when there is no log or no such line yet. A line that does not parse (one being written) is
/// passed over. Parsed from the end: a status asks this of every log of a study, often.
pub fn newest_update(path: &Path) -> Result<Option<LoggedUpdate>> {
    Ok(read_log(path)?.and_then(|text| {
        text.lines()
            .rev()
            .find_map(|l| serde_json::from_str::<LoggedUpdate>(l).ok())
    }))
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_update_line_is_found_past_final_and_half_written_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(METRICS_FILE);
        assert_eq!(newest_update(&path).unwrap(), None, "no log yet");
        let mut log = MetricsLog::open(&path).unwrap();
        // An older line without the total, then one with it.
        log.log(&serde_json::json!({"loss": 5.0, "step": 10, "tokens": 20_480}))
            .unwrap();
        assert_eq!(
            newest_update(&path).unwrap().map(|u| u.total_steps),
            Some(None)
        );
        log.log(&serde_json::json!({
            "loss": 5.0, "step": 20, "tokens": 40_960, "total_steps": 977, "tokens_per_s": 250.5
        }))
        .unwrap();
        log.log(&serde_json::json!({"final": true, "step": 20, "val_loss": 5.1}))
            .unwrap();
        let want = LoggedUpdate {
            step: 20,
            tokens: 40_960,
            total_steps: Some(977),
            tokens_per_s: Some(250.5),
        };
        assert_eq!(newest_update(&path).unwrap(), Some(want));
        // A line cut off while being written is passed over.
        std::fs::write(
            &path,
            std::fs::read_to_string(&path).unwrap() + "{\"loss\": 4.9, \"step\": 3",
        )
        .unwrap();
        assert_eq!(newest_update(&path).unwrap(), Some(want));
        // A folder where the log should be is an error naming it.
        let err = newest_update(dir.path()).unwrap_err().to_string();
        assert!(err.contains(&dir.path().display().to_string()), "{err}");
    }
}
