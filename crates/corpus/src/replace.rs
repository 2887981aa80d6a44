//! Files written whole or not at all: into a temporary file beside the target (named uniquely by
//! `tempfile`, so concurrent writers of one cache file never share one), then renamed over it, so
//! a reader in another process of the same study sees the old file or the new one.

use std::io::{BufWriter, Write};
use std::path::Path;

use crate::error::{CorpusError, Result};

/// Replaces `path` by what `write` writes; on any failure the temporary file is removed and
/// `path` is left as it was.
pub(crate) fn replace_file(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<&mut std::fs::File>) -> std::io::Result<()>,
) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut builder = tempfile::Builder::new();
    // tempfile creates 0600 files; caches are shared by a study's readers, so ask for what
    // `File::create` gets: 0666 less the umask.
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
    let mut tmp = builder
        .tempfile_in(dir)
        .map_err(|e| CorpusError::io(dir, e))?;
    let written = {
        let mut w = BufWriter::new(tmp.as_file_mut());
        write(&mut w).and_then(|()| w.flush())
    };
    written.map_err(|e| CorpusError::io(tmp.path(), e))?;
    // A failed rename drops (and so removes) the temporary file.
    tmp.persist(path)
        .map(drop)
        .map_err(|e| CorpusError::io(path, e.error))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_replaced_file_gets_the_mode_a_created_file_gets() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let plain = dir.path().join("plain");
        std::fs::File::create(&plain).unwrap();
        let p = dir.path().join("counts.json");
        replace_file(&p, |w| w.write_all(b"{}")).unwrap();
        assert_eq!(
            mode(&p),
            mode(&plain),
            "tempfile's 0600 leaked into a cache file"
        );
    }
}
