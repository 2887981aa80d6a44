//! ELMo: two-layer LSTM towers, forward (sees x_<t) and backward (sees x_>t), reading a
//! 2H-wide shared token table projected into each tower; labels are the tokens themselves.
//! The as-released variant (forward only) is [`ElmoMode::AsReleased`].

use candle_core::{DType, Device, Tensor};
use corpus::{Document, Objective, TokenBatch, Tokenizer, TrainingData};

use super::{bert_windows, EmbeddingLayout, TowerStyle};
use super::{Preset, SharedConfig};
use crate::encoders::elmo::{forward_towers_chained, ElmoConfig, ElmoMode, ElmoTower};
use crate::layers::lstm::chains_on_cuda;
use crate::layers::params::Init;
use crate::ops::lstm_seq::chains::Chains;
use crate::Result;

/// The ELMo style.
#[derive(Debug, Clone, Copy)]
pub struct Elmo;

impl TowerStyle for Elmo {
    type Config = ElmoConfig;
    type Tower = ElmoTower;

    fn name(&self) -> &'static str {
        "elmo"
    }

    fn model_name(&self, cfg: &ElmoConfig) -> String {
        match cfg.mode {
            ElmoMode::BiLstm => "elmo",
            ElmoMode::AsReleased => "elmo_released",
        }
        .to_string()
    }

    fn preset(&self, preset: Preset) -> Option<ElmoConfig> {
        Some(match preset {
            Preset::Tiny => ElmoConfig::new(2, 16, 32),
            Preset::PeerSmall => ElmoConfig::new(2, 128, 512),
            Preset::PeerLarge => ElmoConfig::new(2, 256, 1024),
            // The released code: a 256-wide projection of cells 2048 (base) or 4096.
            Preset::Base2Tower => ElmoConfig::new(2, 256, 2048),
            Preset::Large2Tower | Preset::Paper => ElmoConfig::new(2, 256, 4096),
            Preset::PaperLarge => return None,
        })
    }

    fn validate(&self, cfg: &ElmoConfig) -> std::result::Result<(), String> {
        if cfg.n_layers == 0 || cfg.hidden_size == 0 || cfg.lstm_size == 0 {
            return Err("n_layers, hidden_size and lstm_size must be positive for ELMo".into());
        }
        Ok(())
    }

    fn input_width(&self, cfg: &ElmoConfig) -> usize {
        cfg.hidden_size
    }

    fn tower_width(&self, cfg: &ElmoConfig) -> usize {
        2 * cfg.hidden_size // forward ++ backward
    }

    fn embed_size(&self, cfg: &ElmoConfig, _n_towers: usize) -> usize {
        2 * cfg.hidden_size
    }

    fn embedding(&self) -> EmbeddingLayout {
        // No position table: the recurrence orders the tokens and bounds no length.
        EmbeddingLayout {
            positions: false,
            projected: true,
        }
    }

    fn tower(&self, cfg: &ElmoConfig, shared: &SharedConfig, init: Init<'_>) -> Result<ElmoTower> {
        ElmoTower::new(cfg, shared, init)
    }

    fn forward_all(
        &self,
        _cfg: &ElmoConfig,
        towers: &[ElmoTower],
        xs: &[Tensor],
        mask: &Tensor,
    ) -> Result<Vec<Tensor>> {
        // Where a tower's directions run chained (CUDA, bf16, `lstm_bf16`), all towers' chains
        // of a layer run as one op; elsewhere, or past the op's chain limit, tower by tower.
        let chained = xs.first().is_some_and(chains_on_cuda) && 2 * towers.len() <= Chains::MAX;
        match chained {
            true => forward_towers_chained(towers, xs, mask, true),
            false => towers
                .iter()
                .zip(xs)
                .map(|(t, x)| super::Tower::forward(t, x, mask))
                .collect(),
        }
    }

    fn device_mask(&self, batch: &TokenBatch, dtype: DType, dev: &Device) -> Result<Tensor> {
        // PAD steps reset the LSTMs' state to zero: a [B, T, 1] 0/1 mask in the compute dtype.
        let m: Vec<f32> = batch
            .attention_mask
            .iter()
            .map(|&x| f32::from(x.min(1)))
            .collect();
        let shape = (batch.batch_size, batch.seq_len, 1);
        Ok(Tensor::from_vec(m, shape, dev)?.to_dtype(dtype)?)
    }

    fn objective(&self) -> Objective {
        Objective::BidirectionalLm
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
