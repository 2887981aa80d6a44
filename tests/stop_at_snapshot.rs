//! `RunOptions::stop_at_snapshot` (`reproduce --stop-at-snapshot K`): a run stops once its
//! phase 1 holds its K-th snapshot, its checkpoint at that update and nothing further trained;
//! asked again it trains nothing; without the stop it goes on to the scores of a run never
//! stopped, bit for bit. A snapshot the run does not have is a typed error before any training,
//! and a study stops each of its runs and names them together.

mod common;

use std::path::Path;

use common::{quiet, tiny_spec};
use lmsplit::experiment::record::{LOGPROBS_FILE, PHASE1_DIR};
use lmsplit::experiment::{
    run_study, ExperimentError, Protocol, Result, RunOptions, RunSpec, ScoredRun, ScoringSpec,
    StudySpec, Workspace,
};

/// The tiny GPT run with two phase-1 snapshots (at 1/4 and 1/2).
fn spec() -> RunSpec {
    let mut r = tiny_spec(3);
    r.phase1.snapshots = vec![0.25, 0.5];
    r
}

/// The run in `root/<dir>` (the data in `root/data`), stopped at snapshot `stop` if given.
fn ensure(root: &Path, dir: &str, stop: Option<usize>) -> Result<ScoredRun> {
    let spec = spec();
    let ws = Workspace::open(&spec.corpus, root.join("data"))?;
    let set = ws.scoring_set(spec.style, &ScoringSpec::new(32))?;
    let opts = RunOptions {
        stop_at_snapshot: stop,
        ..quiet()
    };
    ws.ensure_run(&spec, &root.join(dir), &set, &opts)
}

fn checkpoint_step(run: &Path) -> u64 {
    let state = run.join(PHASE1_DIR).join("checkpoint/state.json");
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
    s["step"].as_u64().unwrap()
}

fn stopped_at<T>(r: Result<T>, k: usize) -> Vec<String> {
    match r {
        Err(e @ ExperimentError::StoppedAtSnapshot { .. }) => {
            assert!(e.is_stopped(), "a requested stop: {e}");
            assert!(e.to_string().contains(&format!("snapshot {k}")), "{e}");
            match e {
                ExperimentError::StoppedAtSnapshot { runs, snapshot } => {
                    assert_eq!(snapshot, k);
                    runs
                }
                _ => unreachable!(),
            }
        }
        Err(e) => panic!("not a stop at snapshot {k}: {e}"),
        Ok(_) => panic!("not stopped at snapshot {k}"),
    }
}

#[test]
fn a_run_stopped_at_its_snapshot_checkpoints_there_then_goes_on_to_the_unstopped_scores() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let whole = ensure(root, "whole", None).unwrap();
    let steps: Vec<u64> = whole
        .record
        .result
        .as_ref()
        .unwrap()
        .snapshots
        .iter()
        .map(|s| s.step)
        .collect();
    assert_eq!(steps.len(), 2, "{steps:?}");
    let snap = |dir: &str, step: u64| {
        root.join(dir)
            .join(PHASE1_DIR)
            .join(format!("snapshots/step-{step:07}.safetensors"))
    };

    let label = spec().label();
    assert_eq!(
        stopped_at(ensure(root, "part", Some(1)), 1),
        vec![label.clone()]
    );
    let part = root.join("part");
    assert_eq!(
        checkpoint_step(&part),
        steps[0],
        "the checkpoint is the snapshot's update"
    );
    assert!(snap("part", steps[0]).is_file());
    assert!(
        !snap("part", steps[1]).exists(),
        "phase 1 went past the stop"
    );
    assert!(!part.join(LOGPROBS_FILE).exists());

    // Asked again, it trains nothing: the checkpoint is the same file, byte for byte.
    let state = part.join(PHASE1_DIR).join("checkpoint/state.json");
    let before = std::fs::read(&state).unwrap();
    stopped_at(ensure(root, "part", Some(1)), 1);
    assert_eq!(std::fs::read(&state).unwrap(), before);

    stopped_at(ensure(root, "part", Some(2)), 2);
    assert_eq!(checkpoint_step(&part), steps[1]);

    let resumed = ensure(root, "part", None).unwrap();
    for &step in &steps {
        assert_eq!(
            std::fs::read(snap("part", step)).unwrap(),
            std::fs::read(snap("whole", step)).unwrap(),
            "snapshot {step} differs from the unstopped run's"
        );
    }
    assert_eq!(
        std::fs::read(part.join(LOGPROBS_FILE)).unwrap(),
        std::fs::read(root.join("whole").join(LOGPROBS_FILE)).unwrap(),
        "the resumed run scored differently"
    );
    assert_eq!(resumed.logprobs.logp, whole.logprobs.logp);

    // A finished run is reused as it is, stop or no stop.
    let again = ensure(root, "part", Some(1)).unwrap();
    assert_eq!(again.logprobs.logp, whole.logprobs.logp);
}

#[test]
fn a_snapshot_the_run_does_not_have_is_a_bad_setting_before_any_training() {
    let tmp = tempfile::tempdir().unwrap();
    for k in [0, 3] {
        let dir = format!("k{k}");
        match ensure(tmp.path(), &dir, Some(k)) {
            Err(ExperimentError::BadSetting { value, why, .. }) => {
                assert_eq!(value, k.to_string());
                assert!(why.contains("has 2 phase-1 snapshots: 1 to 2"), "{why}");
            }
            other => panic!("stop at snapshot {k}: {:?}", other.map(|r| r.label)),
        }
        let ckpt = tmp.path().join(&dir).join(PHASE1_DIR).join("checkpoint");
        assert!(!ckpt.exists(), "trained before the check");
    }
}

#[test]
fn a_study_stops_each_run_at_the_snapshot_and_names_them_together() {
    let smoke = StudySpec::protocol(Protocol::Smoke, Path::new("unused")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let only = vec!["gpt-s0".to_string(), "gpt-s1".to_string()];
    let opts = RunOptions {
        stop_at_snapshot: Some(1),
        ..quiet()
    };
    let runs = stopped_at(run_study(&smoke, tmp.path(), &only, &opts), 1);
    assert_eq!(runs, only, "both runs, in the study's order");
    for label in &only {
        let run = tmp.path().join(label);
        let snaps = std::fs::read_dir(run.join(PHASE1_DIR).join("snapshots")).unwrap();
        assert_eq!(snaps.count(), 1, "{label}");
        assert!(!run.join(LOGPROBS_FILE).exists(), "{label}");
    }
}
