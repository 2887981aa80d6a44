//! Two-tower runs as independent jobs, tested with real processes of the example command
//! lines (issue 27):
//!
//! - two writers on one run: the second `two_tower` on a folder is refused, naming the first;
//!   the lock of a killed run is named and taken over by the next;
//! - SIGTERM mid-phase-1 and mid-heads: exit code 75 after a checkpoint, and the rerun ends
//!   with the scores of an uninterrupted run, bit for bit;
//! - a failed checkpoint write (a full disk, injected with RLIMIT_FSIZE: the tests run as root,
//!   where permission bits are ignored) names the file and leaves the previous checkpoint;
//! - N processes on one study: `reproduce --only` on disjoint runs of one folder create one
//!   `data/` and give the results of a sequential study;
//! - the status read from a run's folder follows it (phase 1, heads, finished);
//! - a snapshot's job (`reproduce train --only gpt-s0@0.5`) stopped by SIGTERM exits 75 and
//!   resumes to the scores of the same job uninterrupted.
//!
//! The examples must be built from the current sources: a plain `cargo test` builds them,
//! `cargo test --test jobs` alone does not (run `cargo build --examples` first).
#![cfg(unix)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{example_bin, small_gpt_run_args};
use lmsplit::experiment::{run_status, ScoredRun, Stage};

/// Exit code of a run stopped by SIGTERM after its checkpoint (examples/two_tower.rs).
const EXIT_STOPPED: i32 = 75;

/// The uninterrupted reference run, trained once per test binary: its folder (its
/// `data/tokenizer.json` is given to every other run, WordPiece training not being
/// bit-reproducible).
fn whole() -> &'static Path {
    static WHOLE: OnceLock<PathBuf> = OnceLock::new();
    WHOLE.get_or_init(|| {
        // Under the target folder (not a temporary folder: it outlives every test's own).
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("jobs-whole");
        let _ = std::fs::remove_dir_all(&dir);
        let ok = Command::new(example_bin("two_tower"))
            .args(small_gpt_run_args(&dir, None))
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(ok.success());
        dir
    })
}

fn tokenizer() -> PathBuf {
    whole().join("data/tokenizer.json")
}

fn spawn(out: &Path) -> Child {
    Command::new(example_bin("two_tower"))
        .args(small_gpt_run_args(out, Some(&tokenizer())))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Polls until `ready()` or panics after 5 minutes (or when `child` ended first).
fn wait_for(child: &mut Child, what: &str, ready: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !ready() {
        assert!(
            t0.elapsed() < Duration::from_secs(300),
            "no {what} after 5 minutes"
        );
        if let Some(s) = child.try_wait().unwrap() {
            panic!("the run ended ({s}) before {what}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn sigterm(child: &Child) {
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) },
        0
    );
}

fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn same_scores(a: &Path, b: &Path) {
    let read = |d: &Path| lmsplit::heads::ScoresFile::load(&d.join("scores.safetensors")).unwrap();
    assert!(
        read(a) == read(b),
        "{} and {} scored differently",
        a.display(),
        b.display()
    );
}

fn step_of(checkpoint: &Path) -> u64 {
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(checkpoint.join("state.json")).unwrap()).unwrap();
    s["step"].as_u64().unwrap()
}

#[test]
fn two_writers_on_one_run_the_second_is_refused_naming_the_holder() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let mut first = spawn(&out);
    wait_for(&mut first, "writer lock", || {
        out.join("writer.lock").is_file()
    });
    let second = Command::new(example_bin("two_tower"))
        .args(small_gpt_run_args(&out, Some(&tokenizer())))
        .output()
        .unwrap();
    let err = stderr_of(&second);
    assert_eq!(second.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("is locked by process {} on host", first.id())),
        "the holder is not named: {err}"
    );
    assert!(err.contains("writer.lock"), "{err}");
    let first = first.wait_with_output().unwrap();
    assert!(first.status.success(), "{}", stderr_of(&first));
    same_scores(whole(), &out);
}

#[test]
fn a_killed_runs_lock_is_free_for_the_next_and_the_run_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let lock = out.join("writer.lock");
    let mut run = spawn(&out);
    wait_for(&mut run, "writer lock", || lock.is_file());
    run.kill().unwrap(); // SIGKILL: no handler runs; the OS releases its file lock
    run.wait().unwrap();
    let o = Command::new(example_bin("two_tower"))
        .args(small_gpt_run_args(&out, Some(&tokenizer())))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr_of(&o));
    same_scores(whole(), &out);
}

/// A run into `out` sent SIGTERM once its first phase-1 checkpoint exists, and its output.
fn stopped_after_first_checkpoint(out: &Path) -> Output {
    let ckpt = out.join("phase1/checkpoint");
    let mut run = spawn(out);
    wait_for(&mut run, "phase-1 checkpoint", || {
        ckpt.join("state.json").is_file()
    });
    sigterm(&run);
    run.wait_with_output().unwrap()
}

#[test]
fn sigterm_mid_phase1_and_mid_heads_exits_75_and_the_rerun_resumes_bit_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let ckpt = out.join("phase1/checkpoint");

    let o = stopped_after_first_checkpoint(&out);
    let err = stderr_of(&o);
    assert_eq!(o.status.code(), Some(EXIT_STOPPED), "{err}");
    assert!(err.contains("stopped on request after update"), "{err}");
    assert!(err.contains(&ckpt.display().to_string()), "{err}");
    assert!(!out.join("scores.safetensors").exists(), "stopped too late");
    let stopped_at = step_of(&ckpt);
    assert!(
        stopped_at < 157,
        "phase 1 ended before the signal ({stopped_at})"
    );
    // The status read from the manifest: in phase 1.
    let (_, stage, _) = run_status(&out).unwrap().unwrap();
    assert_eq!(stage, Stage::Phase1);

    // Resumed, and stopped again as soon as the heads start training.
    let heads = out.join("heads");
    let mut run = spawn(&out);
    wait_for(&mut run, "heads training", || {
        heads.join("metrics.jsonl").is_file()
    });
    // While it trains, a second writer is refused naming it.
    let second = Command::new(example_bin("two_tower"))
        .args(small_gpt_run_args(&out, Some(&tokenizer())))
        .output()
        .unwrap();
    assert!(
        stderr_of(&second).contains(&format!("process {}", run.id())),
        "{}",
        stderr_of(&second)
    );
    sigterm(&run);
    let o = run.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(EXIT_STOPPED), "{}", stderr_of(&o));
    assert!(stderr_of(&o).contains("heads"), "{}", stderr_of(&o));
    assert!(!out.join("scores.safetensors").exists(), "stopped too late");
    let (_, stage, _) = run_status(&out).unwrap().unwrap();
    assert_eq!(stage, Stage::Heads);

    let o = spawn(&out).wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr_of(&o));
    same_scores(whole(), &out);
    let (_, stage, _) = run_status(&out).unwrap().unwrap();
    assert_eq!(stage, Stage::Done);
    // Copied to another folder and loaded from there: the uninterrupted run's scores, and so
    // its tables.
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let status = Command::new("cp")
        .arg("-r")
        .arg(&out)
        .arg(&elsewhere)
        .status()
        .unwrap();
    assert!(status.success());
    let (copy, reference) = (
        ScoredRun::load(elsewhere.join("run")).unwrap(),
        ScoredRun::load(whole()).unwrap(),
    );
    assert_eq!(copy.logprobs, reference.logprobs);
    assert_eq!(copy.retest, reference.retest);
    let (c, r) = (copy.result().unwrap(), reference.result().unwrap());
    assert_eq!(
        (c.phase1.steps, c.phase1.train_loss),
        (r.phase1.steps, r.phase1.train_loss)
    );
    assert_eq!(
        (&c.heads, &c.retest, &c.scored_nll),
        (&r.heads, &r.retest, &r.scored_nll)
    );
}

#[test]
fn a_failed_checkpoint_write_names_the_file_and_keeps_the_previous_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let ckpt = out.join("phase1/checkpoint");
    let o = stopped_after_first_checkpoint(&out);
    assert_eq!(o.status.code(), Some(EXIT_STOPPED), "{}", stderr_of(&o));
    let before: Vec<Vec<u8>> = ["state.json", "weights.safetensors", "optimizer.safetensors"]
        .iter()
        .map(|f| std::fs::read(ckpt.join(f)).unwrap())
        .collect();

    // A full disk for files over 100 kB (the weights are ~190 kB, the JSON files smaller):
    // RLIMIT_FSIZE with SIGXFSZ ignored makes such a write fail with EFBIG, root or not.
    let mut cmd = Command::new(example_bin("two_tower"));
    cmd.args(small_gpt_run_args(&out, Some(&tokenizer())));
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let lim = libc::rlimit {
                rlim_cur: 100_000,
                rlim_max: 100_000,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let o = cmd.output().unwrap();
    let err = stderr_of(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let failed = out.join("phase1/checkpoint.tmp/weights.safetensors");
    assert!(
        err.contains(&format!(
            "could not write the checkpoint file {}",
            failed.display()
        )),
        "the failed file is not named: {err}"
    );
    assert!(
        err.contains("previous checkpoint is left as it was"),
        "{err}"
    );
    let after: Vec<Vec<u8>> = ["state.json", "weights.safetensors", "optimizer.safetensors"]
        .iter()
        .map(|f| std::fs::read(ckpt.join(f)).unwrap())
        .collect();
    assert!(before == after, "the previous checkpoint changed");
    assert!(
        !out.join("phase1/checkpoint.tmp").exists(),
        "the partial checkpoint was left"
    );

    // With space again, the run resumes from that checkpoint to the uninterrupted scores.
    let o = spawn(&out).wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr_of(&o));
    same_scores(whole(), &out);
}

/// `reproduce train --protocol smoke --only <labels>` on `out`.
fn reproduce(out: &Path, only: &str, tokenizer: Option<&Path>) -> Command {
    let mut c = Command::new(example_bin("reproduce"));
    c.args(["train", "--protocol", "smoke", "--only", only, "--out"])
        .arg(out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(t) = tokenizer {
        c.arg("--tokenizer").arg(t);
    }
    c
}

#[test]
fn n_processes_on_one_study_create_one_data_folder_and_the_sequential_results() {
    let dir = tempfile::tempdir().unwrap();
    let (par, seq) = (dir.path().join("parallel"), dir.path().join("sequential"));
    let labels = ["gpt-s1", "bert-s0"];
    // Started together on one empty study folder: both need the tokenizer trained and the
    // synthetic text written; each needs its style's scoring set.
    let children: Vec<Child> = labels
        .iter()
        .map(|l| reproduce(&par, l, None).spawn().unwrap())
        .collect();
    for c in children {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", stderr_of(&o));
    }
    let data = par.join("data");
    let mut files: Vec<String> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "bert-scoring_set.json",
            "create.lock",
            "gpt-scoring_set.json",
            "synthetic.txt",
            "tokenizer.json",
            "tokenizer.trained_from.json"
        ],
        "stray files (temporary files) in data/; the lock file stays, free"
    );
    // One vocabulary: both scoring sets were cut from the same text and tokenizer.
    let text_fp = |style: &str| {
        let v: serde_json::Value = serde_json::from_slice(
            &std::fs::read(data.join(format!("{style}-scoring_set.json"))).unwrap(),
        )
        .unwrap();
        v["id"]["text_fingerprint"].as_str().unwrap().to_string()
    };
    assert_eq!(text_fp("gpt"), text_fp("bert"));

    // The same runs one after the other, on the vocabulary the parallel study trained.
    let tok = data.join("tokenizer.json");
    for l in labels {
        let o = reproduce(&seq, l, Some(&tok)).output().unwrap();
        assert!(o.status.success(), "{}", stderr_of(&o));
    }
    for l in labels {
        same_scores(&par.join(l), &seq.join(l));
    }
}

/// The `snapshot.json` files under the run folder `run`'s snapshot jobs.
fn snapshot_jobs(run: &Path) -> Vec<PathBuf> {
    match std::fs::read_dir(run.join("emergence")) {
        Ok(rd) => rd
            .map(|e| e.unwrap().path().join("snapshot.json"))
            .collect(),
        Err(_) => Vec::new(),
    }
}

#[test]
fn a_snapshot_job_stopped_by_sigterm_exits_75_and_resumes_to_the_uninterrupted_scores() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    // The run's job alone: it scores no snapshot.
    let o = reproduce(&a, "gpt-s0", None).output().unwrap();
    assert!(o.status.success(), "{}", stderr_of(&o));
    assert!(snapshot_jobs(&a.join("gpt-s0")).is_empty());
    assert!(Command::new("cp")
        .arg("-r")
        .arg(&a)
        .arg(&b)
        .status()
        .unwrap()
        .success());

    // The snapshot's job, stopped as soon as its heads train, then the same command again.
    let mut job = reproduce(&a, "gpt-s0@0.5", None).spawn().unwrap();
    wait_for(&mut job, "snapshot heads training", || {
        let jobs = snapshot_jobs(&a.join("gpt-s0"));
        let heads = jobs
            .iter()
            .flat_map(|m| std::fs::read_dir(m.parent().unwrap()).unwrap());
        heads
            .map(|e| e.unwrap().path())
            .any(|h| h.join("metrics.jsonl").is_file())
    });
    sigterm(&job);
    let o = job.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(EXIT_STOPPED), "{}", stderr_of(&o));
    let manifest = &snapshot_jobs(&a.join("gpt-s0"))[0];
    let stage: serde_json::Value =
        serde_json::from_slice(&std::fs::read(manifest).unwrap()).unwrap();
    assert_eq!(stage["stage"], "heads");
    let o = reproduce(&a, "gpt-s0@0.5", None).output().unwrap();
    assert!(o.status.success(), "{}", stderr_of(&o));

    // The same job uninterrupted on a copy of the run: the same scores, bit for bit.
    let o = reproduce(&b, "gpt-s0@0.5", None).output().unwrap();
    assert!(o.status.success(), "{}", stderr_of(&o));
    let (x, y) = (
        ScoredRun::load(a.join("gpt-s0")).unwrap(),
        ScoredRun::load(b.join("gpt-s0")).unwrap(),
    );
    assert_eq!(x.snapshots.len(), 1);
    assert_eq!(x.snapshots[0].logprobs, y.snapshots[0].logprobs);
    assert_eq!(x.snapshots[0].retest, y.snapshots[0].retest);
    assert_eq!(x.snapshots[0].heads, y.snapshots[0].heads);
}
