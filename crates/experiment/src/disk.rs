//! The files of run and study folders: JSON read and written whole or not at all (through a
//! temporary file and a rename, [`files::write_atomic`]), files saved by APIs that write to a
//! path, and waiting for a folder's lock ([`files::FolderLock`]: one writer per run folder, and
//! processes creating one study's data folder wait for each other).

use std::path::Path;
use std::time::Duration;

use files::FolderLock;

use crate::error::{io_at, ExperimentError, Result};

/// File name of a run folder's writer lock (one writer per run folder, a
/// [`files::FolderLock`]).
pub const WRITER_LOCK: &str = "writer.lock";
/// File name of a study data folder's creation lock (processes creating it wait for each
/// other).
pub const DATA_LOCK: &str = "create.lock";

/// Reads and parses a JSON file.
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let bytes = std::fs::read(path).map_err(io_at(path))?;
    serde_json::from_slice(&bytes).map_err(|source| ExperimentError::Json {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes `value` as pretty JSON through a temporary file (unique, synced to disk) and a rename
/// ([`files::write_atomic`]), so that a killed process never leaves half a file and a reader
/// sees the old file or the new one. A failed write removes the temporary file and is
/// [`ExperimentError::WriteFailed`] naming `path`, the previous file untouched.
pub(crate) fn write_json_atomic<T: serde::Serialize>(path: &Path, value: &T) -> Result<()> {
    let text = serde_json::to_vec_pretty(value).map_err(|source| ExperimentError::Json {
        path: path.to_path_buf(),
        source,
    })?;
    write_bytes_atomic(path, &text)
}

/// Writes `bytes` to `path` whole or not at all; see [`write_json_atomic`].
pub(crate) fn write_bytes_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    files::write_atomic(path, bytes).map_err(|e| write_failed(path, e))
}

/// Replaces `path` by what `save` writes at a temporary path beside it (for APIs that save to a
/// path: weights, tokenizers), whole or not at all; see [`write_json_atomic`].
pub(crate) fn save_atomic(path: &Path, save: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    files::replace_with(path, save)
}

/// [`ExperimentError::WriteFailed`] naming the target `path` (a lock refusal stays itself).
fn write_failed(path: &Path, e: files::FilesError) -> ExperimentError {
    match e {
        e @ files::FilesError::Locked { .. } => e.into(),
        e => ExperimentError::WriteFailed {
            path: path.to_path_buf(),
            source: e.into_io().1,
        },
    }
}

/// Takes the lock file `path` for `what`, waiting while another process holds it (polling
/// every `poll`); a request on `stop` while waiting is [`ExperimentError::Interrupted`].
pub fn acquire_waiting(
    path: &Path,
    what: &str,
    poll: Duration,
    stop: &towers::StopToken,
) -> Result<FolderLock> {
    loop {
        match FolderLock::acquire(path, what) {
            Err(files::FilesError::Locked { .. }) => {
                if stop.requested() {
                    return Err(ExperimentError::Interrupted(format!(
                        "waiting for the lock {}",
                        path.display()
                    )));
                }
                std::thread::sleep(poll);
            }
            other => return other.map_err(ExperimentError::from),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_writes_replace_whole_files_and_name_the_target_when_they_fail() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("run.json");
        write_json_atomic(&p, &[1, 2]).unwrap();
        save_atomic(&p, |tmp| {
            std::fs::write(tmp, b"[3]").map_err(io_at(tmp))?;
            Ok(())
        })
        .unwrap();
        let back: Vec<u32> = read_json(&p).unwrap();
        assert_eq!(back, [3]);
        // A save that fails half way leaves the old file and no temporary.
        let failed = save_atomic(&p, |tmp| {
            std::fs::write(tmp, b"[4").map_err(io_at(tmp))?;
            Err(ExperimentError::too_little("weights", 0, 1))
        });
        assert!(matches!(failed, Err(ExperimentError::TooLittleData { .. })));
        assert_eq!(read_json::<Vec<u32>>(&p).unwrap(), [3]);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["run.json"]);
        // A folder that is not there: the error names the file that was to be written.
        let missing = dir.path().join("no/run.json");
        match write_json_atomic(&missing, &1) {
            Err(ExperimentError::WriteFailed { path, .. }) => assert_eq!(path, missing),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_second_writer_is_refused_naming_the_holder_and_a_waiter_gets_the_lock_once_freed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(WRITER_LOCK);
        let held = FolderLock::acquire(&path, "run").unwrap();
        let e = ExperimentError::from(FolderLock::acquire(&path, "run").unwrap_err());
        assert!(matches!(e, ExperimentError::Locked { .. }), "{e}");
        assert!(
            e.to_string().contains(&std::process::id().to_string()),
            "{e}"
        );
        let waiter = std::thread::spawn({
            let path = path.clone();
            move || {
                let stop = towers::StopToken::new();
                acquire_waiting(&path, "run", Duration::from_millis(5), &stop).map(|_| ())
            }
        });
        std::thread::sleep(Duration::from_millis(30));
        drop(held);
        waiter.join().unwrap().unwrap();
    }
}
