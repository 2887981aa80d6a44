//! One writer per folder: a lock file naming its holder (PID, host, start time), held with the
//! operating system's advisory lock (`flock`) while the [`FolderLock`] lives and removed when
//! it is dropped.
//!
//! - A run folder has one writer: [`crate::Workspace::ensure_run`] takes `<run>/writer.lock`
//!   ([`WRITER_LOCK`]) with [`FolderLock::acquire`], so a second process on the same run is
//!   refused at once with [`ExperimentError::Locked`] naming the holder.
//! - The shared study `data/` (trained tokenizer, scoring sets) is created under
//!   `data/create.lock` ([`DATA_LOCK`]) with [`FolderLock::acquire_waiting`]: N processes
//!   starting together create it once; the others wait, then read what the first wrote.
//! - A run's phase-1 snapshot has one writer of its heads, `<run>/emergence/step-N/writer.lock`
//!   taken with [`FolderLock::acquire_waiting`] (`crate::snapshots`): the run's own process and
//!   one drawing the curve so far ([`crate::curve_so_far`]) may both reach it; the second waits,
//!   then reads what the first wrote.
//!
//! The flock ([`report::LockFile`]) decides between processes that take the lock together:
//! exactly one holds it, and the kernel releases it when its process dies, however it dies
//! (across nodes only where the shared mount supports flocks; elsewhere the file's exclusive
//! creation and its content decide). The file's content is then checked as it was before
//! flocks were used, so that a holder that takes none (an older build still running) is
//! respected too: a lock file left by a process that died without removing it (SIGKILL, a node
//! crash) is taken over and named ([`FolderLock::took_over`]) when its holder is known gone; on
//! the holder's own host, that is a PID that no longer runs (or is a zombie, or was reused by a
//! process started later: the start time in `/proc/<pid>/stat` is recorded). A lock from another host cannot be checked from here: it is refused, and the
//! error says to remove the file when that job is known gone. Liveness is read from `/proc`
//! (Linux); elsewhere every holder counts as alive.

use std::fs;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::{ExperimentError, Result};

/// File name of a run folder's writer lock.
pub const WRITER_LOCK: &str = "writer.lock";
/// File name of the lock around the creation of a study's shared `data/` files.
pub const DATA_LOCK: &str = "create.lock";

/// An unreadable (e.g. empty) lock file older than this is taken to be left by a process that
/// died between creating and writing it (a younger one may be an older build's, still being
/// written).
const UNREADABLE_STALE_AFTER: Duration = Duration::from_secs(10);

/// Who holds a lock (the lock file's content, one JSON object).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockHolder {
    /// Process id.
    pub pid: u32,
    /// Host name.
    pub host: String,
    /// When the lock was taken (seconds since the Unix epoch).
    pub since_unix: u64,
    /// Linux: the process start time (clock ticks after boot, `/proc/<pid>/stat` field 22),
    /// which tells the holder from a later process that reused its PID.
    pub proc_start: Option<u64>,
}

impl LockHolder {
    /// This process.
    pub fn this_process() -> Self {
        let pid = std::process::id();
        Self {
            pid,
            host: host_name(),
            since_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            proc_start: proc_stat(pid).map(|s| s.1),
        }
    }

    /// When the lock was taken, in UTC (`2026-11-26T16:44:06Z`).
    pub fn since_utc(&self) -> String {
        humantime::format_rfc3339_seconds(
            UNIX_EPOCH + std::time::Duration::from_secs(self.since_unix),
        )
        .to_string()
    }

    /// Whether the holder is known to be gone: on this host, its PID no longer runs (or is a
    /// zombie, or belongs to a process started after the holder). A holder on another host, or
    /// where `/proc` cannot tell, is never known to be gone.
    pub fn is_gone(&self) -> bool {
        if self.host != host_name() || !Path::new("/proc/self/stat").is_file() {
            return false;
        }
        match proc_stat(self.pid) {
            None => true,
            Some((state, start)) => {
                matches!(state, 'Z' | 'X') || self.proc_start.is_some_and(|s| s != start)
            }
        }
    }
}

impl std::fmt::Display for LockHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "process {} on host {} (since {})",
            self.pid,
            self.host,
            self.since_utc()
        )
    }
}

/// A held lock: the lock file exists with this process as its holder until the value is
/// dropped.
#[derive(Debug)]
pub struct FolderLock {
    took_over: Option<String>,
    // Holds the flock; dropping it removes the file and releases the lock.
    file: report::LockFile,
}

impl FolderLock {
    /// Takes the lock at `path` now, or fails with [`ExperimentError::Locked`] naming the
    /// holder; `what` names the folder in that sentence ("run", "study data"). A stale lock
    /// (see the module docs) is taken over and named by [`FolderLock::took_over`].
    pub fn acquire(path: &Path, what: &str) -> Result<Self> {
        Self::take(path, what).map_err(|r| r.error)
    }

    /// [`FolderLock::acquire`], with whether a refusal is worth waiting out: the flock is held
    /// (its holder lives), the holder takes no flock but runs on this host, or this mount has
    /// no flocks. A holder on another host whose flock is free on a mount with flocks (it
    /// died, or its build takes none) may never let go: waiting for it could last forever.
    // The crate's error and a flag, once per attempt: not worth a box.
    #[allow(clippy::result_large_err)]
    fn take(path: &Path, what: &str) -> std::result::Result<Self, Refusal> {
        let me = LockHolder::this_process();
        let io = |source| {
            Refusal::final_(ExperimentError::Io {
                path: path.to_path_buf(),
                source,
            })
        };
        let refused = |held: Held, waitable: bool| Refusal {
            error: locked(path, what, &holder_sentence(held, &me)),
            waitable,
        };
        // A few rounds: a lock let go (its file removed) between our try and our read is free.
        for _ in 0..8 {
            let Some(mut file) = report::LockFile::try_take(path).map_err(io)? else {
                match read_holder(path) {
                    Held::Vanished => continue,
                    // Its holder's flock (or, without flocks, its file) stands.
                    held => return Err(refused(held, true)),
                }
            };
            // Ours alone now: what a file we did not create says is a holder that took no
            // flock (an older build, or a mount without flocks), or one that died. A refusal
            // leaves that holder's file as it is (`LockFile` removes only its own).
            let took_over = match file.created() {
                true => None,
                false => match read_holder(path) {
                    // Removed since (an older build taking over a stale file): again.
                    Held::Vanished => continue,
                    Held::By(h) if h.is_gone() => Some(format!("{h}, no longer running")),
                    Held::By(h) => {
                        // Our flock says its holder let go only where this mount honours
                        // flocks; a live holder on another node of a mount without them
                        // (exclusive creation alone) will let go in time.
                        let waitable = h.host == me.host || !file.flocked();
                        return Err(refused(Held::By(h), waitable));
                    }
                    Held::Unreadable { age } if age >= UNREADABLE_STALE_AFTER => {
                        Some(format!("an unreadable lock file {} s old", age.as_secs()))
                    }
                    Held::Unreadable { .. } => {
                        return Err(Refusal {
                            error: locked(path, what, "a process still writing its lock file"),
                            waitable: true,
                        })
                    }
                },
            };
            let text = serde_json::to_string(&me)
                .map_err(std::io::Error::other)
                .map_err(io)?;
            file.replace_content(text.as_bytes()).map_err(io)?;
            // Replaced meanwhile (an older build's takeover renames a stale file away): ours is
            // then no lock at all.
            if !file.is_at_path() {
                continue;
            }
            return Ok(Self { took_over, file });
        }
        Err(Refusal {
            error: locked(
                path,
                what,
                "processes taking it in turn faster than it could be read",
            ),
            waitable: true,
        })
    }

    /// Like [`FolderLock::acquire`], but while another live process holds the lock, waits for
    /// it (polling every `poll`), calling `on_wait` once with the holder's sentence. A stop
    /// request ([`towers::request_stop`], e.g. SIGTERM) ends the wait with
    /// [`ExperimentError::Interrupted`]. On a mount that honours flocks, a lock file whose
    /// flock is free and whose holder is on another host is refused at once, as by `acquire`:
    /// that holder died (or took no flock), and nothing here can tell whether it will ever
    /// let go.
    pub fn acquire_waiting(
        path: &Path,
        what: &str,
        poll: Duration,
        mut on_wait: impl FnMut(&str),
    ) -> Result<Self> {
        let mut told = false;
        loop {
            match Self::take(path, what) {
                Err(Refusal {
                    error: ExperimentError::Locked { holder, .. },
                    waitable: true,
                }) => {
                    if towers::stop_requested() {
                        return Err(ExperimentError::Interrupted(format!(
                            "waiting for the lock {} held by {holder}",
                            path.display()
                        )));
                    }
                    if !told {
                        on_wait(&holder);
                        told = true;
                    }
                    std::thread::sleep(poll);
                }
                r => return r.map_err(|r| r.error),
            }
        }
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// The stale holder this lock replaced, as a sentence, if it replaced one.
    pub fn took_over(&self) -> Option<&str> {
        self.took_over.as_deref()
    }
}

/// Why a lock was not taken, and whether waiting could change that.
struct Refusal {
    error: ExperimentError,
    waitable: bool,
}

impl Refusal {
    /// A refusal that waiting does not change (an I/O error).
    fn final_(error: ExperimentError) -> Self {
        Self {
            error,
            waitable: false,
        }
    }
}

fn locked(path: &Path, what: &str, holder: &str) -> ExperimentError {
    ExperimentError::Locked {
        path: path.to_path_buf(),
        what: what.to_string(),
        holder: holder.to_string(),
    }
}

/// Who holds the lock, as the refusal says it.
fn holder_sentence(held: Held, me: &LockHolder) -> String {
    match held {
        // Our own PID with our start time: this process. With another start time it is a dead
        // holder whose PID we were given (a restarted container).
        Held::By(h) if h.pid == me.pid && h.host == me.host && h.proc_start == me.proc_start => {
            format!("{h}, this very process")
        }
        Held::By(h) => h.to_string(),
        Held::Unreadable { .. } | Held::Vanished => "a process still writing its lock file".into(),
    }
}

/// What a lock file says.
#[derive(Debug, Clone, PartialEq)]
enum Held {
    By(LockHolder),
    /// Empty or not a holder (a taker between creating and writing it, or a crash then).
    Unreadable {
        age: Duration,
    },
    /// Removed since.
    Vanished,
}

fn read_holder(path: &Path) -> Held {
    // A holder writes right after creating: give it a moment before calling it unreadable.
    for attempt in 0..5 {
        let Ok(bytes) = fs::read(path) else {
            return Held::Vanished;
        };
        if let Ok(h) = serde_json::from_slice::<LockHolder>(&bytes) {
            return Held::By(h);
        }
        if attempt < 4 {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let age = fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .unwrap_or_default();
    Held::Unreadable { age }
}

/// This machine's host name (`/proc/sys/kernel/hostname`, else `$HOSTNAME`, else `localhost`).
pub fn host_name() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "localhost".into())
}

/// State and start time of a process, from `/proc/<pid>/stat`.
fn proc_stat(pid: u32) -> Option<(char, u64)> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid ...`: comm may hold spaces and parentheses; split after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // Fields 4.. follow; the start time is field 22, the 19th after the state.
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The PID of a process that has exited and been reaped.
    fn dead_pid() -> u32 {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        pid
    }

    #[test]
    fn the_start_time_reads_in_utc() {
        let at = |since_unix| LockHolder {
            pid: 1,
            host: "h".into(),
            since_unix,
            proc_start: None,
        };
        assert_eq!(at(0).since_utc(), "1970-01-01T00:00:00Z");
        // The chain's writer of 26 Nov (Python's datetime.fromtimestamp gives the same).
        assert_eq!(at(1_795_711_446).since_utc(), "2026-11-26T16:44:06Z");
        assert_eq!(
            at(1_795_711_446).to_string(),
            "process 1 on host h (since 2026-11-26T16:44:06Z)"
        );
    }

    #[test]
    fn a_second_taker_is_refused_naming_the_holder_until_the_first_drops() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(WRITER_LOCK);
        let held = FolderLock::acquire(&path, "run").unwrap();
        assert!(held.took_over().is_none());
        let err = FolderLock::acquire(&path, "run").unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, ExperimentError::Locked { .. }), "{msg}");
        assert!(
            msg.contains(&format!(
                "process {} on host {}",
                std::process::id(),
                host_name()
            )),
            "{msg}"
        );
        assert!(msg.contains(&path.display().to_string()), "{msg}");
        drop(held);
        assert!(!path.exists(), "the lock outlived its holder");
        drop(FolderLock::acquire(&path, "run").unwrap());
        // A live holder that takes no flock (an older build) is refused, and its file stays.
        let text = serde_json::to_string(&LockHolder::this_process()).unwrap();
        fs::write(&path, &text).unwrap();
        let msg = FolderLock::acquire(&path, "run").unwrap_err().to_string();
        assert!(msg.contains("this very process"), "{msg}");
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            text,
            "the refusal removed its file"
        );
    }

    #[test]
    fn a_stale_lock_of_a_dead_process_is_named_and_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(WRITER_LOCK);
        let dead = LockHolder {
            pid: dead_pid(),
            ..LockHolder::this_process()
        };
        assert!(dead.is_gone());
        fs::write(&path, serde_json::to_string(&dead).unwrap()).unwrap();
        let lock = FolderLock::acquire(&path, "run").unwrap();
        let said = lock.took_over().expect("the stale holder named");
        assert!(said.contains(&format!("process {}", dead.pid)), "{said}");
        // A reused PID (same number, another start time) is a dead holder too.
        let reused = LockHolder {
            proc_start: LockHolder::this_process().proc_start.map(|s| s + 1),
            ..LockHolder::this_process()
        };
        assert!(reused.is_gone());
        // ... and taken over, though the PID is this process's own (restarted with its PID).
        drop(lock);
        fs::write(&path, serde_json::to_string(&reused).unwrap()).unwrap();
        let lock = FolderLock::acquire(&path, "run").unwrap();
        assert!(lock.took_over().is_some());
        // A holder on another host is never judged from here.
        let remote = LockHolder {
            host: format!("{}-elsewhere", host_name()),
            ..dead
        };
        assert!(!remote.is_gone());
        drop(lock);
        fs::write(&path, serde_json::to_string(&remote).unwrap()).unwrap();
        let msg = FolderLock::acquire(&path, "run").unwrap_err().to_string();
        assert!(msg.contains("-elsewhere"), "{msg}");
    }

    #[test]
    fn a_lock_held_by_its_flock_is_refused_whatever_its_file_says() {
        // An old, unreadable file was taken to be a dead taker's; a live taker that holds the
        // flock and has not yet written it is refused instead.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(WRITER_LOCK);
        fs::write(&path, b"").unwrap();
        let held = fs::File::open(&path).unwrap();
        held.lock().unwrap();
        let old = SystemTime::now() - 2 * UNREADABLE_STALE_AFTER;
        fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let msg = FolderLock::acquire(&path, "run").unwrap_err().to_string();
        assert!(msg.contains("still writing its lock file"), "{msg}");
        // Released (its taker died): the same file is taken over, named as it was.
        drop(held);
        let lock = FolderLock::acquire(&path, "run").unwrap();
        let said = lock.took_over().expect("the unreadable file named");
        assert!(said.contains("unreadable lock file"), "{said}");
    }

    #[test]
    fn a_waiting_taker_gets_the_lock_once_the_holder_drops_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(DATA_LOCK);
        let held = FolderLock::acquire(&path, "study data").unwrap();
        let p2 = path.clone();
        let waiter = std::thread::spawn(move || {
            let mut waited = Vec::new();
            let l =
                FolderLock::acquire_waiting(&p2, "study data", Duration::from_millis(10), |h| {
                    waited.push(h.to_string())
                });
            (l.map(|_| ()), waited)
        });
        std::thread::sleep(Duration::from_millis(200));
        drop(held);
        let (got, waited) = waiter.join().unwrap();
        got.unwrap();
        assert_eq!(waited.len(), 1, "told once that it waits: {waited:?}");
    }

    #[test]
    fn a_waiting_taker_does_not_wait_for_a_holder_on_another_host_whose_flock_is_free() {
        // Such a holder died (SIGKILL, a node crash) or takes no flock: nothing tells whether it
        // will ever let go, so the taker is refused at once rather than left waiting forever.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(WRITER_LOCK);
        let remote = LockHolder {
            host: format!("{}-elsewhere", host_name()),
            ..LockHolder::this_process()
        };
        let text = serde_json::to_string(&remote).unwrap();
        fs::write(&path, &text).unwrap();
        let mut waited = 0;
        let err =
            FolderLock::acquire_waiting(&path, "run", Duration::from_millis(10), |_| waited += 1)
                .unwrap_err();
        assert!(
            matches!(&err, ExperimentError::Locked { holder, .. } if holder.contains("-elsewhere")),
            "{err:?}"
        );
        assert_eq!(waited, 0);
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            text,
            "its file was removed"
        );
        // A live flock-less holder on this host (an older build) is waited for, as before.
        let here = serde_json::to_string(&LockHolder::this_process()).unwrap();
        fs::write(&path, &here).unwrap();
        let p2 = path.clone();
        let waiter = std::thread::spawn(move || {
            FolderLock::acquire_waiting(&p2, "run", Duration::from_millis(10), |_| {}).map(|_| ())
        });
        std::thread::sleep(Duration::from_millis(200));
        assert!(!waiter.is_finished(), "it did not wait for a live holder");
        fs::remove_file(&path).unwrap();
        waiter.join().unwrap().unwrap();
    }
}
