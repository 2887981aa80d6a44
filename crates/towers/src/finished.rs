//! A training that finished on another machine and came back with its final weights and its
//! metrics log but without the rest of its checkpoint (`state.json`, `config.json`, the
//! optimiser's moments), as `scripts/gpu_session.sh fetch` brings a run back to keep under the
//! 64 MiB a device call returns. Such a folder cannot resume, and it needs not: its log says
//! that the budget was spent and what the run measured on the way.

use std::path::Path;

use serde::Deserialize;

use crate::checkpoint::{latest, CHECKPOINT_DIR, WEIGHTS_FILE};
use crate::metrics::{read_lines, METRICS_FILE};
use crate::TrainSummary;
use crate::{Result, TowersError};

/// One line of a metrics log, as far as the summary reads it.
#[derive(Debug, Deserialize)]
struct Line {
    step: u64,
    tokens: Option<u64>,
    loss: Option<f64>,
    tokens_per_s: Option<f64>,
    val_loss: Option<f64>,
    #[serde(default)]
    #[serde(rename = "final")]
    is_final: bool,
}

/// The summary of the training in `out_dir` when it finished elsewhere: final weights in
/// `checkpoint/weights.safetensors`, no resumable checkpoint beside them, and a log whose last
/// line is the final validation after `total_steps` updates.
///
/// Read from the log, so three fields differ from what [`crate::Trainer::train`] reports:
/// `train_loss` is the mean of the last (up to) 10 *logged* losses (every `log_every`-th
/// update, not the last 10 updates), `tokens_per_s` is the last logged rate of the call that
/// finished (validation time included, so a lower bound), and `best_val_loss` is `None`.
/// Steps, tokens and the final validation loss are exact.
///
/// `Ok(None)` when the folder has a resumable checkpoint (resume it) or no weights (train it).
/// A [`TowersError::Checkpoint`] when it has weights without a checkpoint and its log does not
/// show the budget spent: such weights can be neither resumed nor used.
pub fn finished_elsewhere(out_dir: &Path, total_steps: u64) -> Result<Option<TrainSummary>> {
    let checkpoint = out_dir.join(CHECKPOINT_DIR);
    if latest(out_dir).is_some() || !checkpoint.join(WEIGHTS_FILE).is_file() {
        return Ok(None);
    }
    let refuse = |why: String| TowersError::Checkpoint {
        path: checkpoint.display().to_string(),
        msg: format!(
            "final weights without state.json or optimiser state, and {why}: the folder can \
             neither resume nor be used; move it away to train afresh"
        ),
    };
    let log = out_dir.join(METRICS_FILE);
    let Some(lines) = read_lines::<Line>(&log)? else {
        return Err(refuse(format!("no log at {}", log.display())));
    };
    let Some((last, updates)) = lines.split_last() else {
        return Err(refuse(format!("an empty log at {}", log.display())));
    };
    let val_loss = match (last.is_final, last.val_loss) {
        (true, Some(v)) if last.step == total_steps => v,
        _ => {
            return Err(refuse(format!(
                "its log ends at update {} without the final validation after {total_steps} \
                 updates",
                last.step
            )))
        }
    };
    let logged: Vec<(u64, u64, f64, f64)> = updates
        .iter()
        .filter_map(|l| Some((l.step, l.tokens?, l.loss?, l.tokens_per_s?)))
        .filter(|&(step, ..)| step > 0)
        .collect();
    let Some(&(step, tokens, _, tokens_per_s)) = logged.last() else {
        return Err(refuse("its log has no update line".into()));
    };
    let recent = &logged[logged.len().saturating_sub(10)..];
    Ok(Some(TrainSummary {
        steps: total_steps,
        // Every update of phase 1 takes the same number of positions.
        tokens: tokens / step * total_steps,
        train_loss: recent.iter().map(|r| r.2).sum::<f64>() / recent.len() as f64,
        val_loss: Some(val_loss),
        val_ppl: Some(val_loss.exp()),
        tokens_per_s,
        checkpoint: Some(checkpoint),
        interrupted: false,
        stopped_early: false,
        best_val_loss: None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder with `weights` (a stand-in file: only its presence is read), the log `lines`
    /// and, with `state`, a resumable checkpoint's `state.json`.
    fn folder(lines: &[&str], state: bool) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let ck = dir.path().join(CHECKPOINT_DIR);
        std::fs::create_dir_all(&ck).unwrap();
        std::fs::write(ck.join(WEIGHTS_FILE), b"w").unwrap();
        if state {
            std::fs::write(ck.join("state.json"), b"{}").unwrap();
        }
        std::fs::write(dir.path().join(METRICS_FILE), lines.join("\n") + "\n").unwrap();
        dir
    }

    fn update(step: u64, loss: f64) -> String {
        format!(
            r#"{{"step":{step},"tokens":{},"loss":{loss},"lr":0.001,"grad_norm":1.0,"tokens_per_s":{}}}"#,
            step * 64,
            1000 + step
        )
    }

    #[test]
    fn a_finished_log_gives_the_exact_counts_and_the_logged_losses() {
        let mut lines: Vec<String> = (1..=12).map(|i| update(i * 10, i as f64)).collect();
        lines.insert(5, r#"{"step":50,"val_loss":4.0,"val_ppl":54.6}"#.into());
        lines.push(r#"{"step":127,"val_loss":2.5,"val_ppl":12.18,"final":true}"#.into());
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        let dir = folder(&refs, false);
        let s = finished_elsewhere(dir.path(), 127).unwrap().unwrap();
        assert_eq!((s.steps, s.tokens), (127, 127 * 64));
        // The last ten logged losses are 3..=12.
        assert_eq!(s.train_loss, 7.5);
        assert_eq!((s.val_loss, s.val_ppl), (Some(2.5), Some(2.5f64.exp())));
        assert_eq!(s.tokens_per_s, 1120.0);
        assert_eq!(s.checkpoint, Some(dir.path().join(CHECKPOINT_DIR)));
        assert!(!s.interrupted && !s.stopped_early);
    }

    #[test]
    fn a_resumable_checkpoint_or_no_weights_is_not_read_from_the_log() {
        let done = [
            update(10, 1.0),
            r#"{"step":10,"val_loss":2.0,"final":true}"#.into(),
        ];
        let refs: Vec<&str> = done.iter().map(String::as_str).collect();
        let dir = folder(&refs, true);
        assert!(finished_elsewhere(dir.path(), 10).unwrap().is_none());
        let empty = tempfile::tempdir().unwrap();
        assert!(finished_elsewhere(empty.path(), 10).unwrap().is_none());
    }

    #[test]
    fn weights_of_an_unfinished_or_other_budget_are_refused_naming_the_folder() {
        let cut = [update(10, 1.0), update(20, 1.0)];
        let other = [
            update(10, 1.0),
            r#"{"step":10,"val_loss":2.0,"final":true}"#.into(),
        ];
        for (lines, total, why) in [
            (&cut[..], 20, "ends at update 20"),
            (&other[..], 30, "after 30 updates"),
            (&[][..], 20, "an empty log"),
        ] {
            let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
            let dir = folder(&refs, false);
            let e = finished_elsewhere(dir.path(), total)
                .unwrap_err()
                .to_string();
            assert!(e.contains(why) && e.contains(CHECKPOINT_DIR), "{e}");
            assert!(e.contains("move it away"), "{e}");
        }
    }
}
