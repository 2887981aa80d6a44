//! The status table: one row per run, as `reproduce --status` prints it.

use super::{NextSnapshot, RunStatus, TrainingProgress, WriterLock};
use crate::emergence::fraction_name;

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
         training with its updates (\"scoring\" once trained, \"part of the pass kept\" where \
         a stopped scoring pass goes on from its batches done) and the process holding that \
         snapshot (the run's, or one \
         drawing the curve so far), or while phase 1 trains its next snapshot (its number, \
         as --stop-at-snapshot counts, its fraction and update, and the minutes until it at \
         phase 1's rate, reckoned as ends in); head trainings left: heads, retest heads and snapshot \
         heads still to train, the one in progress included (after phase 1 where that is not \
         done); ends in: the training in progress (or stopped half \
         way), its updates left at the rate of its process since it started or resumed (wall \
         clock, from the newest log line), else at its rate so far (update time); scoring \
         and the run's other trainings come on top; writer: the process \
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
pub(super) fn describe_updates(p: &TrainingProgress) -> String {
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
            "{scored} of {due}; {} seed {}: {}{}{}",
            t.snapshot,
            t.seed,
            describe_updates(&t.progress),
            match (t.progress.done, t.scoring_kept) {
                (false, _) => "",
                (true, false) => ", scoring",
                (true, true) => ", scoring (part of the pass kept)",
            },
            match &t.writer {
                Some(w) => format!(", by {}", w.describe()),
                None => String::new(),
            }
        ),
    }
}
