//! One writer per folder: a run folder's `writer.lock` and a study data folder's
//! `create.lock`, taken with [`files::FolderLock`] (std's file locks: the OS releases a lock
//! when its process dies, so nothing is ever taken over). A second writer on a run folder is
//! refused ([`ExperimentError::Locked`] naming the holder); processes creating one study's data
//! folder together wait for each other.

use std::path::Path;
use std::time::Duration;

use crate::{ExperimentError, Result};

pub use files::FolderLock;

/// File name of a run folder's writer lock.
pub const WRITER_LOCK: &str = "writer.lock";
/// File name of a study data folder's creation lock.
pub const DATA_LOCK: &str = "create.lock";

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
