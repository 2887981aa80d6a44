//! One writer per result file or folder, for every crate that writes results: a lock file held
//! with the operating system's advisory lock (`flock`). Of N processes (or open files) taking
//! it together exactly one gets it, and the kernel releases it when its holder dies, however it
//! dies; the holder removes the file when done. What the file says (who holds it) is the
//! caller's: [`LockFile::replace_content`], and so is judging what a file it did not create
//! says (a holder that takes no flock: an older build, or a mount without flock support, where
//! only the exclusive creation of the file decides, as before flocks were used).

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{Seek, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a taker that created the file waits for a taker that opened it just before and
/// holds its flock while it reads it (then lets go, finding it new).
const CREATOR_WAIT: Duration = Duration::from_secs(1);

/// A taken lock file: its flock is held (where the mount supports flocks) until the value is
/// dropped; the file is removed then if this value created it or wrote its content.
#[derive(Debug)]
pub struct LockFile {
    path: PathBuf,
    file: File,
    created: bool,
    flocked: bool,
    claimed: bool,
}

impl LockFile {
    /// Takes the lock at `path`, creating the file if there is none; `Ok(None)` while another
    /// open file holds it. A file left by a holder that died is taken as it is: its content is
    /// the caller's to judge ([`LockFile::created`] says whether there was one). On a mount
    /// without flock support the lock is the exclusive creation alone: a file that was there is
    /// taken with [`LockFile::flocked`] false, for its content to decide.
    pub fn try_take(path: &Path) -> std::io::Result<Option<Self>> {
        let opts = || {
            let mut o = OpenOptions::new();
            o.read(true).write(true);
            o
        };
        // A few rounds: a holder removes its file before its flock goes, so a flock won on a
        // file that is no longer at `path` is worth nothing; open the new one.
        for _ in 0..8 {
            let (file, created) = match opts().create_new(true).open(path) {
                Ok(f) => (f, true),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    match opts().open(path) {
                        Ok(f) => (f, false),
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                        // Another user's lock file: held, or not ours to take.
                        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                            return match File::open(path).map(|f| f.try_lock()) {
                                Ok(Err(TryLockError::WouldBlock)) => Ok(None),
                                _ => Err(e),
                            };
                        }
                        Err(e) => return Err(e),
                    }
                }
                Err(e) => return Err(e),
            };
            let flocked = match lock(&file, created) {
                Ok(Some(())) => true,
                Ok(None) => return Ok(None),
                Err(e) if no_flock_here(&e) => false,
                Err(e) => {
                    if created {
                        let _ = fs::remove_file(path);
                    }
                    return Err(e);
                }
            };
            if same_file(&file, path) {
                return Ok(Some(Self {
                    path: path.to_path_buf(),
                    file,
                    created,
                    flocked,
                    claimed: false,
                }));
            }
        }
        Err(std::io::Error::other(format!(
            "the lock file {} was replaced eight times while it was being taken",
            path.display()
        )))
    }

    /// Whether this call created the file (then its empty content is this holder's, not one
    /// left by another).
    pub fn created(&self) -> bool {
        self.created
    }

    /// Whether the flock is held (false on a mount without flock support).
    pub fn flocked(&self) -> bool {
        self.flocked
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether `path` still names the file this value holds (not removed or replaced since).
    pub fn is_at_path(&self) -> bool {
        same_file(&self.file, &self.path)
    }

    /// Replaces the file's content by `bytes`, synced (e.g. who holds it, for a refusal's
    /// sentence); from then on the file is this holder's, removed when the value is dropped.
    pub fn replace_content(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.claimed = true;
        self.file.set_len(0)?;
        self.file.rewind()?;
        self.file.write_all(bytes)?;
        self.file.sync_all()
    }
}

impl Drop for LockFile {
    /// Removes the file while still holding its flock, when this value created it or wrote it
    /// and it is still at its path; a file taken and left unclaimed (its content named a live
    /// holder that takes no flock) stays. Closing the file then releases the lock.
    fn drop(&mut self) {
        if (self.created || self.claimed) && self.is_at_path() {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// The flock of `file`: `Ok(None)` while another open file holds it. The taker that created
/// the file waits a moment for one that opened it just before and is reading it.
fn lock(file: &File, created: bool) -> std::io::Result<Option<()>> {
    let since = Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(Some(())),
            Err(TryLockError::WouldBlock) if created && since.elapsed() < CREATOR_WAIT => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(TryLockError::WouldBlock) => return Ok(None),
            Err(TryLockError::Error(e)) => return Err(e),
        }
    }
}

/// Whether a flock failed because the mount does not support flocks (ENOSYS, EOPNOTSUPP,
/// ENOLCK: Lustre without `-o flock`, NFS mounted `nolock`, some FUSE file systems).
fn no_flock_here(e: &std::io::Error) -> bool {
    const ENOLCK: i32 = 37;
    e.kind() == std::io::ErrorKind::Unsupported
        || (cfg!(target_os = "linux") && e.raw_os_error() == Some(ENOLCK))
}

/// Whether `path` still names the file that `file` has open (the same device and inode).
fn same_file(file: &File, path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (file.metadata(), fs::metadata(path)) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = file;
        path.exists()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_the_file_goes_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let mut held = LockFile::try_take(&path).unwrap().expect("free");
        assert!(held.created());
        held.replace_content(b"123\n").unwrap();
        // A second open file, in this very process, is refused.
        assert!(LockFile::try_take(&path).unwrap().is_none());
        assert_eq!(fs::read(&path).unwrap(), b"123\n");
        drop(held);
        assert!(!path.exists(), "the lock file outlived its holder");
        assert!(LockFile::try_take(&path).unwrap().is_some());
    }

    #[test]
    fn a_file_left_unlocked_is_taken_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        fs::write(&path, b"left by a holder that died").unwrap();
        let mut held = LockFile::try_take(&path).unwrap().expect("nobody holds it");
        assert!(!held.created());
        assert_eq!(fs::read(&path).unwrap(), b"left by a holder that died");
        held.replace_content(b"mine").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"mine");
    }

    #[test]
    fn a_file_taken_and_left_unclaimed_stays_for_its_holder() {
        // Its content named a live holder that takes no flock (an older build): the taker
        // refuses, and that holder's file must outlive the refusal.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        fs::write(&path, b"a live holder without a flock").unwrap();
        let taken = LockFile::try_take(&path).unwrap().unwrap();
        assert!(!taken.created() && taken.flocked());
        drop(taken);
        assert_eq!(fs::read(&path).unwrap(), b"a live holder without a flock");
        // A file this value created is its own, written or not.
        let other = dir.path().join("y.lock");
        drop(LockFile::try_take(&other).unwrap().unwrap());
        assert!(!other.exists());
    }

    #[test]
    fn a_creator_waits_out_a_taker_that_opened_its_file_first() {
        // The taker that opened the fresh file first holds its flock while it reads the (empty)
        // file, then lets go; the creator gets it rather than both being refused.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let fresh = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        let reader = File::open(&path).unwrap();
        reader.lock().unwrap();
        let let_go = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(reader);
        });
        assert_eq!(lock(&fresh, true).unwrap(), Some(()));
        let_go.join().unwrap();
        // Not the creator: refused at once.
        drop(fresh);
        let (a, b) = (File::open(&path).unwrap(), File::open(&path).unwrap());
        a.try_lock().unwrap();
        let since = Instant::now();
        assert_eq!(lock(&b, false).unwrap(), None);
        assert!(
            since.elapsed() < CREATOR_WAIT,
            "a taker that did not create it waited"
        );
    }

    #[test]
    fn a_lock_file_replaced_by_hand_is_not_removed_by_the_old_holder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let held = LockFile::try_take(&path).unwrap().unwrap();
        fs::remove_file(&path).unwrap();
        let next = LockFile::try_take(&path)
            .unwrap()
            .expect("a new file, a new lock");
        drop(held);
        assert!(
            path.exists(),
            "the old holder removed the new holder's file"
        );
        drop(next);
        assert!(!path.exists());
    }

    #[test]
    fn of_takers_racing_at_most_one_holds_it_at_a_time() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let start = std::sync::Arc::new(std::sync::Barrier::new(8));
        let (now, most) = (
            std::sync::Arc::new(AtomicUsize::new(0)),
            std::sync::Arc::new(AtomicUsize::new(0)),
        );
        let takers: Vec<_> = (0..8)
            .map(|_| {
                let (p, start, now, most) =
                    (path.clone(), start.clone(), now.clone(), most.clone());
                std::thread::spawn(move || {
                    start.wait();
                    let Some(mut held) = LockFile::try_take(&p).unwrap() else {
                        return false;
                    };
                    let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(n, Ordering::SeqCst);
                    held.replace_content(b"mine").unwrap();
                    std::thread::sleep(Duration::from_millis(50));
                    now.fetch_sub(1, Ordering::SeqCst);
                    true
                })
            })
            .collect();
        let won = takers
            .into_iter()
            .map(|t| t.join().unwrap())
            .filter(|&w| w)
            .count();
        assert!(won >= 1);
        assert_eq!(most.load(Ordering::SeqCst), 1, "two takers held it at once");
    }
}
