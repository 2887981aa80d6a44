//! One writer per result file or folder, for every crate that writes results: a lock file held
//! with the operating system's advisory lock (`flock`). Of N processes (or open files) taking
//! it together exactly one gets it, and the kernel releases it when its holder dies, however it
//! dies; the holder removes the file when done. What the file says (who holds it) is the
//! caller's: [`LockFile::replace_content`].

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{Seek, Write};
use std::path::{Path, PathBuf};

/// A held lock file: its flock is held, and the file is removed, until the value is dropped.
#[derive(Debug)]
pub struct LockFile {
    path: PathBuf,
    file: File,
    created: bool,
}

impl LockFile {
    /// Takes the lock at `path`, creating the file if there is none; `Ok(None)` while another
    /// open file holds it. A file left by a holder that died is taken as it is: its content is
    /// the caller's to judge ([`LockFile::created`] says whether there was one).
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
                        Err(e) => return Err(e),
                    }
                }
                Err(e) => return Err(e),
            };
            match file.try_lock() {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => return Ok(None),
                Err(TryLockError::Error(e)) => return Err(e),
            }
            if same_file(&file, path) {
                return Ok(Some(Self {
                    path: path.to_path_buf(),
                    file,
                    created,
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

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces the file's content by `bytes`, synced (e.g. who holds it, for a refusal's
    /// sentence).
    pub fn replace_content(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.file.set_len(0)?;
        self.file.rewind()?;
        self.file.write_all(bytes)?;
        self.file.sync_all()
    }
}

impl Drop for LockFile {
    /// Removes the file while still holding its flock, unless it is no longer this holder's
    /// (removed or replaced by hand); closing the file then releases the lock.
    fn drop(&mut self) {
        if same_file(&self.file, &self.path) {
            let _ = fs::remove_file(&self.path);
        }
    }
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
    fn of_takers_racing_exactly_one_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let start = std::sync::Arc::new(std::sync::Barrier::new(8));
        let takers: Vec<_> = (0..8)
            .map(|_| {
                let (p, start) = (path.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    let got = LockFile::try_take(&p).unwrap();
                    // Held past every other taker's try.
                    std::thread::sleep(std::time::Duration::from_millis(200));
                    got.is_some()
                })
            })
            .collect();
        let won = takers
            .into_iter()
            .map(|t| t.join().unwrap())
            .filter(|&w| w)
            .count();
        assert_eq!(won, 1);
    }
}
