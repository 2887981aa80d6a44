//! The training steps of a run: phase 1 with its weight snapshots, the heads of phases 2/3
//! (trained until the validation NLL stops improving), the scoring of heads on the scoring set,
//! and the references a head is measured against (the joint head, the unigram model).

use std::path::Path;

use candle_core::{DType, Device};
use corpus::{TokenBatch, IGNORE_LABEL};
use heads::{retrain, HeadConfig, PositionLogProbs, TowerHeads};
use towers::evaluate_loss;
use towers::BatchSource;
use towers::{Budget, CorpusSource, EarlyStop, TrainConfig, TrainSummary, Trainer, TwoTowerLm};

use crate::data::{batcher, CorpusData};
use crate::disk::save_atomic;
use crate::error::io_at;
use crate::error::{ExperimentError, Result};
use crate::manifest::{HeadQuality, RunOptions, Snapshot, PHASE1_DIR};
use crate::scoring::ScoringSet;
use crate::spec::RunSpec;

/// Seed of the validation batches: a constant, so every run validates on the same batches.
const VALID_SEED: u64 = 0x0076_616c_6964;

/// The held-out batches that validate training (the same for every run: a constant seed).
pub fn validation_batches(spec: &RunSpec, data: &CorpusData) -> Result<Vec<TokenBatch>> {
    let p = &spec.phase1;
    let b = batcher(
        &spec.style,
        &data.tok,
        data.held_out(),
        p.seq_len,
        p.batch_size,
        VALID_SEED,
    )?;
    let n = (p.eval_batches.max(1) as u64).min(b.batches_per_epoch());
    let mut src = CorpusSource::new(b);
    (0..n)
        .map(|_| Ok(src.next_batch()?))
        .collect::<Result<Vec<_>>>()
}

/// The towers' compute precision on `device`: bf16 on CUDA (f32 master weights), f32 on the
/// CPU. Phase 1 and every head training of a run's points use it, so that on a GPU the
/// snapshots' heads see their towers in the same arithmetic as the end's.
pub(crate) fn compute_dtype(device: &Device) -> DType {
    if device.is_cuda() {
        DType::BF16
    } else {
        DType::F32
    }
}

/// Phase 1's token positions per update and its number of updates, for the run `spec` whose
/// training batches `b` gives.
fn updates_of(b: &corpus::Batcher, spec: &RunSpec) -> (u64, u64) {
    let p = &spec.phase1;
    let per_update = (b.data().seq_len() * p.batch_size.min(b.data().len()).max(1)) as u64;
    (per_update, p.budget_tokens.div_ceil(per_update).max(1))
}

/// The model of the run `spec` with the phase-1 weights at `path` (its final checkpoint's or
/// a snapshot's).
pub(crate) fn model_at(
    spec: &RunSpec,
    path: &Path,
    data: &CorpusData,
    device: &Device,
) -> Result<TwoTowerLm> {
    if !path.is_file() {
        return Err(ExperimentError::Missing {
            path: path.to_path_buf(),
            what: "the run's phase-1 weights".into(),
        });
    }
    let model = TwoTowerLm::new(&spec.model_config(data.padded_vocab())?, device, spec.seed)?
        .with_compute_dtype(compute_dtype(device));
    model.params().load(path)?;
    Ok(model)
}

/// Phase 1's training batches of the run `spec`.
fn train_batcher(spec: &RunSpec, data: &CorpusData) -> Result<corpus::Batcher> {
    let p = &spec.phase1;
    batcher(
        &spec.style,
        &data.tok,
        data.train(),
        p.seq_len,
        p.batch_size,
        spec.seed,
    )
}

/// Phase 1 with its weight snapshots, resumed from its checkpoint in `dir` when there is one;
/// returns the trained model, its summary and the snapshots.
pub(crate) fn phase1(
    spec: &RunSpec,
    dir: &Path,
    data: &CorpusData,
    valid: &[TokenBatch],
    opts: &RunOptions,
) -> Result<(TwoTowerLm, TrainSummary, Vec<Snapshot>)> {
    let p = &spec.phase1;
    let cfg = spec.model_config(data.padded_vocab())?;
    let model = TwoTowerLm::new(&cfg, &opts.device, spec.seed)?
        .with_compute_dtype(compute_dtype(&opts.device));
    let b = train_batcher(spec, data)?;
    let (_, total) = updates_of(&b, spec);
    let tc = TrainConfig {
        lr: p.lr,
        budget: Budget::Tokens(p.budget_tokens),
        eval_every: p.eval_every,
        checkpoint_every: p.eval_every,
        checkpoint_secs: opts.checkpoint_secs,
        log_every: 10,
        schedule: p.schedule,
        ..TrainConfig::default()
    };
    let out = dir.join(PHASE1_DIR);
    let mut src = CorpusSource::new(b);
    let budget = tc.budget;
    let mut trainer =
        Trainer::resume_or_new(&model, tc, &out, &mut src)?.with_control(control_of(opts));
    trainer.extend_budget(budget)?;
    let mut snapshots = Vec::new();
    for &f in &p.snapshots {
        let snap = Snapshot::at(f, total);
        let (step, path) = (snap.step, &snap.weights_in(dir));
        // Not written and passed: a continued run passed it under its shorter budget, so it has
        // no snapshot there.
        let (written, passed) = (path.is_file(), trainer.state().step > step);
        if !written && !passed {
            if trainer.state().step < step {
                trainer.train_until(&mut src, valid, Some(step))?;
                trainer.save_checkpoint(src.cursor())?;
            }
            let parent = path.parent().unwrap_or(&out);
            std::fs::create_dir_all(parent).map_err(io_at(parent))?;
            save_atomic(path, |tmp| Ok(model.params().save(tmp)?))?;
        }
        if written || !passed {
            snapshots.push(snap);
        }
    }
    let summary = trainer.train(&mut src, valid)?;
    opts.progress.say(|| {
        format!(
            "{}: phase 1 {} updates, train loss {:.4}, validation loss {:.4}, {:.0} tokens/s",
            spec.label(),
            summary.steps,
            summary.train_loss,
            summary.val_loss.unwrap_or(f64::NAN),
            summary.tokens_per_s
        )
    });
    Ok((model, summary, snapshots))
}

/// Trains (or resumes, or loads) one head per frozen tower of `model` in `heads_dir` until the
/// validation NLL stops improving, and measures the heads against the joint head and the
/// unigram model.
pub fn train_heads_in(
    spec: &RunSpec,
    model: &TwoTowerLm,
    data: &CorpusData,
    valid: &[TokenBatch],
    seed: u64,
    heads_dir: &Path,
    opts: &RunOptions,
) -> Result<(TowerHeads, HeadQuality)> {
    let h = &spec.heads;
    let heads = TowerHeads::new(&HeadConfig::for_model(model, h.input), model.device(), seed)?;
    let mut src = CorpusSource::new(batcher(
        &spec.style,
        &data.tok,
        data.train(),
        spec.phase1.seq_len,
        spec.phase1.batch_size,
        seed,
    )?);
    let k = model.config().n_towers;
    let tc = TrainConfig {
        lr: h.lr,
        budget: Budget::Tokens(h.max_budget_tokens),
        eval_every: h.eval_every,
        checkpoint_every: h.eval_every,
        checkpoint_secs: opts.checkpoint_secs,
        log_every: 10,
        early_stop: Some(EarlyStop {
            patience: h.patience,
            min_delta: h.min_delta,
        }),
        clip_groups: if h.per_head_clip {
            (0..k).map(|i| format!("head{i}.")).collect()
        } else {
            Vec::new()
        },
        ..TrainConfig::default()
    };
    let ctl = control_of(opts);
    let summary = retrain(model, &heads, tc, &mut src, valid, Some(heads_dir), &ctl)?;
    heads.save(heads_dir)?;
    let joint_nll = evaluate_loss(model, valid)?;
    let unigram_nll = unigram_cross_entropy(&data.freq, valid);
    let nll = summary.val_loss_per_tower.clone();
    let quality = HeadQuality {
        gap: nll.iter().map(|v| v - joint_nll).collect(),
        above_unigram: nll.iter().any(|&v| v >= unigram_nll),
        nll,
        joint_nll,
        unigram_nll,
        steps: summary.train.steps,
        stopped_early: summary.train.stopped_early,
    };
    opts.progress.say(|| {
        format!(
            "{}: heads (seed {seed}) {} updates{}, NLL {:?} (joint {:.4}, unigram {:.4}){}",
            spec.label(),
            quality.steps,
            if quality.stopped_early {
                ", stopped early"
            } else {
                ""
            },
            quality.nll,
            joint_nll,
            unigram_nll,
            if quality.above_unigram {
                " FLAG: a head is no better than unigram"
            } else {
                ""
            }
        )
    });
    Ok((heads, quality))
}

/// Scores every head of `heads` on the scoring set (the same positions and masks for every
/// tower); a request on `stop` ends it between batches.
pub(crate) fn score(
    model: &TwoTowerLm,
    heads: &TowerHeads,
    scoring: &ScoringSet,
    stop: &towers::StopToken,
) -> Result<PositionLogProbs> {
    Ok(heads::evaluate(
        model,
        heads,
        &scoring.batches,
        false,
        stop,
    )?)
}

/// The run options' stop token and progress, as training takes them.
fn control_of(opts: &RunOptions) -> towers::Control {
    towers::Control::new(opts.stop.clone(), opts.progress.clone())
}

/// −mean ln p_unigram(target) over the labelled positions of `batches`, with the unigram
/// distribution of the training counts `freq` smoothed by add-one.
pub fn unigram_cross_entropy(freq: &[u64], batches: &[TokenBatch]) -> f64 {
    let total: f64 = freq.iter().map(|&c| c as f64).sum::<f64>() + freq.len() as f64;
    let (mut sum, mut n) = (0f64, 0usize);
    for b in batches {
        for &l in b.labels.iter().filter(|&&l| l != IGNORE_LABEL) {
            let c = freq.get(l as usize).copied().unwrap_or(0) as f64 + 1.0;
            sum -= (c / total).ln();
            n += 1;
        }
    }
    sum / n.max(1) as f64
}
