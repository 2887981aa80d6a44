//! The joint head of phase 1: concat(h_1..h_K) -> LayerNorm -> Linear(K·D, E) -> GELU ->
//! LayerNorm -> logits tied to the shared token embedding [V, E], plus an output bias.

use candle_core::{DType, Tensor};

use crate::config::ModelConfig;
use crate::layers::layers::{gelu, Linear};
use crate::layers::norm::LayerNorm;
use crate::layers::params::Init;
use crate::Result;

/// Joint output head over the concatenated tower outputs.
#[derive(Debug, Clone)]
pub struct JointHead {
    ln_in: LayerNorm,
    dense: Linear,
    ln_out: LayerNorm,
    out_bias: Tensor,
}

impl JointHead {
    /// `ln_in`, `dense`, `ln_out`, `out_bias`.
    pub fn new(cfg: &ModelConfig, init: Init<'_>) -> Result<Self> {
        let kd = cfg.n_towers * cfg.tower_width();
        let e = cfg.embed_size();
        Ok(Self {
            ln_in: LayerNorm::new(kd, cfg.layer_norm_eps, init.pp("ln_in"))?,
            dense: Linear::new(kd, e, true, cfg.init_std, init.pp("dense"))?,
            ln_out: LayerNorm::new(e, cfg.layer_norm_eps, init.pp("ln_out"))?,
            out_bias: init.constant("out_bias", &[cfg.vocab_size], 0.0)?,
        })
    }

    /// LayerNorm of the concatenation (the released `layer_norm_final`), [.., K·D].
    pub fn normed_concat(&self, concat: &Tensor) -> Result<Tensor> {
        self.ln_in.forward(concat)
    }

    /// Logits [N, V] (f32) from concatenated tower outputs [N, K·D] and the token table [V, E].
    pub fn forward(&self, concat: &Tensor, tokens: &Tensor) -> Result<Tensor> {
        Ok(self
            .unbiased_logits(concat, tokens)?
            .broadcast_add(&self.out_bias)?)
    }

    /// The logits before the output bias (f32).
    pub fn unbiased_logits(&self, concat: &Tensor, tokens: &Tensor) -> Result<Tensor> {
        let x = self.features(concat)?;
        let logits = x.matmul(&tokens.to_dtype(x.dtype())?.t()?)?;
        Ok(logits.to_dtype(DType::F32)?)
    }

    /// The input of the tied output layer, [N, E]: LayerNorm(GELU(dense(LayerNorm(concat)))).
    /// The training loss multiplies it with the token table inside its fused kernel.
    pub fn features(&self, concat: &Tensor) -> Result<Tensor> {
        let x = self.normed_concat(concat)?;
        self.ln_out.forward(&gelu(&self.dense.forward(&x)?)?)
    }

    /// The output bias \[V\].
    pub fn out_bias(&self) -> &Tensor {
        &self.out_bias
    }
}
