//! What the training loop is given and what it keeps: the budget, the hyper-parameters
//! ([`TrainConfig`], defaults of the paper's 24hBERT recipe), the state saved with every
//! checkpoint, and what an update and a whole training report.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::training::optim::AdamWConfig;
use crate::training::schedule::Schedule;
use crate::{Result, TowersError};

/// When training stops.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Budget {
    /// A number of optimizer updates.
    Steps(u64),
    /// A number of token positions (batch_size · seq_len summed over micro-batches). The
    /// schedule's update count is fixed at the first update as ⌈budget / tokens per update⌉;
    /// training stops once the tokens are spent, which is that count when every update has the
    /// first one's size (the experiment's batchers drop a short last batch; with batches of
    /// varying size the schedule and the stop part ways).
    Tokens(u64),
    /// Seconds of training time (summed over resumed runs); the schedule follows elapsed time,
    /// so this mode is not bit-reproducible.
    WallClockSecs(f64),
}

/// Training hyper-parameters (defaults: the 24hBERT recipe of the paper).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    /// Peak learning rate (1e-3).
    pub lr: f64,
    /// AdamW betas, epsilon and weight decay.
    pub adamw: AdamWConfig,
    /// Global gradient-norm clip (1.0; 0 disables).
    pub clip_norm: f64,
    /// Fraction of the budget spent warming up (0.06).
    pub warmup_frac: f64,
    /// Micro-batches per update.
    pub grad_accum: usize,
    /// When to stop.
    pub budget: Budget,
    /// Validate every this many updates (0: only at the end).
    pub eval_every: u64,
    /// Checkpoint every this many updates (0: only at the end); needs an output directory.
    pub checkpoint_every: u64,
    /// Also checkpoint after an update once this many seconds of wall time have passed since
    /// the last checkpoint (or the start of this process's training), so that a run killed
    /// without warning loses at most about that much however slow its updates are. `None`:
    /// only by `checkpoint_every`. It changes no number (a resumed run continues bit-exactly
    /// from any update), so on resume the caller's value wins over the stored one.
    #[serde(default)]
    pub checkpoint_secs: Option<f64>,
    /// Write a metrics line every this many updates.
    pub log_every: u64,
    /// Stop before the budget once validation stops improving (the budget is then a maximum);
    /// needs `eval_every > 0` and validation batches.
    #[serde(default)]
    pub early_stop: Option<EarlyStop>,
    /// Clip each group of variables on its own: every entry is a variable-name prefix (e.g.
    /// `head0.`), the gradients of the variables under it are clipped to `clip_norm` together,
    /// independently of the other groups (variables under no prefix form one more group).
    /// Empty: one global clip. Per-head clipping keeps one head's large gradient from
    /// shrinking the other heads' steps.
    #[serde(default)]
    pub clip_groups: Vec<String>,
    /// The learning-rate schedule (default: warmup over `warmup_frac`, then linear decay).
    #[serde(default)]
    pub schedule: Schedule,
}

/// Early stopping on the validation loss: stop after `patience` consecutive validations that
/// improved on the best one by less than `min_delta` nats. The weights of the last update are
/// kept (as Keras' `EarlyStopping` does by default), not restored to the best validation's:
/// the stop says the loss has levelled off within `min_delta`, and no copy of the best
/// weights is held.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EarlyStop {
    /// Validations without improvement before stopping.
    pub patience: u64,
    /// The smallest decrease of the validation loss that counts as an improvement.
    pub min_delta: f64,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            lr: 1e-3,
            adamw: AdamWConfig::default(),
            clip_norm: 1.0,
            warmup_frac: 0.06,
            grad_accum: 1,
            budget: Budget::Steps(100),
            eval_every: 0,
            checkpoint_every: 0,
            checkpoint_secs: None,
            log_every: 10,
            early_stop: None,
            clip_groups: Vec::new(),
            schedule: Schedule::default(),
        }
    }
}

/// Persistent training state (saved as `state.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainState {
    /// Updates done.
    pub step: u64,
    /// Token positions consumed.
    pub tokens: u64,
    /// Total updates of the schedule (known after the first update for token budgets).
    pub total_steps: Option<u64>,
    /// Training seconds so far (all runs).
    pub elapsed_s: f64,
    /// Data-source cursor after the last consumed batch.
    pub cursor: Value,
    /// The training configuration in force.
    pub train: TrainConfig,
    /// Losses of the last (up to) 10 updates with a finite loss, so that a resumed run reports
    /// the same final training loss as an uninterrupted one (empty in older checkpoints).
    #[serde(default)]
    pub recent_losses: Vec<f64>,
    /// The best validation loss so far (early stopping).
    #[serde(default)]
    pub best_val_loss: Option<f64>,
    /// Validations since the best one (early stopping).
    #[serde(default)]
    pub evals_since_best: u64,
    /// True once early stopping ended the run.
    #[serde(default)]
    pub stopped_early: bool,
    /// The final validation loss, kept once the budget is spent, so that resuming a finished
    /// run neither validates again nor logs a second final line (none in older checkpoints:
    /// such a run validates once more).
    #[serde(default)]
    pub final_val_loss: Option<f64>,
    /// The optimizer's own update count (AdamW's bias correction), which trails `step` by the
    /// updates that had no target to learn from (`None` in older checkpoints: taken as `step`).
    #[serde(default)]
    pub optimizer_step: Option<u64>,
}

impl TrainState {
    /// The state before the first update of a training under `train` (`total_steps` where the
    /// budget already says it).
    pub fn start(train: TrainConfig, total_steps: Option<u64>) -> Self {
        Self {
            step: 0,
            tokens: 0,
            total_steps,
            elapsed_s: 0.0,
            cursor: Value::Null,
            train,
            recent_losses: Vec::new(),
            best_val_loss: None,
            evals_since_best: 0,
            stopped_early: false,
            final_val_loss: None,
            optimizer_step: None,
        }
    }
}

/// What one update did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepStats {
    /// Update number (1-based).
    pub step: u64,
    /// Mean training loss over the update's labelled positions.
    pub loss: f64,
    /// Learning rate used.
    pub lr: f64,
    /// Gradient norm before clipping.
    pub grad_norm: f64,
    /// Token positions in the update.
    pub tokens: u64,
}

/// Outcome of [`crate::Trainer::train`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainSummary {
    /// Updates done in total.
    pub steps: u64,
    /// Token positions consumed in total.
    pub tokens: u64,
    /// Mean training loss of the last (up to) 10 updates (NaN before any finite-loss update).
    pub train_loss: f64,
    /// Final validation loss (nats per labelled position), if validation batches were given.
    pub val_loss: Option<f64>,
    /// exp(val_loss).
    pub val_ppl: Option<f64>,
    /// Token positions per second of update time over every call that trained the run (its
    /// tokens over [`TrainState::elapsed_s`]), so a run stopped and resumed, or one trained in
    /// stretches (snapshots), reports the same kind of rate as one trained in a single call;
    /// validation and checkpoint time are excluded.
    pub tokens_per_s: f64,
    /// The final checkpoint, if an output directory was given.
    pub checkpoint: Option<PathBuf>,
    /// True when stopped by `stop_after` before the budget was spent.
    pub interrupted: bool,
    /// True when early stopping ended training before the budget.
    #[serde(default)]
    pub stopped_early: bool,
    /// The best validation loss seen (early stopping), if any.
    #[serde(default)]
    pub best_val_loss: Option<f64>,
}

/// Refuses settings that cannot train: they would hang (a NaN wall-clock budget), do nothing
/// (no micro-batch), or silently drop a feature (a NaN clip, patience 0).
pub(crate) fn check_config(cfg: &TrainConfig) -> Result<()> {
    let bad = |why: String| Err(TowersError::Config(why));
    if cfg.early_stop.is_some() && cfg.eval_every == 0 {
        return bad("early stopping needs eval_every > 0".into());
    }
    if cfg.grad_accum == 0 || cfg.lr.is_nan() || cfg.lr <= 0.0 {
        return bad("grad_accum >= 1 and lr > 0 are required".into());
    }
    if !(0.0..1.0).contains(&cfg.warmup_frac) {
        return bad(format!(
            "warmup_frac {} must lie in [0, 1)",
            cfg.warmup_frac
        ));
    }
    if cfg.checkpoint_secs.is_some_and(|s| s.is_nan() || s < 0.0) {
        return bad(format!(
            "checkpoint_secs must be a number of seconds >= 0, not {:?}",
            cfg.checkpoint_secs
        ));
    }
    if !(cfg.clip_norm.is_finite() && cfg.clip_norm >= 0.0) {
        return bad(format!(
            "clip_norm {} must be finite and >= 0",
            cfg.clip_norm
        ));
    }
    if let Budget::WallClockSecs(s) = cfg.budget {
        if !(s.is_finite() && s > 0.0) {
            return bad(format!(
                "a wall-clock budget of {s} s never ends or never starts"
            ));
        }
    }
    if let Some(es) = cfg.early_stop {
        if es.patience == 0 || !es.min_delta.is_finite() {
            return bad(format!(
                "early stopping needs patience >= 1 and a finite min_delta, not {es:?}"
            ));
        }
    }
    Ok(())
}
