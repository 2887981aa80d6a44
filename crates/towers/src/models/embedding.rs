//! The embedding shared by all towers (released code): GPT towers share token and position
//! tables of width H; BERT shares a K·H-wide token+position table with a LayerNorm, projected
//! into each tower by its own Linear(K·H, H); ELMo shares a 2H-wide token table with a
//! LayerNorm, projected into each tower by Linear(2H, H).

use candle_core::{DType, Tensor};

use crate::config::ModelConfig;
use crate::layers::layers::Linear;
use crate::layers::norm::LayerNorm;
use crate::layers::params::Init;
use crate::Result;

/// Shared token (and position) embedding plus the per-tower input projections.
#[derive(Debug, Clone)]
pub struct SharedEmbedding {
    tokens: Tensor,
    positions: Option<Tensor>,
    norm: Option<LayerNorm>,
    projections: Vec<Linear>,
}

impl SharedEmbedding {
    /// Creates `embed.tokens`, `embed.positions`, `embed.norm`, `embed.proj{k}` as the style needs.
    pub fn new(cfg: &ModelConfig, init: Init<'_>) -> Result<Self> {
        let e = cfg.embed_size();
        let tokens = init.normal("tokens", &[cfg.vocab_size, e], cfg.init_std)?;
        let layout = cfg.tower.style().embedding();
        let positions = match layout.positions {
            true => Some(init.normal("positions", &[cfg.max_positions, e], cfg.init_std)?),
            false => None,
        };
        let (norm, projections) = match layout.projected {
            false => (None, Vec::new()),
            true => {
                let norm = LayerNorm::new(e, cfg.layer_norm_eps, init.pp("norm"))?;
                let proj = (0..cfg.n_towers)
                    .map(|k| {
                        Linear::new(
                            e,
                            cfg.input_width(),
                            true,
                            cfg.init_std,
                            init.pp(format!("proj{k}")),
                        )
                    })
                    .collect::<Result<Vec<_>>>()?;
                (Some(norm), proj)
            }
        };
        Ok(Self {
            tokens,
            positions,
            norm,
            projections,
        })
    }

    /// The token table [V, E] (tied to the joint head's output layer).
    pub fn tokens(&self) -> &Tensor {
        &self.tokens
    }

    /// Shared input representation [B, T, E] of `ids` [B, T] (u32), in dtype `dt`.
    pub fn forward(&self, ids: &Tensor, dt: DType) -> Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let flat = ids.flatten_all()?;
        let mut x = self.tokens.index_select(&flat, 0)?.reshape((b, t, ()))?;
        if let Some(p) = &self.positions {
            x = x.broadcast_add(&p.narrow(0, 0, t)?.unsqueeze(0)?)?;
        }
        if let Some(n) = &self.norm {
            x = n.forward(&x)?;
        }
        Ok(x.to_dtype(dt)?)
    }

    /// Input of tower `k`: the projection of the shared representation (identity for GPT).
    pub fn tower_input(&self, k: usize, shared: &Tensor) -> Result<Tensor> {
        match self.projections.get(k) {
            Some(p) => p.forward(shared),
            None => Ok(shared.clone()),
        }
    }
}
