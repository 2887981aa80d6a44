//! BERT: bidirectional pre-LN transformer towers (no final LayerNorm: the joint head's follows)
//! reading a K·H-wide shared token + position table projected into each tower; trained by
//! masked LM (15% with 80/10/10) on BERT windows.

use candle_core::{DType, Device, Tensor};
use corpus::{Document, MaskingConfig, Objective, TokenBatch, Tokenizer, TrainingData};

use super::{bert_windows, transformer_mask, transformer_preset, EmbeddingLayout, TowerStyle};
use super::{Preset, SharedConfig};
use crate::encoders::transformer::{TransformerConfig, TransformerTower};
use crate::layers::params::Init;
use crate::Result;

/// The BERT style.
#[derive(Debug, Clone, Copy)]
pub struct Bert;

impl TowerStyle for Bert {
    type Config = TransformerConfig;
    type Tower = TransformerTower;

    fn name(&self) -> &'static str {
        "bert"
    }

    fn preset(&self, preset: Preset) -> Option<TransformerConfig> {
        match preset {
            // Table 1: BERT-base 12 x 384, FFN 1024, 12 heads; BERT-large 24 x 512, 2048, 16.
            Preset::Paper => Some(TransformerConfig::new(12, 384, 1024, 12)),
            Preset::PaperLarge => Some(TransformerConfig::new(24, 512, 2048, 16)),
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

    fn embed_size(&self, cfg: &TransformerConfig, n_towers: usize) -> usize {
        n_towers * cfg.hidden_size
    }

    fn embedding(&self) -> EmbeddingLayout {
        EmbeddingLayout {
            positions: true,
            projected: true,
        }
    }

    fn tower(
        &self,
        cfg: &TransformerConfig,
        shared: &SharedConfig,
        init: Init<'_>,
    ) -> Result<TransformerTower> {
        TransformerTower::new(cfg, shared, init, false)
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
