//! The BERT family: BERT, RoBERTa, XLM-RoBERTa, CamemBERT, ELECTRA and Longformer share one
//! post-LayerNorm encoder and differ only in the embeddings and the attention pattern:
//! RoBERTa-style models (and Longformer) number positions from `pad_token_id + 1`, ELECTRA
//! projects narrower embeddings up to the hidden width, and Longformer's sliding-window
//! attention (no global tokens, as the LMD reference runs it) is full attention restricted to
//! the band |i − j| ≤ window / 2, exact at any T.
//! Our own code rather than candle's: its BERT mask overflows in f16/bf16 and its BERT ignores
//! the RoBERTa position offset.

use candle_core::{Module, Result, Tensor};
use candle_nn::{Embedding, LayerNorm, Linear, VarBuilder};
use serde::Deserialize;

use super::layers::{
    band_bias, padding_bias, positions, Activation, BlockDims, PostLnBlock, BERT_NAMES,
};

fn default_act() -> Activation {
    Activation::Gelu
}
fn default_type_vocab() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}

/// `config.json` of a BERT-family model (the fields this crate reads).
#[derive(Debug, Clone, Deserialize)]
pub struct Config {
    /// `model_type`: bert, roberta, xlm-roberta, camembert or electra.
    pub model_type: String,
    /// Token vocabulary size.
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// Number of layers.
    pub num_hidden_layers: usize,
    /// Attention heads per layer.
    pub num_attention_heads: usize,
    /// Feed-forward width.
    pub intermediate_size: usize,
    /// Feed-forward activation.
    #[serde(default = "default_act")]
    pub hidden_act: Activation,
    /// Rows of the position table.
    pub max_position_embeddings: usize,
    /// Rows of the token-type table.
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: usize,
    /// LayerNorm epsilon.
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    /// Padding id (RoBERTa numbers positions from `pad_token_id + 1`).
    #[serde(default)]
    pub pad_token_id: Option<usize>,
    /// ELECTRA's embedding width when narrower than `hidden_size`.
    #[serde(default)]
    pub embedding_size: Option<usize>,
    /// Only "absolute" is supported.
    #[serde(default)]
    pub position_embedding_type: Option<String>,
    /// Longformer's attention window (both sides together), one value or one per layer.
    #[serde(default)]
    pub attention_window: Option<Window>,
}

/// Longformer's `attention_window`: one even width for all layers or one per layer.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Window {
    /// The same window in every layer.
    All(usize),
    /// One window per layer.
    PerLayer(Vec<usize>),
}

impl Config {
    /// First position id: `pad_token_id + 1` for RoBERTa-style models, else 0.
    pub fn position_offset(&self) -> usize {
        match self.model_type.as_str() {
            "roberta" | "xlm-roberta" | "camembert" | "longformer" => {
                self.pad_token_id.unwrap_or(1) + 1
            }
            _ => 0,
        }
    }

    /// The most tokens one sequence may have.
    pub fn max_tokens(&self) -> usize {
        self.max_position_embeddings
            .saturating_sub(self.position_offset())
    }

    /// One-sided attention window of layer `i` (Longformer only).
    pub fn half_window(&self, i: usize) -> Option<usize> {
        match &self.attention_window {
            None => None,
            Some(Window::All(w)) => Some(w / 2),
            Some(Window::PerLayer(v)) => v.get(i).or(v.last()).map(|w| w / 2),
        }
    }

    fn embedding_width(&self) -> usize {
        self.embedding_size.unwrap_or(self.hidden_size)
    }
}

/// A BERT-family encoder returning the last hidden states.
pub struct Model {
    word: Embedding,
    position: Embedding,
    token_type: Embedding,
    ln: LayerNorm,
    project: Option<Linear>,
    layers: Vec<PostLnBlock>,
    half_windows: Vec<Option<usize>>,
    offset: usize,
}

impl Model {
    /// Loads from weights named as in Hugging Face (`embeddings.*`, `encoder.layer.{i}.*`).
    pub fn new(cfg: &Config, vb: VarBuilder) -> Result<Self> {
        let e = cfg.embedding_width();
        let emb = vb.pp("embeddings");
        let project = if e != cfg.hidden_size {
            Some(candle_nn::linear(
                e,
                cfg.hidden_size,
                vb.pp("embeddings_project"),
            )?)
        } else {
            None
        };
        let dims = BlockDims {
            hidden: cfg.hidden_size,
            ffn: cfg.intermediate_size,
            heads: cfg.num_attention_heads,
            eps: cfg.layer_norm_eps,
            act: cfg.hidden_act,
        };
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| PostLnBlock::new(dims, &BERT_NAMES, vb.pp(format!("encoder.layer.{i}"))))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            word: candle_nn::embedding(cfg.vocab_size, e, emb.pp("word_embeddings"))?,
            position: candle_nn::embedding(
                cfg.max_position_embeddings,
                e,
                emb.pp("position_embeddings"),
            )?,
            token_type: candle_nn::embedding(
                cfg.type_vocab_size,
                e,
                emb.pp("token_type_embeddings"),
            )?,
            ln: candle_nn::layer_norm(e, cfg.layer_norm_eps, emb.pp("LayerNorm"))?,
            project,
            layers,
            half_windows: (0..cfg.num_hidden_layers)
                .map(|i| cfg.half_window(i))
                .collect(),
            offset: cfg.position_offset(),
        })
    }

    /// ids [n, L] u32, mask [n, L] (1 = real token, right padding) -> hidden [n, L, H].
    pub fn forward(&self, ids: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let mut x = self.embed(ids)?;
        let bias = padding_bias(mask, x.dtype())?;
        for i in 0..self.layers.len() {
            x = self.layer(i, &x, &bias)?;
        }
        Ok(x)
    }

    /// Every layer's token states, for probing: `num_hidden_layers + 1` tensors [n, L, H],
    /// the first the embedding layer's output (after its LayerNorm and ELECTRA's projection),
    /// then each encoder layer's output; the last equals [`Model::forward`].
    pub fn forward_layers(&self, ids: &Tensor, mask: &Tensor) -> Result<Vec<Tensor>> {
        let mut x = self.embed(ids)?;
        let bias = padding_bias(mask, x.dtype())?;
        let mut out = Vec::with_capacity(self.layers.len() + 1);
        out.push(x.clone());
        for i in 0..self.layers.len() {
            x = self.layer(i, &x, &bias)?;
            out.push(x.clone());
        }
        Ok(out)
    }

    /// The embedding layer: token + position + token type 0, LayerNorm, optional projection.
    fn embed(&self, ids: &Tensor) -> Result<Tensor> {
        let l = ids.dim(1)?;
        let pos = self
            .position
            .forward(&positions(l, self.offset, ids.device())?)?;
        let tt = self.token_type.embeddings().narrow(0, 0, 1)?;
        let x = self
            .word
            .forward(ids)?
            .broadcast_add(&pos)?
            .broadcast_add(&tt)?;
        let x = self.ln.forward(&x)?;
        match &self.project {
            Some(p) => p.forward(&x),
            None => Ok(x),
        }
    }

    /// Encoder layer `i` with the padding bias (and Longformer's band).
    fn layer(&self, i: usize, x: &Tensor, bias: &Tensor) -> Result<Tensor> {
        match self.half_windows[i] {
            Some(w) => {
                let band = band_bias(x.dim(1)?, w, x.dtype(), x.device())?;
                self.layers[i].forward(x, &bias.broadcast_add(&band)?)
            }
            None => self.layers[i].forward(x, bias),
        }
    }
}

/// Weight-name prefixes of task checkpoints (as the loader of [`super::load`] strips them).
const PREFIXES: &[&str] = &[
    "bert.",
    "roberta.",
    "electra.",
    "camembert.",
    "longformer.",
    "model.",
];

/// Loads the BERT-family model in `dir` (`config.json` and its weights) as a [`Model`] with
/// its config, for callers that need more than [`super::Encoder`]'s last layer (per-layer
/// states: [`Model::forward_layers`]). The tokenizer is the caller's.
pub fn load_model(
    dir: &std::path::Path,
    opts: &super::LoadOptions,
) -> crate::Result<(Config, Model)> {
    let cfg: Config = super::weights::read_config(dir)?;
    if let Some(p) = cfg
        .position_embedding_type
        .as_deref()
        .filter(|p| *p != "absolute")
    {
        return Err(crate::LmdError::ModelConfig {
            path: dir.join("config.json"),
            message: format!("position embeddings {p:?}: only absolute ones are supported"),
        });
    }
    let w = super::weights::Weights::load(dir, &opts.device)?
        .strip_prefix("embeddings.word_embeddings.weight", PREFIXES);
    let model =
        Model::new(&cfg, w.var_builder(opts.dtype, &opts.device)).map_err(|e| w.error(e))?;
    Ok((cfg, model))
}
