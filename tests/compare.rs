//! Finished runs compared across study folders (`experiment::compare`): the same run copied to
//! another folder agrees with itself exactly, under the names given; unfinished, doubly named
//! and other-corpus runs are refused with typed errors; a study moved whole opens from its own
//! data folder.

mod common;

use std::path::Path;

use common::{copy_dir, run_in, tiny_spec};
use lmsplit::experiment::analysis::{compare_runs, RunScores, TokenSelection};
use lmsplit::experiment::compare::{compare_run_folders, NamedRun};
use lmsplit::experiment::lock::LockHolder;
use lmsplit::experiment::{open_run, CorpusSpec, ExperimentError, Progress};
use lmsplit::prefscore::{CorrOptions, ScoreKind};

fn compare(runs: &[NamedRun], out: &Path) -> Result<Vec<(String, String, f64)>, ExperimentError> {
    let sel = [TokenSelection::MinCount(1)];
    let found = compare_run_folders(
        runs,
        &sel,
        ScoreKind::ArithmeticMean,
        50,
        out,
        &Progress::silent(),
    )?;
    for f in &found.outputs {
        assert!(f.is_file(), "{} was not written", f.display());
    }
    Ok(found
        .pairs
        .into_iter()
        .map(|p| (p.a, p.b, p.pearson.r))
        .collect())
}

#[test]
fn a_run_copied_to_another_study_folder_agrees_with_itself_under_the_names_given() {
    let root = tempfile::tempdir().unwrap();
    let s0 = run_in(&tiny_spec(0), root.path(), "one/gpt-s0").unwrap();
    let s1 = run_in(&tiny_spec(1), root.path(), "one/gpt-s1").unwrap();
    copy_dir(
        &root.path().join("one/gpt-s0"),
        &root.path().join("two/gpt-s0"),
    );
    let runs = [
        NamedRun::from_dir(root.path().join("one/gpt-s0")),
        NamedRun::from_dir(root.path().join("two/gpt-s0")),
        NamedRun {
            name: "seed 1".into(),
            dir: root.path().join("one/gpt-s1"),
        },
    ];
    let out = root.path().join("compare");
    let pairs = compare(&runs, &out).unwrap();
    let names: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(a, b, _)| (a.as_str(), b.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("one/gpt-s0", "two/gpt-s0"),
            ("one/gpt-s0", "seed 1"),
            ("two/gpt-s0", "seed 1"),
        ]
    );
    assert!(
        (pairs[0].2 - 1.0).abs() < 1e-12,
        "a copy gave r {}",
        pairs[0].2
    );
    // Two seeds do not agree exactly, and the folder path gives what the runs themselves give.
    let r = pairs[1].2;
    assert!(r.is_finite() && r < 0.999, "two seeds gave r {r}");
    assert_eq!(pairs[2].2, r);
    let data = lmsplit::experiment::Workspace::open(&tiny_spec(0).corpus, root.path().join("data"))
        .unwrap()
        .into_data();
    let kind = ScoreKind::ArithmeticMean;
    let opts = CorrOptions::with_resamples(50);
    let direct = compare_runs(
        &RunScores::new(&s0, kind).unwrap(),
        &RunScores::new(&s1, kind).unwrap(),
        &data.freq,
        TokenSelection::MinCount(1),
        kind,
        &opts,
    )
    .unwrap();
    assert_eq!(direct.pearson.r, r);
    let table = std::fs::read_to_string(out.join("pairs_arithmetic_min-count-1.md")).unwrap();
    assert!(
        table.contains("two/gpt-s0") && table.contains("seed 1"),
        "{table}"
    );
}

/// A study trained elsewhere (another machine, another path) and brought here whole: its run
/// records name a data folder that is not here, and the run opens from the study's own.
#[test]
fn a_study_moved_whole_opens_from_its_own_data_folder_and_creates_nothing() {
    let root = tempfile::tempdir().unwrap();
    let trained = root.path().join("there");
    let original = run_in(&tiny_spec(0), &trained, "gpt-s0").unwrap();
    let here = root.path().join("here");
    std::fs::rename(&trained, &here).unwrap();
    let opts = common::quiet();
    let (_, moved) = open_run(&here.join("gpt-s0"), &opts).unwrap();
    assert!(moved.reused, "a finished run was trained again");
    assert_eq!(moved.logprobs, original.logprobs);
    assert!(
        !trained.exists(),
        "the recorded data folder {} was created",
        trained.display()
    );
    // With the scoring set in neither folder, the error names both and still creates nothing.
    std::fs::remove_file(here.join("data/gpt-scoring_set.json")).unwrap();
    let err = open_run(&here.join("gpt-s0"), &opts).unwrap_err();
    assert!(matches!(err, ExperimentError::Missing { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains(&trained.join("data").display().to_string())
            && msg.contains(&here.join("data").display().to_string()),
        "{msg}"
    );
    assert!(!trained.exists());
}

#[test]
fn unfinished_doubly_named_and_other_corpus_runs_are_refused() {
    let root = tempfile::tempdir().unwrap();
    run_in(&tiny_spec(0), root.path(), "gpt-s0").unwrap();
    let out = root.path().join("compare");
    let at = |name: &str, dir: &str| NamedRun {
        name: name.into(),
        dir: root.path().join(dir),
    };

    // A folder that is not there (a typo), or holds no run: said so, not "never started".
    let err = compare(&[at("a", "gpt-s0"), at("b", "never")], &out).unwrap_err();
    match &err {
        ExperimentError::Missing { path, what } => {
            assert_eq!(
                (path, what.as_str()),
                (&root.path().join("never"), "the run folder of b")
            )
        }
        e => panic!("expected Missing, got {e:?}"),
    }
    std::fs::create_dir_all(root.path().join("empty")).unwrap();
    let err = compare(&[at("a", "gpt-s0"), at("b", "empty")], &out).unwrap_err();
    assert!(
        matches!(&err, ExperimentError::NotA { path, .. } if path.ends_with("empty")),
        "{err:?}"
    );
    // A run whose record has no results yet: stopped, or still running while its lock is held.
    let stopped = root.path().join("stopped");
    std::fs::create_dir_all(&stopped).unwrap();
    let text = std::fs::read_to_string(root.path().join("gpt-s0/run.json")).unwrap();
    let mut record: serde_json::Value = serde_json::from_str(&text).unwrap();
    record["result"] = serde_json::Value::Null;
    std::fs::write(stopped.join("run.json"), record.to_string()).unwrap();
    let why = |dir: &Path| lmsplit::experiment::run::why_unfinished(dir).unwrap();
    assert_eq!(
        why(&stopped).as_deref(),
        Some("stopped in phase 1 (or failed: run its job again)")
    );
    // Held by a live process (this one): still running, naming it.
    let me = LockHolder::this_process();
    let lock = stopped.join("writer.lock");
    std::fs::write(&lock, serde_json::to_string(&me).unwrap()).unwrap();
    assert_eq!(
        why(&stopped),
        Some(format!(
            "still running: phase 1, pid {} on {} since {}",
            me.pid,
            me.host,
            me.since_utc()
        ))
    );
    // Left by a process that is gone: stopped, whatever the lock says.
    let dead = LockHolder {
        pid: u32::MAX - 1,
        proc_start: None,
        ..me
    };
    std::fs::write(&lock, serde_json::to_string(&dead).unwrap()).unwrap();
    assert_eq!(
        why(&stopped).as_deref(),
        Some("stopped in phase 1 (or failed: run its job again)")
    );
    assert_eq!(why(&root.path().join("gpt-s0")), None);
    assert!(matches!(
        compare(&[at("a", "gpt-s0"), at("a", "gpt-s0")], &out),
        Err(ExperimentError::DuplicateRun(name)) if name == "a"
    ));
    assert!(matches!(
        compare(&[at("a", "gpt-s0")], &out),
        Err(ExperimentError::TooLittleData {
            have: 1,
            need: 2,
            ..
        })
    ));

    let mut other = tiny_spec(0);
    other.corpus = CorpusSpec {
        train_vocab: 256,
        ..CorpusSpec::synthetic(120, 7)
    };
    let other_root = root.path().join("other");
    run_in(&other, &other_root, "gpt-s0").unwrap();
    let err = compare(&[at("a", "gpt-s0"), at("b", "other/gpt-s0")], &out).unwrap_err();
    match &err {
        ExperimentError::Mismatch { run, .. } => assert_eq!(run, "b"),
        e => panic!("expected Mismatch, got {e:?}"),
    }
}

/// A finished run whose folder a live process holds (a study's chain training its snapshot
/// heads) is read as it lies for its scores: the comparison is the unlocked one, nothing in the
/// folder is written, and the lock stays. Opening it for its model still needs the lock.
#[test]
fn a_finished_run_held_by_a_live_writer_is_read_for_its_scores_without_its_lock() {
    let root = tempfile::tempdir().unwrap();
    run_in(&tiny_spec(0), root.path(), "gpt-s0").unwrap();
    run_in(&tiny_spec(1), root.path(), "gpt-s1").unwrap();
    let runs = [
        NamedRun::from_dir(root.path().join("gpt-s0")),
        NamedRun::from_dir(root.path().join("gpt-s1")),
    ];
    let free = compare(&runs, &root.path().join("free")).unwrap();
    let dir = root.path().join("gpt-s1");
    let lock = dir.join("writer.lock");
    let me = serde_json::to_string(&LockHolder::this_process()).unwrap();
    std::fs::write(&lock, &me).unwrap();
    let record = std::fs::read(dir.join("run.json")).unwrap();
    let held = compare(&runs, &root.path().join("held")).unwrap();
    assert_eq!(held, free);
    assert_eq!(std::fs::read(dir.join("run.json")).unwrap(), record);
    assert_eq!(std::fs::read_to_string(&lock).unwrap(), me);
    let opts = lmsplit::experiment::RunOptions {
        need_model: true,
        ..common::quiet()
    };
    let err = open_run(&dir, &opts).unwrap_err();
    assert!(matches!(err, ExperimentError::Locked { .. }), "{err:?}");
}
