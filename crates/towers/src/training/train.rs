//! The training loop shared by phase 1 (the K-tower model) and phases 2/3 (heads): AdamW,
//! clipping, warmup + linear decay, gradient accumulation, budgets, validation, metrics,
//! progress bar, and atomic checkpoints that resume bit-exactly on CPU.

use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::Tensor;
use corpus::TokenBatch;
use report::Bar;
use serde_json::{json, Value};

use crate::control::Control;
use crate::layers::loss::NllPass;
use crate::layers::params::ParamStore;
use crate::models::model::TwoTowerLm;
use crate::training::checkpoint::{self, CheckpointData};
use crate::training::data::BatchSource;
use crate::training::metrics::MetricsLog;
use crate::training::optim::{clip_factor, grad_norm, AdamW};
use crate::training::schedule::{LinearSchedule, Schedule};
use crate::training::train_config::check_config;
use crate::{Budget, StepStats, TrainConfig, TrainState, TrainSummary};
use crate::{Result, TowersError};

/// Something the [`Trainer`] can optimise: its variables and a mean loss per batch.
pub trait Trainable {
    /// The variables to update.
    fn params(&self) -> &ParamStore;
    /// Mean loss over the batch's labelled positions ([`TowersError::NoTargets`] if none),
    /// ready for a backward pass.
    fn loss(&self, batch: &TokenBatch) -> Result<Tensor>;
    /// The same mean loss for evaluation only (no backward pass follows, so a model may skip
    /// gradient work); the default is [`Trainable::loss`].
    fn eval_loss(&self, batch: &TokenBatch) -> Result<f64> {
        Ok(self.loss(batch)?.detach().to_scalar::<f32>()? as f64)
    }
    /// The configuration saved as `config.json` with every checkpoint.
    fn config_json(&self) -> Result<Value>;
    /// Whether a checkpoint's `config.json` describes this model (by default: the same JSON;
    /// a model whose config has older layouts reads them and compares the meaning).
    fn same_config(&self, stored: &Value) -> Result<bool> {
        Ok(*stored == self.config_json()?)
    }
}

impl Trainable for TwoTowerLm {
    fn params(&self) -> &ParamStore {
        TwoTowerLm::params(self)
    }
    fn loss(&self, batch: &TokenBatch) -> Result<Tensor> {
        TwoTowerLm::loss(self, batch)
    }
    fn eval_loss(&self, batch: &TokenBatch) -> Result<f64> {
        Ok(self.loss_for(batch, NllPass::Eval)?.to_scalar::<f32>()? as f64)
    }
    fn config_json(&self) -> Result<Value> {
        Ok(self.config().to_json())
    }
    fn same_config(&self, stored: &Value) -> Result<bool> {
        Ok(crate::ModelConfig::from_json(stored)? == *self.config())
    }
}

/// Runs the optimisation of a [`Trainable`].
pub struct Trainer<'m, M: Trainable> {
    model: &'m M,
    opt: AdamW,
    state: TrainState,
    out_dir: Option<PathBuf>,
    metrics: MetricsLog,
    control: Control,
    /// When the last checkpoint was written (or the trainer made): the clock of
    /// [`TrainConfig::checkpoint_secs`].
    saved_at: Instant,
}

impl<'m, M: Trainable> Trainer<'m, M> {
    /// A fresh trainer; with `out_dir`, metrics go to `out_dir/metrics.jsonl` and checkpoints to
    /// `out_dir/checkpoint/`.
    pub fn new(model: &'m M, cfg: TrainConfig, out_dir: Option<&Path>) -> Result<Self> {
        check_config(&cfg)?;
        let metrics = match out_dir {
            Some(d) => {
                std::fs::create_dir_all(d).map_err(crate::error::io_err(d))?;
                MetricsLog::open(&d.join(crate::training::metrics::METRICS_FILE))?
            }
            None => MetricsLog::none(),
        };
        let total_steps = match cfg.budget {
            Budget::Steps(n) => Some(n),
            _ => None,
        };
        Ok(Self {
            model,
            opt: AdamW::new(model.params().params(), cfg.adamw)?,
            state: TrainState::start(cfg, total_steps),
            out_dir: out_dir.map(Path::to_path_buf),
            metrics,
            control: Control::default(),
            saved_at: Instant::now(),
        })
    }

    /// The caller's stop token (honoured at the next step boundary, with a checkpoint) and
    /// progress (a bar with the loss, rate and learning rate); by default the trainer never
    /// stops early and draws nothing.
    pub fn with_control(mut self, control: Control) -> Self {
        self.control = control;
        self
    }

    fn stop_asked(&self) -> bool {
        self.control.stop.requested()
    }

    /// Like [`Trainer::new`], but when `out_dir` holds a checkpoint, restores weights, optimizer
    /// state, counters and the data cursor (seeking `source`) and continues from there. The
    /// stored training configuration wins over `cfg` (so the schedule is unchanged), except for
    /// the setting that changes no number,
    /// [`TrainConfig::checkpoint_secs`] come from `cfg`.
    pub fn resume_or_new(
        model: &'m M,
        cfg: TrainConfig,
        out_dir: &Path,
        source: &mut dyn BatchSource,
    ) -> Result<Self> {
        check_config(&cfg)?;
        let Some(dir) = checkpoint::latest(out_dir) else {
            return Self::new(model, cfg, Some(out_dir));
        };
        let origin = dir.display().to_string();
        let data = checkpoint::load(&dir, model.params().device())?;
        if !model.same_config(&data.config)? {
            return Err(TowersError::Checkpoint {
                path: origin,
                msg: "stored config differs from the model being trained".into(),
            });
        }
        let mut state: TrainState =
            serde_json::from_value(data.state).map_err(|e| TowersError::Checkpoint {
                path: origin.clone(),
                msg: format!("state.json: {e}"),
            })?;
        state.train.checkpoint_secs = cfg.checkpoint_secs;
        // The stored settings (a hand-edited state.json too) pass the same checks, and the
        // trainer, its optimizer included, is built from them: the caller's AdamW settings
        // must not apply to the rest of a run that started with others.
        check_config(&state.train).map_err(|e| TowersError::Checkpoint {
            path: origin.clone(),
            msg: format!("state.json: {e}"),
        })?;
        let mut t = Self::new(model, state.train.clone(), Some(out_dir))?;
        model.params().load_map(&data.weights, &origin)?;
        let opt_step = state.optimizer_step.unwrap_or(state.step);
        t.opt.load_state(&data.optimizer, opt_step, &origin)?;
        source.seek(&state.cursor)?;
        t.state = state;
        Ok(t)
    }

    /// Raises the budget of a resumed run, so that training continues to `budget` exactly as
    /// one run with that budget would have. Only under [`Schedule::Constant`] (no rate depends
    /// on the total) and for a budget of the same kind that is not smaller; otherwise a
    /// [`TowersError::Config`] that says why.
    pub fn extend_budget(&mut self, budget: Budget) -> Result<()> {
        let old = self.state.train.budget;
        if old == budget {
            return Ok(());
        }
        if !matches!(self.state.train.schedule, Schedule::Constant { .. }) {
            return Err(TowersError::Config(format!(
                "the budget changed from {old:?} to {budget:?}, but under the linear-decay \
                 schedule every learning rate depends on the total budget: only a run with \
                 Schedule::Constant continues to a larger budget"
            )));
        }
        let grows = match (old, budget) {
            (Budget::Steps(a), Budget::Steps(b)) | (Budget::Tokens(a), Budget::Tokens(b)) => b >= a,
            _ => false,
        };
        if !grows {
            return Err(TowersError::Config(format!(
                "a run continues only to a larger budget of the same kind ({old:?} -> {budget:?})"
            )));
        }
        self.state.train.budget = budget;
        // Recomputed at the next update from its token count, as at a run's first update.
        self.state.total_steps = match budget {
            Budget::Steps(n) => Some(n),
            _ => None,
        };
        Ok(())
    }

    /// The current state.
    pub fn state(&self) -> &TrainState {
        &self.state
    }

    fn schedule(&self) -> LinearSchedule {
        let total = self.state.total_steps.unwrap_or(1);
        LinearSchedule {
            peak: self.state.train.lr,
            warmup: (self.state.train.warmup_frac * total as f64).round() as u64,
            total,
        }
    }

    fn lr_now(&self) -> f64 {
        if let Schedule::Constant { warmup_steps } = self.state.train.schedule {
            return Schedule::constant_lr(self.state.train.lr, warmup_steps, self.state.step + 1);
        }
        let s = self.schedule();
        match self.state.train.budget {
            Budget::WallClockSecs(secs) => s.lr_at_fraction(
                self.state.elapsed_s,
                self.state.train.warmup_frac * secs,
                secs,
            ),
            _ => s.lr(self.state.step + 1),
        }
    }

    /// One optimizer update on the given micro-batches (gradients averaged over all their
    /// labelled positions, i.e. as if they were one batch).
    pub fn step(&mut self, micro: &[TokenBatch]) -> Result<StepStats> {
        let tokens: u64 = micro
            .iter()
            .map(|b| (b.batch_size * b.seq_len) as u64)
            .sum();
        if self.state.total_steps.is_none() {
            if let Budget::Tokens(n) = self.state.train.budget {
                self.state.total_steps = Some(n.div_ceil(tokens.max(1)).max(1));
            }
        }
        let n_all: usize = micro.iter().map(|b| b.n_targets()).sum();
        let lr = self.lr_now();
        let mut grads: Vec<Option<Tensor>> = vec![None; self.opt.params().len()];
        let mut loss_sum = 0f64;
        for b in micro {
            let n = b.n_targets();
            if n == 0 {
                continue;
            }
            let loss = self.model.loss(b)?;
            let lv = loss.to_scalar::<f32>()? as f64;
            if !lv.is_finite() {
                return Err(TowersError::NonFinite(format!(
                    "loss {lv} at step {}",
                    self.state.step + 1
                )));
            }
            loss_sum += lv * n as f64;
            let w = n as f64 / n_all as f64;
            let g = (loss * w)?.backward()?;
            for (acc, gi) in grads.iter_mut().zip(self.opt.collect_grads(&g)) {
                *acc = match (acc.take(), gi) {
                    (Some(a), Some(b)) => Some((a + b)?),
                    (a, b) => a.or(b),
                };
            }
        }
        let grad_norm = if n_all > 0 && self.state.train.clip_groups.is_empty() {
            // On CUDA the norm is read back after the update, not between it and the norm.
            self.opt
                .step_clipped(&grads, lr, self.state.train.clip_norm)?
        } else if n_all > 0 {
            let norm = self.clip_by_group(&mut grads)?;
            self.opt.step_scaled(&grads, lr, 1.0)?;
            norm
        } else {
            0.0
        };
        self.state.step += 1;
        self.state.tokens += tokens;
        let loss = if n_all > 0 {
            loss_sum / n_all as f64
        } else {
            f64::NAN
        };
        Ok(StepStats {
            step: self.state.step,
            loss,
            lr,
            grad_norm,
            tokens,
        })
    }

    /// Clips each group of [`TrainConfig::clip_groups`] on its own, in place; returns the
    /// global norm before clipping (for the metrics).
    fn clip_by_group(&self, grads: &mut [Option<Tensor>]) -> Result<f64> {
        let groups = &self.state.train.clip_groups;
        let group_of = |name: &str| {
            groups
                .iter()
                .position(|g| name.starts_with(g.as_str()))
                .unwrap_or(groups.len())
        };
        let ids: Vec<usize> = self
            .opt
            .params()
            .iter()
            .map(|p| group_of(&p.name))
            .collect();
        let mut sq_total = 0f64;
        for g in 0..=groups.len() {
            let members: Vec<Option<Tensor>> = grads
                .iter()
                .zip(&ids)
                .map(|(t, &i)| if i == g { t.clone() } else { None })
                .collect();
            let norm = grad_norm(&members)?;
            sq_total += norm * norm;
            let s = clip_factor(norm, self.state.train.clip_norm);
            if s != 1.0 {
                for (t, &i) in grads.iter_mut().zip(&ids) {
                    if i == g {
                        if let Some(x) = t.as_mut() {
                            *x = (&*x * s)?;
                        }
                    }
                }
            }
        }
        Ok(sq_total.sqrt())
    }

    /// Records a validation loss for early stopping (stops once patience is used up).
    fn note_validation(&mut self, v: f64) {
        let Some(es) = self.state.train.early_stop else {
            return;
        };
        match self.state.best_val_loss {
            Some(b) if v > b - es.min_delta => self.state.evals_since_best += 1,
            _ => {
                self.state.best_val_loss = Some(v);
                self.state.evals_since_best = 0;
            }
        }
        if self.state.evals_since_best >= es.patience {
            self.state.stopped_early = true;
        }
    }

    fn done(&self) -> bool {
        if self.state.stopped_early {
            return true;
        }
        match self.state.train.budget {
            Budget::Steps(n) => self.state.step >= n,
            Budget::Tokens(n) => self.state.tokens >= n,
            Budget::WallClockSecs(s) => self.state.elapsed_s >= s,
        }
    }

    /// Mean loss per labelled position over `batches` (no gradient).
    pub fn evaluate(&self, batches: &[TokenBatch]) -> Result<f64> {
        evaluate_loss(self.model, batches)
    }

    /// Saves a checkpoint (needs an output directory); `cursor` is the data position after the
    /// last consumed batch.
    pub fn save_checkpoint(&mut self, cursor: Value) -> Result<PathBuf> {
        let dir = self
            .out_dir
            .clone()
            .ok_or_else(|| TowersError::Config("checkpoints need an output directory".into()))?;
        self.state.cursor = cursor;
        self.state.optimizer_step = Some(self.opt.step_count());
        let path = checkpoint::save(
            &dir,
            &CheckpointData {
                config: self.model.config_json()?,
                state: serde_json::to_value(&self.state)?,
                weights: self.model.params().snapshot()?,
                optimizer: self.opt.state_tensors()?,
            },
        )?;
        self.saved_at = Instant::now();
        Ok(path)
    }

    /// Trains until the budget is spent, validating on `valid` (may be empty).
    ///
    /// A stop request (the [`crate::StopToken`] of [`Trainer::with_control`]) is honoured at the
    /// next step boundary: the checkpoint is written (with an output directory) and
    /// [`TowersError::Stopped`] returned; resuming from it continues bit-exactly.
    pub fn train(
        &mut self,
        source: &mut dyn BatchSource,
        valid: &[TokenBatch],
    ) -> Result<TrainSummary> {
        self.train_until(source, valid, None)
    }

    /// Like [`Trainer::train`], but returns (without a final checkpoint, as a killed run would)
    /// once update `stop_after` is done — to test resumption.
    pub fn train_until(
        &mut self,
        source: &mut dyn BatchSource,
        valid: &[TokenBatch],
        stop_after: Option<u64>,
    ) -> Result<TrainSummary> {
        // A finished run resumed: its final validation and checkpoint are already there.
        if self.done() && !valid.is_empty() {
            if let (Some(v), Some(dir)) = (
                self.state.final_val_loss,
                self.out_dir.as_deref().and_then(checkpoint::latest),
            ) {
                return Ok(self.summary(Some(v), Some(dir), false));
            }
        }
        let pb = self.progress_bar();
        let start = Instant::now();
        let tokens0 = self.state.tokens;
        let mut val_loss = None;
        let mut interrupted = false;
        while !self.done() {
            if self.stop_asked() {
                pb.finish();
                return Err(self.stopped(source)?);
            }
            let s = self.timed_step(source)?;
            let tps =
                (self.state.tokens - tokens0) as f64 / start.elapsed().as_secs_f64().max(1e-9);
            show_step(&pb, &s, tps, self.state.total_steps);
            if let Some(v) = self.after_step(&s, tps, source, valid)? {
                val_loss = Some(v);
            }
            if stop_after == Some(s.step) {
                interrupted = true;
                break;
            }
        }
        pb.finish();
        if !interrupted && !valid.is_empty() {
            let v = self.evaluate(valid)?;
            val_loss = Some(v);
            self.state.final_val_loss = Some(v);
            self.metrics.log(
                &json!({"step": self.state.step, "val_loss": v, "val_ppl": v.exp(), "final": true}),
            )?;
        }
        let checkpoint = if !interrupted && self.out_dir.is_some() {
            Some(self.save_checkpoint(source.cursor())?)
        } else {
            None
        };
        Ok(self.summary(val_loss, checkpoint, interrupted))
    }

    /// The progress bar of a training call (hidden unless the caller's progress has bars).
    fn progress_bar(&self) -> Bar {
        let pb = self
            .control
            .progress
            .bar(self.state.total_steps.unwrap_or(0), "train");
        pb.set_position(self.state.step);
        pb
    }

    /// A stop request honoured: the checkpoint written (with an output directory), and the
    /// error that says where.
    fn stopped(&mut self, source: &dyn BatchSource) -> Result<TowersError> {
        let checkpoint = match self.out_dir.is_some() {
            true => Some(self.save_checkpoint(source.cursor())?),
            false => None,
        };
        Ok(TowersError::Stopped {
            step: self.state.step,
            checkpoint: checkpoint.map(|p| p.display().to_string()),
        })
    }

    /// One update over `grad_accum` micro-batches, its time added to the state's and its loss
    /// to the recent losses (the last 10).
    fn timed_step(&mut self, source: &mut dyn BatchSource) -> Result<StepStats> {
        let t0 = Instant::now();
        let micro = (0..self.state.train.grad_accum)
            .map(|_| source.next_batch())
            .collect::<Result<Vec<_>>>()?;
        let s = self.step(&micro)?;
        self.state.elapsed_s += t0.elapsed().as_secs_f64();
        if s.loss.is_finite() {
            let recent = &mut self.state.recent_losses;
            recent.push(s.loss);
            if recent.len() > 10 {
                recent.remove(0);
            }
        }
        Ok(s)
    }

    /// What follows an update on its schedule: the metrics line, a validation (its loss
    /// returned) and a checkpoint.
    fn after_step(
        &mut self,
        s: &StepStats,
        tps: f64,
        source: &dyn BatchSource,
        valid: &[TokenBatch],
    ) -> Result<Option<f64>> {
        let cfg = &self.state.train;
        let (log_every, eval_every) = (cfg.log_every, cfg.eval_every);
        let checkpoint_every = cfg.checkpoint_every;
        let overdue = cfg
            .checkpoint_secs
            .is_some_and(|secs| self.saved_at.elapsed().as_secs_f64() >= secs);
        if log_every > 0 && s.step.is_multiple_of(log_every) {
            self.metrics.log(&json!({
                "step": s.step, "tokens": self.state.tokens, "loss": s.loss, "lr": s.lr,
                "grad_norm": s.grad_norm, "tokens_per_s": tps,
                "total_steps": self.state.total_steps,
            }))?;
        }
        let mut val_loss = None;
        if eval_every > 0 && s.step.is_multiple_of(eval_every) && !valid.is_empty() {
            let v = self.evaluate(valid)?;
            val_loss = Some(v);
            self.note_validation(v);
            self.metrics
                .log(&json!({"step": s.step, "val_loss": v, "val_ppl": v.exp()}))?;
        }
        let on_schedule = checkpoint_every > 0 && s.step.is_multiple_of(checkpoint_every);
        if self.out_dir.is_some() && (on_schedule || overdue) {
            self.save_checkpoint(source.cursor())?;
        }
        Ok(val_loss)
    }

    /// The summary of a training call, from the run's state after it.
    fn summary(
        &self,
        val_loss: Option<f64>,
        checkpoint: Option<PathBuf>,
        interrupted: bool,
    ) -> TrainSummary {
        let recent = &self.state.recent_losses;
        // Over all calls, not this one: a call's own rate would describe only its last stretch.
        let tokens_per_s = match self.state.elapsed_s > 0.0 {
            true => self.state.tokens as f64 / self.state.elapsed_s,
            false => 0.0,
        };
        TrainSummary {
            steps: self.state.step,
            tokens: self.state.tokens,
            train_loss: if recent.is_empty() {
                f64::NAN
            } else {
                recent.iter().sum::<f64>() / recent.len() as f64
            },
            val_loss,
            val_ppl: val_loss.map(f64::exp),
            tokens_per_s,
            checkpoint,
            interrupted,
            stopped_early: self.state.stopped_early,
            best_val_loss: self.state.best_val_loss,
        }
    }
}

/// The progress bar after an update: its position, and the loss, rate and learning rate.
fn show_step(pb: &Bar, s: &StepStats, tps: f64, total_steps: Option<u64>) {
    if pb.length() == Some(0) {
        if let Some(n) = total_steps {
            pb.set_length(n);
        }
    }
    pb.set_position(s.step);
    pb.set_message(format!(
        "loss {:.4} lr {:.2e} {:.0} tok/s",
        s.loss, s.lr, tps
    ));
}

/// Rank `rank`'s share of a global batch under data-parallel training over `world` ranks
/// (docs/towers.md, "Data-parallel training"): its contiguous block of `batch_size / world`
/// sequences. Every rank draws the same global batch from the same seeded source (one cursor),
/// so the shards of ranks `0..world`, concatenated, are the single-process batch, and a
/// resumed run restores one cursor for all ranks. A batch size not divisible by `world` is a
/// [`TowersError::Config`].
pub fn rank_shard(batch: &TokenBatch, rank: usize, world: usize) -> Result<TokenBatch> {
    if world == 0 || rank >= world || !batch.batch_size.is_multiple_of(world) {
        return Err(TowersError::Config(format!(
            "rank {rank} of {world}: a batch of {} sequences does not split into {world} equal \
             shards",
            batch.batch_size
        )));
    }
    let rows = batch.batch_size / world;
    let span = rank * rows * batch.seq_len..(rank + 1) * rows * batch.seq_len;
    Ok(TokenBatch {
        batch_size: rows,
        seq_len: batch.seq_len,
        input_ids: batch.input_ids[span.clone()].to_vec(),
        attention_mask: batch.attention_mask[span.clone()].to_vec(),
        labels: batch.labels[span].to_vec(),
    })
}

/// Mean loss per labelled position of `model` over `batches` (batches without targets skipped).
pub fn evaluate_loss<M: Trainable + ?Sized>(model: &M, batches: &[TokenBatch]) -> Result<f64> {
    let (mut sum, mut n) = (0f64, 0usize);
    for b in batches {
        let k = b.n_targets();
        if k == 0 {
            continue;
        }
        sum += model.eval_loss(b)? * k as f64;
        n += k;
    }
    if n == 0 {
        return Err(TowersError::NoTargets);
    }
    Ok(sum / n as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MarkovSource, ModelConfig, Style};
    use candle_core::Device;

    /// A source that raises `flag` when batch number `at` (0-based) is taken: a stop request
    /// arriving during that update.
    struct StopAt {
        inner: MarkovSource,
        taken: usize,
        at: usize,
        flag: crate::StopToken,
    }

    impl BatchSource for StopAt {
        fn next_batch(&mut self) -> Result<TokenBatch> {
            if self.taken == self.at {
                self.flag.request();
            }
            self.taken += 1;
            self.inner.next_batch()
        }
        fn cursor(&self) -> Value {
            self.inner.cursor()
        }
        fn seek(&mut self, cursor: &Value) -> Result<()> {
            self.inner.seek(cursor)
        }
    }

    fn setup(seed: u64) -> (ModelConfig, TwoTowerLm, MarkovSource) {
        let mut mc = ModelConfig::preset(&Style::gpt(), crate::Preset::Tiny).unwrap();
        mc.n_towers = 2;
        let m = TwoTowerLm::new(&mc, &Device::Cpu, seed).unwrap();
        let src = MarkovSource::new(mc.style(), 24, 2, 4, 12, 7, 5).unwrap();
        (mc, m, src)
    }

    fn cfg() -> TrainConfig {
        TrainConfig {
            lr: 5e-3,
            budget: Budget::Steps(9),
            warmup_frac: 0.1,
            checkpoint_every: 4,
            ..TrainConfig::default()
        }
    }

    /// Yields each global batch of `inner` as its `world` rank shards in rank order: with
    /// `grad_accum = world`, the trainer's label-weighted sum of the shards' gradients is what
    /// a data-parallel all-reduce computes.
    struct Ranks {
        inner: MarkovSource,
        world: usize,
        shards: Vec<TokenBatch>,
    }

    impl BatchSource for Ranks {
        fn next_batch(&mut self) -> Result<TokenBatch> {
            if self.shards.is_empty() {
                let b = self.inner.next_batch()?;
                self.shards = (0..self.world)
                    .rev()
                    .map(|r| rank_shard(&b, r, self.world))
                    .collect::<Result<_>>()?;
            }
            Ok(self.shards.pop().expect("one shard per rank"))
        }
        fn cursor(&self) -> Value {
            self.inner.cursor()
        }
        fn seek(&mut self, cursor: &Value) -> Result<()> {
            self.inner.seek(cursor)
        }
    }

    #[test]
    fn rank_shards_reassemble_to_the_single_process_order_and_update() {
        let (mc, _, mut single) = setup(3);
        let mut stream = setup(3).2;
        let world = 4;
        for _ in 0..12 {
            let b = single.next_batch().unwrap();
            let shards: Vec<TokenBatch> = (0..world)
                .map(|r| rank_shard(&b, r, world).unwrap())
                .collect();
            assert!(shards.iter().all(|s| s.batch_size == b.batch_size / world));
            let glued = |f: fn(&TokenBatch) -> Vec<u32>| -> Vec<u32> {
                shards.iter().flat_map(f).collect()
            };
            assert_eq!(glued(|s| s.input_ids.clone()), b.input_ids);
            assert_eq!(glued(|s| s.labels.clone()), b.labels);
            let mask: Vec<u8> = shards
                .iter()
                .flat_map(|s| s.attention_mask.clone())
                .collect();
            assert_eq!(mask, b.attention_mask);
            assert_eq!(stream.next_batch().unwrap().input_ids, b.input_ids);
        }
        assert!(rank_shard(&single.next_batch().unwrap(), 0, 3).is_err());

        // The update: the label-weighted sum of the ranks' gradients (the all-reduce) equals
        // the single-process gradient up to float summation order.
        let tc = |accum| TrainConfig {
            lr: 5e-3,
            budget: Budget::Steps(6),
            grad_accum: accum,
            ..TrainConfig::default()
        };
        let one = TwoTowerLm::new(&mc, &Device::Cpu, 3).unwrap();
        let mut src = setup(3).2;
        Trainer::new(&one, tc(1), None)
            .unwrap()
            .train(&mut src, &[])
            .unwrap();
        let dp = TwoTowerLm::new(&mc, &Device::Cpu, 3).unwrap();
        let mut src = Ranks {
            inner: setup(3).2,
            world,
            shards: Vec::new(),
        };
        Trainer::new(&dp, tc(world), None)
            .unwrap()
            .train(&mut src, &[])
            .unwrap();
        let (a, b) = (
            one.params().snapshot().unwrap(),
            dp.params().snapshot().unwrap(),
        );
        for (name, ta) in &a {
            let d = crate::test_util::max_abs(&(ta - &b[name]).unwrap());
            assert!(
                d < 1e-5,
                "{name} differs by {d} between one process and {world} ranks"
            );
        }
    }

    #[test]
    fn a_stop_request_checkpoints_at_the_next_step_and_the_resume_is_bit_exact() {
        let dir = tempfile::tempdir().unwrap();
        let (_, whole, mut src) = setup(3);
        Trainer::new(&whole, cfg(), Some(&dir.path().join("whole")))
            .unwrap()
            .train(&mut src, &[])
            .unwrap();

        // Asked to stop while update 6 takes its batch (not a checkpoint step): update 6
        // completes, then the trainer writes a checkpoint at step 6 and stops.
        let out = dir.path().join("stopped");
        let flag = crate::StopToken::new();
        let (_, m, inner) = setup(3);
        let mut src = StopAt {
            inner,
            taken: 0,
            at: 5,
            flag: flag.clone(),
        };
        let err = Trainer::new(&m, cfg(), Some(&out))
            .unwrap()
            .with_control(crate::Control::new(flag.clone(), crate::Progress::silent()))
            .train(&mut src, &[])
            .unwrap_err();
        match &err {
            TowersError::Stopped { step, checkpoint } => {
                assert_eq!(*step, 6);
                assert_eq!(
                    checkpoint.as_deref(),
                    Some(&*out.join("checkpoint").display().to_string())
                );
            }
            e => panic!("expected Stopped, got {e}"),
        }
        assert!(
            err.to_string().contains("run the same command again"),
            "{err}"
        );
        // A trainer holding another token is not stopped by this one.
        assert!(!crate::StopToken::new().requested());

        let (_, again, mut src) = setup(99);
        let mut tr = Trainer::resume_or_new(&again, cfg(), &out, &mut src).unwrap();
        assert_eq!(tr.state().step, 6);
        tr.train(&mut src, &[]).unwrap();
        let (a, b) = (
            whole.params().snapshot().unwrap(),
            again.params().snapshot().unwrap(),
        );
        for (name, ta) in &a {
            let d = crate::test_util::max_abs(&(ta - &b[name]).unwrap());
            assert_eq!(d, 0.0, "{name} differs after the stop and resume");
        }
    }
}
