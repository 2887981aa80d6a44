//! Phases 2 and 3: train all heads at once on frozen towers with the towers' training loop.

use std::path::Path;

use candle_core::Tensor;
use corpus::TokenBatch;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use towers::nn::linear_cross_entropy;
use towers::BatchSource;
use towers::{
    Control, NllPass, ParamStore, TowersError, TrainConfig, TrainSummary, Trainable, Trainer,
    TwoTowerLm,
};

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
    /// Per-tower mean cross-entropy tensors on the batch's labelled positions (for training;
    /// see [`FrozenTowers::tower_losses_for`]).
    pub fn tower_losses(&self, batch: &TokenBatch) -> Result<Vec<Tensor>> {
        self.tower_losses_for(batch, NllPass::Train)
    }

    /// [`FrozenTowers::tower_losses`] with the pass made explicit ([`NllPass::Eval`] skips the
    /// output layers' gradient work when no backward pass follows).
    pub fn tower_losses_for(&self, batch: &TokenBatch, pass: NllPass) -> Result<Vec<Tensor>> {
        let f = self.heads.features(self.model, batch)?;
        f.per_tower
            .iter()
            .enumerate()
            .map(|(k, x)| {
                let head = self
                    .heads
                    .head(k)
                    .ok_or_else(|| HeadsError::Mismatch(format!("no head {k}")))?;
                let (w, b) = head.output_layer()?;
                Ok(linear_cross_entropy(
                    &head.hidden(x)?,
                    w,
                    b,
                    &f.labels,
                    pass,
                )?)
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
        sum_losses(self.tower_losses(batch).map_err(to_towers)?)
    }

    fn eval_loss(&self, batch: &TokenBatch) -> towers::Result<f64> {
        let losses = self
            .tower_losses_for(batch, NllPass::Eval)
            .map_err(to_towers)?;
        Ok(sum_losses(losses)?.to_scalar::<f32>()? as f64)
    }

    fn config_json(&self) -> towers::Result<Value> {
        Ok(serde_json::to_value(self.heads.config())?)
    }
}

/// Σ of per-head losses (K ≥ 1).
fn sum_losses(losses: Vec<Tensor>) -> towers::Result<Tensor> {
    let mut it = losses.into_iter();
    let first = it.next().ok_or(TowersError::NoTargets)?;
    it.try_fold(first, |acc, l| Ok((acc + l)?))
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
/// `out_dir`, metrics and atomic checkpoints go there and an interrupted run resumes. Under
/// early stopping the heads keep their last update's weights ([`towers::EarlyStop`]);
/// `val_loss_per_tower` is measured on those. `control` carries the caller's stop token and
/// progress.
pub fn retrain(
    model: &TwoTowerLm,
    heads: &TowerHeads,
    cfg: TrainConfig,
    source: &mut dyn BatchSource,
    valid: &[TokenBatch],
    out_dir: Option<&Path>,
    control: &Control,
) -> Result<RetrainSummary> {
    let frozen = FrozenTowers { model, heads };
    let tr = match out_dir {
        Some(d) => Trainer::resume_or_new(&frozen, cfg, d, source)?,
        None => Trainer::new(&frozen, cfg, None)?,
    };
    let train = tr.with_control(control.clone()).train(source, valid)?;
    let val_loss_per_tower = if valid.is_empty() {
        Vec::new()
    } else {
        evaluate(model, heads, valid, false, &control.stop)?.mean_nll()
    };
    Ok(RetrainSummary {
        train,
        val_loss_per_tower,
    })
}
