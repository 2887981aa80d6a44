//! Files written whole or not at all, for every crate that writes results: the new content goes
//! to a uniquely named temporary file beside the target (so concurrent writers never share one),
//! is synced, and is renamed over the target; a reader in another process sees the old file or
//! the new one, and a failed or killed write leaves the old file and at most a `.tmp` file.

use std::io::Write;
use std::path::Path;

/// Replaces `path` by the file that `write` writes at the temporary path it is given (for APIs
/// that save to a path). Errors from creating, syncing or renaming the file go through `io`
/// with the path concerned; on any failure the temporary file is removed and `path` is left as
/// it was.
pub fn replace_file_with<E>(
    path: &Path,
    write: impl FnOnce(&Path) -> Result<(), E>,
    io: impl Fn(&Path, std::io::Error) -> E,
) -> Result<(), E> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    // `.<name>.XXXXXX.tmp`: hidden, unique, and recognisably a temporary of `path`.
    let prefix = format!(".{name}.");
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).suffix(".tmp");
    // tempfile creates 0600 files; results are read by others (a shared run folder), so ask
    // for what `File::create` gets: 0666 less the umask.
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
    let tmp = builder
        .tempfile_in(dir)
        .map_err(|e| io(dir, e))?
        .into_temp_path();
    // `tmp` removes the file when dropped, so every early return below cleans up.
    write(&tmp)?;
    std::fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(|e| io(&tmp, e))?;
    tmp.persist(path).map_err(|e| io(path, e.error))?;
    // The rename itself reaches the disk with the folder (best effort: not every file system
    // can sync a directory).
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Replaces `path` by `bytes` ([`replace_file_with`]), written in pieces of 1 MiB as any large
/// write reaches the disk.
pub fn replace_file<E>(
    path: &Path,
    bytes: &[u8],
    io: impl Fn(&Path, std::io::Error) -> E,
) -> Result<(), E> {
    replace_file_with(
        path,
        |tmp| {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(tmp)
                .map_err(|e| io(tmp, e))?;
            bytes
                .chunks(1 << 20)
                .try_for_each(|piece| f.write_all(piece))
                .map_err(|e| io(tmp, e))
        },
        &io,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    type Failure = (std::path::PathBuf, std::io::ErrorKind);

    fn io(p: &Path, e: std::io::Error) -> Failure {
        (p.to_path_buf(), e.kind())
    }

    fn leftovers(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect()
    }

    #[test]
    fn replaces_whole_files_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.json");
        replace_file(&p, b"first", io).unwrap();
        replace_file(&p, b"second, longer", io).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"second, longer");
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn a_failed_write_keeps_the_old_file_and_removes_the_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.json");
        replace_file(&p, b"old", io).unwrap();
        let failed = replace_file_with(
            &p,
            |tmp| {
                // Half a file, then the failure.
                std::fs::write(tmp, b"ha").unwrap();
                Err((tmp.to_path_buf(), std::io::ErrorKind::StorageFull))
            },
            io,
        );
        let (at, kind) = failed.unwrap_err();
        assert_eq!(kind, std::io::ErrorKind::StorageFull);
        assert!(at
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(".a.json."));
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        assert!(leftovers(dir.path()).is_empty());
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
        replace_file(&p, b"x", io).unwrap();
        assert_eq!(
            mode(&p),
            mode(&plain),
            "tempfile's 0600 leaked into a result file"
        );
        // and a replacement of an existing file the same
        replace_file(&p, b"y", io).unwrap();
        assert_eq!(mode(&p), mode(&plain));
    }

    #[test]
    fn a_missing_folder_is_named_in_the_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("no/such/a.json");
        let (at, kind) = replace_file(&p, b"x", io).unwrap_err();
        assert_eq!(
            (at.as_path(), kind),
            (p.parent().unwrap(), std::io::ErrorKind::NotFound)
        );
    }
}
