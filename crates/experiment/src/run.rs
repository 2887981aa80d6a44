//! One two-tower run, end to end and resumable: phase 1 (joint training, with weight snapshots
//! for the emergence figure), phases 2/3 (one head per frozen tower, trained until the
//! validation NLL stops improving, optionally a second time with another head seed) and the
//! scoring of every head on the study's [`ScoringSet`].
//!
//! A run lives in one folder: `run.json` ([`RunRecord`]: the spec, the scoring set it was
//! scored on, the results), `phase1/` and `heads/` (checkpoints, metrics), `logprobs.json`.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device};
use corpus::{TokenBatch, IGNORE_LABEL};
use heads::{evaluate, retrain, HeadConfig, PositionLogProbs, TowerHeads};
use serde::{Deserialize, Serialize};
use towers::evaluate_loss;
use towers::BatchSource;
use towers::{
    Budget, CorpusSource, EarlyStop, Schedule, TrainConfig, TrainSummary, Trainer, TwoTowerLm,
};

use crate::data::{batcher, CorpusData};
use crate::error::{io_at, read_json, write_json_atomic};
use crate::scoring::{ScoringSet, ScoringSetId};
use crate::spec::{spec_diff, RunSpec};
use crate::{ExperimentError, Result};

/// File name of a run's record.
pub const RUN_FILE: &str = "run.json";
/// File name of the scored log-probabilities.
pub const LOGPROBS_FILE: &str = "logprobs.json";
/// File name of the retest heads' log-probabilities.
pub const RETEST_FILE: &str = "logprobs_retest.json";

/// Seed of the validation batches: a constant, so every run validates on the same batches.
const VALID_SEED: u64 = 0x0076_616c_6964;

/// How well the heads of a run fit, measured on the validation batches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeadQuality {
    /// Mean NLL of each head (nats).
    pub nll: Vec<f64>,
    /// Mean NLL of the joint head over both towers on the same batches.
    pub joint_nll: f64,
    /// Each head's NLL minus the joint head's.
    pub gap: Vec<f64>,
    /// Cross-entropy of the training text's unigram distribution (add-one) on the same targets.
    pub unigram_nll: f64,
    /// A head ends no better than the unigram model: its scores would record head noise, not a
    /// division of labour. Every table that uses the run says so.
    pub above_unigram: bool,
    /// Updates of the heads' training.
    pub steps: u64,
    /// Whether early stopping ended it (otherwise the token budget did).
    pub stopped_early: bool,
}

/// A phase-1 weight snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Fraction of phase 1's updates done.
    pub fraction: f64,
    /// Update number.
    pub step: u64,
    /// The weights (safetensors).
    pub path: PathBuf,
}

/// What a finished run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// Phase 1.
    pub phase1: TrainSummary,
    /// Phases 2/3.
    pub heads: HeadQuality,
    /// The retest heads (second head seed), when the spec asks for them.
    pub retest: Option<HeadQuality>,
    /// Scored positions.
    pub positions: u64,
    /// Mean NLL of each head on the scoring set.
    pub scored_nll: Vec<f64>,
    /// Phase-1 snapshots.
    pub snapshots: Vec<Snapshot>,
}

/// `run.json`: the spec, where its data lives, the scoring set and the results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The run.
    pub spec: RunSpec,
    /// The study's data folder (synthetic text, trained tokenizer).
    pub data_dir: PathBuf,
    /// The scoring set the run was scored on.
    pub scoring: ScoringSetId,
    /// The results, once the run finished.
    pub result: Option<RunResult>,
}

/// Run-time choices that do not change what a run is.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Where to compute (bf16 compute with f32 master weights on CUDA).
    pub device: Device,
    /// Progress bars.
    pub progress: bool,
    /// Load (or train) the model even when the run finished (for embedding analyses).
    pub need_model: bool,
}

impl Default for RunOptions {
    /// CPU, progress bars, no model for a finished run.
    fn default() -> Self {
        Self {
            device: Device::Cpu,
            progress: true,
            need_model: false,
        }
    }
}

/// A scored run.
#[derive(Debug)]
pub struct ScoredRun {
    /// `<style>-s<seed>`.
    pub label: String,
    /// Its folder.
    pub dir: PathBuf,
    /// Its record (with results).
    pub record: RunRecord,
    /// Every head's log p(target) on the scoring set.
    pub logprobs: PositionLogProbs,
    /// The retest heads' log-probabilities, when asked for.
    pub retest: Option<PositionLogProbs>,
    /// The trained model (when trained now or asked for).
    pub model: Option<TwoTowerLm>,
    /// Whether a finished run was reused without training.
    pub reused: bool,
}

impl ScoredRun {
    /// The results (a scored run always has them).
    pub fn result(&self) -> Result<&RunResult> {
        self.record.result.as_ref().ok_or_else(|| {
            ExperimentError::Invalid(format!("run {} has no results yet", self.label))
        })
    }
}

/// Trains, resumes or reuses the run `spec` in `dir` and scores it on `scoring`.
///
/// A folder holding another run is refused naming the differing fields
/// ([`ExperimentError::SpecMismatch`]); a run scored on another set is refused
/// ([`ExperimentError::ScoringSetMismatch`]). A killed run resumes from its checkpoints
/// bit-exactly on CPU; a finished one is reused (its model loaded only with
/// [`RunOptions::need_model`]).
pub fn ensure_run(
    spec: &RunSpec,
    dir: &Path,
    data: &CorpusData,
    data_dir: &Path,
    scoring: &ScoringSet,
    opts: &RunOptions,
) -> Result<ScoredRun> {
    spec.validate()?;
    if scoring.id.style != spec.style {
        return Err(ExperimentError::Invalid(format!(
            "the scoring set was cut for {:?}, the run is {:?}",
            scoring.id.style, spec.style
        )));
    }
    std::fs::create_dir_all(dir).map_err(io_at(dir))?;
    let rec_path = dir.join(RUN_FILE);
    let mut record = if rec_path.is_file() {
        let mut saved: RunRecord = read_json(&rec_path)?;
        saved
            .scoring
            .check_comparable(&scoring.id, &dir.display().to_string(), "this study")?;
        let fields = spec_diff(&saved.spec, spec);
        if !fields.is_empty() {
            check_continuation(&saved.spec, spec, dir, fields)?;
            // Heads and scores belong to the shorter phase 1: remove them before the record
            // names the new budget, so a kill in between never reuses them.
            for d in ["heads", "heads_retest"] {
                remove_if_present(&dir.join(d))?;
            }
            for f in [LOGPROBS_FILE, RETEST_FILE] {
                remove_if_present(&dir.join(f))?;
            }
            saved.spec = spec.clone();
            saved.result = None;
            write_json_atomic(&rec_path, &saved)?;
            if opts.progress {
                println!(
                    "{}: continuing phase 1 to {} tokens (heads retrained)",
                    spec.label(),
                    spec.phase1.budget_tokens
                );
            }
        }
        saved
    } else {
        let r = RunRecord {
            spec: spec.clone(),
            data_dir: data_dir.to_path_buf(),
            scoring: scoring.id.clone(),
            result: None,
        };
        write_json_atomic(&rec_path, &r)?;
        r
    };
    let label = spec.label();
    let lp_path = dir.join(LOGPROBS_FILE);
    let rt_path = dir.join(RETEST_FILE);
    if record.result.is_some() && lp_path.is_file() && !opts.need_model {
        let logprobs: PositionLogProbs = read_json(&lp_path)?;
        let retest = match spec.retest_heads {
            true => Some(read_json(&rt_path)?),
            false => None,
        };
        return Ok(ScoredRun {
            label,
            dir: dir.to_path_buf(),
            record,
            logprobs,
            retest,
            model: None,
            reused: true,
        });
    }

    let valid = validation_batches(spec, data)?;
    let (model, phase1, snapshots) = phase1(spec, dir, data, &valid, opts)?;
    let (heads, quality) = train_heads_in(
        spec,
        &model,
        data,
        &valid,
        spec.head_seed,
        &dir.join("heads"),
        opts,
    )?;
    let retest = if spec.retest_heads {
        Some(train_heads_in(
            spec,
            &model,
            data,
            &valid,
            spec.head_seed + 1,
            &dir.join("heads_retest"),
            opts,
        )?)
    } else {
        None
    };
    let logprobs = score(&model, &heads, scoring, &lp_path)?;
    let retest_lp = match &retest {
        Some((h, _)) => Some(score(&model, h, scoring, &rt_path)?),
        None => None,
    };
    record.result = Some(RunResult {
        phase1,
        heads: quality,
        retest: retest.map(|(_, q)| q),
        positions: logprobs.len() as u64,
        scored_nll: logprobs.mean_nll(),
        snapshots,
    });
    write_json_atomic(&rec_path, &record)?;
    Ok(ScoredRun {
        label,
        dir: dir.to_path_buf(),
        record,
        logprobs,
        retest: retest_lp,
        model: Some(model),
        reused: false,
    })
}

/// Opens the run saved in `dir` (a folder with `run.json`, e.g. one of a study's): its data,
/// scoring set and scores, and with [`RunOptions::need_model`] its trained model (nothing is
/// trained again for a finished run).
pub fn open_run(dir: &Path, opts: &RunOptions) -> Result<(CorpusData, ScoredRun)> {
    let rec_path = dir.join(RUN_FILE);
    if !rec_path.is_file() {
        return Err(ExperimentError::NotA {
            path: dir.to_path_buf(),
            expected: format!("a run folder (it has no {RUN_FILE})"),
        });
    }
    let record: RunRecord = read_json(&rec_path)?;
    let data = CorpusData::load(&record.spec.corpus, &record.data_dir)?;
    let set = ScoringSet::load(&record.data_dir, record.spec.style, &data)?;
    let run = ensure_run(&record.spec, dir, &data, &record.data_dir, &set, opts)?;
    Ok((data, run))
}

/// The trained phase-1 model of a finished run, read from its final checkpoint (no training,
/// no scoring).
pub fn trained_model(run: &ScoredRun, data: &CorpusData, device: &Device) -> Result<TwoTowerLm> {
    let spec = &run.record.spec;
    let path = run.dir.join("phase1/checkpoint/weights.safetensors");
    if !path.is_file() {
        return Err(ExperimentError::Missing {
            path,
            what: "the run's final phase-1 weights".into(),
        });
    }
    let model = TwoTowerLm::new(&spec.model_config(data.padded_vocab())?, device, spec.seed)?;
    model.params().load(&path)?;
    Ok(model)
}

/// The shared token-embedding table of a model, one row per token id.
pub fn shared_embedding(model: &TwoTowerLm) -> Result<Vec<Vec<f32>>> {
    let table = model
        .params()
        .snapshot()?
        .remove("embed.tokens")
        .ok_or_else(|| ExperimentError::Invalid("the model has no embed.tokens table".into()))?;
    Ok(table.to_vec2()?)
}

/// A saved run may be continued only to a larger phase-1 budget under the constant schedule;
/// any other difference is a [`ExperimentError::SpecMismatch`] naming the fields.
fn check_continuation(
    saved: &RunSpec,
    spec: &RunSpec,
    dir: &Path,
    fields: Vec<String>,
) -> Result<()> {
    let grows = spec.phase1.budget_tokens > saved.phase1.budget_tokens;
    if fields == ["phase1.budget_tokens"] && grows {
        if matches!(spec.phase1.schedule, Schedule::Constant { .. }) {
            return Ok(());
        }
        return Err(ExperimentError::NotContinuable {
            path: dir.to_path_buf(),
            from: saved.phase1.budget_tokens,
            to: spec.phase1.budget_tokens,
        });
    }
    Err(ExperimentError::SpecMismatch {
        path: dir.to_path_buf(),
        fields,
    })
}

fn remove_if_present(path: &Path) -> Result<()> {
    let r = if path.is_dir() {
        std::fs::remove_dir_all(path)
    } else if path.is_file() {
        std::fs::remove_file(path)
    } else {
        return Ok(());
    };
    r.map_err(io_at(path))
}

/// The held-out batches that validate training (the same for every run: a constant seed).
pub fn validation_batches(spec: &RunSpec, data: &CorpusData) -> Result<Vec<TokenBatch>> {
    let p = &spec.phase1;
    let b = batcher(
        spec.style,
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

/// Phase 1 with its snapshots; returns the trained model.
fn phase1(
    spec: &RunSpec,
    dir: &Path,
    data: &CorpusData,
    valid: &[TokenBatch],
    opts: &RunOptions,
) -> Result<(TwoTowerLm, TrainSummary, Vec<Snapshot>)> {
    let p = &spec.phase1;
    let cfg = spec.model_config(data.padded_vocab())?;
    let dtype = if opts.device.is_cuda() {
        DType::BF16
    } else {
        DType::F32
    };
    let model = TwoTowerLm::new(&cfg, &opts.device, spec.seed)?.with_compute_dtype(dtype);
    let b = batcher(
        spec.style,
        &data.tok,
        data.train(),
        p.seq_len,
        p.batch_size,
        spec.seed,
    )?;
    let per_update = (b.data().seq_len() * p.batch_size.min(b.data().len()).max(1)) as u64;
    let total = p.budget_tokens.div_ceil(per_update).max(1);
    let tc = TrainConfig {
        lr: p.lr,
        budget: Budget::Tokens(p.budget_tokens),
        eval_every: p.eval_every,
        checkpoint_every: p.eval_every,
        log_every: 10,
        progress: opts.progress,
        schedule: p.schedule,
        ..TrainConfig::default()
    };
    let out = dir.join("phase1");
    let mut src = CorpusSource::new(b);
    let budget = tc.budget;
    let mut trainer = Trainer::resume_or_new(&model, tc, &out, &mut src)?;
    trainer.extend_budget(budget)?;
    let mut snapshots = Vec::new();
    for &f in &p.snapshots {
        let step = ((f * total as f64).round() as u64).clamp(1, total);
        let path = out
            .join("snapshots")
            .join(format!("step-{step:07}.safetensors"));
        if !path.is_file() {
            if trainer.state().step > step {
                // A continued run passed this point under its shorter budget: no snapshot.
                continue;
            }
            if trainer.state().step < step {
                trainer.train_until(&mut src, valid, Some(step))?;
                trainer.save_checkpoint(src.cursor())?;
            }
            let parent = path.parent().unwrap_or(&out);
            std::fs::create_dir_all(parent).map_err(io_at(parent))?;
            let tmp = path.with_extension("tmp");
            model.params().save(&tmp)?;
            std::fs::rename(&tmp, &path).map_err(io_at(&path))?;
        }
        snapshots.push(Snapshot {
            fraction: f,
            step,
            path,
        });
    }
    let summary = trainer.train(&mut src, valid)?;
    if opts.progress {
        println!(
            "{}: phase 1 {} updates, train loss {:.4}, validation loss {:.4}, {:.0} tokens/s",
            spec.label(),
            summary.steps,
            summary.train_loss,
            summary.val_loss.unwrap_or(f64::NAN),
            summary.tokens_per_s
        );
    }
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
        spec.style,
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
        log_every: 10,
        progress: opts.progress,
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
    let summary = retrain(model, &heads, tc, &mut src, valid, Some(heads_dir))?;
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
    if opts.progress {
        println!(
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
        );
    }
    Ok((heads, quality))
}

/// Scores every head on the scoring set and saves the log-probabilities atomically.
fn score(
    model: &TwoTowerLm,
    heads: &TowerHeads,
    scoring: &ScoringSet,
    path: &Path,
) -> Result<PositionLogProbs> {
    let lp = evaluate(model, heads, &scoring.batches, false)?;
    write_json_atomic(path, &lp)?;
    Ok(lp)
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
