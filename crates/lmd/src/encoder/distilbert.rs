//! DistilBERT: BERT's post-LayerNorm block under other weight names, no token types.
//! Our own code: candle's DistilBERT takes an inverted mask (1 = masked), an easy trap.

use candle_core::{Module, Result, Tensor};
use candle_nn::{Embedding, LayerNorm, VarBuilder};
use serde::Deserialize;

use super::layers::{padding_bias, positions, Activation, BlockDims, BlockNames, PostLnBlock};

fn default_act() -> Activation {
    Activation::Gelu
}

/// `config.json` of a DistilBERT model (the fields this crate reads).
#[derive(Debug, Clone, Deserialize)]
pub struct Config {
    /// Token vocabulary size.
    pub vocab_size: usize,
    /// Model width.
    pub dim: usize,
    /// Number of layers.
    pub n_layers: usize,
    /// Attention heads.
    pub n_heads: usize,
    /// Feed-forward width.
    pub hidden_dim: usize,
    /// Feed-forward activation.
    #[serde(default = "default_act")]
    pub activation: Activation,
    /// Rows of the position table.
    pub max_position_embeddings: usize,
}

/// DistilBERT weight names inside `transformer.layer.{i}`.
const NAMES: BlockNames = BlockNames {
    q: "attention.q_lin",
    k: "attention.k_lin",
    v: "attention.v_lin",
    o: "attention.out_lin",
    ln1: "sa_layer_norm",
    ff_in: "ffn.lin1",
    ff_out: "ffn.lin2",
    ln2: "output_layer_norm",
};

/// A DistilBERT encoder returning the last hidden states.
pub struct Model {
    word: Embedding,
    position: Embedding,
    ln: LayerNorm,
    layers: Vec<PostLnBlock>,
}

impl Model {
    /// Loads from Hugging Face weight names (`embeddings.*`, `transformer.layer.{i}.*`).
    pub fn new(cfg: &Config, vb: VarBuilder) -> Result<Self> {
        let emb = vb.pp("embeddings");
        let dims = BlockDims {
            hidden: cfg.dim,
            ffn: cfg.hidden_dim,
            heads: cfg.n_heads,
            eps: 1e-12,
            act: cfg.activation,
        };
        let layers = (0..cfg.n_layers)
            .map(|i| PostLnBlock::new(dims, &NAMES, vb.pp(format!("transformer.layer.{i}"))))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            word: candle_nn::embedding(cfg.vocab_size, cfg.dim, emb.pp("word_embeddings"))?,
            position: candle_nn::embedding(
                cfg.max_position_embeddings,
                cfg.dim,
                emb.pp("position_embeddings"),
            )?,
            ln: candle_nn::layer_norm(cfg.dim, 1e-12, emb.pp("LayerNorm"))?,
            layers,
        })
    }

    /// ids [n, L] u32, mask [n, L] (1 = real token) -> hidden [n, L, dim].
    pub fn forward(&self, ids: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let l = ids.dim(1)?;
        let pos = self.position.forward(&positions(l, 0, ids.device())?)?;
        let mut x = self
            .ln
            .forward(&self.word.forward(ids)?.broadcast_add(&pos)?)?;
        let bias = padding_bias(mask, x.dtype())?;
        for layer in &self.layers {
            x = layer.forward(&x, &bias)?;
        }
        Ok(x)
    }
}
