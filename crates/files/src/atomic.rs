//! Files written whole or not at all: the new content goes to a uniquely named hidden temporary
//! file beside the target (so concurrent writers never share one), is synced to disk, and is
//! renamed over the target.

use std::io::{BufWriter, Write};
use std::path::Path;

use crate::error::{FilesError, Result};

/// Writes `bytes` to `path` whole or not at all (see [`write_atomic_with`]).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic_with(path, |w| w.write_all(bytes))
}

/// Writes `value` to `path` as pretty JSON ending in a newline, whole or not at all (see
/// [`write_atomic_with`]); a value that cannot be serialized is [`FilesError::Json`] and
/// writes nothing.
pub fn write_json_atomic<T: serde::Serialize + ?Sized>(path: &Path, value: &T) -> Result<()> {
    let mut text = serde_json::to_vec_pretty(value).map_err(|source| FilesError::Json {
        path: path.to_path_buf(),
        source,
    })?;
    text.push(b'\n');
    write_atomic(path, &text)
}

/// Replaces `path` by what `write` writes (through a buffer) into a hidden temporary file
/// beside it (`.<name>.XXXXXX.tmp`), which is synced to disk and then renamed over `path`, so a
/// reader sees the old file or the new one. On any failure, `write`'s included, the temporary
/// file is removed, `path` is left as it was, and the error is [`FilesError::Write`] naming
/// `path`. A killed process leaves the old file and at most the temporary one.
pub fn write_atomic_with(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    let failed = |source| FilesError::Write {
        path: path.to_path_buf(),
        source,
    };
    let dir = folder_of(path);
    let mut tmp = temporary_beside(path, dir)?;
    let written = {
        let mut w = BufWriter::new(tmp.as_file_mut());
        write(&mut w).and_then(|()| w.flush())
    };
    written.map_err(failed)?;
    tmp.as_file().sync_all().map_err(failed)?;
    // A failed rename drops (and so removes) the temporary file.
    tmp.persist(path).map_err(|e| failed(e.error))?;
    sync_folder(dir);
    Ok(())
}

/// Replaces `path` by the file that `write` writes at the temporary path it is given, for APIs
/// that save to a path (e.g. safetensors, tokenizers): the temporary file (hidden, beside
/// `path`, already created and empty) is synced and renamed over `path` once `write` returns
/// `Ok`. `write`'s error is returned as it is; this crate's own failures (creating, syncing or
/// renaming the temporary file) are [`FilesError::Write`] naming `path`, converted into the
/// caller's error by `From`. On any failure the temporary file is removed and `path` is left
/// as it was.
pub fn replace_with<E: From<FilesError>>(
    path: &Path,
    write: impl FnOnce(&Path) -> Result<(), E>,
) -> Result<(), E> {
    let failed = |source| FilesError::Write {
        path: path.to_path_buf(),
        source,
    };
    let dir = folder_of(path);
    // `tmp` removes the file when dropped, so every early return below cleans up.
    let tmp = temporary_beside(path, dir)?.into_temp_path();
    write(&tmp)?;
    // Write access: Windows flushes only a handle opened for writing.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(failed)?;
    tmp.persist(path).map_err(|e| failed(e.error))?;
    sync_folder(dir);
    Ok(())
}

/// The folder `path` is in (`.` for a bare file name).
fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// A new empty temporary file `.<name>.XXXXXX.tmp` in `dir`: hidden, unique, recognisably a
/// temporary of `path`, and with the mode `File::create` gives.
fn temporary_beside(path: &Path, dir: &Path) -> Result<tempfile::NamedTempFile> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let prefix = format!(".{name}.");
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).suffix(".tmp");
    // tempfile creates 0600 files; results are read by others (a shared run folder), so ask
    // for what `File::create` gets: 0666 less the umask.
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
    builder
        .tempfile_in(dir)
        .map_err(|source| FilesError::Write {
            path: path.to_path_buf(),
            source,
        })
}

/// Syncs the folder so that the rename itself reaches the disk (best effort: not every file
/// system, nor Windows, can sync a folder).
fn sync_folder(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leftovers(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect()
    }

    /// A caller's error type, as a crate with its own error would have.
    #[derive(Debug)]
    enum Caller {
        Files(FilesError),
        Mine(std::path::PathBuf),
    }

    impl From<FilesError> for Caller {
        fn from(e: FilesError) -> Self {
            Caller::Files(e)
        }
    }

    #[test]
    fn replaces_whole_files_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.json");
        write_atomic(&p, b"first").unwrap();
        write_atomic(&p, b"second, longer").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"second, longer");
        write_atomic(&p, b"short").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"short");
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn the_folder_of_a_bare_file_name_is_the_current_one() {
        // Only the folder rule: a relative path with no parent is `.`.
        assert_eq!(folder_of(Path::new("a.json")), Path::new("."));
        assert_eq!(folder_of(Path::new("d/a.json")), Path::new("d"));
    }

    #[test]
    fn json_is_pretty_and_ends_in_a_newline() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.json");
        write_json_atomic(&p, &serde_json::json!({"a": [1, 2]})).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(text, "{\n  \"a\": [\n    1,\n    2\n  ]\n}\n");
        // A value JSON cannot hold: refused naming the file, nothing written.
        let q = dir.path().join("b.json");
        let bad = std::collections::HashMap::from([((1, 2), 3)]);
        match write_json_atomic(&q, &bad) {
            Err(FilesError::Json { path, .. }) => assert_eq!(path, q),
            other => panic!("{other:?}"),
        }
        assert!(!q.exists());
    }

    #[test]
    fn a_failed_write_names_the_path_and_keeps_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.json");
        write_atomic(&p, b"old").unwrap();
        let failed = write_atomic_with(&p, |w| {
            // Half a file, then the failure.
            w.write_all(b"ha")?;
            Err(std::io::ErrorKind::StorageFull.into())
        });
        match failed {
            Err(FilesError::Write { path, source }) => {
                assert_eq!(path, p);
                assert_eq!(source.kind(), std::io::ErrorKind::StorageFull);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn a_failed_save_to_a_path_keeps_the_old_file_and_removes_the_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.json");
        write_atomic(&p, b"old").unwrap();
        let failed = replace_with(&p, |tmp| {
            std::fs::write(tmp, b"ha").unwrap();
            Err(Caller::Mine(tmp.to_path_buf()))
        });
        let Err(Caller::Mine(at)) = failed else {
            panic!("{failed:?}")
        };
        let name = at.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with(".a.json.") && name.ends_with(".tmp"),
            "{name}"
        );
        assert_eq!(at.parent(), Some(dir.path()));
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        assert!(leftovers(dir.path()).is_empty());
        // and a save that succeeds replaces it
        replace_with(&p, |tmp| {
            std::fs::write(tmp, b"new").map_err(|_| Caller::Mine(p.clone()))
        })
        .unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn a_missing_folder_is_a_write_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("no/such/a.json");
        match write_atomic(&p, b"x") {
            Err(FilesError::Write { path, source }) => {
                assert_eq!(path, p);
                assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
            }
            other => panic!("{other:?}"),
        }
        match replace_with(&p, |_| -> Result<(), Caller> {
            panic!("no temporary file")
        }) {
            Err(Caller::Files(e)) => assert_eq!(e.path(), p),
            other => panic!("{other:?}"),
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_replaced_file_gets_the_mode_a_created_file_gets() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let plain = dir.path().join("plain");
        std::fs::File::create(&plain).unwrap();
        let p = dir.path().join("a.json");
        write_atomic(&p, b"x").unwrap();
        assert_eq!(
            mode(&p),
            mode(&plain),
            "tempfile's 0600 leaked into a result file"
        );
        // and a replacement of an existing file the same, by either way of writing
        write_atomic(&p, b"y").unwrap();
        assert_eq!(mode(&p), mode(&plain));
        replace_with(&p, |tmp| {
            std::fs::write(tmp, b"z").map_err(|source| FilesError::Write {
                path: tmp.to_path_buf(),
                source,
            })
        })
        .unwrap();
        assert_eq!(mode(&p), mode(&plain));
    }
}
