//! One two-tower run as a job, end to end and resumable: phase 1 (joint training, with weight
//! snapshots for the agreement curve), phases 2/3 (one head per frozen tower, trained until the
//! validation NLL stops improving, and again with the retest head seed), and the scoring of
//! every head on the study's [`ScoringSet`]. Each snapshot's heads are a job of their own
//! ([`crate::snapshots`]).
//!
//! A run lives in one folder ([`crate::manifest`]). The same spec reuses it; new head settings
//! retrain the heads on the kept phase 1; a larger budget under the constant schedule continues
//! phase 1 (the old heads and scores move to `superseded/NNN/`); any other spec is refused.

use std::path::{Path, PathBuf};

use candle_core::Device;
use heads::PositionLogProbs;
use sha2::{Digest, Sha256};
use towers::{Schedule, TwoTowerLm};

use crate::data::CorpusData;
use crate::disk::WRITER_LOCK;
use crate::disk::{read_json, write_json_atomic};
use crate::error::io_at;
use crate::error::{ExperimentError, Result};
use crate::manifest::{build_name, device_name, read_manifest, MANIFEST_VERSION};
pub use crate::manifest::{
    HeadQuality, Manifest, RunId, RunOptions, RunResult, Snapshot, Stage, HEADS_DIR, MANIFEST_FILE,
    PHASE1_DIR, RETEST_HEADS_DIR, SNAPSHOT_HEADS_DIR, STUDY_DATA_DIR, TOKENIZER_DIR,
};
use crate::manifest::{MAIN, RETEST, SCORES_FILE};
use crate::scoring::ScoringSet;
use crate::snapshots::{load_snapshots, SnapshotScores};
use crate::spec::{spec_diff, RunSpec};
use crate::training::{model_at, phase1, score};
pub use crate::training::{train_heads_in, unigram_cross_entropy, validation_batches};
use crate::workspace::Workspace;
use heads::ScoresFile;

/// A scored run: its manifest and every head's log-probabilities on the scoring set.
#[derive(Debug)]
pub struct ScoredRun {
    /// `<model>-s<seed>` ([`RunId`]).
    pub label: String,
    /// Its folder.
    pub dir: PathBuf,
    /// Its manifest (with results).
    pub manifest: Manifest,
    /// Every head's log p(target) on the scoring set.
    pub logprobs: PositionLogProbs,
    /// The retest heads' log-probabilities, when the run has them.
    pub retest: Option<PositionLogProbs>,
    /// The trained model (when trained now or asked for).
    pub model: Option<TwoTowerLm>,
    /// The heads and scores of every phase-1 snapshot whose job has finished (the agreement
    /// curve's points, [`crate::snapshots`]).
    pub snapshots: Vec<SnapshotScores>,
    /// Whether a finished run was reused without training.
    pub reused: bool,
}

impl ScoredRun {
    /// Reads the finished run in `dir` (its manifest and scores file, and its finished snapshot
    /// jobs'; nothing trained, locked or written), from any folder on any machine: a run folder
    /// copied elsewhere loads the same. A folder without a manifest is [`ExperimentError::NotA`] a
    /// run folder; a run not finished is [`ExperimentError::Unfinished`] naming its stage.
    pub fn load(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let manifest = read_manifest(dir)?;
        manifest.finished_result()?;
        let file = ScoresFile::load(&dir.join(SCORES_FILE))?;
        scored_run(manifest, dir, file, None, true)
    }

    /// [`ScoredRun::load`] of every folder of `dirs`, in order; where some have not finished,
    /// one [`ExperimentError::Unfinished`] names each of them with its stage.
    pub fn load_all<P: AsRef<Path>>(dirs: &[P]) -> Result<Vec<Self>> {
        let (mut runs, mut unfinished) = (Vec::new(), Vec::new());
        for d in dirs {
            match Self::load(d) {
                Ok(r) => runs.push(r),
                Err(ExperimentError::Unfinished { runs, .. }) => unfinished.extend(runs),
                Err(e) => return Err(e),
            }
        }
        match unfinished.is_empty() {
            true => Ok(runs),
            false => Err(ExperimentError::Unfinished {
                runs: unfinished,
                total: dirs.len(),
            }),
        }
    }

    /// The results (a scored run always has them).
    pub fn result(&self) -> Result<&RunResult> {
        self.manifest.finished_result()
    }

    /// The trained phase-1 model of the run, read from its final checkpoint (no training, no
    /// scoring), with the vocabulary of `data`.
    pub fn trained_model(&self, data: &CorpusData, device: &Device) -> Result<TwoTowerLm> {
        model_at(&self.manifest.spec, &final_weights(&self.dir), data, device)
    }
}

/// The run of `manifest` in `dir` with its scores from `file`, its scores file.
fn scored_run(
    manifest: Manifest,
    dir: &Path,
    file: ScoresFile,
    model: Option<TwoTowerLm>,
    reused: bool,
) -> Result<ScoredRun> {
    let path = dir.join(SCORES_FILE);
    if file.scoring != manifest.scoring.fingerprint {
        return Err(ExperimentError::mismatch(
            format!("run {}", manifest.id),
            path.display().to_string(),
            "the scores file was scored on another scoring set",
        ));
    }
    let logprobs = file.require(MAIN, &path)?;
    let retest = match manifest.spec.retest_heads {
        true => Some(file.require(RETEST, &path)?),
        false => None,
    };
    let snapshots = load_snapshots(&manifest, dir)?;
    Ok(ScoredRun {
        label: manifest.id.to_string(),
        dir: dir.to_path_buf(),
        manifest,
        logprobs,
        retest,
        model,
        snapshots,
        reused,
    })
}

impl Workspace {
    /// Trains, resumes or reuses the run `spec` in its folder `run_dir` on this workspace's
    /// corpus, and scores it on `scoring` (a set of the run's style, e.g. from
    /// [`Workspace::scoring_set`]).
    ///
    /// A folder holding another run is refused naming the differing fields
    /// ([`crate::ExperimentError::SpecMismatch`]); a run scored on another set is refused
    /// ([`crate::ExperimentError::ScoringSetMismatch`]). A run stopped (SIGTERM: its checkpoint
    /// written) or killed resumes from its checkpoints bit-exactly on CPU; a finished one is
    /// reused (its model loaded only with [`RunOptions::need_model`]).
    ///
    /// A run folder has one writer: the call holds `<run_dir>/writer.lock` until it returns,
    /// and a second process on the same folder is refused with
    /// [`crate::ExperimentError::Locked`] naming the holder.
    pub fn ensure_run(
        &self,
        spec: &RunSpec,
        run_dir: &Path,
        scoring: &ScoringSet,
        opts: &RunOptions,
    ) -> Result<ScoredRun> {
        ensure_run(spec, run_dir, self, scoring, opts)
    }
}

/// [`Workspace::ensure_run`].
fn ensure_run(
    spec: &RunSpec,
    dir: &Path,
    ws: &Workspace,
    scoring: &ScoringSet,
    opts: &RunOptions,
) -> Result<ScoredRun> {
    spec.validate()?;
    if scoring.id.style != spec.style.scoring_style()? {
        return Err(ExperimentError::mismatch(
            format!("run {} ({})", spec.label(), spec.style),
            format!("the scoring set cut for {}", scoring.id.style),
            "a scoring set serves runs of its own style",
        ));
    }
    ws.check_corpus(spec)?;
    // The model's config (preset, sizes) before anything is written: a bad one leaves no
    // manifest that a corrected call would then be refused against.
    spec.model_config(ws.data().padded_vocab())?;
    std::fs::create_dir_all(dir).map_err(io_at(dir))?;
    // Held until this function returns: one writer per run folder.
    let _lock = files::FolderLock::acquire(&dir.join(WRITER_LOCK), "run")?;
    let mut m = open_manifest(spec, dir, ws.data(), scoring, opts)?;
    let reused = m.finished();
    let (file, model) = match reused {
        true => (ScoresFile::load(&dir.join(SCORES_FILE))?, None),
        false => train_and_score(&mut m, dir, ws.data(), scoring, opts)?,
    };
    let model = match (model, opts.need_model) {
        (Some(m), true) => Some(m),
        (None, true) => Some(model_at(
            spec,
            &final_weights(dir),
            ws.data(),
            &opts.device,
        )?),
        (_, false) => None,
    };
    scored_run(m, dir, file, model, reused)
}

/// The manifest of the run in `dir`: the saved one (continued to a larger budget where that is
/// allowed), or a new one written now (with a copy of the run's tokenizer).
fn open_manifest(
    spec: &RunSpec,
    dir: &Path,
    data: &CorpusData,
    scoring: &ScoringSet,
    opts: &RunOptions,
) -> Result<Manifest> {
    let path = dir.join(MANIFEST_FILE);
    if path.is_file() {
        let saved = read_manifest(dir)?;
        saved
            .scoring
            .check_comparable(&scoring.id, &dir.display().to_string(), "this study")?;
        return continue_manifest(saved, spec, dir, opts);
    }
    let name = data.tokenizer_path.file_name().unwrap_or_default();
    let tokenizer = Path::new(TOKENIZER_DIR).join(name);
    let copy = dir.join(&tokenizer);
    std::fs::create_dir_all(dir.join(TOKENIZER_DIR)).map_err(io_at(dir))?;
    let bytes = std::fs::read(&data.tokenizer_path).map_err(io_at(&data.tokenizer_path))?;
    crate::disk::write_bytes_atomic(&copy, &bytes)?;
    let m = Manifest {
        version: MANIFEST_VERSION,
        id: RunId::of(spec),
        spec: spec.clone(),
        stage: Stage::Phase1,
        step: 0,
        scoring: scoring.id.clone(),
        tokenizer,
        weights_sha256: None,
        device: device_name(&opts.device),
        build: build_name(),
        result: None,
    };
    write_json_atomic(&path, &m)?;
    Ok(m)
}

/// A saved manifest whose spec differs from `spec` only by a larger phase-1 budget (under the
/// constant schedule), or only in its head settings, is continued: its heads, snapshot jobs
/// and scores move to `superseded/NNN/` with the old manifest ([`supersede`]; hours of head
/// training are never deleted), the new spec is saved, and phase 1 goes on (or is kept as it
/// is). The same spec leaves it as it is; any other difference is refused.
fn continue_manifest(
    mut saved: Manifest,
    spec: &RunSpec,
    dir: &Path,
    opts: &RunOptions,
) -> Result<Manifest> {
    let fields = spec_diff(&saved.spec, spec);
    if fields.is_empty() {
        return Ok(saved);
    }
    let heads_only = fields.iter().all(|f| f.starts_with("heads."));
    if !heads_only {
        check_continuation(&saved.spec, spec, dir, fields.clone())?;
    }
    // Heads and scores belong to the old spec: move them away before the manifest names the
    // new one, so a kill in between never reuses them.
    let kept = supersede(&saved, dir)?;
    saved.spec = spec.clone();
    saved.result = None;
    saved.stage = Stage::Phase1;
    write_json_atomic(&dir.join(MANIFEST_FILE), &saved)?;
    let kept = match kept {
        Some(k) => format!("; the old heads and scores are in {}", k.display()),
        None => String::new(),
    };
    opts.progress.say(|| match heads_only {
        true => format!(
            "{}: {} changed: phase 1 kept, heads retrained{kept}",
            spec.label(),
            fields.join(", ")
        ),
        false => format!(
            "{}: continuing phase 1 to {} tokens (heads retrained){kept}",
            spec.label(),
            spec.phase1.budget_tokens
        ),
    });
    Ok(saved)
}

/// The folder of a run's superseded heads and scores.
pub const SUPERSEDED_DIR: &str = "superseded";

/// Moves the heads, snapshot jobs and scores of `saved` (the manifest in `dir`) into
/// `superseded/NNN/` beside a copy of the manifest they belong to, and returns that folder
/// (`None` when there was nothing to move). A call killed half way is finished by the next
/// one in the same folder: the last folder whose manifest equals `saved` is taken up again.
fn supersede(saved: &Manifest, dir: &Path) -> Result<Option<PathBuf>> {
    let items: Vec<PathBuf> = [HEADS_DIR, RETEST_HEADS_DIR, SNAPSHOT_HEADS_DIR, SCORES_FILE]
        .into_iter()
        .map(|name| dir.join(name))
        .filter(|p| p.exists())
        .collect();
    if items.is_empty() {
        return Ok(None);
    }
    let root = dir.join(SUPERSEDED_DIR);
    std::fs::create_dir_all(&root).map_err(io_at(&root))?;
    let mut taken: Vec<u32> = std::fs::read_dir(&root)
        .map_err(io_at(&root))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    taken.sort_unstable();
    let same = |n: &u32| {
        let m = root.join(format!("{n:03}")).join(MANIFEST_FILE);
        read_json::<Manifest>(&m).is_ok_and(|m| m == *saved)
    };
    let n = match taken.last() {
        Some(last) if same(last) => *last,
        Some(last) => last + 1,
        None => 1,
    };
    let to = root.join(format!("{n:03}"));
    std::fs::create_dir_all(&to).map_err(io_at(&to))?;
    write_json_atomic(&to.join(MANIFEST_FILE), saved)?;
    for from in items {
        let name = from.file_name().unwrap_or_default();
        std::fs::rename(&from, to.join(name)).map_err(io_at(&from))?;
    }
    Ok(Some(to))
}

/// The stages of the run of `m` not done yet: phase 1 (resumed from its checkpoint), the heads and
/// the retest heads with their scores. The manifest is saved after each stage and the scores file
/// after each head set, so a stop loses at most the stage in progress (its training resumes from
/// its checkpoint). Returns the scores file, and the model when phase 1 was loaded.
fn train_and_score(
    m: &mut Manifest,
    dir: &Path,
    data: &CorpusData,
    scoring: &ScoringSet,
    opts: &RunOptions,
) -> Result<(ScoresFile, Option<TwoTowerLm>)> {
    let spec = m.spec.clone();
    let valid = validation_batches(&spec, data)?;
    let scores_path = dir.join(SCORES_FILE);
    let mut scores = ScoresFile::open_or_new(&scores_path, &scoring.id.fingerprint)?;
    let save = |m: &mut Manifest, stage: Stage| {
        m.stage = stage;
        m.device = device_name(&opts.device);
        m.build = build_name();
        write_json_atomic(&dir.join(MANIFEST_FILE), &*m)
    };
    let mut model = None;
    if m.result.is_none() {
        let (trained, phase1, snapshots) = phase1(&spec, dir, data, &valid, opts)?;
        m.step = phase1.steps;
        m.weights_sha256 = Some(weights_sha256(dir)?);
        save(m, Stage::Heads)?;
        let mut heads_of = |seed: u64, folder: &str, set: &str| -> Result<HeadQuality> {
            let (heads, q) =
                train_heads_in(&spec, &trained, data, &valid, seed, &dir.join(folder), opts)?;
            scores.ensure(set, &scores_path, || {
                score(&trained, &heads, scoring, &opts.stop)
            })?;
            Ok(q)
        };
        let heads = heads_of(spec.head_seed, HEADS_DIR, MAIN)?;
        let retest = match spec.retest_heads {
            true => {
                save(m, Stage::RetestHeads)?;
                Some(heads_of(spec.head_seed + 1, RETEST_HEADS_DIR, RETEST)?)
            }
            false => None,
        };
        let main = scores.require(MAIN, &scores_path)?;
        m.result = Some(RunResult {
            phase1,
            heads,
            retest,
            positions: main.len() as u64,
            scored_nll: main.mean_nll(),
            snapshots,
        });
        model = Some(trained);
    }
    save(m, Stage::Done)?;
    Ok((scores, model))
}

/// SHA-256 (hex) of the run's final phase-1 weights.
fn weights_sha256(dir: &Path) -> Result<String> {
    let path = final_weights(dir);
    let bytes = std::fs::read(&path).map_err(io_at(&path))?;
    Ok(crate::scoring::hex(Sha256::digest(bytes)))
}

/// The final phase-1 weights of the run folder `dir`.
pub(crate) fn final_weights(dir: &Path) -> PathBuf {
    (dir.join(PHASE1_DIR))
        .join(towers::CHECKPOINT_DIR)
        .join(towers::WEIGHTS_FILE)
}

/// The shared token-embedding table of a model, one row per token id.
pub fn shared_embedding(model: &TwoTowerLm) -> Result<Vec<Vec<f32>>> {
    let table = model
        .params()
        .snapshot()?
        .remove("embed.tokens")
        .ok_or_else(|| ExperimentError::MissingParameter("embed.tokens".into()))?;
    Ok(table.to_vec2()?)
}

/// Where the run folder `dir` stands: its id and stage, read from its manifest (`None` for a
/// folder with no manifest yet). Nothing is locked or written, so it may be asked beside the
/// process training the run.
pub fn run_status(dir: &Path) -> Result<Option<(RunId, Stage, u64)>> {
    match dir.join(MANIFEST_FILE).is_file() {
        true => {
            let m = read_manifest(dir)?;
            Ok(Some((m.id, m.stage, m.step)))
        }
        false => Ok(None),
    }
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
