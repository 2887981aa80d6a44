//! Tests of the status module: progress, the table cells and the snapshot heads.

use super::table::describe_updates;
use super::*;
use towers::{LoggedUpdate, TrainState};

/// A head checkpoint's `state.json` at `step` of `total` updates.
fn head_checkpoint(heads_dir: &Path, step: u64, total: u64) {
    let ck = heads_dir.join(towers::CHECKPOINT_DIR);
    std::fs::create_dir_all(&ck).unwrap();
    let state = TrainState {
        step,
        tokens: step * 2048,
        elapsed_s: 10.0,
        ..TrainState::start(towers::TrainConfig::default(), Some(total))
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
    for &step in steps {
        let mut line = serde_json::json!({"loss": 5.0, "step": step, "tokens": step * 2048});
        if let Some(total) = total {
            line["total_steps"] = total.into();
        }
        log_line(dir, &line);
    }
}

/// Appends `line` to the metrics log in `dir`.
fn log_line(dir: &Path, line: &serde_json::Value) {
    use std::io::Write;
    std::fs::create_dir_all(dir).unwrap();
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(towers::METRICS_FILE))
        .unwrap();
    writeln!(log, "{line}").unwrap();
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
    // A log line past the checkpoint that states its call's rate (wall clock since the resume)
    // sets the pace: 557 updates at 20,480 tokens/s, a third of the checkpoint's time.
    let line = serde_json::json!({"step": 420, "tokens": 420 * 2048, "tokens_per_s": 20_480.0});
    log_line(&heads, &line);
    let paced = head_progress(&heads).unwrap().unwrap();
    assert_eq!(paced.rate(), Some(20_480.0));
    let left = paced.minutes_left().unwrap();
    assert!(
        (left * 60.0 - 557.0 * 2048.0 / 20_480.0).abs() < 1e-9,
        "{left}"
    );
    // A zero rate (a line written before any time passed) falls back to the checkpoint's.
    let stalled = TrainingProgress {
        logged: paced.logged.map(|l| LoggedUpdate {
            tokens_per_s: Some(0.0),
            ..l
        }),
        ..paced.clone()
    };
    assert_eq!(stalled.rate(), Some(61_440.0));
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
        scoring_kept: false,
    });
    assert_eq!(r.current_training(), Some(&p));
    // Phase 1 stopped at a snapshot while another process trains that snapshot's heads: the
    // heads are the training in progress; once a process holds the run again, phase 1 is.
    let holder = |pid| WriterLock {
        holder: Some(LockHolder {
            pid,
            host: "vm".into(),
            since_unix: 0,
            proc_start: None,
        }),
        gone: false,
    };
    let stopped = RunStatus {
        stage: Stage::Phase1,
        phase1: Some(TrainingProgress::default()),
        snapshot_training: Some(SnapshotTraining {
            writer: Some(holder(7)),
            ..r.snapshot_training.clone().unwrap()
        }),
        ..r.clone()
    };
    assert_eq!(stopped.current_training(), Some(&p));
    let resumed = RunStatus {
        writer: Some(holder(8)),
        ..stopped.clone()
    };
    assert_eq!(resumed.current_training(), resumed.phase1.as_ref());
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
            tokens_per_s: None,
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
    // Trained, then scored part of the way: the table says so.
    head_checkpoint(&em.join("step-0000002/heads-6"), 977, 977);
    std::fs::write(em.join("step-0000002/heads-6").join(heads::HEADS_FILE), "").unwrap();
    let (_, training) = snapshot_heads(dir.path(), &[5, 6]).unwrap();
    assert!(training
        .as_ref()
        .is_some_and(|t| t.progress.done && !t.scoring_kept));
    std::fs::write(
        em.join("step-0000002/heads-6").join(PARTIAL_SCORES_FILE),
        "{}",
    )
    .unwrap();
    let (_, training) = snapshot_heads(dir.path(), &[5, 6]).unwrap();
    let t = training.expect("the head being scored");
    assert!(t.progress.done && t.scoring_kept);
    let mut r = run_status("elmo-s0", dir.path()).unwrap();
    (r.snapshot_heads, r.snapshot_training) = ((3, 4), Some(t));
    let md = status_table(&[r]).to_markdown();
    assert!(
        md.contains("step-0000002 seed 6: 977 of 977, scoring (part of the pass kept)"),
        "{md}"
    );
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
