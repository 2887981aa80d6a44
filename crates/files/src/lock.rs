//! One writer per folder: a lock file held with the operating system's file lock
//! ([`File::try_lock`], `flock` on Unix, `LockFileEx` on Windows).

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{FilesError, Result};

/// How much of a lock file a refusal reads to name its holder.
const HOLDER_MAX_BYTES: u64 = 1024;

/// What a refusal names when the lock file names no holder (the holder has not written it yet,
/// or the file cannot be read).
const UNKNOWN_HOLDER: &str = "another process";

/// An exclusive lock on a lock file (e.g. `run/writer.lock`), for one writer per folder: held
/// until the value is dropped. Of N processes (or open files) taking it together exactly one
/// gets it; the others are refused at once with [`FilesError::Locked`] naming the holder,
/// which the lock file records (process id, host name and when it took the lock). The
/// operating system releases the lock when its holder dies, however it dies, so a lock file
/// left behind is simply taken by the next writer: there are no stale locks. Dropping the
/// value empties the file and unlocks it; the file itself stays.
///
/// The lock is advisory: it keeps out the writers that take it, nothing else. It needs a file
/// system with file locks (a network mount without them gives [`FilesError::Lock`]).
#[derive(Debug)]
pub struct FolderLock {
    path: PathBuf,
    file: File,
}

impl FolderLock {
    /// Takes the lock file at `path` (created if there is none; its folder must exist) for
    /// `what` (what it guards, for the refusal's sentence, e.g. "run"), and records this
    /// process in it. While another holder has it, this is [`FilesError::Locked`] naming
    /// `path`, `what` and the holder as its file names it; a file that cannot be opened or
    /// locked is [`FilesError::Lock`].
    pub fn acquire(path: &Path, what: &str) -> Result<Self> {
        let failed = |source| FilesError::Lock {
            path: path.to_path_buf(),
            source,
        };
        let file = match OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
        {
            Ok(f) => f,
            // Another user's lock file: held (then the refusal names its holder), or not ours.
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return match File::open(path).map(|f| f.try_lock()) {
                    Ok(Err(TryLockError::WouldBlock)) => Err(refusal(path, what)),
                    _ => Err(failed(e)),
                };
            }
            Err(e) => return Err(failed(e)),
        };
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Err(refusal(path, what)),
            Err(TryLockError::Error(e)) => return Err(failed(e)),
        }
        // Freshly opened: the offset is 0, so the holder replaces whatever a dead one left.
        file.set_len(0).map_err(failed)?;
        (&file)
            .write_all(holder_line(SystemTime::now()).as_bytes())
            .map_err(failed)?;
        Ok(Self {
            path: path.to_path_buf(),
            file,
        })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for FolderLock {
    /// Empties the file (so that it names no holder once there is none), then unlocks it.
    fn drop(&mut self) {
        let _ = self.file.set_len(0);
        let _ = self.file.unlock();
    }
}

/// [`FilesError::Locked`] for the lock at `path`, naming the holder its file records.
fn refusal(path: &Path, what: &str) -> FilesError {
    FilesError::Locked {
        path: path.to_path_buf(),
        what: what.to_string(),
        holder: holder_in(path),
    }
}

/// The holder a lock file names (its first KiB, trimmed), or [`UNKNOWN_HOLDER`].
fn holder_in(path: &Path) -> String {
    let mut bytes = Vec::new();
    let read = File::open(path).and_then(|f| f.take(HOLDER_MAX_BYTES).read_to_end(&mut bytes));
    let text = String::from_utf8_lossy(&bytes);
    match (read, text.trim()) {
        (Ok(_), t) if !t.is_empty() => t.to_string(),
        _ => UNKNOWN_HOLDER.to_string(),
    }
}

/// What a holder writes in its lock file: "process <pid> on host <host> since <RFC 3339 UTC>".
fn holder_line(now: SystemTime) -> String {
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    format!(
        "process {} on host {} since {}\n",
        std::process::id(),
        host_name(),
        rfc3339_utc(secs)
    )
}

/// This machine's name, as the kernel and the system know it: `/proc/sys/kernel/hostname`,
/// else `/etc/hostname`, else "unknown" (no environment variable: a library reads none).
fn host_name() -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim().to_string())
        .find(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}

/// Seconds since the Unix epoch as an RFC 3339 UTC time, e.g. `2023-11-14T22:13:20Z` (the
/// proleptic Gregorian calendar; days to a date after Howard Hinnant's `civil_from_days`).
fn rfc3339_utc(secs: u64) -> String {
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3_600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;

    /// Set only in the child process of [`a_lock_held_by_another_process_is_refused_until_it_dies`]:
    /// the lock file it is to hold.
    const CHILD_LOCK_ENV: &str = "LMSPLIT_FILES_TEST_HOLD_LOCK";
    const CHILD_SAYS: &str = "child holds the lock";

    #[test]
    fn a_second_holder_is_refused_naming_the_first_until_it_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("writer.lock");
        let held = FolderLock::acquire(&path, "run").unwrap();
        assert_eq!(held.path(), path);
        let me = format!("process {} on host ", std::process::id());
        assert!(std::fs::read_to_string(&path).unwrap().starts_with(&me));
        // A second open file, in this very process, is refused.
        match FolderLock::acquire(&path, "run") {
            Err(e @ FilesError::Locked { .. }) => {
                let msg = e.to_string();
                let FilesError::Locked {
                    path: p,
                    what,
                    holder,
                } = e
                else {
                    unreachable!()
                };
                assert_eq!((p.as_path(), what.as_str()), (path.as_path(), "run"));
                assert!(
                    holder.starts_with(&me) && holder.contains(" since 20"),
                    "{holder}"
                );
                assert!(msg.contains(&me) && msg.contains("writer.lock"), "{msg}");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        drop(held);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "",
            "names no holder"
        );
        let again = FolderLock::acquire(&path, "run").unwrap();
        assert!(std::fs::read_to_string(again.path())
            .unwrap()
            .starts_with(&me));
    }

    #[test]
    fn a_lock_file_left_behind_is_taken_and_a_nameless_holder_is_another_process() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("writer.lock");
        std::fs::write(&path, "process 1 on host gone since 2020-01-01T00:00:00Z\n").unwrap();
        let held = FolderLock::acquire(&path, "run").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.starts_with(&format!("process {} ", std::process::id())),
            "{text}"
        );
        drop(held);
        // A holder that has not written its file yet.
        let other = File::open(&path).unwrap();
        other.lock().unwrap();
        match FolderLock::acquire(&path, "study data") {
            Err(FilesError::Locked { holder, .. }) => assert_eq!(holder, UNKNOWN_HOLDER),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_lock_in_a_missing_folder_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no/writer.lock");
        match FolderLock::acquire(&path, "run") {
            Err(FilesError::Lock { path: p, source }) => {
                assert_eq!(p, path);
                assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
            }
            other => panic!("{other:?}"),
        }
    }

    /// Runs only as the child of the test below (otherwise returns at once): takes the lock,
    /// says so, and waits to be killed.
    #[test]
    fn child_process_holding_a_lock() {
        let Some(path) = std::env::var_os(CHILD_LOCK_ENV) else {
            return;
        };
        let _held = FolderLock::acquire(Path::new(&path), "run").unwrap();
        println!("{CHILD_SAYS}");
        std::io::stdout().flush().unwrap();
        // Killed long before (bounded, should the parent fail to kill it).
        std::thread::sleep(std::time::Duration::from_secs(60));
    }

    #[test]
    fn a_lock_held_by_another_process_is_refused_until_it_dies() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("writer.lock");
        let test = module_path!().split_once("::").unwrap().1;
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                &format!("{test}::child_process_holding_a_lock"),
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_LOCK_ENV, &path)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        let held = out.lines().any(|l| l.is_ok_and(|l| l.contains(CHILD_SAYS)));
        let refused = FolderLock::acquire(&path, "run");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(held, "the child did not take the lock");
        match refused {
            Err(FilesError::Locked { holder, .. }) => {
                let want = format!("process {} on host ", child.id());
                assert!(holder.starts_with(&want), "{holder}");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        // Killed, it holds nothing: the file it left is taken.
        FolderLock::acquire(&path, "run").unwrap();
    }

    #[test]
    fn times_are_rfc3339_utc() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339_utc(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339_utc(4_102_444_799), "2099-12-31T23:59:59Z");
    }
}
