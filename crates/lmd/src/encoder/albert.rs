//! ALBERT: factorised embeddings (width `embedding_size`, projected to `hidden_size`) and
//! layers shared across depth: layer i runs group `i / (layers / groups)`, each group being
//! `inner_group_num` post-LayerNorm blocks.

use candle_core::{Module, Result, Tensor};
use candle_nn::{Embedding, LayerNorm, Linear, VarBuilder};
use serde::Deserialize;

use super::layers::{padding_bias, positions, Activation, BlockDims, BlockNames, PostLnBlock};

fn one() -> usize {
    1
}
fn default_act() -> Activation {
    Activation::GeluTanh
}
fn default_eps() -> f64 {
    1e-12
}
fn default_type_vocab() -> usize {
    2
}

/// `config.json` of an ALBERT model (the fields this crate reads).
#[derive(Debug, Clone, Deserialize)]
pub struct Config {
    /// Token vocabulary size.
    pub vocab_size: usize,
    /// Embedding width.
    pub embedding_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// Number of (shared) layer applications.
    pub num_hidden_layers: usize,
    /// Attention heads.
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
    /// Distinct layer groups.
    #[serde(default = "one")]
    pub num_hidden_groups: usize,
    /// Blocks per group.
    #[serde(default = "one")]
    pub inner_group_num: usize,
}

const NAMES: BlockNames = BlockNames {
    q: "attention.query",
    k: "attention.key",
    v: "attention.value",
    o: "attention.dense",
    ln1: "attention.LayerNorm",
    ff_in: "ffn",
    ff_out: "ffn_output",
    ln2: "full_layer_layer_norm",
};

/// An ALBERT encoder returning the last hidden states.
pub struct Model {
    word: Embedding,
    position: Embedding,
    token_type: Embedding,
    ln: LayerNorm,
    mapping: Linear,
    groups: Vec<Vec<PostLnBlock>>,
    layers: usize,
}

impl Model {
    /// Loads from Hugging Face weight names (`embeddings.*`, `encoder.albert_layer_groups.*`).
    pub fn new(cfg: &Config, vb: VarBuilder) -> Result<Self> {
        if cfg.num_hidden_groups == 0
            || !cfg.num_hidden_layers.is_multiple_of(cfg.num_hidden_groups)
        {
            candle_core::bail!("num_hidden_layers must be a multiple of num_hidden_groups");
        }
        let emb = vb.pp("embeddings");
        let e = cfg.embedding_size;
        let dims = BlockDims {
            hidden: cfg.hidden_size,
            ffn: cfg.intermediate_size,
            heads: cfg.num_attention_heads,
            eps: cfg.layer_norm_eps,
            act: cfg.hidden_act,
        };
        let enc = vb.pp("encoder");
        let groups = (0..cfg.num_hidden_groups)
            .map(|g| {
                (0..cfg.inner_group_num)
                    .map(|j| {
                        let p = format!("albert_layer_groups.{g}.albert_layers.{j}");
                        PostLnBlock::new(dims, &NAMES, enc.pp(p))
                    })
                    .collect::<Result<Vec<_>>>()
            })
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
            mapping: candle_nn::linear(e, cfg.hidden_size, enc.pp("embedding_hidden_mapping_in"))?,
            groups,
            layers: cfg.num_hidden_layers,
        })
    }

    /// ids [n, L] u32, mask [n, L] (1 = real token) -> hidden [n, L, H].
    pub fn forward(&self, ids: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let l = ids.dim(1)?;
        let pos = self.position.forward(&positions(l, 0, ids.device())?)?;
        let tt = self.token_type.embeddings().narrow(0, 0, 1)?;
        let x = self
            .word
            .forward(ids)?
            .broadcast_add(&pos)?
            .broadcast_add(&tt)?;
        let mut x = self.mapping.forward(&self.ln.forward(&x)?)?;
        let bias = padding_bias(mask, x.dtype())?;
        let per_group = self.layers / self.groups.len();
        for i in 0..self.layers {
            for block in &self.groups[i / per_group] {
                x = block.forward(&x, &bias)?;
            }
        }
        Ok(x)
    }
}
