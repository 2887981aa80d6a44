//! Where each run of a study stands, read from its folder without training or locking
//! anything: the stage it is in, phase 1's tokens against its budget and its throughput so far,
//! each head training's updates, the snapshot heads done, and whether a live process holds the
//! run. Safe beside the process that trains it: nothing is written or locked, and every file
//! read is replaced atomically (a read that races a checkpoint's rename into place fails with
//! an error naming the file; ask again).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use towers::TrainSummary;

use crate::brought_snapshots::late_snapshots;
use crate::error::read_json;
use crate::lock::{LockHolder, WRITER_LOCK};
use crate::record::{
    RunRecord, Snapshot, HEADS_DIR, LOGPROBS_FILE, PHASE1_DIR, RETEST_HEADS_DIR, RUN_FILE,
    SNAPSHOT_HEADS_DIR,
};
use crate::resumable_scoring::PARTIAL_SCORES_FILE;
use crate::snapshots::{snapshot_heads_folder, snapshot_scores_file};
use crate::Result;

mod progress;
mod table;
#[cfg(test)]
mod tests;

pub use progress::TrainingProgress;
use progress::{finished, head_progress, latest_state, progress};
pub use table::status_table;

/// The step a run has reached, in the order a run goes through them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Stage {
    /// No `run.json` yet.
    NotStarted,
    /// Phase 1 has not spent its budget.
    Phase1,
    /// Phase 1 done; the heads (head seed) are training.
    Heads,
    /// The heads done; the retest heads (head seed + 1) are training.
    RetestHeads,
    /// Every head trained; the scores are not written yet.
    Scoring,
    /// Scored: the run's results are in its record (snapshot heads are counted apart).
    Finished,
}

impl Stage {
    /// The stage in words, as the status table writes it.
    pub fn describe(self) -> &'static str {
        match self {
            Stage::NotStarted => "not started",
            Stage::Phase1 => "phase 1",
            Stage::Heads => "heads",
            Stage::RetestHeads => "retest heads",
            Stage::Scoring => "scoring",
            Stage::Finished => "finished",
        }
    }
}

/// The next phase-1 snapshot a run in phase 1 has still to write (where `--stop-at-snapshot`
/// stops, and the next point of the agreement curve).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct NextSnapshot {
    /// Its fraction of phase 1's updates.
    pub fraction: f64,
    /// Its update.
    pub step: u64,
    /// Its number among the run's snapshots (1 = the first), as `--stop-at-snapshot` counts.
    pub number: usize,
}

/// One run's row of the status table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunStatus {
    /// `<model>-s<seed>`.
    pub label: String,
    /// Its folder.
    pub dir: PathBuf,
    /// The step it has reached.
    pub stage: Stage,
    /// Phase 1's budget in token positions (from the saved spec).
    pub phase1_budget: Option<u64>,
    /// Phase 1 so far (`None` before its first checkpoint).
    pub phase1: Option<TrainingProgress>,
    /// The heads so far.
    pub heads: Option<TrainingProgress>,
    /// The retest heads so far (`None` also for runs without them).
    pub retest: Option<TrainingProgress>,
    /// Snapshot heads scored, and how many the run's snapshots call for (one per snapshot and
    /// head seed).
    pub snapshot_heads: (usize, usize),
    /// The snapshot head training now (or stopped half way), if any.
    #[serde(default)]
    pub snapshot_training: Option<SnapshotTraining>,
    /// The next snapshot phase 1 has to write, while it is training.
    #[serde(default)]
    pub next_snapshot: Option<NextSnapshot>,
    /// Whether the run's spec trains retest heads (head seed + 1).
    #[serde(default)]
    pub retest_heads: bool,
    /// The run's writer lock, when one is there.
    pub writer: Option<WriterLock>,
}

/// A snapshot head training that has not finished: which snapshot, which head seed, how far.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotTraining {
    /// The snapshot's folder under `emergence/`, e.g. `step-0000488`.
    pub snapshot: String,
    /// The head seed.
    pub seed: u64,
    /// Its updates so far.
    pub progress: TrainingProgress,
    /// The snapshot folder's writer lock, when one is there: the run's own process, or one
    /// drawing the curve so far beside it ([`crate::curve_so_far`]).
    #[serde(default)]
    pub writer: Option<WriterLock>,
    /// Whether the heads' folder keeps part of a scoring pass
    /// ([`crate::resumable_scoring::PARTIAL_SCORES_FILE`]): trained, scored part of the way.
    #[serde(default)]
    pub scoring_kept: bool,
}

/// A run's `writer.lock`: who holds it, and whether that process is known to be gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriterLock {
    /// The holder it names (`None`: the file could not be read as one, e.g. it is being
    /// written).
    pub holder: Option<LockHolder>,
    /// The holder died without removing the lock ([`LockHolder::is_gone`]).
    pub gone: bool,
}

impl WriterLock {
    /// `pid <N> on <host> since <UTC time>`, with `(gone)` for a dead holder.
    pub fn describe(&self) -> String {
        match &self.holder {
            Some(h) => format!(
                "pid {} on {} since {}{}",
                h.pid,
                h.host,
                h.since_utc(),
                if self.gone { " (gone)" } else { "" }
            ),
            None => "an unreadable writer.lock".into(),
        }
    }
}

impl RunStatus {
    /// The training in progress, or stopped half way: a snapshot head that a live process
    /// holds while none holds the run (one drawing the curve so far beside a stopped phase 1),
    /// else by the run's stage phase 1, the heads, the retest heads, or (once the run is
    /// scored) a snapshot head; `None` when none is.
    pub fn current_training(&self) -> Option<&TrainingProgress> {
        let live = |w: &Option<WriterLock>| w.as_ref().is_some_and(|w| !w.gone);
        if let Some(t) = &self.snapshot_training {
            if live(&t.writer) && !live(&self.writer) {
                return Some(&t.progress);
            }
        }
        match self.stage {
            Stage::Phase1 => self.phase1.as_ref(),
            Stage::Heads => self.heads.as_ref(),
            Stage::RetestHeads => self.retest.as_ref(),
            _ => self.snapshot_training.as_ref().map(|t| &t.progress),
        }
    }

    /// Why the run has not finished, in a few words (`None` when it has): never started,
    /// still running (naming the stage and the process), or stopped in a stage.
    pub fn why_unfinished(&self) -> Option<String> {
        let stage = self.stage.describe();
        match (self.stage, &self.writer) {
            (Stage::Finished, _) => None,
            (Stage::NotStarted, _) => Some("never started".into()),
            (_, Some(w)) if !w.gone => Some(format!("still running: {stage}, {}", w.describe())),
            _ => Some(format!("stopped in {stage} (or failed: run its job again)")),
        }
    }

    /// How many head trainings the run has still to do, the one in progress included: its
    /// heads, its retest heads and its snapshots' heads not finished (`None` before it
    /// started). Each is at most the spec's head budget; phase 1, if not done, comes first.
    pub fn head_trainings_left(&self) -> Option<usize> {
        if self.stage == Stage::NotStarted {
            return None;
        }
        let open = |p: &Option<TrainingProgress>| usize::from(!p.as_ref().is_some_and(|p| p.done));
        let (scored, due) = self.snapshot_heads;
        let retest = match self.retest_heads {
            true => open(&self.retest),
            false => 0,
        };
        Some(open(&self.heads) + retest + due.saturating_sub(scored))
    }

    /// Why the heads of the run's phase-1 snapshots (the agreement curve's points) are not all
    /// scored, in a few words (`None` when they are): how many are, and whether a live process
    /// is training the rest. Counted apart from [`RunStatus::why_unfinished`]: tables without
    /// the curve do not wait for them.
    pub fn snapshot_heads_left(&self) -> Option<String> {
        let (scored, total) = self.snapshot_heads;
        if scored >= total {
            return None;
        }
        let how = match &self.writer {
            Some(w) if !w.gone => format!("still running: {}", w.describe()),
            _ => "stopped (run its job again)".into(),
        };
        Some(format!("snapshot heads {scored} of {total} scored, {how}"))
    }
}

/// Where the run in `dir` (labelled `label`) stands. An absent folder is
/// [`Stage::NotStarted`]; a malformed record or checkpoint state is an error naming the file.
pub fn run_status(label: &str, dir: &Path) -> Result<RunStatus> {
    let mut s = RunStatus {
        label: label.to_string(),
        dir: dir.to_path_buf(),
        stage: Stage::NotStarted,
        phase1_budget: None,
        phase1: None,
        heads: None,
        retest: None,
        snapshot_heads: (0, 0),
        snapshot_training: None,
        next_snapshot: None,
        retest_heads: false,
        writer: writer(dir),
    };
    let rec = dir.join(RUN_FILE);
    if !rec.is_file() {
        return Ok(s);
    }
    let record: RunRecord = read_json(&rec)?;
    let spec = &record.spec;
    s.phase1_budget = Some(spec.phase1.budget_tokens);
    match &record.result {
        // A finished run is described by its record, as the runs table describes it (its
        // checkpoints may have stayed on another machine).
        Some(r) => {
            let rate = phase1_tokens_per_s(dir, &r.phase1)?;
            s.phase1 = Some(finished(r.phase1.steps, r.phase1.tokens, rate));
            s.heads = Some(finished(r.heads.steps, 0, 0.0));
            s.retest = r.retest.as_ref().map(|q| finished(q.steps, 0, 0.0));
        }
        None => {
            let budget = spec.phase1.budget_tokens;
            let phase1 = dir.join(PHASE1_DIR);
            s.phase1 = progress(&phase1, |st, _| st.tokens >= budget)?;
            // A phase 1 that came back from another machine has its final weights and log but
            // no state.json: finished, as the run's next call will find it.
            let total = s
                .phase1
                .as_ref()
                .filter(|p| !p.done)
                .and_then(|p| p.total_steps);
            if let Some(Ok(Some(sum))) = total.map(|t| towers::finished_elsewhere(&phase1, t)) {
                let rate = phase1_tokens_per_s(dir, &sum)?;
                s.phase1 = Some(finished(sum.steps, sum.tokens, rate));
            }
            s.next_snapshot = next_snapshot(&phase1, &spec.phase1.snapshots, s.phase1.as_ref());
            s.heads = head_progress(&dir.join(HEADS_DIR))?;
            if spec.retest_heads {
                s.retest = head_progress(&dir.join(RETEST_HEADS_DIR))?;
            }
        }
    }
    let seeds = spec.head_seeds();
    // A finished run's snapshots are its record's and those brought since, which its next
    // call adopts and trains heads for (or refuses, saying why).
    let snapshots = match &record.result {
        Some(r) => r.snapshots.len() + late_snapshots(&record, dir).len(),
        None => spec.phase1.snapshots.len(),
    };
    let (scored, training) = snapshot_heads(dir, &seeds)?;
    s.snapshot_heads = (scored, snapshots * seeds.len());
    s.retest_heads = spec.retest_heads;
    s.snapshot_training = training;
    let done = |p: &Option<TrainingProgress>| p.as_ref().is_some_and(|p| p.done);
    s.stage = if record.result.is_some() && dir.join(LOGPROBS_FILE).is_file() {
        Stage::Finished
    } else if !done(&s.phase1) {
        Stage::Phase1
    } else if !done(&s.heads) {
        Stage::Heads
    } else if spec.retest_heads && !done(&s.retest) {
        Stage::RetestHeads
    } else {
        Stage::Scoring
    };
    Ok(s)
}

/// The first of phase 1's snapshots (fractions `fractions` of its updates, in the phase-1 folder
/// `phase1`) that is not written and lies past the newest update, while phase 1 trains with a
/// known total.
fn next_snapshot(
    phase1: &Path,
    fractions: &[f64],
    progress: Option<&TrainingProgress>,
) -> Option<NextSnapshot> {
    let p = progress.filter(|p| !p.done)?;
    let total = p.total_steps?;
    fractions.iter().enumerate().find_map(|(i, &f)| {
        let snap = Snapshot::at(phase1, f, total);
        (snap.step > p.newest_step() && !snap.path.is_file()).then_some(NextSnapshot {
            fraction: f,
            step: snap.step,
            number: i + 1,
        })
    })
}

/// Phase 1's tokens per second of update time over every call that trained it, for the run
/// in `dir` whose record says `recorded`: from its final checkpoint where that is here (records
/// written before 26 Nov 2026, towers b37f3e3, hold the last call's own rate instead, which for
/// a resumed run describes only its last stretch), else the record's.
pub fn phase1_tokens_per_s(dir: &Path, recorded: &TrainSummary) -> Result<f64> {
    Ok(match latest_state(&dir.join(PHASE1_DIR))? {
        Some(st) if st.tokens == recorded.tokens && st.elapsed_s > 0.0 => {
            st.tokens as f64 / st.elapsed_s
        }
        _ => recorded.tokens_per_s,
    })
}

/// Snapshot heads of head seeds `seeds` whose scores are written
/// (`emergence/step-*/logprobs-<seed>.json`), and the one training (a `heads-<seed>/` with a
/// checkpoint and no scores yet), the first in step order when a stopped run left several.
fn snapshot_heads(dir: &Path, seeds: &[u64]) -> Result<(usize, Option<SnapshotTraining>)> {
    let root = dir.join(SNAPSHOT_HEADS_DIR);
    if !root.is_dir() {
        return Ok((0, None));
    }
    let (mut scored, mut training) = (0, None);
    for step in sorted_entries(&root)? {
        if !step.is_dir() {
            continue;
        }
        for &seed in seeds {
            if step.join(snapshot_scores_file(seed)).is_file() {
                scored += 1;
                continue;
            }
            if training.is_some() {
                continue;
            }
            let heads_dir = step.join(snapshot_heads_folder(seed));
            if let Some(progress) = head_progress(&heads_dir)? {
                training = Some(SnapshotTraining {
                    scoring_kept: heads_dir.join(PARTIAL_SCORES_FILE).is_file(),
                    snapshot: step
                        .file_name()
                        .unwrap_or_default()
                        .to_string_lossy()
                        .into(),
                    seed,
                    progress,
                    writer: writer(&step),
                });
            }
        }
    }
    Ok((scored, training))
}

/// The entries of folder `dir`, sorted by name.
fn sorted_entries(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).map_err(crate::error::io_at(dir))? {
        out.push(e.map_err(crate::error::io_at(dir))?.path());
    }
    out.sort();
    Ok(out)
}

/// The run's writer lock, if there is one.
fn writer(dir: &Path) -> Option<WriterLock> {
    let text = std::fs::read_to_string(dir.join(WRITER_LOCK)).ok()?;
    let holder = serde_json::from_str::<LockHolder>(&text).ok();
    Some(WriterLock {
        gone: holder.as_ref().is_some_and(LockHolder::is_gone),
        holder,
    })
}
