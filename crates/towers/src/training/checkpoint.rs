//! Atomic checkpoints: a directory `checkpoint/` holding `config.json` (the model's or heads'
//! serde config), `state.json` (step, tokens, schedule, data cursor, ...), `weights.safetensors`
//! and `optimizer.safetensors`. It is written into `checkpoint.tmp/` and renamed into place,
//! the previous one kept as `checkpoint.old/` until the rename succeeded, so a kill at any
//! moment leaves a complete checkpoint.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use serde_json::Value;

use crate::config::ModelConfig;
use crate::error::io_err;
use crate::models::model::TwoTowerLm;
use crate::{Result, TowersError};

/// Name of the checkpoint directory inside a run's output directory.
pub const CHECKPOINT_DIR: &str = "checkpoint";

/// Name of the model weights' file inside a checkpoint directory.
pub const WEIGHTS_FILE: &str = "weights.safetensors";

/// Everything a checkpoint holds, in memory.
#[derive(Debug)]
pub struct CheckpointData {
    /// Model (or heads) configuration.
    pub config: Value,
    /// Training state.
    pub state: Value,
    /// Weights by parameter name.
    pub weights: HashMap<String, Tensor>,
    /// Optimizer moments (`m.<name>`, `v.<name>`).
    pub optimizer: HashMap<String, Tensor>,
}

/// A failed write at `path`: [`TowersError::CheckpointWrite`] naming it.
fn write_err(path: &Path, msg: impl std::fmt::Display) -> TowersError {
    TowersError::CheckpointWrite {
        path: path.display().to_string(),
        msg: msg.to_string(),
    }
}

/// Forces a written file (or a directory's entries) to disk, so that a rename after it never
/// publishes a file whose bytes are still only in the page cache.
fn sync(path: &Path) -> Result<()> {
    fs::File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| write_err(path, e))
}

#[cfg(test)]
thread_local! {
    /// Fault injection of the tests: the file name whose write fails (as a full disk would).
    static FAIL_WRITE: std::cell::RefCell<Option<&'static str>> = const { std::cell::RefCell::new(None) };
}

/// The injected fault for `path`, if the test set one for its file name.
fn injected(path: &Path) -> Result<()> {
    #[cfg(test)]
    if FAIL_WRITE.with(|f| *f.borrow()) == path.file_name().and_then(|n| n.to_str()) {
        return Err(write_err(
            path,
            std::io::Error::from_raw_os_error(28), // ENOSPC: no space left on device
        ));
    }
    let _ = path;
    Ok(())
}

fn write_json(path: &Path, v: &Value) -> Result<()> {
    injected(path)?;
    fs::write(path, serde_json::to_vec_pretty(v)?).map_err(|e| write_err(path, e))?;
    sync(path)
}

fn write_tensors(path: &Path, t: &HashMap<String, Tensor>) -> Result<()> {
    injected(path)?;
    crate::layers::params::write_safetensors(t, path).map_err(|e| write_err(path, e))?;
    sync(path)
}

/// Writes every file of `data` into the fresh directory `tmp`.
fn write_all(tmp: &Path, data: &CheckpointData) -> Result<()> {
    if tmp.exists() {
        fs::remove_dir_all(tmp).map_err(|e| write_err(tmp, e))?;
    }
    fs::create_dir_all(tmp).map_err(|e| write_err(tmp, e))?;
    write_json(&tmp.join("config.json"), &data.config)?;
    write_json(&tmp.join("state.json"), &data.state)?;
    write_tensors(&tmp.join(WEIGHTS_FILE), &data.weights)?;
    write_tensors(&tmp.join("optimizer.safetensors"), &data.optimizer)?;
    sync(tmp)
}

/// Writes `data` as `out_dir/checkpoint` atomically; returns the checkpoint path.
///
/// Every file goes into `checkpoint.tmp/` first (synced to disk); a write that fails there (no
/// space, no permission) removes that directory and returns
/// [`TowersError::CheckpointWrite`] naming the file, the previous `checkpoint/` untouched.
/// Only then is the previous checkpoint moved to `checkpoint.old/` and the new one renamed
/// into place.
pub fn save(out_dir: &Path, data: &CheckpointData) -> Result<PathBuf> {
    fs::create_dir_all(out_dir).map_err(|e| write_err(out_dir, e))?;
    let fin = out_dir.join(CHECKPOINT_DIR);
    let tmp = out_dir.join(format!("{CHECKPOINT_DIR}.tmp"));
    let old = out_dir.join(format!("{CHECKPOINT_DIR}.old"));
    if let Err(e) = write_all(&tmp, data) {
        // Best effort: give the space back; the error already names the failed file.
        let _ = fs::remove_dir_all(&tmp);
        return Err(e);
    }
    if fin.exists() {
        if old.exists() {
            fs::remove_dir_all(&old).map_err(|e| write_err(&old, e))?;
        }
        fs::rename(&fin, &old).map_err(|e| write_err(&fin, e))?;
    }
    fs::rename(&tmp, &fin).map_err(|e| write_err(&fin, e))?;
    if old.exists() {
        fs::remove_dir_all(&old).map_err(io_err(&old))?;
    }
    // The renames themselves reach the disk.
    sync(out_dir)?;
    Ok(fin)
}

/// The newest complete checkpoint under `out_dir` (`checkpoint/`, else a leftover
/// `checkpoint.old/` from a run killed between the two renames), if any.
pub fn latest(out_dir: &Path) -> Option<PathBuf> {
    [CHECKPOINT_DIR.to_string(), format!("{CHECKPOINT_DIR}.old")]
        .iter()
        .map(|n| out_dir.join(n))
        .find(|p| p.join("state.json").is_file())
}

fn read_json(path: &Path) -> Result<Value> {
    let bytes = fs::read(path).map_err(io_err(path))?;
    serde_json::from_slice(&bytes).map_err(|e| TowersError::Checkpoint {
        path: path.display().to_string(),
        msg: format!("malformed JSON: {e}"),
    })
}

fn read_tensors(path: &Path, dev: &Device) -> Result<HashMap<String, Tensor>> {
    candle_core::safetensors::load(path, dev).map_err(|e| TowersError::Checkpoint {
        path: path.display().to_string(),
        msg: e.to_string(),
    })
}

/// Reads a checkpoint directory written by [`save`].
pub fn load(dir: &Path, dev: &Device) -> Result<CheckpointData> {
    Ok(CheckpointData {
        config: read_json(&dir.join("config.json"))?,
        state: read_json(&dir.join("state.json"))?,
        weights: read_tensors(&dir.join(WEIGHTS_FILE), dev)?,
        optimizer: read_tensors(&dir.join("optimizer.safetensors"), dev)?,
    })
}

/// Rebuilds a trained [`TwoTowerLm`] from a checkpoint directory (config + weights).
pub fn load_model(dir: &Path, dev: &Device) -> Result<TwoTowerLm> {
    let config = read_json(&dir.join("config.json"))?;
    let cfg = ModelConfig::from_json(&config).map_err(|e| TowersError::Checkpoint {
        path: dir.join("config.json").display().to_string(),
        msg: e.to_string(),
    })?;
    let model = TwoTowerLm::new(&cfg, dev, 0)?;
    let weights = read_tensors(&dir.join(WEIGHTS_FILE), dev)?;
    model
        .params()
        .load_map(&weights, &dir.join(WEIGHTS_FILE).display().to_string())?;
    Ok(model)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ModelConfig, Style};

    fn data(seed: u64, step: u64) -> CheckpointData {
        let mc = ModelConfig::preset(&Style::gpt(), crate::Preset::Tiny).unwrap();
        let m = TwoTowerLm::new(&mc, &Device::Cpu, seed).unwrap();
        CheckpointData {
            config: serde_json::to_value(&mc).unwrap(),
            state: serde_json::json!({ "step": step }),
            weights: m.params().snapshot().unwrap(),
            optimizer: HashMap::new(),
        }
    }

    /// The tests run as root, where permission bits are ignored: faults are injected instead,
    /// a full disk at one file of the new checkpoint (the test hook `FAIL_WRITE`) and an output
    /// folder under a regular file.
    #[test]
    fn a_failed_write_names_the_path_and_leaves_the_previous_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("phase1");
        let first = save(&out, &data(1, 4)).unwrap();
        let weights = fs::read(first.join("weights.safetensors")).unwrap();
        let state = fs::read(first.join("state.json")).unwrap();

        for file in ["weights.safetensors", "optimizer.safetensors", "state.json"] {
            FAIL_WRITE.with(|f| *f.borrow_mut() = Some(file));
            let err = save(&out, &data(2, 8)).unwrap_err();
            FAIL_WRITE.with(|f| *f.borrow_mut() = None);
            let msg = err.to_string();
            assert!(matches!(err, TowersError::CheckpointWrite { .. }), "{msg}");
            let failed = out.join("checkpoint.tmp").join(file);
            assert!(msg.contains(&failed.display().to_string()), "{msg}");
            assert!(msg.contains("No space left"), "{msg}");
            // The previous checkpoint is the latest one, byte for byte; the partial one is gone.
            assert_eq!(latest(&out).as_deref(), Some(first.as_path()));
            assert_eq!(
                fs::read(first.join("weights.safetensors")).unwrap(),
                weights
            );
            assert_eq!(fs::read(first.join("state.json")).unwrap(), state);
            assert!(!out.join("checkpoint.tmp").exists());
        }
        // Without the fault the next checkpoint replaces it.
        save(&out, &data(2, 8)).unwrap();
        assert_ne!(fs::read(first.join("state.json")).unwrap(), state);

        let a_file = dir.path().join("a-file");
        fs::write(&a_file, b"not a folder").unwrap();
        let err = save(&a_file.join("phase1"), &data(2, 8)).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, TowersError::CheckpointWrite { .. }), "{msg}");
        assert!(
            msg.contains(&a_file.join("phase1").display().to_string()),
            "{msg}"
        );
    }
}
