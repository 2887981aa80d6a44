//! The run stage's last step: heads for every phase-1 weight snapshot of a run (the agreement
//! curve's points), trained by the run's head rule and its retest seed under
//! `<run>/emergence/step-<N>/heads-<seed>/` (checkpointed like every head training), and scored
//! on the study's scoring set into the run's scores file.

use std::path::Path;

use heads::PositionLogProbs;
use towers::TwoTowerLm;

use crate::data::CorpusData;
use crate::manifest::{
    heads_flagged, HeadQuality, Manifest, RunOptions, SnapshotHeads, SNAPSHOT_HEADS_DIR,
};
use crate::scores_file::{snapshot_set, ScoresFile};
use crate::scoring::ScoringSet;
use crate::training::{compute_dtype, score, train_heads_in, validation_batches};
use crate::Result;

/// The heads of one phase-1 snapshot and their log-probabilities on the scoring set.
#[derive(Debug, Clone)]
pub struct SnapshotScores {
    /// Fraction of phase 1's updates done.
    pub fraction: f64,
    /// Token positions trained by then.
    pub tokens: u64,
    /// The heads of the run's head seed.
    pub heads: HeadQuality,
    /// Their log p(target) on the scoring set.
    pub logprobs: PositionLogProbs,
    /// The retest heads (head seed + 1), when the run has them.
    pub retest_heads: Option<HeadQuality>,
    /// Their log-probabilities.
    pub retest: Option<PositionLogProbs>,
}

impl SnapshotScores {
    /// Whether a head of this point ended no better than the unigram model.
    pub fn flagged(&self) -> bool {
        heads_flagged(&self.heads, self.retest_heads.as_ref())
    }
}

/// The scores of every snapshot whose heads the manifest `m` records, read from the scores
/// file `file` (at `path`, named in errors).
pub(crate) fn snapshot_scores(
    m: &Manifest,
    file: &ScoresFile,
    path: &Path,
) -> Result<Vec<SnapshotScores>> {
    let Some(res) = &m.result else {
        return Ok(Vec::new());
    };
    res.snapshot_heads
        .iter()
        .map(|s| {
            let step = s.snapshot.step;
            Ok(SnapshotScores {
                fraction: s.snapshot.fraction,
                tokens: s.tokens,
                heads: s.heads.clone(),
                logprobs: file.require(&snapshot_set(step, false), path)?,
                retest_heads: s.retest.clone(),
                retest: match &s.retest {
                    Some(_) => Some(file.require(&snapshot_set(step, true), path)?),
                    None => None,
                },
            })
        })
        .collect()
}

/// Trains and scores the heads of every snapshot of the finished run `m` in `dir` not scored
/// yet, adding each one's scores to `scores` (saved at `scores_path`) and its heads to the
/// manifest (handed to `save_manifest`) as soon as it is done.
#[allow(clippy::too_many_arguments)]
pub(crate) fn score_snapshots(
    m: &mut Manifest,
    dir: &Path,
    data: &CorpusData,
    scoring: &ScoringSet,
    opts: &RunOptions,
    scores: &mut ScoresFile,
    scores_path: &Path,
    save_manifest: &mut dyn FnMut(&Manifest) -> Result<()>,
) -> Result<()> {
    let spec = m.spec.clone();
    let Some(res) = &m.result else {
        return Ok(());
    };
    let per_update = res.phase1.tokens / res.phase1.steps.max(1);
    let done: Vec<u64> = res.snapshot_heads.iter().map(|s| s.snapshot.step).collect();
    let left: Vec<_> = (res.snapshots.iter())
        .filter(|s| !done.contains(&s.step))
        .cloned()
        .collect();
    if left.is_empty() {
        return Ok(());
    }
    let valid = validation_batches(&spec, data)?;
    let cfg = spec.model_config(data.padded_vocab())?;
    for snap in left {
        let model = TwoTowerLm::new(&cfg, &opts.device, spec.seed)?
            .with_compute_dtype(compute_dtype(&opts.device));
        model.params().load(&snap.weights_in(dir))?;
        let folder = dir
            .join(SNAPSHOT_HEADS_DIR)
            .join(format!("step-{:07}", snap.step));
        let mut heads_of = |seed: u64, retest: bool| -> Result<HeadQuality> {
            let heads_dir = folder.join(format!("heads-{seed}"));
            let (heads, q) = train_heads_in(&spec, &model, data, &valid, seed, &heads_dir, opts)?;
            let set = snapshot_set(snap.step, retest);
            scores.ensure(&set, scores_path, || score(&model, &heads, scoring))?;
            Ok(q)
        };
        let heads = heads_of(spec.head_seed, false)?;
        let retest = match spec.retest_heads {
            true => Some(heads_of(spec.head_seed + 1, true)?),
            false => None,
        };
        if let Some(res) = m.result.as_mut() {
            res.snapshot_heads.push(SnapshotHeads {
                tokens: snap.step * per_update,
                snapshot: snap,
                heads,
                retest,
            });
        }
        save_manifest(m)?;
    }
    Ok(())
}
