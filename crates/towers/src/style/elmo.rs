//! ELMo: two-layer LSTM towers, forward (sees x_<t) and backward (sees x_>t), reading a
//! 2H-wide shared token table projected into each tower; labels are the tokens themselves.
//! The as-released variant (forward only) is [`ElmoMode::AsReleased`].

use candle_core::{DType, Device, Tensor};
use corpus::{Document, Objective, TokenBatch, Tokenizer, TrainingData};
use serde::{Deserialize, Serialize};

use super::{bert_windows, EmbeddingLayout, TowerStyle};
use crate::config::{ModelConfig, Preset};
use crate::models::elmo::{forward_towers_chained, ElmoTower};
use crate::models::lstm::chains_on_cuda;
use crate::models::params::Init;
use crate::ops::lstm_seq::chains::Chains;
use crate::{Result, TowersError};

/// How an ELMo tower combines its directions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ElmoMode {
    /// Forward and backward LSTM outputs concatenated (the intended model).
    #[default]
    BiLstm,
    /// As the released code behaves: its `flip_seq` zeroes the backward output, so the tower is
    /// forward-only with a zero second half (we do not build the unused backward LSTM).
    AsReleased,
}

impl ElmoMode {
    /// The name the command lines use: `full` or `as-released`.
    pub fn as_str(self) -> &'static str {
        match self {
            ElmoMode::BiLstm => "full",
            ElmoMode::AsReleased => "as-released",
        }
    }
}

impl std::fmt::Display for ElmoMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ElmoMode {
    type Err = TowersError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "full" | "bilstm" => Ok(ElmoMode::BiLstm),
            "as-released" | "released" | "forward-only" => Ok(ElmoMode::AsReleased),
            _ => Err(TowersError::Config(format!(
                "unknown ELMo backward mode {s:?} (full, as-released)"
            ))),
        }
    }
}

/// The configuration of an ELMo tower (the released code's keys: `model_size` is
/// `hidden_size`, its `hidden_size` our `lstm_size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ElmoConfig {
    /// LSTM layers per direction.
    pub n_layers: usize,
    /// The per-direction output width H (the LSTMs' projection).
    pub hidden_size: usize,
    /// The LSTM cell width (the released `hidden_size`, 2048/4096).
    pub lstm_size: usize,
    /// Both directions, or the released code's forward-only towers.
    #[serde(default, alias = "elmo_mode")]
    pub mode: ElmoMode,
}

impl ElmoConfig {
    /// `n_layers` LSTM layers of cell `lstm_size`, projected to `hidden_size`, both directions.
    pub const fn new(n_layers: usize, hidden_size: usize, lstm_size: usize) -> Self {
        Self {
            n_layers,
            hidden_size,
            lstm_size,
            mode: ElmoMode::BiLstm,
        }
    }
}

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

    fn tower(&self, cfg: &ElmoConfig, model: &ModelConfig, init: Init<'_>) -> Result<ElmoTower> {
        ElmoTower::new(cfg, model, init)
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
                .map(|(t, x)| crate::style::Tower::forward(t, x, mask))
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
