//! GPT: causal pre-LN transformer towers (final LayerNorm as GPT-2) sharing width-H token and
//! position tables; labels are the next tokens of contiguous blocks.

use candle_core::{DType, Device, Tensor};
use corpus::{Document, Objective, TokenBatch, Tokenizer, TrainingData};

use super::{transformer_mask, transformer_preset, EmbeddingLayout, TowerStyle};
use super::{Preset, SharedConfig};
use crate::encoders::transformer::{TransformerConfig, TransformerTower};
use crate::layers::params::Init;
use crate::Result;

/// The GPT style.
#[derive(Debug, Clone, Copy)]
pub struct Gpt;

impl TowerStyle for Gpt {
    type Config = TransformerConfig;
    type Tower = TransformerTower;

    fn name(&self) -> &'static str {
        "gpt"
    }

    fn preset(&self, preset: Preset) -> Option<TransformerConfig> {
        match preset {
            // Table 1: GPT 12 x 768, FFN 3072, 12 heads.
            Preset::Paper => Some(TransformerConfig::new(12, 768, 3072, 12)),
            _ => transformer_preset(preset),
        }
    }

    fn validate(&self, cfg: &TransformerConfig) -> std::result::Result<(), String> {
        cfg.validate()
    }

    fn input_width(&self, cfg: &TransformerConfig) -> usize {
        cfg.hidden_size
    }

    fn tower_width(&self, cfg: &TransformerConfig) -> usize {
        cfg.hidden_size
    }

    fn embed_size(&self, cfg: &TransformerConfig, _n_towers: usize) -> usize {
        cfg.hidden_size
    }

    fn embedding(&self) -> EmbeddingLayout {
        // The towers share the token and position tables themselves (no projection).
        EmbeddingLayout {
            positions: true,
            projected: false,
        }
    }

    fn tower(
        &self,
        cfg: &TransformerConfig,
        shared: &SharedConfig,
        init: Init<'_>,
    ) -> Result<TransformerTower> {
        TransformerTower::new(cfg, shared, init, true)
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
