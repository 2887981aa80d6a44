//! Files written whole or not at all: into a temporary file beside the target, then renamed
//! over it, so a reader (another process of the same study) sees the old file or the new one.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{CorpusError, Result};

/// A temporary file beside `path`, unique to this process and call: writers of the same cache
/// file (processes of one study, threads of one process) never share one, so each rename moves
/// a whole file into place.
fn tmp_path(path: &Path) -> PathBuf {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{}.{call}.tmp", std::process::id()));
    path.with_file_name(name)
}

/// Replaces `path` by what `write` writes; on any failure the temporary file is removed and
/// `path` is left as it was.
pub(crate) fn replace_file(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> Result<()> {
    let tmp = tmp_path(path);
    let written = std::fs::File::create(&tmp).and_then(|f| {
        let mut w = BufWriter::new(f);
        write(&mut w)?;
        w.flush()
    });
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(CorpusError::io(&tmp, e));
    }
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        CorpusError::io(path, e)
    })
}
