//! One training's progress read from its folder: the newest checkpoint's state and the
//! metrics log that runs ahead of it, and the minutes left at its rate so far.

use std::path::Path;

use serde::{Deserialize, Serialize};
use towers::{LoggedUpdate, TrainState};

use crate::error::read_json;
use crate::Result;

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

    /// Minutes until the schedule's last update, from the newest update at the rate of
    /// [`TrainingProgress::rate`] and the tokens per update of the last checkpoint; `None` once
    /// done, or before a checkpoint gives a rate and a total.
    pub fn minutes_left(&self) -> Option<f64> {
        self.minutes_to(self.total_steps?)
    }

    /// The rate the minutes are reckoned at, in tokens per second: the newest logged line's
    /// where the log runs past the last checkpoint (the call in progress, wall clock: its
    /// validations and checkpoints included, and a stretch slowed by other work before its
    /// start left out), else the checkpoint's (update time over every call so far).
    pub fn rate(&self) -> Option<f64> {
        self.logged
            .and_then(|l| l.tokens_per_s)
            .filter(|r| *r > 0.0)
            .or(self.tokens_per_s)
    }

    /// Minutes until update `step`, reckoned as [`TrainingProgress::minutes_left`]
    /// does (0 once the newest update has passed it); `None` once done, or before a checkpoint
    /// gives a rate.
    pub fn minutes_to(&self, step: u64) -> Option<f64> {
        let rate = self.rate()?;
        if self.done || self.step == 0 || rate <= 0.0 {
            return None;
        }
        let per_update = self.tokens as f64 / self.step as f64;
        let left = step.saturating_sub(self.newest_step());
        Some(left as f64 * per_update / rate / 60.0)
    }
}

/// A finished training of `steps` updates (`tokens` and its rate where known, else 0).
pub(super) fn finished(steps: u64, tokens: u64, tokens_per_s: f64) -> TrainingProgress {
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
pub(super) fn latest_state(dir: &Path) -> Result<Option<TrainState>> {
    towers::latest_checkpoint(dir)
        .map(|ck| read_json(&ck.join("state.json")))
        .transpose()
}

/// The training in `dir` from its newest checkpoint and its metrics log (a training that has
/// logged updates but not yet saved a checkpoint is at checkpoint step 0); `done` says from its
/// state and folder whether it has finished.
pub(super) fn progress(
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
pub(super) fn head_progress(dir: &Path) -> Result<Option<TrainingProgress>> {
    progress(dir, |_, d| d.join(heads::HEADS_FILE).is_file())
}
