//! The run stage's last step: heads for every phase-1 weight snapshot of a run (the agreement
//! curve's points), trained by the run's head rule and its retest seed, scored on the study's
//! scoring set, and cached under `<run>/emergence/step-<N>/` (`logprobs-<seed>.json`,
//! `heads_quality-<seed>.json`, `heads-<seed>/`), so a finished run reads them back. Each
//! snapshot's folder has one writer (`writer.lock`; a second waits and then reads), so that the
//! heads of the snapshots written so far can train beside the phase 1 still writing others
//! ([`written_snapshot_scores`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use heads::PositionLogProbs;
use towers::TwoTowerLm;

use crate::brought_snapshots::check_brought;
use crate::data::CorpusData;
use crate::error::{io_at, read_json, write_json_atomic};
use crate::lock::{FolderLock, WRITER_LOCK};
use crate::record::{
    heads_flagged, HeadQuality, RunOptions, RunRecord, Snapshot, PHASE1_DIR, RUN_FILE,
    SNAPSHOT_HEADS_DIR,
};
use crate::resumable_scoring::score_heads;
use crate::scoring::ScoringSet;
use crate::spec::require_same;
use crate::training::{compute_dtype, phase1_updates, train_heads_in, validation_batches};
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

/// The folder of the heads of the snapshot at update `step` in the run folder `dir`.
fn snapshot_folder(dir: &Path, step: u64) -> PathBuf {
    dir.join(SNAPSHOT_HEADS_DIR).join(format!("step-{step:07}"))
}

/// Whether the heads of head seed `seed` in the snapshot folder `dir` are scored (their
/// scores and their quality written).
fn scored(dir: &Path, seed: u64) -> bool {
    dir.join(snapshot_scores_file(seed)).is_file()
        && dir.join(snapshot_quality_file(seed)).is_file()
}

/// File name of the quality of the heads of head seed `seed` in a snapshot's folder.
fn snapshot_quality_file(seed: u64) -> String {
    format!("heads_quality-{seed}.json")
}

/// One snapshot of a run with what its head trainings need; the snapshot's model is loaded the
/// first time heads must be trained.
struct SnapshotHeads<'a> {
    record: &'a RunRecord,
    data: &'a CorpusData,
    scoring: &'a ScoringSet,
    opts: &'a RunOptions,
    /// The run's folder.
    run: &'a Path,
    /// The snapshot's folder of heads.
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
            dir.join(snapshot_quality_file(seed)),
        );
        if scored(dir, seed) {
            return Ok((read_json(&lp_path)?, read_json(&q_path)?));
        }
        std::fs::create_dir_all(dir).map_err(io_at(dir))?;
        // A snapshot's heads have one writer: the run's own process, or one training the heads
        // of the snapshots written so far beside its phase 1 (`crate::curve_so_far`). The one
        // that waited then reads what the other wrote.
        let label = self.record.spec.label();
        let _lock = FolderLock::acquire_waiting(
            &dir.join(WRITER_LOCK),
            "snapshot's heads",
            LOCK_POLL,
            |holder| {
                self.opts.progress.say(|| {
                    format!(
                        "{label}: waiting for {holder}, who trains the heads of {}",
                        dir.display()
                    )
                })
            },
        )?;
        if scored(dir, seed) {
            return Ok((read_json(&lp_path)?, read_json(&q_path)?));
        }
        let (run, record) = (self.run, self.record);
        record_unchanged(run, record)?;
        let spec = &record.spec;
        let (data, opts, scoring) = (self.data, self.opts, self.scoring);
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
        let lp = score_heads(model, &heads, &heads_dir, scoring, opts, |lp| {
            // A new spec saved meanwhile moved this snapshot's folder away: these heads are
            // not its, and their checkpoint must not be resumed under it.
            if let Err(e) = record_unchanged(run, record) {
                let _ = std::fs::remove_dir_all(&heads_dir);
                return Err(e);
            }
            write_json_atomic(&q_path, &q)?;
            write_json_atomic(&lp_path, lp)
        })?;
        Ok((lp, q))
    }
}

/// The run folder `run`'s saved record still holds the spec of `record` (as read): a process
/// training snapshot heads beside the run's own ([`written_snapshot_scores`]) read it hours ago.
fn record_unchanged(run: &Path, record: &RunRecord) -> Result<()> {
    let saved: RunRecord = read_json(&run.join(RUN_FILE))?;
    require_same(&saved.spec, &record.spec, run)
}

/// How often a process waiting for another's snapshot heads looks again.
const LOCK_POLL: Duration = Duration::from_secs(2);

/// The scores of every phase-1 snapshot of the finished run `record` in `dir`: heads trained
/// and scored once, then read from the cache (none with `RunOptions::snapshot_heads` off).
pub fn snapshot_scores(
    record: &RunRecord,
    dir: &Path,
    data: &CorpusData,
    scoring: &ScoringSet,
    opts: &RunOptions,
) -> Result<Vec<SnapshotScores>> {
    match opts.snapshot_heads {
        true => record_snapshot_scores(record, dir, data, scoring, opts, &|_| true),
        false => Ok(Vec::new()),
    }
}

/// The scores of the snapshots in the finished run's record: those whose fraction `train`
/// accepts with their heads trained where they are not cached yet, the others only where
/// already scored.
pub(crate) fn record_snapshot_scores(
    record: &RunRecord,
    dir: &Path,
    data: &CorpusData,
    scoring: &ScoringSet,
    opts: &RunOptions,
    train: &dyn Fn(f64) -> bool,
) -> Result<Vec<SnapshotScores>> {
    let Some(res) = record.result.as_ref() else {
        return Ok(Vec::new());
    };
    let per_update = res.phase1.tokens / res.phase1.steps.max(1);
    let snaps = &res.snapshots;
    scores_of(record, dir, snaps, per_update, data, scoring, opts, train)
}

/// The scores of the phase-1 snapshots that the run `record` in `dir`, whose phase 1 has not
/// finished, has written so far (its spec's fractions whose weights are in place), trained and
/// cached as [`snapshot_scores`] does (whatever `opts.snapshot_heads` says), so that the
/// finished run reads them back instead of training them again; a snapshot whose fraction
/// `train` does not accept is taken only where already scored, nothing trained for it.
/// Nothing of phase 1 is touched: the process training it may go on.
pub fn written_snapshot_scores(
    record: &RunRecord,
    dir: &Path,
    data: &CorpusData,
    scoring: &ScoringSet,
    opts: &RunOptions,
    train: &dyn Fn(f64) -> bool,
) -> Result<Vec<SnapshotScores>> {
    let spec = &record.spec;
    let (per_update, total) = phase1_updates(spec, data)?;
    let phase1 = dir.join(PHASE1_DIR);
    let written: Vec<Snapshot> = spec
        .phase1
        .snapshots
        .iter()
        .map(|&f| Snapshot::at(&phase1, f, total))
        .filter(|s| s.weights_in(dir).is_file())
        .collect();
    // A phase 1 brought from another machine brings its snapshots: each must show that it is
    // a point of that phase 1, as the run itself will require.
    // (An error here is a checkpoint being replaced under a running phase 1: not brought.)
    if matches!(towers::finished_elsewhere(&phase1, total), Ok(Some(_))) {
        check_brought(&phase1, &written)?;
    }
    scores_of(
        record, dir, &written, per_update, data, scoring, opts, train,
    )
}

/// The scores of the snapshots `snaps` of the run `record` in `dir` (`per_update` token
/// positions an update); of a snapshot whose fraction `train` does not accept, only where its
/// heads are all scored already.
#[allow(clippy::too_many_arguments)]
fn scores_of(
    record: &RunRecord,
    dir: &Path,
    snaps: &[Snapshot],
    per_update: u64,
    data: &CorpusData,
    scoring: &ScoringSet,
    opts: &RunOptions,
    train: &dyn Fn(f64) -> bool,
) -> Result<Vec<SnapshotScores>> {
    let spec = &record.spec;
    let seeds = spec.head_seeds();
    let mut out = Vec::new();
    for snap in snaps {
        let folder = snapshot_folder(dir, snap.step);
        if !train(snap.fraction) && !seeds.iter().all(|&seed| scored(&folder, seed)) {
            continue;
        }
        let mut s = SnapshotHeads {
            record,
            data,
            scoring,
            opts,
            run: dir,
            dir: folder,
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
