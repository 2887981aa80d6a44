//! Where hidden states come from: the [`StateSource`] trait, and exported states in a
//! safetensors file (one tensor per layer, `layer_0`, `layer_1`, ..., each [n_words, H], the
//! words of a CoNLL-U file in order), so any model a user can export can be probed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device};
use corpus::ParsedSentence;
use report::Progress;

use crate::error::{ProbeError, Result};
use crate::states::LayerStates;

/// A model (or a file) that gives per-word hidden states at every layer for treebank
/// sentences. Implement it to probe another model; the two-tower runs' towers are one more.
pub trait StateSource {
    /// A display name (the model's folder, the file).
    fn name(&self) -> &str;
    /// The number of layers it gives (layer 0 first).
    fn n_layers(&self) -> usize;
    /// The states of `sentences`, one vector per word at every layer.
    fn states(&self, sentences: &[ParsedSentence], progress: &Progress) -> Result<LayerStates>;
}

/// The tensor name of layer `l` in a states file.
pub fn layer_name(l: usize) -> String {
    format!("layer_{l}")
}

/// Hidden states read from a safetensors file: tensors `layer_0` .. `layer_{L-1}`, each
/// [n_words, H] (f32, f16, bf16 or f64), no other tensor.
#[derive(Debug, Clone)]
pub struct StatesFile {
    path: PathBuf,
    name: String,
    width: usize,
    n_words: usize,
    layers: Vec<Vec<f32>>,
}

impl StatesFile {
    /// Reads and checks the file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let bad = |message: String| ProbeError::StatesFile {
            path: path.clone(),
            message,
        };
        let tensors = candle_core::safetensors::load(&path, &Device::Cpu)
            .map_err(|e| bad(format!("not a readable safetensors file: {e}")))?;
        let mut by_layer = BTreeMap::new();
        for (name, t) in tensors {
            let l = name
                .strip_prefix("layer_")
                .and_then(|x| x.parse::<usize>().ok())
                .filter(|l| layer_name(*l) == name)
                .ok_or_else(|| bad(format!("tensor {name:?} is not named layer_<i>")))?;
            by_layer.insert(l, t);
        }
        if by_layer.is_empty() {
            return Err(bad("no tensor".into()));
        }
        let mut layers = Vec::with_capacity(by_layer.len());
        let mut shape = None;
        for (i, (l, t)) in by_layer.into_iter().enumerate() {
            if l != i {
                return Err(bad(format!("layer_{i} is missing (found layer_{l})")));
            }
            let dims = t.dims().to_vec();
            if dims.len() != 2 || dims[1] == 0 {
                return Err(bad(format!(
                    "layer_{l} has shape {dims:?}, expected [n_words, H]"
                )));
            }
            if let Some(s) = &shape {
                if *s != dims {
                    return Err(bad(format!("layer_{l} has shape {dims:?}, layer_0 {s:?}")));
                }
            }
            shape = Some(dims);
            let v = t
                .to_dtype(DType::F32)
                .and_then(|t| t.flatten_all())
                .and_then(|t| t.to_vec1::<f32>())
                .map_err(|e| bad(format!("layer_{l}: {e}")))?;
            if v.iter().any(|x| !x.is_finite()) {
                return Err(bad(format!("layer_{l} has non-finite values")));
            }
            layers.push(v);
        }
        let dims = shape.unwrap_or_default();
        Ok(Self {
            name: path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            path,
            width: dims[1],
            n_words: dims[0],
            layers,
        })
    }

    /// Width H.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Rows (words) of every layer.
    pub fn n_words(&self) -> usize {
        self.n_words
    }

    /// The file's states cut into sentences of these lengths (the CoNLL-U file's words in
    /// order); the lengths must add up to the file's rows.
    pub fn split(&self, sentence_lens: &[usize]) -> Result<LayerStates> {
        let words: usize = sentence_lens.iter().sum();
        if words != self.n_words {
            return Err(ProbeError::StatesFile {
                path: self.path.clone(),
                message: format!(
                    "{} rows per layer, but the sentences have {words} words",
                    self.n_words
                ),
            });
        }
        LayerStates::from_layers(self.width, sentence_lens, self.layers.clone())
    }
}

impl StateSource for StatesFile {
    fn name(&self) -> &str {
        &self.name
    }
    fn n_layers(&self) -> usize {
        self.layers.len()
    }
    fn states(&self, sentences: &[ParsedSentence], _progress: &Progress) -> Result<LayerStates> {
        let lens: Vec<usize> = sentences.iter().map(ParsedSentence::len).collect();
        self.split(&lens)
    }
}

/// Writes states as a states file (f32 `layer_<i>` tensors [n_words, H]), whole or not at all.
pub fn write_states(path: &Path, states: &LayerStates) -> Result<()> {
    let shape = vec![states.n_words(), states.width()];
    let names: Vec<String> = (0..states.n_layers()).map(layer_name).collect();
    let bytes: Vec<Vec<u8>> = (0..states.n_layers())
        .map(|l| {
            states
                .layer(l)
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect()
        })
        .collect();
    let views = names
        .iter()
        .zip(&bytes)
        .map(|(n, b)| {
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), b)
                .map(|v| (n.clone(), v))
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| ProbeError::StatesFile {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    let out = safetensors::serialize(views, None).map_err(|e| ProbeError::StatesFile {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    files::write_atomic(path, &out)?;
    Ok(())
}
