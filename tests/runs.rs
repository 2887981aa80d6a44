//! A run folder through the public facade: reuse of a finished run, continuation to a larger
//! budget, refusal of a different run or another scoring set.

mod common;

use std::sync::{Arc, Mutex};

use common::{copy_dir, quiet, run_in, tiny_spec};
use lmsplit::experiment::manifest::{MAIN, MANIFEST_FILE, SCORES_FILE};
use lmsplit::experiment::units::pairs::RunPairs;
use lmsplit::experiment::units::runs::StudyRuns;
use lmsplit::experiment::{
    analyze, builtin, run_status, ExperimentError, Input, Manifest, Progress, Protocol, ScoredRun,
    ScoringSet, ScoringSpec, Stage, StudySpec, Workspace,
};
use lmsplit::heads::ScoresFile;
use lmsplit::towers::{Preset, Schedule};

#[test]
fn a_finished_run_is_reused_with_identical_scores() {
    let dir = tempfile::tempdir().unwrap();
    let spec = tiny_spec(0);
    let first = run_in(&spec, dir.path(), "run").unwrap();
    assert!(!first.reused);
    let again = run_in(&spec, dir.path(), "run").unwrap();
    assert!(again.reused, "the finished run was trained again");
    assert_eq!(again.logprobs.logp, first.logprobs.logp);
    assert_eq!(again.manifest, first.manifest);
    // The folder alone, loaded: the same scores; its status read from its manifest.
    let run = dir.path().join("run");
    let loaded = ScoredRun::load(&run).unwrap();
    assert_eq!(loaded.logprobs, first.logprobs);
    assert_eq!(loaded.retest, first.retest);
    let (id, stage, step) = run_status(&run).unwrap().unwrap();
    let res = first.result().unwrap();
    assert_eq!(
        (id.to_string(), stage, step),
        ("gpt-s0".into(), Stage::Done, res.phase1.steps)
    );
    assert_eq!(first.manifest.device, "cpu");
    assert!(run_status(dir.path()).unwrap().is_none());
}

#[test]
fn a_run_folder_copied_as_its_manifest_and_scores_alone_is_analysed_by_what_needs_only_scores() {
    let dir = tempfile::tempdir().unwrap();
    let spec = tiny_spec(0);
    let run = run_in(&spec, dir.path(), "gpt-s0").unwrap();
    // The two files alone, in another folder: what a collaborator is sent.
    let bare = dir.path().join("sent/gpt-s0");
    std::fs::create_dir_all(&bare).unwrap();
    for f in [MANIFEST_FILE, SCORES_FILE] {
        std::fs::copy(run.dir.join(f), bare.join(f)).unwrap();
    }
    let loaded = ScoredRun::load_all(std::slice::from_ref(&bare)).unwrap();
    let mut study = StudySpec::protocol(Protocol::Smoke, std::path::Path::new("unused")).unwrap();
    study.runs = vec![spec.clone()];
    let said = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = said.clone();
    let progress = Progress::to(move |m| sink.lock().unwrap().push(m.to_string())).with_bars(false);
    let tables = dir.path().join("tables");
    let out = analyze(&study, &loaded, &builtin(), &tables, &progress).unwrap();
    // The runs table needs only the scores and manifests: computed and written.
    let runs = &out.get::<StudyRuns>().expect("the runs unit ran").0;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].positions, run.result().unwrap().positions);
    assert!(tables.join("runs.md").is_file());
    // Every other built-in is left out for want of the vocabulary, naming the file looked for.
    let names: Vec<String> = builtin().iter().map(|u| u.name().to_string()).collect();
    let left: Vec<&str> = out.left_out.iter().map(|l| l.unit.as_str()).collect();
    let others: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| *n != "runs")
        .collect();
    assert_eq!(left, others);
    for l in &out.left_out {
        assert_eq!(l.input, Input::Vocabulary, "{l:?}");
        assert!(l.why.contains("tokenizer"), "{l:?}");
    }
    assert!(out.get::<RunPairs>().is_none());
    // ... said in one line.
    let lines: Vec<String> = (said.lock().unwrap().iter())
        .filter(|m| m.contains("left out"))
        .cloned()
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("pairs (needs the vocabulary") && !lines[0].contains('\n'),
        "{}",
        lines[0]
    );
    // study.json maps each unit that ran to its output.
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tables.join("study.json")).unwrap()).unwrap();
    assert_eq!(json["units"]["runs"][0]["label"], "gpt-s0");
    assert!(json["units"].get("pairs").is_none(), "{json}");
    assert_eq!(json["left_out"].as_array().unwrap().len(), others.len());
    // With its vocabulary beside them, the corpus is read again and only what reads the
    // model's weights waits (the protocol's word groups of gpt-s0).
    copy_dir(&run.dir.join("tokenizer"), &bare.join("tokenizer"));
    let loaded = ScoredRun::load_all(std::slice::from_ref(&bare)).unwrap();
    let out = analyze(&study, &loaded, &builtin(), &tables, &Progress::silent()).unwrap();
    let left: Vec<(&str, Input)> = (out.left_out.iter())
        .map(|l| (l.unit.as_str(), l.input))
        .collect();
    assert_eq!(left, [("word_groups", Input::Weights)]);
    assert!(out.left_out[0].why.contains("weights.safetensors"));
    assert!(out.get::<RunPairs>().is_some());
}

/// Every file of a finished run folder has the mode a plain `File::create` gets there (the
/// umask's), so a collaborator's group can read a shared run folder (safetensors' own writer
/// made the checkpoints 0600).
#[cfg(unix)]
#[test]
fn every_file_of_a_run_folder_honours_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let run = run_in(&tiny_spec(0), dir.path(), "run").unwrap();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let plain = dir.path().join("plain");
    std::fs::File::create(&plain).unwrap();
    let want = mode(&plain);
    let mut seen = 0;
    let mut stack = vec![run.dir.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n != "writer.lock") {
                assert_eq!(mode(&p), want, "{} has mode {:o}", p.display(), mode(&p));
                seen += 1;
            }
        }
    }
    let weights = run.dir.join("phase1/checkpoint/weights.safetensors");
    assert!(weights.is_file() && seen > 5, "{seen} files");
}

/// Two identical runs write byte-identical scores files (the metadata in a fixed order).
#[test]
fn two_identical_runs_write_byte_identical_scores_files() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let spec = tiny_spec(0);
    let ra = run_in(&spec, a.path(), "run").unwrap();
    let rb = run_in(&spec, b.path(), "run").unwrap();
    let bytes = |d: &std::path::Path| std::fs::read(d.join(SCORES_FILE)).unwrap();
    assert_eq!(bytes(&ra.dir), bytes(&rb.dir));
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
    let other = ScoringSet::build(&spec.style, &data.tok, data.held_out(), &fewer).unwrap();
    let err = ws
        .ensure_run(&spec, &dir.path().join("run"), &other, &quiet())
        .unwrap_err();
    assert!(
        matches!(err, ExperimentError::ScoringSetMismatch { .. }),
        "{err:?}"
    );
    // ... and the saved set rebuilt with other settings is refused too.
    let err = ws.scoring_set(&spec.style, &fewer).unwrap_err();
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
    let set = ws.scoring_set(&spec.style, &ScoringSpec::new(32)).unwrap();
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
fn a_run_of_a_preset_its_style_lacks_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = tiny_spec(0);
    // Only BERT has the paper's BERT-large.
    spec.preset = Preset::PaperLarge;
    let err = run_in(&spec, dir.path(), "run").unwrap_err();
    assert!(
        err.to_string().contains("no preset paper_large for"),
        "{err}"
    );
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
    std::fs::write(stale.join("marker"), "{}").unwrap();

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
    let kept_record: Manifest =
        serde_json::from_str(&std::fs::read_to_string(kept.join("manifest.json")).unwrap())
            .unwrap();
    assert_eq!(kept_record.spec, old);
    assert_eq!(kept_record.result, first.manifest.result);
    assert!(kept.join("heads/heads.safetensors").is_file());
    assert!(kept.join("emergence/step-0000001/marker").is_file());
    let old_scores = ScoresFile::load(&kept.join("scores.safetensors")).unwrap();
    assert_eq!(old_scores.get(MAIN).unwrap().logp, first.logprobs.logp);
    let (a, b) = (fresh.result().unwrap(), changed.result().unwrap());
    assert_eq!(b.phase1, first.result().unwrap().phase1);
    // The same heads as a run trained under the new settings from the start.
    assert_eq!(a.heads, b.heads);
    assert_eq!(fresh.logprobs.logp, changed.logprobs.logp);
    assert_eq!(changed.manifest.spec, new);
    // Once retrained, the run is reused as it is.
    assert!(run_in(&new, dir.path(), "changed").unwrap().reused);

    // Back to the old settings, killed half way through moving: only `heads` had moved.
    let kept2 = dir.path().join("changed/superseded/002");
    std::fs::create_dir_all(&kept2).unwrap();
    std::fs::copy(
        dir.path().join("changed/manifest.json"),
        kept2.join("manifest.json"),
    )
    .unwrap();
    std::fs::rename(dir.path().join("changed/heads"), kept2.join("heads")).unwrap();
    let again = run_in(&old, dir.path(), "changed").unwrap();
    assert_eq!(again.logprobs.logp, first.logprobs.logp);
    // The next call finished the move into the same folder, and took no third one.
    assert!(kept2.join("heads/heads.safetensors").is_file());
    assert!(kept2.join("scores.safetensors").is_file());
    assert!(!dir.path().join("changed/superseded/003").exists());
    assert!(kept.join("heads/heads.safetensors").is_file());
}

#[test]
fn a_snapshot_is_scored_by_a_job_of_its_own_and_loaded_with_its_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = tiny_spec(6);
    spec.phase1.snapshots = vec![0.25, 0.5];
    spec.retest_heads = true;
    let ws = Workspace::open(&spec.corpus, dir.path().join("data")).unwrap();
    let set = ws.scoring_set(&spec.style, &ScoringSpec::new(32)).unwrap();
    let run_dir = dir.path().join("run");

    // The run's job scores its own heads only; its snapshots wait for their jobs.
    let run = ws.ensure_run(&spec, &run_dir, &set, &quiet()).unwrap();
    assert!(run.snapshots.is_empty());
    assert_eq!(run.result().unwrap().snapshots.len(), 2);
    let err = ws
        .ensure_snapshot(&run_dir, 0.3, &set, &quiet())
        .unwrap_err();
    assert!(err.to_string().contains("[0.25, 0.5]"), "{err}");

    // One snapshot's job may run while another holds its own folder's lock.
    let snaps = &run.result().unwrap().snapshots;
    let other = snaps[0].job_dir(&run_dir);
    std::fs::create_dir_all(&other).unwrap();
    let held = lmsplit::files::FolderLock::acquire(&other.join("writer.lock"), "test").unwrap();
    let half = ws.ensure_snapshot(&run_dir, 0.5, &set, &quiet()).unwrap();
    let err = ws
        .ensure_snapshot(&run_dir, 0.25, &set, &quiet())
        .unwrap_err();
    assert!(matches!(err, ExperimentError::Locked { .. }), "{err:?}");
    drop(held);
    let quarter = ws.ensure_snapshot(&run_dir, 0.25, &set, &quiet()).unwrap();
    assert_eq!((quarter.fraction, half.fraction), (0.25, 0.5));
    let res = run.result().unwrap();
    assert_eq!(
        half.tokens,
        snaps[1].step * (res.phase1.tokens / res.phase1.steps)
    );
    assert!(half.retest.is_some() && half.retest_heads.is_some());
    // Heads of an earlier snapshot fit worse, and their scores are not the end's.
    assert_ne!(half.logprobs.logp, run.logprobs.logp);
    assert_ne!(quarter.logprobs.logp, half.logprobs.logp);

    // A finished job is reused; the run folder copied elsewhere loads with both points.
    let again = ws.ensure_snapshot(&run_dir, 0.5, &set, &quiet()).unwrap();
    assert_eq!(again.logprobs, half.logprobs);
    assert_eq!(again.heads, half.heads);
    let copy = dir.path().join("elsewhere/run");
    common::copy_dir(&run_dir, &copy);
    let loaded = ScoredRun::load(&copy).unwrap();
    let points: Vec<f64> = loaded.snapshots.iter().map(|s| s.fraction).collect();
    assert_eq!(points, [0.25, 0.5]);
    assert_eq!(loaded.snapshots[1].logprobs, half.logprobs);
    assert_eq!(loaded.snapshots[1].retest, half.retest);

    // A snapshot job's folder from another phase 1 is refused, not read as this run's.
    let job = snaps[1].job_dir(&copy).join("snapshot.json");
    let text = std::fs::read_to_string(&job).unwrap();
    let sha = loaded.manifest.weights_sha256.clone().unwrap();
    std::fs::write(&job, text.replace(&sha, &"0".repeat(sha.len()))).unwrap();
    let err = ScoredRun::load(&copy).unwrap_err();
    assert!(err.to_string().contains("another phase 1"), "{err}");

    // A run not finished has no snapshot to score yet.
    let manifest = copy.join("manifest.json");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, text.replace("\"done\"", "\"heads\"")).unwrap();
    let err = ws.ensure_snapshot(&copy, 0.5, &set, &quiet()).unwrap_err();
    assert!(matches!(err, ExperimentError::Unfinished { .. }), "{err:?}");
}
