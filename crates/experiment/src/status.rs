//! Where each run of a study stands, read from its folder without training or locking
//! anything: the stage it is in, phase 1's tokens against its budget and its throughput so far,
//! each head training's updates, the snapshot heads done, and whether a live process holds the
//! run. Safe beside the process that trains it: nothing is written or locked, and every file
//! read is replaced atomically (a read that races a checkpoint's rename into place fails with
//! an error naming the file; ask again).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use towers::{TrainState, TrainSummary};

use crate::error::read_json;
use crate::lock::{LockHolder, WRITER_LOCK};
use crate::record::{RunRecord, LOGPROBS_FILE, RUN_FILE, SNAPSHOT_HEADS_DIR};
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// The run's writer lock, when one is there.
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
    /// `pid <N> on <host> since <unix time>`, with `(gone)` for a dead holder.
    pub fn describe(&self) -> String {
        match &self.holder {
            Some(h) => format!(
                "pid {} on {} since {}{}",
                h.pid,
                h.host,
                h.since_unix,
                if self.gone { " (gone)" } else { "" }
            ),
            None => "an unreadable writer.lock".into(),
        }
    }
}

impl RunStatus {
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
            s.phase1 = progress(&dir.join("phase1"), None)?;
            s.heads = progress(&dir.join("heads"), Some("heads.safetensors"))?;
            if spec.retest_heads {
                s.retest = progress(&dir.join("heads_retest"), Some("heads.safetensors"))?;
            }
        }
    }
    let seeds = 1 + usize::from(spec.retest_heads);
    let snapshots = match &record.result {
        Some(r) => r.snapshots.len(),
        None => spec.phase1.snapshots.len(),
    };
    s.snapshot_heads = (scored_snapshot_heads(dir)?, snapshots * seeds);
    let done = |p: &Option<TrainingProgress>| p.as_ref().is_some_and(|p| p.done);
    let phase1_done = s
        .phase1
        .as_ref()
        .is_some_and(|p| p.tokens >= spec.phase1.budget_tokens);
    s.stage = if record.result.is_some() && dir.join(LOGPROBS_FILE).is_file() {
        Stage::Finished
    } else if !phase1_done {
        Stage::Phase1
    } else if !done(&s.heads) {
        Stage::Heads
    } else if spec.retest_heads && !done(&s.retest) {
        Stage::RetestHeads
    } else {
        Stage::Scoring
    };
    // A finished phase 1 is all its budget, whatever its last checkpoint wrote as it ended.
    if let (Some(p), true) = (s.phase1.as_mut(), phase1_done) {
        p.done = true;
    }
    Ok(s)
}

/// Phase 1's tokens per second of update time over every call that trained it, for the run
/// in `dir` whose record says `recorded`: from its final checkpoint where that is here (records
/// written before 26 Nov 2026, towers b37f3e3, hold the last call's own rate instead, which for
/// a resumed run describes only its last stretch), else the record's.
pub fn phase1_tokens_per_s(dir: &Path, recorded: &TrainSummary) -> Result<f64> {
    let Some(ck) = towers::latest_checkpoint(&dir.join("phase1")) else {
        return Ok(recorded.tokens_per_s);
    };
    let st: TrainState = read_json(&ck.join("state.json"))?;
    Ok(match st.tokens == recorded.tokens && st.elapsed_s > 0.0 {
        true => st.tokens as f64 / st.elapsed_s,
        false => recorded.tokens_per_s,
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
    }
}

/// The training in `dir` from its newest checkpoint; `done_file` marks a finished one.
fn progress(dir: &Path, done_file: Option<&str>) -> Result<Option<TrainingProgress>> {
    let Some(ck) = towers::latest_checkpoint(dir) else {
        return Ok(None);
    };
    let st: TrainState = read_json(&ck.join("state.json"))?;
    Ok(Some(TrainingProgress {
        step: st.step,
        total_steps: st.total_steps,
        tokens: st.tokens,
        tokens_per_s: (st.elapsed_s > 0.0).then(|| st.tokens as f64 / st.elapsed_s),
        done: done_file.is_some_and(|f| dir.join(f).is_file()),
    }))
}

/// Snapshot heads whose scores are written (`emergence/step-*/logprobs-<seed>.json`).
fn scored_snapshot_heads(dir: &Path) -> Result<usize> {
    let root = dir.join(SNAPSHOT_HEADS_DIR);
    if !root.is_dir() {
        return Ok(0);
    }
    let mut n = 0;
    for step in std::fs::read_dir(&root).map_err(crate::error::io_at(&root))? {
        let step = step.map_err(crate::error::io_at(&root))?.path();
        if !step.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&step).map_err(crate::error::io_at(&step))? {
            let name = f.map_err(crate::error::io_at(&step))?.file_name();
            let name = name.to_string_lossy();
            n += usize::from(name.starts_with("logprobs-") && name.ends_with(".json"));
        }
    }
    Ok(n)
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
            "writer",
        ]
        .map(String::from)
        .to_vec(),
    )
    .with_title("Where each run stands (read from its folder at the last checkpoint)")
    .with_note(
        "tokens/s: phase 1's tokens over its update time so far; heads: updates at the last \
         checkpoint of each head training, of the schedule's total (a finished one says done); \
         snapshot heads: scored of those the run's snapshots call for; writer: the process \
         holding the run (\"(gone)\": it died without removing its lock)",
    )
    .with_precision(1);
    let updates = |p: &Option<TrainingProgress>| match p {
        None => String::new(),
        Some(p) if p.done => format!("{} (done)", p.step),
        Some(p) => match p.total_steps {
            Some(total) => format!("{} of {total}", p.step),
            None => p.step.to_string(),
        },
    };
    for r in runs {
        let tokens = r.phase1.as_ref().map(|p| p.tokens);
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
            report::Cell::from(
                format!("{} of {}", r.snapshot_heads.0, r.snapshot_heads.1).as_str(),
            ),
            report::Cell::from(r.writer.as_ref().map(WriterLock::describe)),
        ]);
    }
    t
}
