//! Per-layer word states of a BERT-family encoder of the LMD zoo (`lmd::encoder::bert`, e.g.
//! all-MiniLM-L6-v2): each sentence tokenized by the model's own `tokenizer.json` (the
//! `corpus` tokenizer), every layer's piece states pooled into word vectors.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device};
use corpus::ParsedSentence;
use lmd::encoder::{bert, model_name, pad_batch, LoadOptions};
use report::Progress;

use crate::align::{align_words, pool_words, PiecePooling, WordAlignment};
use crate::error::{ProbeError, Result};
use crate::source::StateSource;
use crate::states::LayerStates;

/// A BERT-family encoder read layer by layer: layer 0 is its embedding layer's output
/// (token + position embeddings, LayerNorm: no word sees another), layers 1..=L its encoder
/// layers' outputs.
pub struct EncoderLayers {
    name: String,
    dir: PathBuf,
    model: bert::Model,
    tokenizer: corpus::Tokenizer,
    layers: usize,
    width: usize,
    max_tokens: usize,
    device: Device,
    pooling: PiecePooling,
    batch_tokens: usize,
}

impl EncoderLayers {
    /// Loads the model folder `dir` (`config.json`, weights, `tokenizer.json`) on the device
    /// and dtype of `opts`, pooling pieces into words as `pooling` says.
    pub fn load(dir: impl AsRef<Path>, opts: &LoadOptions, pooling: PiecePooling) -> Result<Self> {
        let dir = dir.as_ref();
        let (cfg, model) = bert::load_model(dir, opts)?;
        let tokenizer = corpus::Tokenizer::from_file(dir.join("tokenizer.json"))?;
        Ok(Self {
            name: model_name(dir),
            dir: dir.to_path_buf(),
            model,
            tokenizer,
            layers: cfg.num_hidden_layers + 1,
            width: cfg.hidden_size,
            max_tokens: cfg.max_tokens(),
            device: opts.device.clone(),
            pooling,
            batch_tokens: 8192,
        })
    }

    /// With at most about `tokens` padded pieces per forward pass (default 8192).
    pub fn with_batch_tokens(mut self, tokens: usize) -> Self {
        self.batch_tokens = tokens.max(1);
        self
    }

    /// The folder it was loaded from.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Width H.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Its tokenizer.
    pub fn tokenizer(&self) -> &corpus::Tokenizer {
        &self.tokenizer
    }
}

impl StateSource for EncoderLayers {
    fn name(&self) -> &str {
        &self.name
    }

    fn n_layers(&self) -> usize {
        self.layers
    }

    fn states(&self, sentences: &[ParsedSentence], progress: &Progress) -> Result<LayerStates> {
        let aligned: Vec<WordAlignment> = sentences
            .iter()
            .enumerate()
            .map(|(k, s)| align_words(&self.tokenizer, &s.words, k))
            .collect::<Result<_>>()?;
        if let Some((k, a)) = aligned
            .iter()
            .enumerate()
            .find(|(_, a)| a.ids.len() > self.max_tokens)
        {
            return Err(ProbeError::TooLong {
                sentence: k,
                pieces: a.ids.len(),
                max: self.max_tokens,
            });
        }
        let lens: Vec<usize> = sentences.iter().map(ParsedSentence::len).collect();
        let mut states = LayerStates::zeros(self.layers, self.width, &lens)?;
        // Longest first, so padding stays small and memory peaks early.
        let mut order: Vec<usize> = (0..aligned.len()).collect();
        order.sort_by_key(|&k| (std::cmp::Reverse(aligned[k].ids.len()), k));
        let mut start = 0;
        let mut done = 0;
        while start < order.len() {
            let longest = aligned[order[start]].ids.len();
            let take = (self.batch_tokens / longest)
                .max(1)
                .min(order.len() - start);
            let batch = &order[start..start + take];
            let ids: Vec<Vec<u32>> = batch.iter().map(|&k| aligned[k].ids.clone()).collect();
            let (ids_t, mask) = pad_batch(&ids, &self.device)?;
            let hidden = self.model.forward_layers(&ids_t, &mask)?;
            let h = self.width;
            for (l, t) in hidden.iter().enumerate() {
                let t = t.to_dtype(DType::F32)?.to_device(&Device::Cpu)?;
                let (_, len, _) = t.dims3()?;
                let flat = t.flatten_all()?.to_vec1::<f32>()?;
                for (r, &k) in batch.iter().enumerate() {
                    let rows = &flat[r * len * h..(r + 1) * len * h];
                    let words = pool_words(rows, h, &aligned[k], self.pooling);
                    if words.iter().any(|x| !x.is_finite()) {
                        return Err(ProbeError::Mismatch(format!(
                            "{}: non-finite state at layer {l}, sentence {k}",
                            self.name
                        )));
                    }
                    states.set_sentence(k, l, &words)?;
                }
            }
            start += take;
            done += take;
            progress.say(|| format!("  {}: {done}/{} sentences", self.name, order.len()));
        }
        Ok(states)
    }
}
