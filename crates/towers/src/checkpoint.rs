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
use crate::model::TwoTowerLm;
use crate::{Result, TowersError};

/// Name of the checkpoint directory inside a run's output directory.
pub const CHECKPOINT_DIR: &str = "checkpoint";

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

fn write_json(path: &Path, v: &Value) -> Result<()> {
    fs::write(path, serde_json::to_vec_pretty(v)?).map_err(io_err(path))
}

/// Writes `data` as `out_dir/checkpoint` atomically; returns the checkpoint path.
pub fn save(out_dir: &Path, data: &CheckpointData) -> Result<PathBuf> {
    fs::create_dir_all(out_dir).map_err(io_err(out_dir))?;
    let fin = out_dir.join(CHECKPOINT_DIR);
    let tmp = out_dir.join(format!("{CHECKPOINT_DIR}.tmp"));
    let old = out_dir.join(format!("{CHECKPOINT_DIR}.old"));
    if tmp.exists() {
        fs::remove_dir_all(&tmp).map_err(io_err(&tmp))?;
    }
    fs::create_dir_all(&tmp).map_err(io_err(&tmp))?;
    write_json(&tmp.join("config.json"), &data.config)?;
    write_json(&tmp.join("state.json"), &data.state)?;
    candle_core::safetensors::save(&data.weights, tmp.join("weights.safetensors"))?;
    candle_core::safetensors::save(&data.optimizer, tmp.join("optimizer.safetensors"))?;
    if fin.exists() {
        if old.exists() {
            fs::remove_dir_all(&old).map_err(io_err(&old))?;
        }
        fs::rename(&fin, &old).map_err(io_err(&fin))?;
    }
    fs::rename(&tmp, &fin).map_err(io_err(&tmp))?;
    if old.exists() {
        fs::remove_dir_all(&old).map_err(io_err(&old))?;
    }
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
        weights: read_tensors(&dir.join("weights.safetensors"), dev)?,
        optimizer: read_tensors(&dir.join("optimizer.safetensors"), dev)?,
    })
}

/// Rebuilds a trained [`TwoTowerLm`] from a checkpoint directory (config + weights).
pub fn load_model(dir: &Path, dev: &Device) -> Result<TwoTowerLm> {
    let config = read_json(&dir.join("config.json"))?;
    let cfg: ModelConfig = serde_json::from_value(config).map_err(|e| TowersError::Checkpoint {
        path: dir.display().to_string(),
        msg: format!("config.json is not a model config: {e}"),
    })?;
    let model = TwoTowerLm::new(&cfg, dev, 0)?;
    let weights = read_tensors(&dir.join("weights.safetensors"), dev)?;
    model.params().load_map(
        &weights,
        &dir.join("weights.safetensors").display().to_string(),
    )?;
    Ok(model)
}
