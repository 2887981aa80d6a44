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
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| CorpusError::io(dir, e))?;
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
