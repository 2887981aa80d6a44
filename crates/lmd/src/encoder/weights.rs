//! Reading a Hugging Face model folder: `config.json` and the weights (`model.safetensors` or a
//! zip-format `pytorch_model.bin`), with errors that name the file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;

use crate::error::{LmdError, Result};

/// Parses `dir/config.json` into `T`, naming the file in any error.
pub(crate) fn read_config<T: serde::de::DeserializeOwned>(dir: &Path) -> Result<T> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|source| LmdError::Io {
        path: path.clone(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| LmdError::ModelConfig {
        path,
        message: e.to_string(),
    })
}

/// The weights of one model folder, loaded into memory with their names.
pub(crate) struct Weights {
    /// The file they came from (named in errors).
    pub path: PathBuf,
    tensors: HashMap<String, Tensor>,
}

impl Weights {
    /// Loads `model.safetensors`, else `pytorch_model.bin` (zip format), from `dir`.
    pub fn load(dir: &Path, device: &Device) -> Result<Self> {
        let st = dir.join("model.safetensors");
        let pth = dir.join("pytorch_model.bin");
        let (path, tensors) = if st.is_file() {
            let t = candle_core::safetensors::load(&st, device).map_err(|e| LmdError::Weights {
                path: st.clone(),
                message: e.to_string(),
            })?;
            (st, t)
        } else if pth.is_file() {
            let list = candle_core::pickle::read_all(&pth).map_err(|e| LmdError::Weights {
                path: pth.clone(),
                message: format!("not a readable zip-format PyTorch checkpoint: {e}"),
            })?;
            let mut t = HashMap::new();
            for (name, tensor) in list {
                let tensor = tensor.to_device(device)?;
                t.insert(name, tensor);
            }
            (pth, t)
        } else {
            return Err(LmdError::Weights {
                path: dir.to_path_buf(),
                message: "neither model.safetensors nor pytorch_model.bin found".into(),
            });
        };
        if tensors.is_empty() {
            return Err(LmdError::Weights {
                path,
                message: "no tensors".into(),
            });
        }
        Ok(Self { path, tensors })
    }

    /// Wraps in-memory tensors (tests, llama2.c checkpoints).
    pub fn from_tensors(path: PathBuf, tensors: HashMap<String, Tensor>) -> Self {
        Self { path, tensors }
    }

    /// Drops the first of `prefixes` (e.g. `"bert."`) that starts a tensor named
    /// `probe`, so task checkpoints (`BertForSequenceClassification`) load like base models.
    pub fn strip_prefix(mut self, probe: &str, prefixes: &[&str]) -> Self {
        if self.tensors.contains_key(probe) {
            return self;
        }
        for p in prefixes {
            if self.tensors.contains_key(&format!("{p}{probe}")) {
                self.tensors = self
                    .tensors
                    .into_iter()
                    .filter_map(|(k, v)| k.strip_prefix(p).map(|k| (k.to_string(), v)))
                    .collect();
                break;
            }
        }
        self
    }

    /// A VarBuilder over these tensors, converting to `dtype` on first use.
    pub fn var_builder(&self, dtype: DType, device: &Device) -> VarBuilder<'static> {
        VarBuilder::from_tensors(self.tensors.clone(), dtype, device)
    }

    /// Maps a model-construction error (a missing tensor, a wrong shape) to one naming the file.
    pub fn error(&self, e: candle_core::Error) -> LmdError {
        LmdError::Weights {
            path: self.path.clone(),
            message: e.to_string(),
        }
    }
}
