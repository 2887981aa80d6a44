//! Where each run of a study stands, read from its folder without training or locking
//! anything: the stage it is in, phase 1's tokens against its budget and its throughput so far,
//! each head training's updates, the snapshot heads done, and whether a live process holds the
//! run. Safe beside the process that trains it: nothing is written or locked, and every file
//! read is replaced atomically (a read that races a checkpoint's rename into place fails with
//! an error naming the file; ask again).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use towers::{LoggedUpdate, TrainState, TrainSummary};

use crate::brought_snapshots::late_snapshots;
use crate::emergence::fraction_name;
use crate::error::read_json;
use crate::lock::{LockHolder, WRITER_LOCK};
use crate::record::{
    RunRecord, Snapshot, HEADS_DIR, LOGPROBS_FILE, PHASE1_DIR, RETEST_HEADS_DIR, RUN_FILE,
    SNAPSHOT_HEADS_DIR,
};
use crate::snapshots::{snapshot_heads_folder, snapshot_scores_file};
use crate::Result;

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

/// Updates of one training (phase 1 or a head training) so far.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TrainingProgress {
    /// Updates done at the last checkpoint.
    pub step: u64,
    /// Updates of the whole schedule, once known.
    pub total_steps: Option<u64>,
    /// Token positions consumed at the last checkpoint (0 where unknown: a finished head
    /// training's record counts updates only).
    pub tokens: u64,
    /// Tokens per second of update time over every call so far.
    pub tokens_per_s: Option<f64>,
    /// Whether the training has finished (its final weights are saved).
    pub done: bool,
    /// The newest update in the training's metrics log, where it is past the last checkpoint
    /// (the log gets a line every few updates; a stopped training resumes from the checkpoint).
    pub logged: Option<LoggedUpdate>,
}

impl TrainingProgress {
    /// Updates done: the newest logged, else the last checkpoint's.
    pub fn newest_step(&self) -> u64 {
        self.logged.map_or(self.step, |l| l.step)
    }

    /// Token positions consumed: the newest logged, else the last checkpoint's.
    pub fn newest_tokens(&self) -> u64 {
        self.logged.map_or(self.tokens, |l| l.tokens)
    }

    /// Minutes of update time until the schedule's last update, from the newest update at the
    /// rate and tokens per update of the last checkpoint (validations, checkpoints and scoring
    /// come on top); `None` once done, or before a checkpoint gives a rate and a total.
    pub fn minutes_left(&self) -> Option<f64> {
        self.minutes_to(self.total_steps?)
    }

    /// Minutes of update time until update `step`, reckoned as [`TrainingProgress::minutes_left`]
    /// does (0 once the newest update has passed it); `None` once done, or before a checkpoint
    /// gives a rate.
    pub fn minutes_to(&self, step: u64) -> Option<f64> {
        let rate = self.tokens_per_s?;
        if self.done || self.step == 0 || rate <= 0.0 {
            return None;
        }
        let per_update = self.tokens as f64 / self.step as f64;
        let left = step.saturating_sub(self.newest_step());
        Some(left as f64 * per_update / rate / 60.0)
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
    /// The training in progress, or stopped half way: phase 1, the heads, the retest heads, or
    /// (once the run is scored) a snapshot head; `None` when none is.
    pub fn current_training(&self) -> Option<&TrainingProgress> {
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

/// A finished training of `steps` updates (`tokens` and its rate where known, else 0).
fn finished(steps: u64, tokens: u64, tokens_per_s: f64) -> TrainingProgress {
    TrainingProgress {
        step: steps,
        total_steps: Some(steps),
        tokens,
        tokens_per_s: (tokens_per_s > 0.0).then_some(tokens_per_s),
        done: true,
        logged: None,
    }
}

/// The state of the newest checkpoint of the training in `dir`, if it has one.
fn latest_state(dir: &Path) -> Result<Option<TrainState>> {
    towers::latest_checkpoint(dir)
        .map(|ck| read_json(&ck.join("state.json")))
        .transpose()
}

/// The training in `dir` from its newest checkpoint and its metrics log (a training that has
/// logged updates but not yet saved a checkpoint is at checkpoint step 0); `done` says from its
/// state and folder whether it has finished.
fn progress(
    dir: &Path,
    done: impl FnOnce(&TrainState, &Path) -> bool,
) -> Result<Option<TrainingProgress>> {
    let checkpoint = latest_state(dir)?.map(|st| TrainingProgress {
        step: st.step,
        total_steps: st.total_steps,
        tokens: st.tokens,
        tokens_per_s: (st.elapsed_s > 0.0).then(|| st.tokens as f64 / st.elapsed_s),
        done: done(&st, dir),
        logged: None,
    });
    // A finished training's log says nothing more; an unfinished one's runs ahead.
    if checkpoint.as_ref().is_some_and(|p| p.done) {
        return Ok(checkpoint);
    }
    let logged = towers::newest_update(&dir.join(towers::METRICS_FILE))?;
    let mut p = match (checkpoint, logged) {
        (None, None) => return Ok(None),
        (checkpoint, _) => checkpoint.unwrap_or_default(),
    };
    // Before its first checkpoint only the log knows the schedule's total.
    p.total_steps = p.total_steps.or(logged.and_then(|l| l.total_steps));
    p.logged = logged.filter(|l| l.step > p.step);
    Ok(Some(p))
}

/// A head training in `dir`: finished once its weights are saved.
fn head_progress(dir: &Path) -> Result<Option<TrainingProgress>> {
    progress(dir, |_, d| d.join(heads::HEADS_FILE).is_file())
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
            if let Some(progress) = head_progress(&step.join(snapshot_heads_folder(seed)))? {
                training = Some(SnapshotTraining {
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

/// The status table: one row per run of `runs`, in their order.
pub fn status_table(runs: &[RunStatus]) -> report::Table {
    let mut t = report::Table::new(
        [
            "run",
            "stage",
            "phase-1 tokens",
            "budget",
            "done (%)",
            "tokens/s",
            "heads (updates)",
            "retest heads (updates)",
            "snapshot heads",
            "head trainings left",
            "ends in (min)",
            "writer",
        ]
        .map(String::from)
        .to_vec(),
    )
    .with_title("Where each run stands (read from its folder: the newest logged update)")
    .with_note(
        "phase-1 tokens: the newest in phase 1's metrics log (a line every few updates), which \
         runs ahead of its last checkpoint; tokens/s: phase 1's tokens over its update time at \
         the last checkpoint; heads: the newest logged updates of the schedule's total, with \
         the checkpoint a stopped training would resume at where that is earlier (a finished \
         one says done); \
         snapshot heads: scored of those the run's snapshots call for, and the one \
         training with its updates and the process holding that snapshot (the run's, or one \
         drawing the curve so far), or while phase 1 trains its next snapshot (its number, \
         as --stop-at-snapshot counts, its fraction and update, and the minutes until it at \
         phase 1's rate so far); head trainings left: heads, retest heads and snapshot \
         heads still to train, the one in progress included (after phase 1 where that is not \
         done); ends in: the training in progress (or stopped half \
         way), its updates left at its rate so far (update time; validations, checkpoints, \
         scoring and the run's other trainings come on top); writer: the process \
         holding the run (\"(gone)\": it died without removing its lock)",
    )
    .with_precision(1);
    let updates = |p: &Option<TrainingProgress>| match p {
        None => String::new(),
        Some(p) if p.done => format!("{} (done)", p.step),
        Some(p) => describe_updates(p),
    };
    for r in runs {
        let tokens = r.phase1.as_ref().map(TrainingProgress::newest_tokens);
        let share = match (tokens, r.phase1_budget) {
            (Some(t), Some(b)) if b > 0 => Some(100.0 * (t.min(b)) as f64 / b as f64),
            _ => None,
        };
        t.push_row(vec![
            report::Cell::from(r.label.as_str()),
            report::Cell::from(r.stage.describe()),
            report::Cell::from(tokens.map(|t| t as usize)),
            report::Cell::from(r.phase1_budget.map(|b| b as usize)),
            report::Cell::from(share),
            report::Cell::from(r.phase1.as_ref().and_then(|p| p.tokens_per_s)),
            report::Cell::from(updates(&r.heads).as_str()),
            report::Cell::from(updates(&r.retest).as_str()),
            report::Cell::from(snapshot_cell(r).as_str()),
            report::Cell::from(r.head_trainings_left()),
            report::Cell::from(
                r.current_training()
                    .and_then(TrainingProgress::minutes_left),
            ),
            report::Cell::from(r.writer.as_ref().map(WriterLock::describe)),
        ]);
    }
    t
}

/// `N of TOTAL` (`N` where the total is not known yet), with `(resumes at M)` where the
/// newest logged update is past the last checkpoint.
fn describe_updates(p: &TrainingProgress) -> String {
    let mut s = match p.total_steps {
        Some(total) => format!("{} of {total}", p.newest_step()),
        None => p.newest_step().to_string(),
    };
    if p.logged.is_some() {
        s.push_str(&format!(" (resumes at {})", p.step));
    }
    s
}

/// `scored of due`, and the one training with its updates, or phase 1's next snapshot with
/// the minutes until it at phase 1's rate so far.
fn snapshot_cell(r: &RunStatus) -> String {
    let (scored, due) = r.snapshot_heads;
    let next = |n: &NextSnapshot| {
        let eta = r.phase1.as_ref().and_then(|p| p.minutes_to(n.step));
        format!(
            "; next snapshot {} ({}) at update {}{}",
            n.number,
            fraction_name(n.fraction),
            n.step,
            eta.map_or(String::new(), |m| format!(" in {m:.0} min"))
        )
    };
    match &r.snapshot_training {
        None => format!(
            "{scored} of {due}{}",
            r.next_snapshot.as_ref().map_or(String::new(), next)
        ),
        Some(t) => format!(
            "{scored} of {due}; {} seed {}: {}{}",
            t.snapshot,
            t.seed,
            describe_updates(&t.progress),
            match &t.writer {
                Some(w) => format!(", by {}", w.describe()),
                None => String::new(),
            }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A head checkpoint's `state.json` at `step` of `total` updates.
    fn head_checkpoint(heads_dir: &Path, step: u64, total: u64) {
        let ck = heads_dir.join(towers::CHECKPOINT_DIR);
        std::fs::create_dir_all(&ck).unwrap();
        let state = TrainState {
            step,
            tokens: step * 2048,
            total_steps: Some(total),
            elapsed_s: 10.0,
            cursor: serde_json::Value::Null,
            train: towers::TrainConfig::default(),
            recent_losses: Vec::new(),
            best_val_loss: None,
            evals_since_best: 0,
            stopped_early: false,
            final_val_loss: None,
            optimizer_step: None,
        };
        std::fs::write(ck.join("state.json"), serde_json::to_vec(&state).unwrap()).unwrap();
    }

    /// Appends update lines for `steps` (2048 tokens each) to the metrics log in `dir`, as a
    /// log written before the lines stated the schedule's total.
    fn log_updates(dir: &Path, steps: &[u64]) {
        log_updates_of(dir, steps, None)
    }

    /// [`log_updates`], the lines stating `total` updates where given.
    fn log_updates_of(dir: &Path, steps: &[u64], total: Option<u64>) {
        use std::io::Write;
        std::fs::create_dir_all(dir).unwrap();
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(towers::METRICS_FILE))
            .unwrap();
        for &step in steps {
            let mut line = serde_json::json!({"loss": 5.0, "step": step, "tokens": step * 2048});
            if let Some(total) = total {
                line["total_steps"] = total.into();
            }
            writeln!(log, "{line}").unwrap();
        }
    }

    #[test]
    fn progress_reads_the_newest_logged_update_past_the_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let heads = dir.path().join("heads");
        assert_eq!(head_progress(&heads).unwrap(), None, "nothing there yet");
        // Logged before its first checkpoint: at checkpoint 0, 20 logged.
        log_updates(&heads, &[10, 20]);
        let p = head_progress(&heads)
            .unwrap()
            .expect("a training that has logged");
        assert_eq!(
            (p.step, p.newest_step(), p.newest_tokens()),
            (0, 20, 40_960)
        );
        assert_eq!(describe_updates(&p), "20 (resumes at 0)", "an older log");
        // A log that states the schedule's total gives it before the first checkpoint.
        log_updates_of(&heads, &[30], Some(977));
        let p = head_progress(&heads).unwrap().unwrap();
        assert_eq!(describe_updates(&p), "30 of 977 (resumes at 0)");
        // A checkpoint at 300 of 977, the log at 420: both shown.
        head_checkpoint(&heads, 300, 977);
        log_updates(&heads, &[300, 420]);
        let p = head_progress(&heads).unwrap().unwrap();
        assert_eq!(p.logged.map(|l| l.step), Some(420));
        assert_eq!(describe_updates(&p), "420 of 977 (resumes at 300)");
        // A resumed training whose log has not passed its checkpoint yet: the checkpoint.
        head_checkpoint(&heads, 500, 977);
        let p = head_progress(&heads).unwrap().unwrap();
        assert_eq!((p.logged, p.newest_step()), (None, 500));
        assert_eq!(describe_updates(&p), "500 of 977");
        // Finished: its weights are saved; the log no longer matters.
        log_updates(&heads, &[970]);
        head_checkpoint(&heads, 977, 977);
        std::fs::write(heads.join(heads::HEADS_FILE), "w").unwrap();
        let p = head_progress(&heads).unwrap().unwrap();
        assert!(p.done && p.logged.is_none());
    }

    #[test]
    fn the_training_in_progress_ends_at_its_rate_so_far() {
        let dir = tempfile::tempdir().unwrap();
        let heads = dir.path().join("heads");
        // Checkpoint at 300 of 977 after 10 s (2048 tokens an update: 61,440 tokens/s), the
        // log at 420: 557 updates left, 1,140,736 tokens, 18.57 s.
        head_checkpoint(&heads, 300, 977);
        log_updates(&heads, &[420]);
        let p = head_progress(&heads).unwrap().unwrap();
        let left = p.minutes_left().unwrap();
        assert!(
            (left * 60.0 - 557.0 * 2048.0 / 61_440.0).abs() < 1e-9,
            "{left}"
        );
        // No rate before a checkpoint, none once done.
        let fresh = TrainingProgress {
            total_steps: Some(977),
            ..TrainingProgress::default()
        };
        assert_eq!(fresh.minutes_left(), None);
        let done = TrainingProgress {
            done: true,
            ..p.clone()
        };
        assert_eq!(done.minutes_left(), None);
        // The run's current training follows its stage; the table shows it.
        let mut r = run_status("gpt-s0", dir.path()).unwrap();
        r.stage = Stage::Heads;
        r.heads = Some(p.clone());
        assert_eq!(r.current_training(), Some(&p));
        r.stage = Stage::Finished;
        assert_eq!(r.current_training(), None);
        r.snapshot_training = Some(SnapshotTraining {
            snapshot: "step-0000488".into(),
            seed: 5,
            progress: p.clone(),
            writer: None,
        });
        assert_eq!(r.current_training(), Some(&p));
        let md = status_table(&[r]).to_markdown();
        let row = md.lines().find(|l| l.starts_with("| gpt-s0")).unwrap();
        assert!(
            md.contains("ends in (min)") && row.contains(" 0.3 |"),
            "{md}"
        );
    }

    #[test]
    fn phase_one_names_its_next_snapshot_and_the_minutes_until_it() {
        let dir = tempfile::tempdir().unwrap();
        let phase1 = dir.path().join(PHASE1_DIR);
        // Checkpoint at 300 of 3,907 updates (2048 tokens each, 240 tokens/s), logged at 420.
        let p = TrainingProgress {
            step: 300,
            total_steps: Some(3907),
            tokens: 300 * 2048,
            tokens_per_s: Some(240.0),
            done: false,
            logged: Some(LoggedUpdate {
                step: 420,
                tokens: 420 * 2048,
                total_steps: Some(3907),
            }),
        };
        let fractions = [0.125, 0.25, 0.5];
        let next = |p: &TrainingProgress| next_snapshot(&phase1, &fractions, Some(p));
        // 1/8 of 3,907 is update 488 (rounded), not written yet.
        assert_eq!(
            next(&p),
            Some(NextSnapshot {
                fraction: 0.125,
                step: 488,
                number: 1
            })
        );
        // Written: the next is 1/4 at 977, the second.
        let snap = Snapshot::at(&phase1, 0.125, 3907).path;
        std::fs::create_dir_all(snap.parent().unwrap()).unwrap();
        std::fs::write(&snap, b"w").unwrap();
        let n = next(&p).unwrap();
        assert_eq!((n.number, n.step), (2, 977));
        // Past the last snapshot, done, or without a total: none.
        let late = TrainingProgress {
            logged: None,
            step: 2000,
            ..p.clone()
        };
        assert_eq!(next(&late), None);
        let done = TrainingProgress {
            done: true,
            ..p.clone()
        };
        assert_eq!(next(&done), None);
        let untold = TrainingProgress {
            total_steps: None,
            ..p.clone()
        };
        assert_eq!(next(&untold), None);
        // The table's cell: 557 updates from the newest (420) to 977, at the checkpoint's rate.
        let mut r = run_status("elmo-s0", dir.path()).unwrap();
        r.stage = Stage::Phase1;
        r.snapshot_heads = (2, 6);
        r.phase1 = Some(p.clone());
        r.next_snapshot = Some(n);
        let minutes = 557.0 * 2048.0 / 240.0 / 60.0;
        assert!((p.minutes_to(977).unwrap() - minutes).abs() < 1e-9);
        let md = status_table(&[r.clone()]).to_markdown();
        assert!(
            md.contains("2 of 6; next snapshot 2 (1/4) at update 977 in 79 min"),
            "{md}"
        );
        // Before a checkpoint gives a rate: the snapshot without the minutes.
        r.phase1 = Some(TrainingProgress {
            tokens_per_s: None,
            ..p
        });
        let md = status_table(&[r]).to_markdown();
        assert!(
            md.contains("2 of 6; next snapshot 2 (1/4) at update 977 |"),
            "{md}"
        );
    }

    #[test]
    fn the_snapshot_head_in_training_is_found_beside_the_scored_ones() {
        let dir = tempfile::tempdir().unwrap();
        let em = dir.path().join(SNAPSHOT_HEADS_DIR);
        // step 1: both seeds scored; step 2: seed 5 scored, seed 6 at 300 of 977.
        for (step, seed, scored) in [(1, 5, true), (1, 6, true), (2, 5, true), (2, 6, false)] {
            let d = em.join(format!("step-{step:07}"));
            head_checkpoint(&d.join(format!("heads-{seed}")), 977, 977);
            if scored {
                std::fs::write(d.join(format!("logprobs-{seed}.json")), "{}").unwrap();
            } else {
                head_checkpoint(&d.join(format!("heads-{seed}")), 300, 977);
            }
        }
        let (scored, training) = snapshot_heads(dir.path(), &[5, 6]).unwrap();
        assert_eq!(scored, 3);
        let t = training.expect("the head in training");
        assert_eq!((t.snapshot.as_str(), t.seed), ("step-0000002", 6));
        assert_eq!((t.progress.step, t.progress.total_steps), (300, Some(977)));
        assert!(!t.progress.done);
        assert_eq!(t.writer, None);
        // A process training it (the run's, or one drawing the curve so far) is named.
        let lock = crate::lock::FolderLock::acquire(
            &em.join("step-0000002").join(WRITER_LOCK),
            "snapshot's heads",
        )
        .unwrap();
        let (_, training) = snapshot_heads(dir.path(), &[5, 6]).unwrap();
        let w = training.unwrap().writer.expect("the snapshot's writer");
        // Not `since_unix`: a second may pass between taking the lock and asking here.
        let (h, me) = (w.holder.clone().unwrap(), LockHolder::this_process());
        assert_eq!(
            (h.pid, &h.host, h.proc_start),
            (me.pid, &me.host, me.proc_start)
        );
        assert!(w
            .describe()
            .starts_with(&format!("pid {}", std::process::id())));
        drop(lock);
        // Once it is scored, nothing is in training.
        std::fs::write(em.join("step-0000002/logprobs-6.json"), "{}").unwrap();
        assert_eq!(snapshot_heads(dir.path(), &[5, 6]).unwrap(), (4, None));
        // A damaged checkpoint state is an error naming its file, not a silent zero.
        std::fs::remove_file(em.join("step-0000002/logprobs-6.json")).unwrap();
        let state = em.join("step-0000002/heads-6/checkpoint/state.json");
        std::fs::write(&state, "{").unwrap();
        let err = snapshot_heads(dir.path(), &[5, 6]).unwrap_err().to_string();
        assert!(err.contains("state.json"), "{err}");
    }
}
