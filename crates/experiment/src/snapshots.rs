//! The run stage's last step: heads for every phase-1 weight snapshot of a run (the agreement
//! curve's points), trained by the run's head rule and its retest seed, scored on the study's
//! scoring set, and cached under `<run>/emergence/step-<N>/` (`logprobs-<seed>.json`,
//! `heads_quality-<seed>.json`, `heads-<seed>/`), so a finished run reads them back.

use std::path::PathBuf;

use heads::{evaluate, PositionLogProbs};
use towers::TwoTowerLm;

use crate::data::CorpusData;
use crate::error::{io_at, read_json, write_json_atomic};
use crate::record::{heads_flagged, HeadQuality, RunOptions, RunRecord, SNAPSHOT_HEADS_DIR};
use crate::scoring::ScoringSet;
use crate::training::{compute_dtype, train_heads_in, validation_batches};
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

/// File name of the scores of head seed `seed` in a snapshot's folder.
pub(crate) fn snapshot_scores_file(seed: u64) -> String {
    format!("logprobs-{seed}.json")
}

/// Folder name of the heads of head seed `seed` in a snapshot's folder.
pub(crate) fn snapshot_heads_folder(seed: u64) -> String {
    format!("heads-{seed}")
}

/// One snapshot of a run with what its head trainings need; the snapshot's model is loaded the
/// first time heads must be trained.
struct SnapshotHeads<'a> {
    record: &'a RunRecord,
    data: &'a CorpusData,
    scoring: &'a ScoringSet,
    opts: &'a RunOptions,
    dir: PathBuf,
    /// The snapshot's weights in the run's folder as it lies now (not the path recorded when
    /// it was written: the study may have moved or come from another machine).
    weights: PathBuf,
    model: Option<TwoTowerLm>,
}

impl SnapshotHeads<'_> {
    /// The heads of head seed `seed` and their scores, trained once, then read from the cache.
    fn heads(&mut self, seed: u64) -> Result<(PositionLogProbs, HeadQuality)> {
        let dir = &self.dir;
        let (lp_path, q_path) = (
            dir.join(snapshot_scores_file(seed)),
            dir.join(format!("heads_quality-{seed}.json")),
        );
        if lp_path.is_file() && q_path.is_file() {
            return Ok((read_json(&lp_path)?, read_json(&q_path)?));
        }
        std::fs::create_dir_all(dir).map_err(io_at(dir))?;
        let spec = &self.record.spec;
        let (data, opts) = (self.data, self.opts);
        let model = match &mut self.model {
            Some(m) => m,
            empty => {
                let cfg = spec.model_config(data.padded_vocab())?;
                let m = TwoTowerLm::new(&cfg, &opts.device, spec.seed)?
                    .with_compute_dtype(compute_dtype(&opts.device));
                m.params().load(&self.weights)?;
                empty.insert(m)
            }
        };
        let valid = validation_batches(spec, data)?;
        let heads_dir = dir.join(snapshot_heads_folder(seed));
        let (heads, q) = train_heads_in(spec, model, data, &valid, seed, &heads_dir, opts)?;
        let lp = evaluate(model, &heads, &self.scoring.batches, false)?;
        write_json_atomic(&q_path, &q)?;
        write_json_atomic(&lp_path, &lp)?;
        Ok((lp, q))
    }
}

/// The scores of every phase-1 snapshot of the finished run `record` in `dir`: heads trained
/// and scored once, then read from the cache (none with `RunOptions::snapshot_heads` off).
pub fn snapshot_scores(
    record: &RunRecord,
    dir: &std::path::Path,
    data: &CorpusData,
    scoring: &ScoringSet,
    opts: &RunOptions,
) -> Result<Vec<SnapshotScores>> {
    let Some(res) = record.result.as_ref().filter(|_| opts.snapshot_heads) else {
        return Ok(Vec::new());
    };
    let per_update = res.phase1.tokens / res.phase1.steps.max(1);
    let spec = &record.spec;
    let mut out = Vec::new();
    for snap in &res.snapshots {
        let mut s = SnapshotHeads {
            record,
            data,
            scoring,
            opts,
            dir: dir
                .join(SNAPSHOT_HEADS_DIR)
                .join(format!("step-{:07}", snap.step)),
            weights: snap.weights_in(dir),
            model: None,
        };
        let (logprobs, heads) = s.heads(spec.head_seed)?;
        let (retest, retest_heads) = match spec.retest_heads {
            true => {
                let (r, q) = s.heads(spec.head_seed + 1)?;
                (Some(r), Some(q))
            }
            false => (None, None),
        };
        out.push(SnapshotScores {
            fraction: snap.fraction,
            tokens: snap.step * per_update,
            heads,
            logprobs,
            retest_heads,
            retest,
        });
    }
    Ok(out)
}
