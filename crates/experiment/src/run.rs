//! One two-tower run, end to end and resumable: phase 1 (joint training, with weight snapshots
//! for the emergence figure), phases 2/3 (one head per frozen tower, trained until the
//! validation NLL stops improving, optionally a second time with another head seed) and the
//! scoring of every head on the study's [`ScoringSet`], and the heads of every phase-1 snapshot
//! (`snapshots`).
//!
//! A run lives in one folder: `run.json` ([`RunRecord`]: the spec, the scoring set it was
//! scored on, the results), `phase1/` and `heads/` (checkpoints, metrics), `logprobs.json`,
//! `emergence/` (the snapshot heads). The same spec reuses the folder; new head settings
//! retrain the heads on the kept phase 1; a larger budget under the constant schedule
//! continues phase 1 (either way the old heads and scores move to `superseded/NNN/`, never
//! deleted); any other spec is refused.

use std::path::{Path, PathBuf};

use candle_core::Device;
use heads::{PositionLogProbs, TowerHeads};
use towers::{Schedule, TwoTowerLm};

use crate::brought_snapshots::{check_brought, late_snapshots};
use crate::data::CorpusData;
use crate::error::{io_at, read_json, write_json_atomic};
use crate::lock::{FolderLock, WRITER_LOCK};
pub use crate::record::{
    HeadQuality, RunOptions, RunRecord, RunResult, Snapshot, HEADS_DIR, LOGPROBS_FILE, PHASE1_DIR,
    RETEST_FILE, RETEST_HEADS_DIR, RUN_FILE, SNAPSHOT_HEADS_DIR, STUDY_DATA_DIR,
};
use crate::scoring::ScoringSet;
use crate::snapshots::{snapshot_scores, SnapshotScores};
use crate::spec::{spec_diff, RunSpec};
use crate::training::{phase1, score};
pub use crate::training::{train_heads_in, unigram_cross_entropy, validation_batches};
use crate::workspace::Workspace;
use crate::{ExperimentError, Result};

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
    /// The heads and scores of every phase-1 snapshot (the agreement curve's points).
    pub snapshots: Vec<SnapshotScores>,
    /// Whether a finished run was reused without training.
    pub reused: bool,
}

impl ScoredRun {
    /// The results (a scored run always has them).
    pub fn result(&self) -> Result<&RunResult> {
        self.record
            .result
            .as_ref()
            .ok_or_else(|| ExperimentError::Unfinished {
                runs: vec![self.label.clone()],
                total: 1,
            })
    }
}

impl Workspace {
    /// Trains, resumes or reuses the run `spec` in its folder `run_dir` on this workspace's
    /// corpus, and scores it on `scoring` (a set of the run's style, e.g. from
    /// [`Workspace::scoring_set`]).
    ///
    /// A folder holding another run is refused naming the differing fields
    /// ([`crate::ExperimentError::SpecMismatch`]); a run scored on another set is refused
    /// ([`crate::ExperimentError::ScoringSetMismatch`]). A killed run resumes from its
    /// checkpoints bit-exactly on CPU; a finished one is reused (its model loaded only with
    /// [`RunOptions::need_model`]).
    ///
    /// A run folder has one writer: the call holds `<run_dir>/writer.lock` until it returns,
    /// and a second process on the same folder is refused with
    /// [`crate::ExperimentError::Locked`] naming the holder (a lock left by a dead process on
    /// this host is taken over, and said so).
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

/// Trains, resumes or reuses the run `spec` in `dir` on the corpus of `ws` and scores it on
/// `scoring` (see [`Workspace::ensure_run`], the public entry).
pub(crate) fn ensure_run(
    spec: &RunSpec,
    dir: &Path,
    ws: &Workspace,
    scoring: &ScoringSet,
    opts: &RunOptions,
) -> Result<ScoredRun> {
    spec.validate()?;
    if scoring.id.style != spec.style {
        return Err(ExperimentError::Mismatch {
            run: format!("run {} ({})", spec.label(), spec.style),
            data: format!("the scoring set cut for {}", scoring.id.style),
            why: "a scoring set serves runs of its own style".into(),
        });
    }
    // The run trains on the workspace's text and tokenizer: a spec naming others would record
    // a corpus it never saw.
    if spec.corpus != *ws.corpus() {
        return Err(ExperimentError::Mismatch {
            run: format!("run {} (corpus {:?})", spec.label(), spec.corpus),
            data: format!("the workspace opened on {:?}", ws.corpus()),
            why: "a run trains on its workspace's text and tokenizer".into(),
        });
    }
    // The model's config (preset, sizes) before anything is written: a bad one leaves no
    // record that a corrected call would then be refused against.
    spec.model_config(ws.data().padded_vocab())?;
    std::fs::create_dir_all(dir).map_err(io_at(dir))?;
    // Held until this function returns: one writer per run folder.
    let lock = FolderLock::acquire(&dir.join(WRITER_LOCK), "run")?;
    if let Some(stale) = lock.took_over() {
        opts.progress
            .say(|| format!("{}: took over the lock of {stale}", spec.label()));
    }
    let mut record = open_record(spec, dir, ws.dir(), scoring, opts)?;
    adopt_late_snapshots(&mut record, dir)?;
    let reused = finished(&record, dir);
    let scores = match reused {
        // A finished run is never trained or scored again: asked for its model, it loads its
        // final phase-1 weights (a run fetched without its heads' checkpoints would otherwise
        // train new heads and overwrite the scores it came with).
        true => Scores {
            model: match opts.need_model {
                true => Some(final_model(spec, dir, ws.data(), &opts.device)?),
                false => None,
            },
            ..read_scores(spec, dir)?
        },
        false => train_and_score(spec, &mut record, dir, ws.data(), scoring, opts)?,
    };
    let snapshots = snapshot_scores(&record, dir, ws.data(), scoring, opts)?;
    Ok(scored_run(record, dir, scores, snapshots, reused))
}

/// The finished run of `record` in `dir` read back without its lock (its scores are written
/// once; only a new spec for the run moves them away, under its lock), with the scores
/// `snapshots` of its snapshots.
pub(crate) fn read_finished(
    record: RunRecord,
    dir: &Path,
    snapshots: Vec<SnapshotScores>,
) -> Result<ScoredRun> {
    let scores = read_scores(&record.spec, dir)?;
    Ok(scored_run(record, dir, scores, snapshots, true))
}

/// Whether the run has finished: its record has results and its log-probabilities are written
/// (its scores are then read, never trained again).
pub(crate) fn finished(record: &RunRecord, dir: &Path) -> bool {
    record.result.is_some() && dir.join(LOGPROBS_FILE).is_file()
}

/// The run of `record` in `dir` with its scores and snapshots' scores.
fn scored_run(
    record: RunRecord,
    dir: &Path,
    scores: Scores,
    snapshots: Vec<SnapshotScores>,
    reused: bool,
) -> ScoredRun {
    ScoredRun {
        label: record.spec.label(),
        dir: dir.to_path_buf(),
        record,
        logprobs: scores.logprobs,
        retest: scores.retest,
        model: scores.model,
        snapshots,
        reused,
    }
}

/// Adds to a finished run's record the snapshots of its spec that were missing when it finished
/// and have been put in place since (one a lent GPU brought back later: docs/gpu.md), so that
/// their heads are trained like the others', once their log shows them to be points of this
/// run's phase 1 ([`check_brought`]); the record is saved when one was added.
fn adopt_late_snapshots(record: &mut RunRecord, dir: &Path) -> Result<()> {
    let late = late_snapshots(record, dir);
    // Brought from another machine: only with proof that they are points of this phase 1.
    check_brought(&dir.join(PHASE1_DIR), &late)?;
    if let (false, Some(res)) = (late.is_empty(), record.result.as_mut()) {
        res.snapshots.extend(late);
        res.snapshots.sort_by_key(|s| s.step);
        write_json_atomic(&dir.join(RUN_FILE), &*record)?;
    }
    Ok(())
}

/// What scoring a run gives: every head's log-probabilities (and the retest heads'), and the
/// model when it was trained now.
struct Scores {
    logprobs: PositionLogProbs,
    retest: Option<PositionLogProbs>,
    model: Option<TwoTowerLm>,
}

/// The record of the run in `dir`: the saved one (continued to a larger budget where that is
/// allowed), or a new one written now.
fn open_record(
    spec: &RunSpec,
    dir: &Path,
    data_dir: &Path,
    scoring: &ScoringSet,
    opts: &RunOptions,
) -> Result<RunRecord> {
    let rec_path = dir.join(RUN_FILE);
    if rec_path.is_file() {
        let saved: RunRecord = read_json(&rec_path)?;
        saved
            .scoring
            .check_comparable(&scoring.id, &dir.display().to_string(), "this study")?;
        return continue_record(saved, spec, dir, opts);
    }
    let r = RunRecord {
        spec: spec.clone(),
        data_dir: data_dir.to_path_buf(),
        scoring: scoring.id.clone(),
        result: None,
    };
    write_json_atomic(&rec_path, &r)?;
    Ok(r)
}

/// A saved record whose spec differs from `spec` only by a larger phase-1 budget (under the
/// constant schedule), or only in its head settings, is continued: its heads, snapshot heads
/// and scores move to `superseded/NNN/` with the old record ([`supersede`]; hours of head
/// training are never deleted), the new spec is saved, and phase 1 goes on (or is kept as it
/// is). The same spec leaves it as it is; any other difference is refused.
fn continue_record(
    mut saved: RunRecord,
    spec: &RunSpec,
    dir: &Path,
    opts: &RunOptions,
) -> Result<RunRecord> {
    let fields = spec_diff(&saved.spec, spec);
    if fields.is_empty() {
        return Ok(saved);
    }
    let heads_only = fields.iter().all(|f| f.starts_with("heads."));
    if !heads_only {
        check_continuation(&saved.spec, spec, dir, fields.clone())?;
    }
    // Held until the record names the new spec: a process drawing the curve so far cannot
    // start the heads of an old-spec snapshot in between.
    let writers = snapshot_writers(&dir.join(SNAPSHOT_HEADS_DIR))?;
    // Heads and scores belong to the old spec: move them away before the record names the new
    // one, so a kill in between never reuses them.
    let kept = supersede(&saved, dir)?;
    saved.spec = spec.clone();
    saved.result = None;
    write_json_atomic(&dir.join(RUN_FILE), &saved)?;
    release_moved(writers, kept.as_deref());
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

/// Moves the heads, snapshot heads and scores of `saved` (the record in `dir`) into
/// `superseded/NNN/` beside a copy of the record they belong to, and returns that folder
/// (`None` when there was nothing to move). A call killed half way is finished by the next
/// one in the same folder: the last folder whose record equals `saved` is taken up again.
fn supersede(saved: &RunRecord, dir: &Path) -> Result<Option<PathBuf>> {
    let items: Vec<PathBuf> = [HEADS_DIR, RETEST_HEADS_DIR, SNAPSHOT_HEADS_DIR]
        .into_iter()
        .chain([LOGPROBS_FILE, RETEST_FILE])
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
    let same_record = |n: &u32| {
        let rec = root.join(format!("{n:03}")).join(RUN_FILE);
        read_json::<RunRecord>(&rec).is_ok_and(|r| r == *saved)
    };
    let n = match taken.last() {
        Some(last) if same_record(last) => *last,
        Some(last) => last + 1,
        None => 1,
    };
    let to = root.join(format!("{n:03}"));
    std::fs::create_dir_all(&to).map_err(io_at(&to))?;
    write_json_atomic(&to.join(RUN_FILE), saved)?;
    for from in items {
        let name = from.file_name().unwrap_or_default();
        std::fs::rename(&from, to.join(name)).map_err(io_at(&from))?;
    }
    Ok(Some(to))
}

/// The lock of every snapshot folder in `emergence` (its name with its lock), so that no other
/// process (one drawing the curve so far, [`crate::curve_so_far`]) trains a snapshot's heads
/// while they move away; [`ExperimentError::Locked`] naming one that does now, before anything
/// moves. A snapshot folder made after this (by such a process, for a snapshot without heads
/// yet) finds the record changed before it writes scores, and removes what it trained.
fn snapshot_writers(emergence: &Path) -> Result<Vec<(std::ffi::OsString, FolderLock)>> {
    let Ok(entries) = std::fs::read_dir(emergence) else {
        return Ok(Vec::new());
    };
    let mut held = Vec::new();
    for e in entries {
        let step = e.map_err(io_at(emergence))?.path();
        if step.is_dir() {
            let lock = FolderLock::acquire(&step.join(WRITER_LOCK), "snapshot's heads")?;
            held.push((step.file_name().unwrap_or_default().to_owned(), lock));
        }
    }
    Ok(held)
}

/// Lets go of the snapshot locks of [`snapshot_writers`], whose files moved with their folders
/// into `kept` (`superseded/NNN/`), and removes those files there.
fn release_moved(writers: Vec<(std::ffi::OsString, FolderLock)>, kept: Option<&Path>) {
    for (step, lock) in writers {
        drop(lock);
        if let Some(k) = kept {
            let moved = k.join(SNAPSHOT_HEADS_DIR).join(step).join(WRITER_LOCK);
            // Best effort: a lock file left in superseded/ holds nothing back.
            let _ = std::fs::remove_file(moved);
        }
    }
}

/// A finished run's scores read back (and the retest heads').
fn read_scores(spec: &RunSpec, dir: &Path) -> Result<Scores> {
    let logprobs: PositionLogProbs = read_json(&dir.join(LOGPROBS_FILE))?;
    let retest = match spec.retest_heads {
        true => Some(read_json(&dir.join(RETEST_FILE))?),
        false => None,
    };
    Ok(Scores {
        logprobs,
        retest,
        model: None,
    })
}

/// Phase 1 (resumed from its checkpoint when there is one), the heads (and the retest heads),
/// their scores on `scoring`, and the record's results (saved).
fn train_and_score(
    spec: &RunSpec,
    record: &mut RunRecord,
    dir: &Path,
    data: &CorpusData,
    scoring: &ScoringSet,
    opts: &RunOptions,
) -> Result<Scores> {
    let valid = validation_batches(spec, data)?;
    let known: Vec<u64> = record
        .result
        .iter()
        .flat_map(|r| r.snapshots.iter().map(|s| s.step))
        .collect();
    let (model, phase1, snapshots) = phase1(spec, dir, data, &valid, &known, opts)?;
    let heads_in = |seed: u64, folder: &str| {
        train_heads_in(spec, &model, data, &valid, seed, &dir.join(folder), opts)
    };
    let (heads, quality) = heads_in(spec.head_seed, HEADS_DIR)?;
    let retest = match spec.retest_heads {
        true => Some(heads_in(spec.head_seed + 1, RETEST_HEADS_DIR)?),
        false => None,
    };
    let score_in = |heads: &TowerHeads, folder: &str, file: &str| {
        score(
            &model,
            heads,
            &dir.join(folder),
            scoring,
            &dir.join(file),
            opts,
        )
    };
    let logprobs = score_in(&heads, HEADS_DIR, LOGPROBS_FILE)?;
    let retest_lp = match &retest {
        Some((h, _)) => Some(score_in(h, RETEST_HEADS_DIR, RETEST_FILE)?),
        None => None,
    };
    let stretches = crate::machine::read_stretches(&dir.join(PHASE1_DIR))?;
    let phase1_machines = crate::machine::shares(&stretches, phase1.steps);
    record.result = Some(RunResult {
        phase1,
        heads: quality,
        retest: retest.map(|(_, q)| q),
        positions: logprobs.len() as u64,
        scored_nll: logprobs.mean_nll(),
        snapshots,
        machine: Some(crate::machine::describe(&opts.device)),
        phase1_machines,
    });
    write_json_atomic(&dir.join(RUN_FILE), &*record)?;
    Ok(Scores {
        logprobs,
        retest: retest_lp,
        model: Some(model),
    })
}

/// The record path of the run folder `dir`; a folder without one is
/// [`ExperimentError::NotA`] a run folder.
pub(crate) fn require_run_folder(dir: &Path) -> Result<PathBuf> {
    let rec_path = dir.join(RUN_FILE);
    match rec_path.is_file() {
        true => Ok(rec_path),
        false => Err(ExperimentError::NotA {
            path: dir.to_path_buf(),
            expected: format!("a run folder (it has no {RUN_FILE})"),
        }),
    }
}

/// Opens the run saved in `dir` (a folder with `run.json`, e.g. one of a study's): its data,
/// scoring set and scores, and with [`RunOptions::need_model`] its trained model (nothing is
/// trained again for a finished run). A finished run opened for its scores alone (neither the
/// model nor snapshot heads asked for) is read as it lies, without its writer lock and
/// writing nothing, so that it can be read while the process holding it still trains its
/// snapshot heads (a study's chain); anything else goes through [`Workspace::ensure_run`].
pub fn open_run(dir: &Path, opts: &RunOptions) -> Result<(CorpusData, ScoredRun)> {
    let rec_path = require_run_folder(dir)?;
    let record: RunRecord = read_json(&rec_path)?;
    let ws = Workspace::open(&record.spec.corpus, run_data_dir(&record, dir)?)?;
    let set = ws.saved_scoring_set(record.spec.style)?;
    if finished(&record, dir) && !opts.need_model && !opts.snapshot_heads {
        record
            .scoring
            .check_comparable(&set.id, &dir.display().to_string(), "this study")?;
        let scores = read_scores(&record.spec, dir)?;
        return Ok((
            ws.into_data(),
            scored_run(record, dir, scores, Vec::new(), true),
        ));
    }
    let run = ws.ensure_run(&record.spec, dir, &set, opts)?;
    Ok((ws.into_data(), run))
}

/// The data folder of the run saved in `dir`: the one its record names or, where that holds no
/// scoring set of the run's style (a study moved, or trained on another machine and fetched),
/// the study's own data folder beside the run. Whichever is found, the run's scoring-set
/// fingerprint is checked against it before anything is read. Nothing is created: a folder
/// with neither is an error naming both.
fn run_data_dir(record: &RunRecord, dir: &Path) -> Result<PathBuf> {
    let style = record.spec.style;
    let beside = dir.parent().map(|study| study.join(STUDY_DATA_DIR));
    let mut tried = Vec::new();
    for candidate in std::iter::once(record.data_dir.clone()).chain(beside) {
        let set = ScoringSet::path(&candidate, style);
        if set.is_file() {
            return Ok(candidate);
        }
        tried.push(set);
    }
    Err(ExperimentError::Missing {
        path: tried[0].clone(),
        what: match tried.get(1) {
            Some(beside) => format!(
                "the saved scoring set of this run's style (nor is it at {}, beside the run)",
                beside.display()
            ),
            None => "the saved scoring set of this run's style".into(),
        },
    })
}

/// The trained phase-1 model of a finished run, read from its final checkpoint (no training,
/// no scoring).
pub fn trained_model(run: &ScoredRun, data: &CorpusData, device: &Device) -> Result<TwoTowerLm> {
    final_model(&run.record.spec, &run.dir, data, device)
}

/// The final phase-1 model of the run `spec` in `dir`, read from its checkpoint.
fn final_model(
    spec: &RunSpec,
    dir: &Path,
    data: &CorpusData,
    device: &Device,
) -> Result<TwoTowerLm> {
    let path = (dir.join(crate::record::PHASE1_DIR))
        .join(towers::CHECKPOINT_DIR)
        .join(towers::WEIGHTS_FILE);
    if !path.is_file() {
        return Err(ExperimentError::Missing {
            path,
            what: "the run's final phase-1 weights".into(),
        });
    }
    let model = TwoTowerLm::new(&spec.model_config(data.padded_vocab())?, device, spec.seed)?
        .with_compute_dtype(crate::training::compute_dtype(device));
    model.params().load(&path)?;
    Ok(model)
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

/// Why the run folder `dir` has not finished ([`crate::status::RunStatus::why_unfinished`]:
/// never started, still running in a stage, or stopped in one), or `None` when it has.
pub fn why_unfinished(dir: &Path) -> Result<Option<String>> {
    Ok(crate::status::run_status("", dir)?.why_unfinished())
}

/// Every run of `runs` (label, folder) has finished, and with `snapshot_heads` (tables that
/// draw the agreement curve) has its snapshots' heads scored too; else
/// [`ExperimentError::Unfinished`] naming each one that has not, and why.
pub fn check_finished(runs: &[(String, PathBuf)], snapshot_heads: bool) -> Result<()> {
    let mut missing = Vec::new();
    for (label, dir) in runs {
        let st = crate::status::run_status(label, dir)?;
        let why = match (st.why_unfinished(), snapshot_heads) {
            (None, true) => st.snapshot_heads_left(),
            (why, _) => why,
        };
        if let Some(why) = why {
            missing.push(format!("{label} ({why})"));
        }
    }
    match missing.is_empty() {
        true => Ok(()),
        false => Err(ExperimentError::Unfinished {
            runs: missing,
            total: runs.len(),
        }),
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
