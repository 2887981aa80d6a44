//! BERT: bidirectional pre-LN transformer towers (no final LayerNorm: the joint head's follows)
//! reading a K·H-wide shared token + position table projected into each tower; trained by
//! masked LM (15% with 80/10/10) on BERT windows.

use candle_core::{DType, Device, Tensor};
use corpus::{Document, MaskingConfig, Objective, TokenBatch, Tokenizer, TrainingData};

use super::{bert_windows, transformer_mask, transformer_sizes, validate_transformer};
use super::{EmbeddingLayout, Sizes, Tower, TowerStyle};
use crate::config::{ModelConfig, Preset};
use crate::params::Init;
use crate::transformer::TransformerTower;
use crate::Result;

/// The BERT style.
#[derive(Debug, Clone, Copy)]
pub struct Bert;

impl TowerStyle for Bert {
    fn name(&self) -> &'static str {
        "bert"
    }

    fn sizes(&self, preset: Preset) -> Option<Sizes> {
        match preset {
            // Table 1: BERT-base 12 x 384, FFN 1024, 12 heads; BERT-large 24 x 512, 2048, 16.
            Preset::Paper => Some(Sizes::transformer(12, 384, 1024, 12)),
            Preset::PaperLarge => Some(Sizes::transformer(24, 512, 2048, 16)),
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
        cfg.n_towers * cfg.hidden_size
    }

    fn embedding(&self) -> EmbeddingLayout {
        EmbeddingLayout {
            positions: true,
            projected: true,
        }
    }

    fn tower(&self, cfg: &ModelConfig, init: Init<'_>) -> Result<Box<dyn Tower>> {
        Ok(Box::new(TransformerTower::new(cfg, init, false)?))
    }

    fn device_mask(&self, batch: &TokenBatch, _dtype: DType, dev: &Device) -> Result<Tensor> {
        transformer_mask(batch, false, dev)
    }

    fn objective(&self) -> Objective {
        Objective::MaskedLm(MaskingConfig::default())
    }

    fn sequences(
        &self,
        tok: &Tokenizer,
        docs: &[Document],
        seq_len: usize,
    ) -> corpus::Result<TrainingData> {
        bert_windows(tok, docs, seq_len)
    }
}
