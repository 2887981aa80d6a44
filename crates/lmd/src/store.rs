//! Per-model, per-split embedding files: `{dir}/{model}/{split}-T{t}-{pooling}.safetensors`,
//! written atomically with the [`ExtractKey`] they were computed from (the model's files, its
//! device and dtype, the pooling, T and the texts), so a rerun reuses exactly the finished
//! (model, split) pairs and never a stale one.

use std::path::{Path, PathBuf};

use safetensors::tensor::TensorView;
use safetensors::Dtype;

use crate::encoder::{file_safe, Encoder};
use crate::error::{LmdError, Result};
use crate::extract::{embed_texts, Embedded, ExtractOptions};
use crate::shard::{ExtractKey, ModelKey, Shard};

/// Embedding files of many models and splits under one folder.
#[derive(Debug, Clone)]
pub struct EmbeddingStore {
    dir: PathBuf,
}

impl EmbeddingStore {
    /// A store rooted at `dir` (created on first write).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The file of one model (by name; `/` of hub ids becomes `--`) and split.
    pub fn path(&self, model: &str, split: &str, opts: &ExtractOptions) -> PathBuf {
        self.dir.join(file_safe(model)).join(format!(
            "{split}-T{}-{}.safetensors",
            opts.t,
            opts.pooling.as_str()
        ))
    }

    fn key(enc: &dyn Encoder, texts: &[String], opts: &ExtractOptions) -> Result<ExtractKey> {
        Ok(ExtractKey::new(
            &[ModelKey::of(enc)?],
            texts,
            opts,
            Shard::WHOLE,
            0,
        ))
    }

    /// The stored embeddings of `enc` for exactly `texts` (same model files, device, dtype,
    /// pooling and T), or `None`.
    pub fn load(
        &self,
        enc: &dyn Encoder,
        split: &str,
        texts: &[String],
        opts: &ExtractOptions,
    ) -> Result<Option<Embedded>> {
        let path = self.path(enc.name(), split, opts);
        if !path.is_file() {
            return Ok(None);
        }
        let bytes = std::fs::read(&path).map_err(|source| LmdError::Io {
            path: path.clone(),
            source,
        })?;
        let bad = |m: String| LmdError::Weights {
            path: path.clone(),
            message: m,
        };
        let (_, meta) =
            safetensors::SafeTensors::read_metadata(&bytes).map_err(|e| bad(e.to_string()))?;
        let meta = meta.metadata().clone().unwrap_or_default();
        if ExtractKey::from_meta(&meta) != Some(Self::key(enc, texts, opts)?) {
            return Ok(None);
        }
        let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| bad(e.to_string()))?;
        let view = st.tensor("embeddings").map_err(|e| bad(e.to_string()))?;
        let shape = view.shape();
        if view.dtype() != Dtype::F32 || shape != [texts.len(), enc.width()] {
            return Err(bad(format!(
                "expected f32 [{}, {}], found {:?} {:?}",
                texts.len(),
                enc.width(),
                view.dtype(),
                shape
            )));
        }
        let data: Vec<f32> = view
            .data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        Ok(Some(Embedded {
            rows: shape[0],
            width: shape[1],
            data,
            seconds: 0.0,
            tokens: 0,
        }))
    }

    /// Writes the embeddings `e` of `texts` by `enc` atomically, with their key.
    pub fn save(
        &self,
        enc: &dyn Encoder,
        split: &str,
        texts: &[String],
        opts: &ExtractOptions,
        e: &Embedded,
    ) -> Result<PathBuf> {
        let path = self.path(enc.name(), split, opts);
        let parent = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(parent).map_err(|source| LmdError::Io {
            path: parent.to_path_buf(),
            source,
        })?;
        let bytes: Vec<u8> = e.data.iter().flat_map(|x| x.to_le_bytes()).collect();
        let view = TensorView::new(Dtype::F32, vec![e.rows, e.width], &bytes)
            .map_err(|err| LmdError::InvalidArgument(err.to_string()))?;
        let meta = Self::key(enc, texts, opts)?.to_meta();
        let data = safetensors::tensor::serialize([("embeddings", view)], Some(meta))
            .map_err(|err| LmdError::InvalidArgument(err.to_string()))?;
        // Whole or not at all, through a temporary file no other writer shares.
        files::write_atomic(&path, &data)?;
        Ok(path)
    }

    /// The stored embeddings of (model, split) when present for exactly these texts, else
    /// computes and stores them. The flag says whether they were reused.
    pub fn get_or_embed(
        &self,
        enc: &dyn Encoder,
        split: &str,
        texts: &[String],
        opts: &ExtractOptions,
    ) -> Result<(Embedded, bool)> {
        if let Some(e) = self.load(enc, split, texts, opts)? {
            return Ok((e, true));
        }
        let e = embed_texts(enc, texts, opts)?;
        self.save(enc, split, texts, opts, &e)?;
        Ok((e, false))
    }
}
