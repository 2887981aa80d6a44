//! What names a model and what proves it unchanged: the display name (the folder's name, or the
//! hub id of a hub snapshot) and a SHA-256 fingerprint of the folder's files.

use std::io::Read;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::error::{LmdError, Result};

/// The name a model is shown and stored under: the hub id (`org/name`) of a hub cache snapshot
/// (`…/models--org--name/snapshots/<commit>/`), else the folder's own name.
pub fn model_name(dir: &Path) -> String {
    let part = |p: Option<&Path>| {
        p.and_then(|p| p.file_name())
            .map(|s| s.to_string_lossy().to_string())
    };
    let parent = dir.parent();
    if part(parent).as_deref() == Some("snapshots") {
        if let Some(repo) = part(parent.and_then(Path::parent)) {
            if let Some(id) = repo.strip_prefix("models--") {
                return id.replace("--", "/");
            }
        }
    }
    part(Some(dir)).unwrap_or_else(|| dir.display().to_string())
}

/// A name usable as one path component (`/` of hub ids becomes `--`, as the hub cache writes it).
pub fn file_safe(name: &str) -> String {
    name.replace(['/', '\\'], "--")
}

/// SHA-256 (hex) over the regular files directly in `dir` (symbolic links followed, as in a hub
/// snapshot), in name order, each as name, length and bytes. Documentation (`*.md`) and hidden
/// files are left out: they do not change what the model computes.
pub fn folder_fingerprint(dir: &Path) -> Result<String> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| LmdError::Io { path, source }
    };
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(io(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .filter(|p| {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default();
            !name.starts_with('.') && !name.ends_with(".md")
        })
        .collect();
    files.sort();
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    for path in &files {
        let mut f = std::fs::File::open(path).map_err(io(path))?;
        let len = f.metadata().map_err(io(path))?.len();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        h.update(name.as_bytes());
        h.update([0]);
        h.update(len.to_le_bytes());
        loop {
            let k = f.read(&mut buf).map_err(io(path))?;
            if k == 0 {
                break;
            }
            h.update(&buf[..k]);
        }
    }
    Ok(format!("{:x}", h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_snapshots_are_named_by_their_id() {
        let p = Path::new("/cache/hub/models--google--electra-base-discriminator/snapshots/0a1b");
        assert_eq!(model_name(p), "google/electra-base-discriminator");
        assert_eq!(
            model_name(Path::new("/x/models--bert-base-uncased/snapshots/ff")),
            "bert-base-uncased"
        );
        assert_eq!(
            model_name(Path::new("/models/all-MiniLM-L6-v2")),
            "all-MiniLM-L6-v2"
        );
        // A folder that merely sits in a `snapshots` folder keeps its own name.
        assert_eq!(model_name(Path::new("/data/snapshots/run3")), "run3");
        assert_eq!(file_safe("google/electra-base"), "google--electra-base");
    }

    #[test]
    fn the_fingerprint_changes_with_any_weight_byte_but_not_with_docs() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), b"{}").unwrap();
        std::fs::write(dir.path().join("model.safetensors"), [1u8, 2, 3]).unwrap();
        let a = folder_fingerprint(dir.path()).unwrap();
        assert_eq!(a.len(), 64);
        std::fs::write(dir.path().join("README.md"), b"notes").unwrap();
        assert_eq!(folder_fingerprint(dir.path()).unwrap(), a);
        std::fs::write(dir.path().join("model.safetensors"), [1u8, 2, 4]).unwrap();
        assert_ne!(folder_fingerprint(dir.path()).unwrap(), a);
        let missing = dir.path().join("nope");
        assert!(
            matches!(folder_fingerprint(&missing), Err(LmdError::Io { path, .. }) if path == missing)
        );
    }
}
