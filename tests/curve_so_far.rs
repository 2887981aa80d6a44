//! The agreement curve so far (`experiment::curve_so_far`): runs still in phase 1 give the
//! points of the snapshots they have written, equal to the finished study's; the finished runs
//! read back the heads trained for it instead of training them again; a snapshot whose heads
//! another process is training is waited for and read; heads whose spec changed under them are
//! removed; bad requests are typed errors.

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use common::{copy_dir, quiet};
use lmsplit::experiment::curve_so_far::{curve_so_far, CurvePoints, CurveRun, CurveSoFar};
use lmsplit::experiment::emergence::{Emergence, EmergencePoint};
use lmsplit::experiment::lock::FolderLock;
use lmsplit::experiment::{
    run_study, ExperimentError, Progress, Protocol, RunOptions, RunRecord, StudySpec,
};

const RUNS: [&str; 2] = ["gpt-s0", "gpt-s1"];

fn smoke() -> StudySpec {
    StudySpec::protocol(Protocol::Smoke, Path::new("unused")).unwrap()
}

fn only() -> Vec<String> {
    RUNS.map(String::from).to_vec()
}

/// The smoke study's two GPT runs trained to the end once for every test of this file, and
/// their agreement curve.
fn finished() -> &'static (tempfile::TempDir, Emergence) {
    static DONE: OnceLock<(tempfile::TempDir, Emergence)> = OnceLock::new();
    DONE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let out = run_study(&smoke(), dir.path(), &only(), &quiet()).unwrap();
        let e = out.emergence.expect("the smoke protocol draws the curve");
        (dir, e)
    })
}

fn read_record(p: &Path) -> RunRecord {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn write_record(p: &Path, rec: &RunRecord) {
    std::fs::write(p, serde_json::to_string(rec).unwrap()).unwrap();
}

/// The finished runs of `from` as they stood during phase 1 once their snapshots were written
/// (their records without results, the snapshots' weights, the study's data), in `to`.
fn in_phase1(from: &Path, to: &Path) {
    copy_dir(&from.join("data"), &to.join("data"));
    for label in RUNS {
        let (a, b) = (from.join(label), to.join(label));
        copy_dir(
            &a.join("phase1").join("snapshots"),
            &b.join("phase1").join("snapshots"),
        );
        let mut rec = read_record(&a.join("run.json"));
        rec.result = None;
        write_record(&b.join("run.json"), &rec);
    }
}

/// The folder of the heads of `label`'s only snapshot (1/2) in the study `study`.
fn snapshot_folder(study: &Path, label: &str) -> PathBuf {
    let rec = read_record(&finished().0.path().join(label).join("run.json"));
    let step = rec.result.unwrap().snapshots[0].step;
    study
        .join(label)
        .join("emergence")
        .join(format!("step-{step:07}"))
}

/// The quality file of the main heads in a snapshot folder, with its first head's NLL moved by
/// `by`: a value no training gives, to tell a read cache from a trained head.
fn mark_heads(folder: &Path, by: f64) -> f64 {
    let path = folder.join("heads_quality-1000.json");
    let mut q: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let nll = q["nll"][0].as_f64().unwrap() + by;
    q["nll"][0] = nll.into();
    std::fs::write(&path, q.to_string()).unwrap();
    nll
}

fn point<'a>(e: &'a Emergence, label: &str, fraction: f64) -> &'a EmergencePoint {
    e.points
        .iter()
        .find(|p| p.label == label && p.fraction == fraction)
        .unwrap_or_else(|| panic!("no point of {label} at {fraction}: {:?}", e.points))
}

fn curve(out: &Path, only: &[String], points: CurvePoints) -> Result<CurveSoFar, ExperimentError> {
    curve_so_far(&smoke(), out, only, &quiet(), points)
}

type Said = Arc<Mutex<Vec<String>>>;

/// gpt-s0's curve so far in `study`, asked for on another thread, with what it says.
fn ask_in_background(
    study: &Path,
) -> (
    std::thread::JoinHandle<Result<CurveSoFar, ExperimentError>>,
    Said,
) {
    let said: Said = Arc::default();
    let sink = said.clone();
    let opts = RunOptions {
        progress: Progress::to(move |m| sink.lock().unwrap().push(m.to_string())),
        ..quiet()
    };
    let root = study.to_path_buf();
    let asked = std::thread::spawn(move || {
        curve_so_far(
            &smoke(),
            &root,
            &["gpt-s0".into()],
            &opts,
            CurvePoints::Train,
        )
    });
    (asked, said)
}

/// A study in phase 1 whose gpt-s0 snapshot's heads another writer holds (`lock`), and the
/// curve so far asked for on another thread (`asked`), waiting for that writer.
struct Waiting {
    study: tempfile::TempDir,
    folder: PathBuf,
    lock: FolderLock,
    asked: std::thread::JoinHandle<Result<CurveSoFar, ExperimentError>>,
}

fn waiting_for_a_writer() -> Waiting {
    let study = tempfile::tempdir().unwrap();
    in_phase1(finished().0.path(), study.path());
    let folder = snapshot_folder(study.path(), "gpt-s0");
    std::fs::create_dir_all(&folder).unwrap();
    let lock = FolderLock::acquire(&folder.join("writer.lock"), "snapshot's heads").unwrap();
    let (asked, said) = ask_in_background(study.path());
    wait_until_said(&said, "waiting for");
    Waiting {
        study,
        folder,
        lock,
        asked,
    }
}

/// Returns once a message containing `what` was said (at most two minutes).
fn wait_until_said(said: &Said, what: &str) {
    let start = std::time::Instant::now();
    while !said.lock().unwrap().iter().any(|m| m.contains(what)) {
        assert!(
            start.elapsed().as_secs() < 120,
            "never said {what:?}: {:?}",
            said.lock().unwrap()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn runs_in_phase1_give_the_finished_curves_points_and_the_finished_runs_read_their_heads() {
    let (done, full) = finished();
    let study = tempfile::tempdir().unwrap();
    in_phase1(done.path(), study.path());
    // Nothing is scored yet: taking only scored points finds none.
    let err = curve(study.path(), &only(), CurvePoints::Scored).unwrap_err();
    assert!(
        matches!(err, ExperimentError::TooLittleData { have: 0, .. }),
        "{err:?}"
    );
    let c = curve(study.path(), &only(), CurvePoints::Train).unwrap();
    let at_half = |label: &str| CurveRun {
        label: label.into(),
        fractions: vec![0.5],
        finished: false,
    };
    assert_eq!(c.runs, [at_half("gpt-s0"), at_half("gpt-s1")]);
    // The same heads and scores as the finished study's at 1/2; no end to compare with yet.
    assert_eq!(c.emergence.points.len(), 2);
    for p in &c.emergence.points {
        let want = EmergencePoint {
            with_end: None,
            ..point(full, &p.label, 0.5).clone()
        };
        assert_eq!(*p, want);
    }
    assert_eq!(c.emergence.pairs.len(), 1);
    assert_eq!(c.emergence.pairs[0], full.pairs[0]);
    assert_eq!(full.pairs[0].fraction, 0.5);
    assert_eq!(c.tables, study.path().join("curve-so-far-gpt-s0+gpt-s1"));
    for f in [
        "emergence.md",
        "fig_emergence_correlation.png",
        "curve_so_far.json",
    ] {
        assert!(c.tables.join(f).is_file(), "{f} was not written");
        assert!(c.outputs.contains(&c.tables.join(f)), "{f} not listed");
    }
    // The runs finish (everything of the finished folders but their snapshot heads); the
    // heads trained for the curve so far are read back, not trained again.
    let marked = mark_heads(&snapshot_folder(study.path(), "gpt-s0"), 1.0);
    for label in RUNS {
        let (a, b) = (done.path().join(label), study.path().join(label));
        for e in std::fs::read_dir(&a).unwrap() {
            let e = e.unwrap();
            let dest = b.join(e.file_name());
            match (
                e.file_name() == "emergence",
                e.file_type().unwrap().is_dir(),
            ) {
                (true, _) => {}
                (false, true) => copy_dir(&e.path(), &dest),
                (false, false) => drop(std::fs::copy(e.path(), dest).unwrap()),
            }
        }
    }
    let out = run_study(&smoke(), study.path(), &only(), &quiet()).unwrap();
    let e = out.emergence.unwrap();
    assert_eq!(point(&e, "gpt-s0", 0.5).heads.nll[0], marked);
    assert_eq!(point(&e, "gpt-s1", 0.5), point(full, "gpt-s1", 0.5));
    // Finished now: the curve so far has their ends too, and only scored points train nothing.
    let c = curve(study.path(), &only(), CurvePoints::Scored).unwrap();
    assert!(c
        .runs
        .iter()
        .all(|r| r.finished && r.fractions == [0.5, 1.0]));
    assert_eq!(c.emergence.pairs.len(), 2);
    assert_eq!(c.emergence.pairs[1], full.pairs[1]);
}

#[test]
fn a_snapshot_whose_heads_another_process_trains_is_waited_for_and_read() {
    let (done, _) = finished();
    // Another writer holds the snapshot's lock while the curve is asked for.
    let w = waiting_for_a_writer();
    let (study, folder) = (&w.study, &w.folder);
    // It writes the heads' scores (marked), each file whole, the quality files last (a call
    // that came late reads them without waiting, but never half of them), then lets go: the
    // waiting call reads them.
    let staging = study.path().join("staging");
    std::fs::create_dir_all(&staging).unwrap();
    let mut files: Vec<_> = std::fs::read_dir(snapshot_folder(done.path(), "gpt-s0"))
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| e.file_name())
        .collect();
    files.sort_by_key(|f| f.to_string_lossy().starts_with("heads_quality"));
    for f in &files {
        let from = snapshot_folder(done.path(), "gpt-s0").join(f);
        std::fs::copy(from, staging.join(f)).unwrap();
    }
    let marked = mark_heads(&staging, 2.0);
    for f in &files {
        std::fs::rename(staging.join(f), folder.join(f)).unwrap();
    }
    drop(w.lock);
    let c = w.asked.join().unwrap().unwrap();
    assert_eq!(point(&c.emergence, "gpt-s0", 0.5).heads.nll[0], marked);
    assert!(
        !folder.join("heads-1000").exists(),
        "the waiting call trained heads of its own"
    );
}

#[test]
fn bad_requests_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    // No run has started: no point at all.
    let err = curve(dir.path(), &[], CurvePoints::Train).unwrap_err();
    assert!(
        matches!(err, ExperimentError::TooLittleData { have: 0, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("gpt-s0, gpt-s1"), "{err}");
    // bert is not one of the smoke curve's models; elmo-s9 is no run of the study.
    let err = curve(dir.path(), &["bert-s0".into()], CurvePoints::Train).unwrap_err();
    assert!(
        matches!(&err, ExperimentError::BadSetting { field, .. } if field == "--only"),
        "{err:?}"
    );
    let err = curve(dir.path(), &["elmo-s9".into()], CurvePoints::Train).unwrap_err();
    assert!(matches!(err, ExperimentError::UnknownRun { .. }), "{err:?}");
    // A study that draws no curve.
    let mut none = smoke();
    none.emergence = None;
    let err = curve_so_far(&none, dir.path(), &[], &quiet(), CurvePoints::Train).unwrap_err();
    assert!(
        matches!(&err, ExperimentError::BadSetting { field, .. } if field == "emergence"),
        "{err:?}"
    );
    // A folder holding another run is refused, naming the differing field.
    let (done, _) = finished();
    in_phase1(done.path(), dir.path());
    let rec_path = dir.path().join("gpt-s0").join("run.json");
    let mut rec = read_record(&rec_path);
    rec.spec.phase1.lr *= 2.0;
    write_record(&rec_path, &rec);
    let err = curve(dir.path(), &[], CurvePoints::Train).unwrap_err();
    assert!(
        matches!(&err, ExperimentError::SpecMismatch { fields, .. } if fields == &["phase1.lr"]),
        "{err:?}"
    );
}

#[test]
fn the_reproduce_flag_draws_the_curve_of_scored_points_and_refuses_bad_values() {
    let (done, full) = finished();
    let study = tempfile::tempdir().unwrap();
    copy_dir(done.path(), study.path());
    let run = |extra: &[&str]| {
        std::process::Command::new(common::example_bin("reproduce"))
            .args(["--protocol", "smoke", "--only", "gpt-s0,gpt-s1", "--out"])
            .arg(study.path())
            .args(extra)
            .output()
            .unwrap()
    };
    let o = run(&["--curve-so-far", "scored"]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        stdout.contains("gpt-s1: finished, points at 0.5, 1"),
        "{stdout}"
    );
    let last = stdout.lines().last().unwrap();
    let c: CurveSoFar = serde_json::from_str(last).unwrap();
    assert_eq!(c.emergence.pairs, full.pairs);
    for bad in [
        &["--curve-so-far", "all"][..],
        &["--curve-so-far", "2,x"],
        &["--curve-so-far", "--no-emergence"],
        &["--curve-so-far", "--status"],
    ] {
        let o = run(bad);
        assert_eq!(o.status.code(), Some(2), "{bad:?}");
    }
    let o = run(&["--curve-so-far", "all"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("train (the default), scored, or snapshots such as 2,3"),
        "{err}"
    );
}

#[test]
fn heads_are_not_written_for_a_spec_the_run_no_longer_has_nor_a_spec_changed_under_them() {
    let (done, _) = finished();
    // The curve's process read the record, then waits for the snapshot's writer, while the run
    // is restarted with new head settings: it refuses the heads of a spec the run has left.
    let w = waiting_for_a_writer();
    let (study, folder) = (&w.study, &w.folder);
    let rec_path = study.path().join("gpt-s0").join("run.json");
    let mut rec = read_record(&rec_path);
    rec.spec.heads.lr *= 2.0;
    write_record(&rec_path, &rec);
    drop(w.lock);
    let err = w.asked.join().unwrap().unwrap_err();
    assert!(
        matches!(&err, ExperimentError::SpecMismatch { fields, .. } if fields == &["heads.lr"]),
        "{err:?}"
    );
    assert!(!folder.join("logprobs-1000.json").exists());
    // A finished run given new head settings moves its snapshot heads away: not while another
    // process trains one of them.
    let finished_copy = tempfile::tempdir().unwrap();
    copy_dir(done.path(), finished_copy.path());
    let folder = snapshot_folder(finished_copy.path(), "gpt-s0");
    let lock = FolderLock::acquire(&folder.join("writer.lock"), "snapshot's heads").unwrap();
    let mut spec = smoke();
    for r in &mut spec.runs {
        r.heads.lr *= 2.0;
    }
    let err = run_study(&spec, finished_copy.path(), &["gpt-s0".into()], &quiet()).unwrap_err();
    assert!(
        matches!(&err, ExperimentError::Locked { what, .. } if what == "snapshot's heads"),
        "{err:?}"
    );
    assert!(
        folder.join("logprobs-1000.json").is_file(),
        "moved under its writer"
    );
    drop(lock);
    // Once it lets go they move, with the locks taken for the move removed there.
    run_study(&spec, finished_copy.path(), &["gpt-s0".into()], &quiet()).unwrap();
    let step = folder.file_name().unwrap();
    let moved = finished_copy
        .path()
        .join("gpt-s0/superseded/001/emergence")
        .join(step);
    assert!(moved.join("logprobs-1000.json").is_file());
    assert!(
        !moved.join("writer.lock").exists(),
        "a lock left in superseded/"
    );
    assert!(
        !folder.join("writer.lock").exists(),
        "a lock left in emergence/"
    );
}

#[test]
fn heads_whose_spec_changed_while_they_trained_are_removed_not_scored() {
    // The run's record gets new head settings while the curve's process trains a snapshot's
    // heads (rewritten from the message that says those heads are trained, before they are
    // scored): their scores are not written and their folder, checkpoint included, is removed,
    // so that the new spec never resumes them.
    let study = tempfile::tempdir().unwrap();
    in_phase1(finished().0.path(), study.path());
    let rec_path = study.path().join("gpt-s0").join("run.json");
    let changed = Arc::new(Mutex::new(false));
    let (path, flag) = (rec_path.clone(), changed.clone());
    let opts = RunOptions {
        progress: Progress::to(move |m| {
            if m.contains("heads (seed 1000)") {
                let mut rec = read_record(&path);
                rec.spec.heads.lr *= 2.0;
                write_record(&path, &rec);
                *flag.lock().unwrap() = true;
            }
        })
        .with_bars(false),
        ..quiet()
    };
    let err = curve_so_far(
        &smoke(),
        study.path(),
        &["gpt-s0".into()],
        &opts,
        CurvePoints::Train,
    )
    .unwrap_err();
    assert!(*changed.lock().unwrap(), "the heads were never trained");
    assert!(
        matches!(&err, ExperimentError::SpecMismatch { fields, .. } if fields == &["heads.lr"]),
        "{err:?}"
    );
    let folder = snapshot_folder(study.path(), "gpt-s0");
    for left in [
        "logprobs-1000.json",
        "heads_quality-1000.json",
        "heads-1000",
    ] {
        assert!(!folder.join(left).exists(), "{left} was left behind");
    }
}

#[test]
fn train_only_trains_the_snapshots_asked_for_and_takes_the_others_where_scored() {
    let mut spec = smoke();
    for r in &mut spec.runs {
        r.phase1.snapshots = vec![0.25, 0.5];
    }
    let tmp = tempfile::tempdir().unwrap();
    let only = vec!["gpt-s0".to_string()];
    let stop = RunOptions {
        stop_at_snapshot: Some(2),
        ..quiet()
    };
    let stopped = run_study(&spec, tmp.path(), &only, &stop).unwrap_err();
    assert!(
        matches!(stopped, ExperimentError::StoppedAtSnapshot { .. }),
        "{stopped}"
    );
    let ask = |points| curve_so_far(&spec, tmp.path(), &only, &quiet(), points);
    let cache = tmp.path().join("gpt-s0").join("emergence");
    // A snapshot the run lacks (or none at all) is refused before anything is trained.
    for bad in [vec![3], vec![0], vec![]] {
        let err = ask(CurvePoints::TrainOnly(bad.clone())).unwrap_err();
        assert!(
            matches!(err, ExperimentError::BadSetting { .. }),
            "{bad:?}: {err}"
        );
        assert!(!cache.exists(), "{bad:?}: trained before the check");
    }
    // The second snapshot's heads only: the first is neither trained nor taken.
    let second = ask(CurvePoints::TrainOnly(vec![2])).unwrap();
    assert_eq!(second.runs[0].fractions, vec![0.5]);
    assert_eq!(
        std::fs::read_dir(&cache).unwrap().count(),
        1,
        "one snapshot folder"
    );
    // Asked for all, the first is trained now and the second read back from the cache.
    let both = ask(CurvePoints::Train).unwrap();
    assert_eq!(both.runs[0].fractions, vec![0.25, 0.5]);
    assert_eq!(
        point(&both.emergence, "gpt-s0", 0.5),
        point(&second.emergence, "gpt-s0", 0.5)
    );
    // And the first alone now takes the second too, scored already.
    let first = ask(CurvePoints::TrainOnly(vec![1])).unwrap();
    assert_eq!(first.runs[0].fractions, vec![0.25, 0.5]);
}
