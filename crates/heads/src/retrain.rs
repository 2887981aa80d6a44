//! Phases 2 and 3: train all heads at once on frozen towers with the towers' training loop.

use std::path::Path;

use candle_core::Tensor;
use corpus::TokenBatch;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use towers::data::BatchSource;
use towers::loss::cross_entropy;
use towers::{ParamStore, TowersError, TrainConfig, TrainSummary, Trainable, Trainer, TwoTowerLm};

use crate::eval::evaluate;
use crate::head::TowerHeads;
use crate::{HeadsError, Result};

/// A frozen model with trainable heads: the [`Trainable`] of phases 2/3. Only the heads'
/// variables are exposed to the optimizer and the towers' outputs are detached.
#[derive(Debug)]
pub struct FrozenTowers<'m> {
    /// The phase-1 model (never updated).
    pub model: &'m TwoTowerLm,
    /// The heads being trained.
    pub heads: &'m TowerHeads,
}

fn to_towers(e: HeadsError) -> TowersError {
    match e {
        HeadsError::Towers(t) => t,
        HeadsError::Candle(c) => TowersError::Candle(c),
        other => TowersError::Config(other.to_string()),
    }
}

impl FrozenTowers<'_> {
    /// Per-tower mean cross-entropy tensors on the batch's labelled positions.
    pub fn tower_losses(&self, batch: &TokenBatch) -> Result<Vec<Tensor>> {
        let f = self.heads.features(self.model, batch)?;
        let dev = self.model.device();
        f.per_tower
            .iter()
            .enumerate()
            .map(|(k, x)| {
                let head = self
                    .heads
                    .head(k)
                    .ok_or_else(|| HeadsError::Mismatch(format!("no head {k}")))?;
                Ok(cross_entropy(&head.forward(x)?, &f.labels, dev)?)
            })
            .collect()
    }
}

impl Trainable for FrozenTowers<'_> {
    fn params(&self) -> &ParamStore {
        self.heads.params()
    }

    /// Σ_k CE_k: the heads share no variable, so each gets exactly its own gradient.
    fn loss(&self, batch: &TokenBatch) -> towers::Result<Tensor> {
        let losses = self.tower_losses(batch).map_err(to_towers)?;
        let mut total = losses[0].clone();
        for l in &losses[1..] {
            total = (total + l)?;
        }
        Ok(total)
    }

    fn config_json(&self) -> towers::Result<Value> {
        Ok(serde_json::to_value(self.heads.config())?)
    }
}

/// Outcome of [`retrain`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetrainSummary {
    /// The loop's summary (losses are sums over the K heads).
    pub train: TrainSummary,
    /// Mean NLL of each head on the validation batches (empty without validation data).
    pub val_loss_per_tower: Vec<f64>,
}

/// Trains `heads` on the frozen towers of `model` (phases 2 and 3 in one pass). With
/// `out_dir`, metrics and atomic checkpoints go there and an interrupted run resumes.
pub fn retrain(
    model: &TwoTowerLm,
    heads: &TowerHeads,
    cfg: TrainConfig,
    source: &mut dyn BatchSource,
    valid: &[TokenBatch],
    out_dir: Option<&Path>,
) -> Result<RetrainSummary> {
    let frozen = FrozenTowers { model, heads };
    let mut tr = match out_dir {
        Some(d) => Trainer::resume_or_new(&frozen, cfg, d, source)?,
        None => Trainer::new(&frozen, cfg, None)?,
    };
    let train = tr.train(source, valid)?;
    let val_loss_per_tower = if valid.is_empty() {
        Vec::new()
    } else {
        evaluate(model, heads, valid, false)?.mean_nll()
    };
    Ok(RetrainSummary {
        train,
        val_loss_per_tower,
    })
}
