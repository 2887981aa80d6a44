//! A run folder through the public facade: reuse of a finished run, continuation to a larger
//! budget, refusal of a different run or another scoring set.

mod common;

use common::{quiet, run_in, tiny_spec};
use lmsplit::experiment::run::check_finished;
use lmsplit::experiment::status::{phase1_tokens_per_s, run_status, Stage};
use lmsplit::experiment::{
    machine, ExperimentError, RunOptions, RunRecord, RunSpec, ScoredRun, ScoringSet, ScoringSpec,
    Workspace,
};
use lmsplit::heads::PositionLogProbs;
use lmsplit::towers::Schedule;

#[test]
fn a_finished_run_is_reused_with_identical_scores() {
    let dir = tempfile::tempdir().unwrap();
    let spec = tiny_spec(0);
    let first = run_in(&spec, dir.path(), "run").unwrap();
    assert!(!first.reused);
    let again = run_in(&spec, dir.path(), "run").unwrap();
    assert!(again.reused, "the finished run was trained again");
    // The heads say where they were trained.
    let here = Some(machine::describe(&quiet().device));
    assert_eq!(first.result().unwrap().heads.machine, here);
    assert!(here.is_some_and(|m| m.starts_with("cpu")));
    assert_eq!(again.logprobs.logp, first.logprobs.logp);
    assert_eq!(again.record, first.record);

    // Its status: finished, every update of phase 1 and of the heads done.
    let run = dir.path().join("run");
    let st = run_status("run", &run).unwrap();
    assert_eq!((st.stage, st.why_unfinished()), (Stage::Finished, None));
    let res = first.result().unwrap();
    let p1 = st.phase1.as_ref().unwrap();
    assert_eq!(
        (p1.step, p1.tokens, p1.done),
        (res.phase1.steps, res.phase1.tokens, true)
    );
    assert_eq!(st.heads.as_ref().map(|h| h.step), Some(res.heads.steps));
    // Phase 1's rate comes from its checkpoint (a record written before 26 Nov holds the last
    // call's own rate), else from the record.
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("phase1/checkpoint/state.json")).unwrap())
            .unwrap();
    let rate = state["tokens"].as_f64().unwrap() / state["elapsed_s"].as_f64().unwrap();
    let mut stale = res.phase1.clone();
    stale.tokens_per_s = 1.0;
    assert_eq!(phase1_tokens_per_s(&run, &stale).unwrap(), rate);
    std::fs::remove_dir_all(run.join("phase1/checkpoint")).unwrap();
    assert_eq!(phase1_tokens_per_s(&run, &stale).unwrap(), 1.0);
}

#[test]
fn another_run_in_the_same_folder_is_refused_naming_the_fields() {
    let dir = tempfile::tempdir().unwrap();
    let spec = tiny_spec(0);
    run_in(&spec, dir.path(), "run").unwrap();
    let mut other = spec.clone();
    other.phase1.lr = 1e-4;
    other.heads.patience = 9;
    let err = run_in(&other, dir.path(), "run").unwrap_err();
    match &err {
        ExperimentError::SpecMismatch { fields, .. } => {
            assert_eq!(fields, &["heads.patience", "phase1.lr"])
        }
        e => panic!("expected SpecMismatch, got {e:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("heads.patience, phase1.lr differ"), "{msg}");
    // A smaller budget is not a continuation either.
    let mut smaller = spec.clone();
    smaller.phase1.budget_tokens /= 2;
    assert!(matches!(
        run_in(&smaller, dir.path(), "run"),
        Err(ExperimentError::SpecMismatch { .. })
    ));
}

#[test]
fn a_larger_budget_continues_the_run_as_one_uninterrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut short = tiny_spec(3);
    short.phase1.schedule = Schedule::Constant { warmup_steps: 5 };
    let mut long = short.clone();
    long.phase1.budget_tokens *= 2;

    let whole = run_in(&long, dir.path(), "whole").unwrap();
    run_in(&short, dir.path(), "continued").unwrap();
    let continued = run_in(&long, dir.path(), "continued").unwrap();
    assert!(!continued.reused);
    let (a, b) = (whole.result().unwrap(), continued.result().unwrap());
    assert_eq!(a.phase1.steps, b.phase1.steps);
    assert_eq!(a.phase1.val_loss, b.phase1.val_loss);
    assert_eq!(a.heads, b.heads);
    assert_eq!(whole.logprobs.logp, continued.logprobs.logp);

    // Under linear decay the same request is a typed error that says why.
    let mut decay = tiny_spec(4);
    run_in(&decay, dir.path(), "decay").unwrap();
    decay.phase1.budget_tokens *= 2;
    let err = run_in(&decay, dir.path(), "decay").unwrap_err();
    assert!(
        matches!(err, ExperimentError::NotContinuable { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("linear-decay"), "{err}");
}

#[test]
fn a_run_scored_on_another_scoring_set_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let spec = tiny_spec(0);
    run_in(&spec, dir.path(), "run").unwrap();
    let ws = Workspace::open(&spec.corpus, dir.path().join("data")).unwrap();
    let data = ws.data();
    let fewer = ScoringSpec {
        max_sequences: Some(3),
        ..ScoringSpec::new(32)
    };
    // A set cut differently (not saved over the study's own) ...
    let other = ScoringSet::build(spec.style, &data.tok, data.held_out(), &fewer).unwrap();
    let err = ws
        .ensure_run(&spec, &dir.path().join("run"), &other, &quiet())
        .unwrap_err();
    assert!(
        matches!(err, ExperimentError::ScoringSetMismatch { .. }),
        "{err:?}"
    );
    // ... and the saved set rebuilt with other settings is refused too.
    let err = ws.scoring_set(spec.style, &fewer).unwrap_err();
    assert!(
        matches!(err, ExperimentError::ScoringSetMismatch { .. }),
        "{err:?}"
    );
}

#[test]
fn a_run_naming_another_corpus_than_its_workspace_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let spec = tiny_spec(0);
    let ws = Workspace::open(&spec.corpus, dir.path().join("data")).unwrap();
    let set = ws.scoring_set(spec.style, &ScoringSpec::new(32)).unwrap();
    // The same run, its record saying it was trained with another tokenizer.
    let mut other = spec.clone();
    other.corpus.tokenizer = Some("elsewhere/tokenizer.json".into());
    let run_dir = dir.path().join("run");
    let err = ws.ensure_run(&other, &run_dir, &set, &quiet()).unwrap_err();
    assert!(matches!(err, ExperimentError::Mismatch { .. }), "{err:?}");
    assert!(
        err.to_string().contains("elsewhere/tokenizer.json"),
        "{err}"
    );
    // Refused before anything was written.
    assert!(!run_dir.exists());
}

#[test]
fn a_run_of_an_unknown_preset_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = tiny_spec(0);
    spec.preset = "nope".into();
    let err = run_in(&spec, dir.path(), "run").unwrap_err();
    assert!(err.to_string().contains("unknown preset \"nope\""), "{err}");
    // No record was left for the corrected call to be refused against.
    assert!(!dir.path().join("run").exists());
    run_in(&tiny_spec(0), dir.path(), "run").unwrap();
}

#[test]
fn new_head_settings_retrain_the_heads_on_the_kept_phase_one() {
    let dir = tempfile::tempdir().unwrap();
    let old = tiny_spec(5);
    let mut new = old.clone();
    new.heads.max_budget_tokens *= 3;
    new.heads.patience += 1;

    let fresh = run_in(&new, dir.path(), "fresh").unwrap();
    let first = run_in(&old, dir.path(), "changed").unwrap();
    let weights = dir
        .path()
        .join("changed/phase1/checkpoint/weights.safetensors");
    let before = std::fs::read(&weights).unwrap();
    // A snapshot-heads cache trained under the old settings must not be read back.
    let stale = dir.path().join("changed/emergence/step-0000001");
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::write(stale.join("logprobs-0.json"), "{}").unwrap();

    let changed = run_in(&new, dir.path(), "changed").unwrap();
    assert!(!changed.reused, "the heads were not retrained");
    assert_eq!(
        std::fs::read(&weights).unwrap(),
        before,
        "phase 1 was trained again"
    );
    assert!(!dir.path().join("changed/emergence").exists());
    // Nothing was deleted: the old heads, snapshot heads and scores sit beside their record.
    let kept = dir.path().join("changed/superseded/001");
    let kept_record: RunRecord =
        serde_json::from_str(&std::fs::read_to_string(kept.join("run.json")).unwrap()).unwrap();
    assert_eq!(kept_record.spec, old);
    assert_eq!(kept_record.result, first.record.result);
    assert!(kept.join("heads/heads.safetensors").is_file());
    assert!(kept
        .join("emergence/step-0000001/logprobs-0.json")
        .is_file());
    let old_scores: PositionLogProbs =
        serde_json::from_str(&std::fs::read_to_string(kept.join("logprobs.json")).unwrap())
            .unwrap();
    assert_eq!(old_scores.logp, first.logprobs.logp);
    let (a, b) = (fresh.result().unwrap(), changed.result().unwrap());
    assert_eq!(b.phase1, first.result().unwrap().phase1);
    // The same heads as a run trained under the new settings from the start.
    assert_eq!(a.heads, b.heads);
    assert_eq!(fresh.logprobs.logp, changed.logprobs.logp);
    assert_eq!(changed.record.spec, new);
    // Once retrained, the run is reused as it is.
    assert!(run_in(&new, dir.path(), "changed").unwrap().reused);

    // Back to the old settings, killed half way through moving: only `heads` had moved.
    let kept2 = dir.path().join("changed/superseded/002");
    std::fs::create_dir_all(&kept2).unwrap();
    std::fs::copy(dir.path().join("changed/run.json"), kept2.join("run.json")).unwrap();
    std::fs::rename(dir.path().join("changed/heads"), kept2.join("heads")).unwrap();
    let again = run_in(&old, dir.path(), "changed").unwrap();
    assert_eq!(again.logprobs.logp, first.logprobs.logp);
    // The next call finished the move into the same folder, and took no third one.
    assert!(kept2.join("heads/heads.safetensors").is_file());
    assert!(kept2.join("logprobs.json").is_file());
    assert!(!dir.path().join("changed/superseded/003").exists());
    assert!(kept.join("heads/heads.safetensors").is_file());
}

/// Deletes every file under `root` but the paths in `keep` (relative to `root`).
fn keep_only(root: &std::path::Path, keep: &[&str]) {
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if !keep.iter().any(|k| root.join(k) == p) {
                std::fs::remove_file(&p).unwrap();
            }
        }
    }
}

/// Where `scripts/gpu_session.sh snapshot` puts the log of the training that wrote snapshots
/// up to `step` of the run in `run`.
fn brought_log(run: &std::path::Path, step: u64) -> std::path::PathBuf {
    run.join(format!("phase1/snapshots/step-{step:07}.metrics.jsonl"))
}

/// The phase-1 log of the run in `run`, its lines kept by `keep` and changed by `change`.
fn edited_log(
    run: &std::path::Path,
    keep: impl Fn(&serde_json::Value) -> bool,
    change: impl Fn(&mut serde_json::Value),
) -> String {
    let text = std::fs::read_to_string(run.join("phase1/metrics.jsonl")).unwrap();
    let mut out = String::new();
    for line in text.lines() {
        let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
        if keep(&v) {
            change(&mut v);
            out += &format!("{v}\n");
        }
    }
    out
}

/// The run `spec` in the folder `run` of the study `root`, asked for its model.
fn ensure_with_model(spec: &RunSpec, root: &std::path::Path, run: &std::path::Path) -> ScoredRun {
    let ws = Workspace::open(&spec.corpus, root.join("data")).unwrap();
    let set = ws.scoring_set(spec.style, &ScoringSpec::new(32)).unwrap();
    let opts = RunOptions {
        need_model: true,
        ..quiet()
    };
    ws.ensure_run(spec, run, &set, &opts).unwrap()
}

/// The tiny run of `seed` without snapshots, trained to the end in `<root>/<name>`.
fn run_without_snapshots(seed: u64, root: &std::path::Path, name: &str) -> (RunSpec, ScoredRun) {
    let mut spec = tiny_spec(seed);
    spec.phase1.snapshots.clear();
    let run = run_in(&spec, root, name).unwrap();
    (spec, run)
}

/// The tiny run with snapshots at 1/4 and 1/2, trained in `<tempdir>/run`.
fn run_with_two_snapshots() -> (tempfile::TempDir, RunSpec, ScoredRun) {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = tiny_spec(6);
    spec.phase1.snapshots = vec![0.25, 0.5];
    let whole = run_in(&spec, dir.path(), "run").unwrap();
    (dir, spec, whole)
}

/// Rewrites the record `run.json` of the run folder `run` by `edit`.
fn edit_record(run: &std::path::Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = run.join("run.json");
    let mut record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut record);
    std::fs::write(&path, record.to_string()).unwrap();
}

#[test]
fn tables_that_draw_the_curve_wait_for_the_snapshot_heads_and_say_so() {
    let (dir, spec, _) = run_with_two_snapshots();
    let runs = [("run".to_string(), dir.path().join("run"))];
    assert!(check_finished(&runs, true).is_ok());
    // The 1/2 point's heads not scored yet (a chain stopped while training them).
    let scores = format!(
        "run/emergence/step-0000012/logprobs-{}.json",
        spec.head_seed
    );
    std::fs::remove_file(dir.path().join(scores)).unwrap();
    let st = run_status("run", &runs[0].1).unwrap();
    assert_eq!((st.stage, st.why_unfinished()), (Stage::Finished, None));
    assert_eq!(st.head_trainings_left(), Some(1), "{st:?}");
    let err = check_finished(&runs, true).unwrap_err().to_string();
    assert!(
        err.contains("run (snapshot heads 1 of 2 scored, stopped"),
        "{err}"
    );
    // Tables without the curve (a comparison of scores) do not wait for them.
    assert!(check_finished(&runs, false).is_ok());
    run_in(&spec, dir.path(), "run").unwrap();
    assert!(check_finished(&runs, true).is_ok());
    let st = run_status("run", &runs[0].1).unwrap();
    assert_eq!(st.head_trainings_left(), Some(0), "{st:?}");
}

#[test]
fn a_phase_1_brought_from_another_machine_shows_as_done_while_its_heads_train() {
    let dir = tempfile::tempdir().unwrap();
    let (spec, _) = run_without_snapshots(9, dir.path(), "run");
    let run = dir.path().join("run");
    // As fetched: phase 1's final weights and log, no checkpoint state, nothing after it.
    keep_only(
        &run,
        &[
            "run.json",
            "phase1/checkpoint/weights.safetensors",
            "phase1/metrics.jsonl",
        ],
    );
    edit_record(&run, |r| r["result"] = serde_json::Value::Null);
    let st = run_status("run", &run).unwrap();
    assert_eq!(st.stage, Stage::Heads, "{st:?}");
    assert!(st.phase1.as_ref().is_some_and(|p| p.done), "{st:?}");
    run_in(&spec, dir.path(), "run").unwrap();
    assert_eq!(run_status("run", &run).unwrap().stage, Stage::Finished);
}

#[test]
fn a_finished_run_asked_for_its_model_is_not_trained_or_scored_again() {
    let dir = tempfile::tempdir().unwrap();
    let (spec, whole) = run_without_snapshots(8, dir.path(), "run");
    let run = dir.path().join("run");
    // As fetched from another machine: the scores and record, no heads' checkpoints.
    std::fs::remove_dir_all(run.join("heads")).unwrap();
    if spec.retest_heads {
        std::fs::remove_dir_all(run.join("heads_retest")).unwrap();
    }
    let (record, scores) = (
        std::fs::read(run.join("run.json")).unwrap(),
        std::fs::read(run.join("logprobs.json")).unwrap(),
    );
    let again = ensure_with_model(&spec, dir.path(), &run);
    assert!(again.model.is_some() && again.reused);
    assert_eq!(again.logprobs.logp, whole.logprobs.logp);
    assert!(!run.join("heads").exists(), "new heads were trained");
    assert_eq!(std::fs::read(run.join("run.json")).unwrap(), record);
    assert_eq!(std::fs::read(run.join("logprobs.json")).unwrap(), scores);
}

#[test]
fn snapshot_heads_of_a_moved_run_read_its_snapshots_where_it_lies_now() {
    let (dir, spec, _) = run_with_two_snapshots();
    let scores = format!("emergence/step-0000012/logprobs-{}.json", spec.head_seed);
    let before = std::fs::read_to_string(dir.path().join("run").join(&scores)).unwrap();
    // The run moves (a fetched study, a renamed folder); run.json still names the old path.
    std::fs::rename(dir.path().join("run"), dir.path().join("moved")).unwrap();
    let moved = dir.path().join("moved");
    std::fs::remove_file(moved.join(&scores)).unwrap();
    run_in(&spec, dir.path(), "moved").unwrap();
    // The heads trained again from the moved snapshot score as they did before the move.
    assert_eq!(
        std::fs::read_to_string(moved.join(&scores)).unwrap(),
        before
    );
    // And a run lying at the recorded path is never read in its place.
    assert!(!dir.path().join("run").exists());
}

#[test]
fn a_snapshot_brought_later_joins_only_with_a_log_that_repeats_the_run_up_to_it() {
    let (dir, spec, whole) = run_with_two_snapshots();
    let res = whole.result().unwrap().clone();
    let run = dir.path().join("run");
    // As a run that finished without its 1/2 snapshot (it did not fit a device call's return).
    let snap = res.snapshots[1].clone();
    let bytes = std::fs::read(&snap.path).unwrap();
    std::fs::remove_file(&snap.path).unwrap();
    std::fs::remove_dir_all(run.join(format!("emergence/step-{:07}", snap.step))).unwrap();
    let record_path = run.join("run.json");
    edit_record(&run, |r| {
        r["result"]["snapshots"].as_array_mut().unwrap().truncate(1)
    });
    let record_without = std::fs::read(&record_path).unwrap();
    assert_eq!(run_in(&spec, dir.path(), "run").unwrap().snapshots.len(), 1);

    let runs = [("run".to_string(), run.clone())];
    assert_eq!(run_status("run", &run).unwrap().snapshot_heads, (1, 1));
    assert!(check_finished(&runs, true).is_ok());

    // Brought back without a log: nothing shows it is this run's.
    std::fs::write(&snap.path, &bytes).unwrap();
    // Not adopted yet, its heads are already due: the status counts them, and tables that
    // draw the curve (which would adopt it and train them) wait for them.
    let st = run_status("run", &run).unwrap();
    assert_eq!(
        (st.snapshot_heads, st.head_trainings_left()),
        ((1, 2), Some(1)),
        "{st:?}"
    );
    let err = check_finished(&runs, true).unwrap_err().to_string();
    assert!(err.contains("snapshot heads 1 of 2 scored"), "{err}");
    assert!(check_finished(&runs, false).is_ok());
    let err = run_in(&spec, dir.path(), "run").unwrap_err().to_string();
    assert!(
        err.contains("step-0000012.safetensors") && err.contains("without a"),
        "{err}"
    );
    // With the log of a training on other arithmetic: one loss differs in its last digit.
    let log = brought_log(&run, snap.step);
    let first_update = |v: &serde_json::Value| v["step"] == 10 && v.get("loss").is_some();
    let other = edited_log(
        &run,
        |_| true,
        |v| {
            if first_update(v) {
                let l = v["loss"].as_f64().unwrap();
                v["loss"] = serde_json::json!(f64::from_bits(l.to_bits() + 1));
            }
        },
    );
    std::fs::write(&log, other).unwrap();
    let err = run_in(&spec, dir.path(), "run").unwrap_err().to_string();
    assert!(
        err.contains("step-0000012.metrics.jsonl")
            && err.contains("departs from this run at update 10: loss"),
        "{err}"
    );
    // With this training's log, stopped before the snapshot: it lacks update 10's line.
    std::fs::write(
        &log,
        edited_log(&run, |v| v["step"].as_u64() < Some(10), |_| {}),
    )
    .unwrap();
    let err = run_in(&spec, dir.path(), "run").unwrap_err().to_string();
    assert!(err.contains("stops before update 10"), "{err}");
    // None of the refusals touched the record.
    assert_eq!(std::fs::read(&record_path).unwrap(), record_without);

    // With the log that repeats the run (here its own): adopted, its heads trained again.
    std::fs::copy(run.join("phase1/metrics.jsonl"), &log).unwrap();
    let later = run_in(&spec, dir.path(), "run").unwrap();
    assert_eq!(later.result().unwrap().snapshots, res.snapshots);
    assert_eq!(
        later.snapshots[1].logprobs.logp,
        whole.snapshots[1].logprobs.logp
    );
}

#[test]
fn a_phase_one_fetched_without_its_optimiser_finishes_here_from_its_weights_and_log() {
    let (dir, spec, whole) = run_with_two_snapshots();
    let (res, snaps) = (whole.result().unwrap().clone(), whole.snapshots.clone());
    assert_eq!(snaps.len(), 2);

    // As a device call cut in the heads brings a run back (scripts/gpu_session.sh fetch, plus
    // one snapshot by `snapshot`): phase 1's final weights and log, the heads' log, no result.
    let run = dir.path().join("run");
    let early = std::fs::read(&res.snapshots[0].path).unwrap();
    let late = res.snapshots[1].path.strip_prefix(&run).unwrap().to_owned();
    let late = late.to_str().unwrap();
    keep_only(
        &run,
        &[
            "run.json",
            "phase1/metrics.jsonl",
            "phase1/machines.json",
            "phase1/checkpoint/weights.safetensors",
            late,
            "heads/metrics.jsonl",
            "heads/heads_config.json",
        ],
    );
    edit_record(&run, |r| r["result"] = serde_json::Value::Null);
    // Without the log of the training that wrote it, the snapshot is refused, naming it.
    let err = run_in(&spec, dir.path(), "run").unwrap_err().to_string();
    assert!(err.contains(late) && err.contains("without a"), "{err}");
    // It came with that log (on the machine that trained the run, the run's own).
    std::fs::copy(
        run.join("phase1/metrics.jsonl"),
        brought_log(&run, res.snapshots[1].step),
    )
    .unwrap();
    let weights = std::fs::read(run.join("phase1/checkpoint/weights.safetensors")).unwrap();
    let log = std::fs::read(run.join("phase1/metrics.jsonl")).unwrap();

    let here = run_in(&spec, dir.path(), "run").unwrap();
    assert!(!here.reused);
    let got = here.result().unwrap();
    assert_eq!(
        std::fs::read(run.join("phase1/checkpoint/weights.safetensors")).unwrap(),
        weights,
        "phase 1 was trained again"
    );
    assert!(
        std::fs::read(run.join("phase1/metrics.jsonl")).unwrap() == log,
        "phase 1's log grew: phase 1 was trained again"
    );
    assert_eq!(
        (got.phase1.steps, got.phase1.tokens, got.phase1.val_loss),
        (res.phase1.steps, res.phase1.tokens, res.phase1.val_loss)
    );
    // The heads trained here from the same weights are the heads of the whole run.
    assert_eq!(got.heads, res.heads);
    assert_eq!(here.logprobs.logp, whole.logprobs.logp);
    // The snapshot that did not come back is left out; the one that did is scored as before.
    assert_eq!(got.snapshots.len(), 1);
    assert_eq!(here.snapshots.len(), 1);
    assert_eq!(here.snapshots[0].fraction, 0.5);
    assert_eq!(here.snapshots[0].logprobs.logp, snaps[1].logprobs.logp);
    let cpu = Some(machine::describe(&quiet().device));
    assert_eq!(here.snapshots[0].heads.machine, cpu);
    // Once finished, it is reused as it is.
    assert!(run_in(&spec, dir.path(), "run").unwrap().reused);
    // The missing snapshot, brought later, joins the finished run and gets its heads.
    std::fs::write(&res.snapshots[0].path, early).unwrap();
    let later = run_in(&spec, dir.path(), "run").unwrap();
    assert_eq!(later.result().unwrap().snapshots, res.snapshots);
    let fractions: Vec<f64> = later.snapshots.iter().map(|s| s.fraction).collect();
    assert_eq!(fractions, [0.25, 0.5]);
    assert_eq!(later.snapshots[0].logprobs.logp, snaps[0].logprobs.logp);
    assert_eq!(later.logprobs.logp, whole.logprobs.logp);
    // Asked for its model, the run loads phase 1 again; the snapshots its record holds were
    // checked when they joined and are not asked for their log again.
    std::fs::remove_file(brought_log(&run, res.snapshots[1].step)).unwrap();
    let with_model = ensure_with_model(&spec, dir.path(), &run);
    assert!(with_model.model.is_some());
    assert_eq!(with_model.result().unwrap().snapshots, res.snapshots);

    // Weights whose log does not show the budget spent are refused, naming the folder.
    let (cut, _) = run_without_snapshots(7, dir.path(), "cut");
    let cut_dir = dir.path().join("cut");
    keep_only(
        &cut_dir,
        &["run.json", "phase1/checkpoint/weights.safetensors"],
    );
    let err = run_in(&cut, dir.path(), "cut").unwrap_err().to_string();
    assert!(
        err.contains("cut/phase1/checkpoint") && err.contains("no log"),
        "{err}"
    );
}
