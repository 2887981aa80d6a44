//! Scoring one phase-1 snapshot of a finished run is a job of its own (the agreement curve's
//! points): the run's head rule trains heads on the frozen snapshot (and the retest heads, when
//! the run has them), scored on the run's scoring set. Each snapshot has its own folder,
//! `<run>/emergence/step-<N>/`, with its own writer lock, its own manifest (`snapshot.json`,
//! [`SnapshotManifest`]), its heads' checkpoints (`heads-<seed>/`) and its own scores file (sets
//! `main` and `retest`), so the snapshots of one run can be scored by a job array in parallel,
//! and a stopped job resumes like a run. [`crate::ScoredRun::load`] gathers the finished ones.

use std::path::Path;

use heads::PositionLogProbs;
use serde::{Deserialize, Serialize};

use crate::disk::WRITER_LOCK;
use crate::disk::{read_json, write_json_atomic};
use crate::error::io_at;
use crate::error::{ExperimentError, Result};
use crate::manifest::{
    build_name, device_name, heads_flagged, read_manifest, HeadQuality, Manifest, RunId,
    RunOptions, Snapshot, Stage, MANIFEST_VERSION,
};
use crate::manifest::{MAIN, RETEST, SCORES_FILE};
use crate::scoring::ScoringSet;
use crate::training::{model_at, score, train_heads_in, validation_batches};
use crate::workspace::Workspace;
use heads::ScoresFile;

/// File name of a snapshot job's manifest, in its folder ([`Snapshot::job_dir`]).
pub const SNAPSHOT_MANIFEST: &str = "snapshot.json";

/// `snapshot.json`: which run and snapshot the job scores, how far it has got, its heads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotManifest {
    /// [`MANIFEST_VERSION`] of the layout.
    pub version: u32,
    /// The run whose snapshot this is.
    pub run: RunId,
    /// The snapshot.
    pub snapshot: Snapshot,
    /// Token positions phase 1 had trained by then.
    pub tokens: u64,
    /// The run's final phase-1 weights hash: the phase 1 the snapshot was taken from.
    pub run_weights_sha256: Option<String>,
    /// The scoring set's fingerprint ([`crate::ScoringSetId::fingerprint`]).
    pub scoring: String,
    /// [`Stage::Heads`], [`Stage::RetestHeads`] or [`Stage::Done`].
    pub stage: Stage,
    /// The heads of the run's head seed, once trained.
    pub heads: Option<HeadQuality>,
    /// The retest heads (head seed + 1), once trained, when the run has them.
    pub retest: Option<HeadQuality>,
    /// The device that last wrote the manifest.
    pub device: String,
    /// The build that last wrote the manifest.
    pub build: String,
}

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

/// The scores of every snapshot of the run `m` in `dir` whose job has finished, in phase-1
/// order; a snapshot not scored yet (no job, or one still running) is left out. A job folder
/// of another phase 1 or scoring set is refused.
pub(crate) fn load_snapshots(m: &Manifest, dir: &Path) -> Result<Vec<SnapshotScores>> {
    let Some(res) = &m.result else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for snap in &res.snapshots {
        let job = snap.job_dir(dir);
        if !job.join(SNAPSHOT_MANIFEST).is_file() {
            continue;
        }
        let sm: SnapshotManifest = read_json(&job.join(SNAPSHOT_MANIFEST))?;
        check_belongs(&sm, m, &job)?;
        if sm.stage == Stage::Done {
            out.push(snapshot_scores(&sm, &job)?);
        }
    }
    Ok(out)
}

/// The snapshot job's manifest `sm` (in `job`) is of the run `m`: its version, phase 1 and
/// scoring set.
fn check_belongs(sm: &SnapshotManifest, m: &Manifest, job: &Path) -> Result<()> {
    // A snapshot job's own layout is the same in manifest layouts 2 and 3.
    let why = if !(2..=MANIFEST_VERSION).contains(&sm.version) {
        "it is of another manifest version"
    } else if sm.run != m.id {
        "it belongs to another run"
    } else if sm.run_weights_sha256 != m.weights_sha256 {
        "it was taken from another phase 1"
    } else if sm.scoring != m.scoring.fingerprint {
        "it was scored on another scoring set"
    } else {
        return Ok(());
    };
    Err(ExperimentError::mismatch(
        format!("the snapshot job {}", job.display()),
        format!("run {}", m.id),
        why,
    ))
}

/// The finished snapshot job `sm`'s scores, read from its scores file in `job`.
fn snapshot_scores(sm: &SnapshotManifest, job: &Path) -> Result<SnapshotScores> {
    let path = job.join(SCORES_FILE);
    let file = ScoresFile::load(&path)?;
    let heads = sm.heads.clone().ok_or_else(|| ExperimentError::Missing {
        path: job.join(SNAPSHOT_MANIFEST),
        what: "the heads of a finished snapshot job".into(),
    })?;
    Ok(SnapshotScores {
        fraction: sm.snapshot.fraction,
        tokens: sm.tokens,
        heads,
        logprobs: file.require(MAIN, &path)?,
        retest_heads: sm.retest.clone(),
        retest: match &sm.retest {
            Some(_) => Some(file.require(RETEST, &path)?),
            None => None,
        },
    })
}

impl Workspace {
    /// Scores the phase-1 snapshot at `fraction` of the finished run in `run_dir` (a job of its
    /// own in `emergence/step-<N>/`): its heads trained, resumed from their checkpoints or
    /// reused, and scored on `scoring`, the run's scoring set.
    ///
    /// A run not finished is [`ExperimentError::Unfinished`]; a fraction at which the run has no
    /// snapshot, another scoring set or another corpus than the workspace's is refused. The job
    /// holds its folder's `writer.lock` until it returns ([`ExperimentError::Locked`] for a second
    /// writer), so jobs of different snapshots of one run may run at once.
    pub fn ensure_snapshot(
        &self,
        run_dir: &Path,
        fraction: f64,
        scoring: &ScoringSet,
        opts: &RunOptions,
    ) -> Result<SnapshotScores> {
        let m = read_manifest(run_dir)?;
        let (res, spec) = (m.finished_result()?, &m.spec);
        self.check_corpus(spec)?;
        let here = run_dir.display().to_string();
        m.scoring
            .check_comparable(&scoring.id, &here, "this scoring set")?;
        let Some(snap) = res.snapshots.iter().find(|s| s.fraction == fraction) else {
            let have: Vec<f64> = res.snapshots.iter().map(|s| s.fraction).collect();
            let why = format!("run {} has snapshots at {have:?}", m.id);
            return Err(ExperimentError::bad_setting("the snapshot", fraction, why));
        };
        let job = snap.job_dir(run_dir);
        std::fs::create_dir_all(&job).map_err(io_at(&job))?;
        let _lock = files::FolderLock::acquire(&job.join(WRITER_LOCK), "snapshot job")?;
        let path = job.join(SNAPSHOT_MANIFEST);
        let mut sm = match path.is_file() {
            true => read_json(&path)?,
            false => SnapshotManifest {
                version: MANIFEST_VERSION,
                run: m.id.clone(),
                snapshot: snap.clone(),
                tokens: snap.step * (res.phase1.tokens / res.phase1.steps.max(1)),
                run_weights_sha256: m.weights_sha256.clone(),
                scoring: m.scoring.fingerprint.clone(),
                stage: Stage::Heads,
                heads: None,
                retest: None,
                device: device_name(&opts.device),
                build: build_name(),
            },
        };
        check_belongs(&sm, &m, &job)?;
        if sm.stage == Stage::Done {
            return snapshot_scores(&sm, &job);
        }
        let data = self.data();
        let model = model_at(spec, &snap.weights_in(run_dir), data, &opts.device)?;
        let valid = validation_batches(spec, data)?;
        let scores_path = job.join(SCORES_FILE);
        let mut scores = ScoresFile::open_or_new(&scores_path, &sm.scoring)?;
        let mut heads_of = |seed: u64, set: &str| -> Result<HeadQuality> {
            let heads_dir = job.join(format!("heads-{seed}"));
            let (heads, q) = train_heads_in(spec, &model, data, &valid, seed, &heads_dir, opts)?;
            scores.ensure(set, &scores_path, || {
                score(&model, &heads, scoring, &opts.stop)
            })?;
            Ok(q)
        };
        let save = |sm: &mut SnapshotManifest, stage: Stage| {
            (sm.stage, sm.device, sm.build) = (stage, device_name(&opts.device), build_name());
            write_json_atomic(&path, &*sm)
        };
        save(&mut sm, Stage::Heads)?;
        sm.heads = Some(heads_of(spec.head_seed, MAIN)?);
        if spec.retest_heads {
            save(&mut sm, Stage::RetestHeads)?;
            sm.retest = Some(heads_of(spec.head_seed + 1, RETEST)?);
        }
        save(&mut sm, Stage::Done)?;
        snapshot_scores(&sm, &job)
    }
}
