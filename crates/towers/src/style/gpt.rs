//! GPT: causal pre-LN transformer towers (final LayerNorm as GPT-2) sharing width-H token and
//! position tables; labels are the next tokens of contiguous blocks.

use candle_core::{DType, Device, Tensor};
use corpus::{Document, Objective, TokenBatch, Tokenizer, TrainingData};

use super::{transformer_mask, transformer_sizes, validate_transformer, EmbeddingLayout, Sizes};
use super::{Tower, TowerStyle};
use crate::config::{ModelConfig, Preset};
use crate::params::Init;
use crate::transformer::TransformerTower;
use crate::Result;

/// The GPT style.
#[derive(Debug, Clone, Copy)]
pub struct Gpt;

impl TowerStyle for Gpt {
    fn name(&self) -> &'static str {
        "gpt"
    }

    fn sizes(&self, preset: Preset) -> Option<Sizes> {
        match preset {
            // Table 1: GPT 12 x 768, FFN 3072, 12 heads.
            Preset::Paper => Some(Sizes::transformer(12, 768, 3072, 12)),
            _ => transformer_sizes(preset),
        }
    }

    fn validate(&self, cfg: &ModelConfig) -> std::result::Result<(), &'static str> {
        validate_transformer(cfg)
    }

    fn tower_width(&self, cfg: &ModelConfig) -> usize {
        cfg.hidden_size
    }

    fn embed_size(&self, cfg: &ModelConfig) -> usize {
        cfg.hidden_size
    }

    fn embedding(&self) -> EmbeddingLayout {
        // The towers share the token and position tables themselves (no projection).
        EmbeddingLayout {
            positions: true,
            projected: false,
        }
    }

    fn tower(&self, cfg: &ModelConfig, init: Init<'_>) -> Result<Box<dyn Tower>> {
        Ok(Box::new(TransformerTower::new(cfg, init, true)?))
    }

    fn device_mask(&self, batch: &TokenBatch, _dtype: DType, dev: &Device) -> Result<Tensor> {
        transformer_mask(batch, true, dev)
    }

    fn objective(&self) -> Objective {
        Objective::CausalLm
    }

    fn sequences(
        &self,
        tok: &Tokenizer,
        docs: &[Document],
        seq_len: usize,
    ) -> corpus::Result<TrainingData> {
        let it = docs.iter().cloned().map(Ok);
        corpus::windows::causal_blocks(tok, it, seq_len, Some(tok.special_tokens()?.sep))
    }
}
