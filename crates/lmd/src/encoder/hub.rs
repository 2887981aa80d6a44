//! Where a model comes from: a local folder, or (feature `hub`) a Hugging Face hub id fetched
//! into the hub cache (`HF_HOME` honoured, `HF_ENDPOINT` too). The rest of the crate only
//! ever sees local folders.

use std::path::PathBuf;

use crate::error::{LmdError, Result};

/// Files fetched besides `config.json` when present: weights (safetensors preferred) and the
/// tokenizer in any of the forms [`super::TextTokenizer`] reads.
#[cfg(feature = "hub")]
const OPTIONAL_FILES: &[&str] = &[
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
];

/// The local folder for `spec`: `spec` itself when it is a folder; otherwise, with the `hub`
/// feature, the hub snapshot of the model id `spec` (downloaded on first use).
pub fn resolve(spec: &str) -> Result<PathBuf> {
    let p = PathBuf::from(spec);
    if p.is_dir() {
        return Ok(p);
    }
    fetch(spec)
}

#[cfg(feature = "hub")]
fn fetch(spec: &str) -> Result<PathBuf> {
    use hf_hub::api::sync::ApiBuilder;
    let err = |m: String| LmdError::ModelSource {
        spec: spec.to_string(),
        message: m,
    };
    let api = ApiBuilder::from_env()
        .build()
        .map_err(|e| err(e.to_string()))?;
    let repo = api.model(spec.to_string());
    let config = repo
        .get("config.json")
        .map_err(|e| err(format!("config.json: {e}")))?;
    if repo.get("model.safetensors").is_err() {
        repo.get("pytorch_model.bin")
            .map_err(|e| err(format!("no model.safetensors nor pytorch_model.bin: {e}")))?;
    }
    for f in OPTIONAL_FILES {
        // Absent files are fine: the loader says which tokenizer it needed.
        let _ = repo.get(f);
    }
    config
        .parent()
        .map(PathBuf::from)
        .ok_or_else(|| err("cache path has no parent".into()))
}

#[cfg(not(feature = "hub"))]
fn fetch(spec: &str) -> Result<PathBuf> {
    Err(LmdError::ModelSource {
        spec: spec.to_string(),
        message: "not a folder (hub ids need the `hub` feature)".into(),
    })
}
