//! GPT-2: pre-LayerNorm causal decoder with learned positions; weights stored as `Conv1D`
//! ([in, out]). Causal attention with right padding means real tokens never see padding.

use candle_core::{Module, Result, Tensor};
use candle_nn::{Embedding, LayerNorm, Linear, VarBuilder};
use serde::Deserialize;

use super::layers::{attend, causal_bias, conv1d_linear, positions, Activation};

fn default_act() -> Activation {
    Activation::GeluTanh
}
fn default_eps() -> f64 {
    1e-5
}

/// `config.json` of a GPT-2 model (the fields this crate reads).
#[derive(Debug, Clone, Deserialize)]
pub struct Config {
    /// Token vocabulary size.
    pub vocab_size: usize,
    /// Model width.
    pub n_embd: usize,
    /// Number of layers.
    pub n_layer: usize,
    /// Attention heads.
    pub n_head: usize,
    /// Rows of the position table.
    pub n_positions: usize,
    /// Feed-forward width (default 4 × n_embd).
    #[serde(default)]
    pub n_inner: Option<usize>,
    /// Feed-forward activation.
    #[serde(default = "default_act")]
    pub activation_function: Activation,
    /// LayerNorm epsilon.
    #[serde(default = "default_eps")]
    pub layer_norm_epsilon: f64,
}

struct Block {
    ln_1: LayerNorm,
    c_attn: Linear,
    c_proj: Linear,
    ln_2: LayerNorm,
    c_fc: Linear,
    mlp_proj: Linear,
}

/// A GPT-2 decoder returning the last hidden states (after `ln_f`).
pub struct Model {
    wte: Embedding,
    wpe: Embedding,
    blocks: Vec<Block>,
    ln_f: LayerNorm,
    heads: usize,
    act: Activation,
}

impl Model {
    /// Loads from Hugging Face weight names (`wte`, `wpe`, `h.{i}.*`, `ln_f`).
    pub fn new(cfg: &Config, vb: VarBuilder) -> Result<Self> {
        let (d, eps) = (cfg.n_embd, cfg.layer_norm_epsilon);
        let ffn = cfg.n_inner.unwrap_or(4 * d);
        let blocks = (0..cfg.n_layer)
            .map(|i| {
                let b = vb.pp(format!("h.{i}"));
                Ok(Block {
                    ln_1: candle_nn::layer_norm(d, eps, b.pp("ln_1"))?,
                    c_attn: conv1d_linear(d, 3 * d, b.pp("attn.c_attn"))?,
                    c_proj: conv1d_linear(d, d, b.pp("attn.c_proj"))?,
                    ln_2: candle_nn::layer_norm(d, eps, b.pp("ln_2"))?,
                    c_fc: conv1d_linear(d, ffn, b.pp("mlp.c_fc"))?,
                    mlp_proj: conv1d_linear(ffn, d, b.pp("mlp.c_proj"))?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            wte: candle_nn::embedding(cfg.vocab_size, d, vb.pp("wte"))?,
            wpe: candle_nn::embedding(cfg.n_positions, d, vb.pp("wpe"))?,
            blocks,
            ln_f: candle_nn::layer_norm(d, eps, vb.pp("ln_f"))?,
            heads: cfg.n_head,
            act: cfg.activation_function,
        })
    }

    /// ids [n, L] u32 (right padded; the mask is implied by causality) -> hidden [n, L, d].
    pub fn forward(&self, ids: &Tensor, _mask: &Tensor) -> Result<Tensor> {
        let l = ids.dim(1)?;
        let pos = self.wpe.forward(&positions(l, 0, ids.device())?)?;
        let mut x = self.wte.forward(ids)?.broadcast_add(&pos)?;
        let bias = causal_bias(l, x.dtype(), ids.device())?;
        let d = x.dim(2)?;
        for b in &self.blocks {
            let qkv = b.c_attn.forward(&b.ln_1.forward(&x)?)?;
            let (q, k, v) = (
                qkv.narrow(2, 0, d)?,
                qkv.narrow(2, d, d)?,
                qkv.narrow(2, 2 * d, d)?,
            );
            let a = attend(&q, &k, &v, self.heads, Some(&bias))?;
            x = (x + b.c_proj.forward(&a)?)?;
            let h = self.act.forward(&b.c_fc.forward(&b.ln_2.forward(&x)?)?)?;
            x = (&x + b.mlp_proj.forward(&h)?)?;
        }
        self.ln_f.forward(&x)
    }
}
