//! DeBERTa-v2/v3 (disentangled relative attention with log-bucketed positions), through
//! candle-transformers' `debertav2` module, which matches transformers in f32 (see the parity
//! fixture). Its masks are built in f32 with `f32::MIN`, so this architecture always runs at f32
//! (the loader ignores a bf16 request for it).

use candle_core::{DType, Result, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::debertav2::{Config as CandleConfig, DebertaV2Model};

/// `config.json` of a DeBERTa-v2 model: candle's own config type.
pub type Config = CandleConfig;

/// A DeBERTa-v2 encoder returning the last hidden states.
pub struct Model {
    inner: DebertaV2Model,
}

impl Model {
    /// Loads from Hugging Face weight names (`embeddings.*`, `encoder.*`); f32 only.
    pub fn new(cfg: &Config, vb: VarBuilder) -> Result<Self> {
        if vb.dtype() != DType::F32 {
            candle_core::bail!("deberta-v2 runs at f32 only (candle's masks use f32::MIN)");
        }
        Ok(Self {
            inner: DebertaV2Model::load(vb, cfg)?,
        })
    }

    /// ids [n, L] u32, mask [n, L] (1 = real token) -> hidden [n, L, H].
    pub fn forward(&self, ids: &Tensor, mask: &Tensor) -> Result<Tensor> {
        self.inner
            .forward(ids, None, Some(mask.to_dtype(DType::F32)?))
    }
}
