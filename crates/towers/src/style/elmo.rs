//! ELMo: two-layer LSTM towers, forward (sees x_<t) and backward (sees x_>t), reading a
//! 2H-wide shared token table projected into each tower; labels are the tokens themselves.
//! The as-released variant (forward only) is [`ElmoMode::AsReleased`].

use candle_core::{DType, Device, Tensor};
use corpus::{Document, Objective, TokenBatch, Tokenizer, TrainingData};

use super::{bert_windows, EmbeddingLayout, Sizes, Tower, TowerStyle};
use crate::config::{ElmoMode, ModelConfig, Preset};
use crate::elmo::{forward_towers_chained, ElmoTower};
use crate::lstm::chains_on_cuda;
use crate::lstm_chains::Chains;
use crate::params::Init;
use crate::Result;

/// The ELMo style.
#[derive(Debug, Clone, Copy)]
pub struct Elmo;

impl TowerStyle for Elmo {
    fn name(&self) -> &'static str {
        "elmo"
    }

    fn model_name(&self, mode: ElmoMode) -> Option<&'static str> {
        Some(match mode {
            ElmoMode::BiLstm => "elmo",
            ElmoMode::AsReleased => "elmo_released",
        })
    }

    fn sizes(&self, preset: Preset) -> Option<Sizes> {
        Some(match preset {
            Preset::Tiny => Sizes::lstm(2, 16, 32),
            Preset::PeerSmall => Sizes::lstm(2, 128, 512),
            Preset::PeerLarge => Sizes::lstm(2, 256, 1024),
            // The released code: a 256-wide projection of cells 2048 (base) or 4096.
            Preset::Base2Tower => Sizes::lstm(2, 256, 2048),
            Preset::Large2Tower | Preset::Paper => Sizes::lstm(2, 256, 4096),
            Preset::PaperLarge => return None,
        })
    }

    fn validate(&self, cfg: &ModelConfig) -> std::result::Result<(), &'static str> {
        if cfg.lstm_size == 0 {
            return Err("lstm_size must be positive for ELMo");
        }
        Ok(())
    }

    fn tower_width(&self, cfg: &ModelConfig) -> usize {
        2 * cfg.hidden_size // forward ++ backward
    }

    fn embed_size(&self, cfg: &ModelConfig) -> usize {
        2 * cfg.hidden_size
    }

    fn embedding(&self) -> EmbeddingLayout {
        // No position table: the recurrence orders the tokens and bounds no length.
        EmbeddingLayout {
            positions: false,
            projected: true,
        }
    }

    fn tower(&self, cfg: &ModelConfig, init: Init<'_>) -> Result<Box<dyn Tower>> {
        Ok(Box::new(ElmoTower::new(cfg, init)?))
    }

    fn forward_all(
        &self,
        towers: &[Box<dyn Tower>],
        xs: &[Tensor],
        mask: &Tensor,
    ) -> Option<Result<Vec<Tensor>>> {
        // Where a tower's directions run chained (CUDA, bf16, `lstm_bf16`), all towers' chains
        // of a layer run as one op; elsewhere, or past the op's chain limit, tower by tower.
        let chained = xs.first().is_some_and(chains_on_cuda) && 2 * towers.len() <= Chains::MAX;
        chained.then(|| forward_towers_chained(towers, xs, mask, true))
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
