//! Pre-LN transformer towers: GPT (causal, final LayerNorm as GPT-2) and BERT (bidirectional,
//! no final LayerNorm: the joint head's LayerNorm over the concatenation follows, as in the
//! released DeepSpeed pre-LN kernels).

use candle_core::Tensor;
use serde::{Deserialize, Serialize};

use super::{SharedConfig, Tower};
use crate::layers::attention::SelfAttention;
use crate::layers::layers::{gelu, Linear};
use crate::layers::norm::LayerNorm;
use crate::layers::params::Init;
use crate::Result;

/// The sizes of a transformer tower (GPT's and BERT's configuration; the field names of the
/// released code's config).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransformerConfig {
    /// Blocks.
    pub n_layers: usize,
    /// Width H.
    pub hidden_size: usize,
    /// Feed-forward width.
    pub ffn_size: usize,
    /// Attention heads (dividing H).
    pub n_heads: usize,
}

impl TransformerConfig {
    /// `n_layers` blocks of width `hidden_size`, FFN `ffn_size`, `n_heads` heads.
    pub const fn new(n_layers: usize, hidden_size: usize, ffn_size: usize, n_heads: usize) -> Self {
        Self {
            n_layers,
            hidden_size,
            ffn_size,
            n_heads,
        }
    }

    /// Heads divide the width; a non-empty FFN and at least one block.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.n_layers == 0 || self.hidden_size == 0 {
            return Err("n_layers and hidden_size must be positive".into());
        }
        if self.n_heads == 0 || !self.hidden_size.is_multiple_of(self.n_heads) {
            return Err("hidden_size must be a positive multiple of n_heads".into());
        }
        if self.ffn_size == 0 {
            return Err("ffn_size must be positive".into());
        }
        Ok(())
    }
}

/// One pre-LN block: x + Attn(LN(x)), then x + FFN(LN(x)).
#[derive(Debug, Clone)]
struct Block {
    ln1: LayerNorm,
    attn: SelfAttention,
    ln2: LayerNorm,
    fc1: Linear,
    fc2: Linear,
}

impl Block {
    fn new(cfg: &TransformerConfig, shared: &SharedConfig, init: Init<'_>) -> Result<Self> {
        let (h, f, std, eps) = (
            cfg.hidden_size,
            cfg.ffn_size,
            shared.init_std,
            shared.layer_norm_eps,
        );
        Ok(Self {
            ln1: LayerNorm::new(h, eps, init.pp("ln1"))?,
            attn: SelfAttention::new(h, cfg.n_heads, std, init.pp("attn"))?,
            ln2: LayerNorm::new(h, eps, init.pp("ln2"))?,
            fc1: Linear::new(h, f, true, std, init.pp("fc1"))?,
            fc2: Linear::new(f, h, true, std, init.pp("fc2"))?,
        })
    }

    fn forward(&self, x: &Tensor, bias: &Tensor) -> Result<Tensor> {
        let x = (x + self.attn.forward(&self.ln1.forward(x)?, bias)?)?;
        let m = self
            .fc2
            .forward(&gelu(&self.fc1.forward(&self.ln2.forward(&x)?)?)?)?;
        Ok((x + m)?)
    }
}

/// A stack of pre-LN blocks; causal for GPT.
#[derive(Debug, Clone)]
pub struct TransformerTower {
    blocks: Vec<Block>,
    final_ln: Option<LayerNorm>,
}

impl TransformerTower {
    /// `layer{i}.*` blocks, plus `ln_f` when `final_ln` (GPT).
    pub fn new(
        cfg: &TransformerConfig,
        shared: &SharedConfig,
        init: Init<'_>,
        final_ln: bool,
    ) -> Result<Self> {
        let blocks = (0..cfg.n_layers)
            .map(|i| Block::new(cfg, shared, init.pp(format!("layer{i}"))))
            .collect::<Result<Vec<_>>>()?;
        let final_ln = if final_ln {
            Some(LayerNorm::new(
                cfg.hidden_size,
                shared.layer_norm_eps,
                init.pp("ln_f"),
            )?)
        } else {
            None
        };
        Ok(Self { blocks, final_ln })
    }

    /// Encodes `x` [B, T, H] under the additive attention `bias` [B, 1, T, T].
    pub fn encode(&self, x: &Tensor, bias: &Tensor) -> Result<Tensor> {
        let mut x = x.clone();
        for b in &self.blocks {
            x = b.forward(&x, bias)?;
        }
        match &self.final_ln {
            Some(ln) => ln.forward(&x),
            None => Ok(x),
        }
    }
}

impl Tower for TransformerTower {
    fn forward(&self, x: &Tensor, bias: &Tensor) -> Result<Tensor> {
        self.encode(x, bias)
    }
}
