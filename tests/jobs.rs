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
//! - the status read from a run's folder follows it (phase 1, the live writer, heads,
//!   finished), and `reproduce --status` names every run of a study without preparing one.
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
use lmsplit::experiment::status::{run_status, RunStatus, Stage};

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
    let read = |d: &Path| std::fs::read(d.join("logprobs.json")).unwrap();
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
    assert!(
        !out.join("writer.lock").exists(),
        "the lock outlived its run"
    );
    same_scores(whole(), &out);
}

#[test]
fn a_killed_runs_stale_lock_is_named_and_taken_over() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let lock = out.join("writer.lock");
    let mut run = spawn(&out);
    wait_for(&mut run, "writer lock", || lock.is_file());
    let pid = run.id();
    run.kill().unwrap(); // SIGKILL: no handler runs, the lock stays
    run.wait().unwrap();
    assert!(lock.is_file(), "a killed process cannot remove its lock");
    let o = Command::new(example_bin("two_tower"))
        .args(small_gpt_run_args(&out, Some(&tokenizer())))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr_of(&o));
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        said.contains(&format!("took over the lock of process {pid} on host")),
        "the stale holder is not named: {said}"
    );
    assert!(!lock.exists(), "the lock outlived its run");
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
    assert!(!out.join("logprobs.json").exists(), "stopped too late");
    assert!(
        !out.join("writer.lock").exists(),
        "the lock outlived its run"
    );
    let stopped_at = step_of(&ckpt);
    assert!(
        stopped_at < 157,
        "phase 1 ended before the signal ({stopped_at})"
    );
    // The status read from the folder: in phase 1, at the checkpoint's update, held by no one.
    let st = run_status("run", &out).unwrap();
    assert_eq!(st.stage, Stage::Phase1, "{st:?}");
    // Every head training is still ahead: the heads, the retest heads where the spec has
    // them, and each snapshot's.
    let all = 1 + usize::from(st.retest_heads) + st.snapshot_heads.1;
    assert_eq!(st.head_trainings_left(), Some(all), "{st:?}");
    let p1 = st.phase1.as_ref().unwrap();
    assert_eq!((p1.step, p1.done), (stopped_at, false), "{st:?}");
    assert!(p1.tokens < st.phase1_budget.unwrap(), "{st:?}");
    // Its metrics log reaches the checkpoint, or past it where the signal came between the two.
    assert!(p1.newest_step() >= stopped_at, "{st:?}");
    assert!(p1.logged.is_none_or(|l| l.step > stopped_at), "{st:?}");
    // Each of its update lines states the schedule's total, as the checkpoint does.
    let log = out.join("phase1").join(lmsplit::towers::METRICS_FILE);
    let newest = lmsplit::towers::newest_update(&log).unwrap();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(newest.and_then(|u| u.total_steps), p1.total_steps, "{text}");
    assert_eq!(st.writer, None);

    // Resumed, and stopped again as soon as the heads start training.
    let heads = out.join("heads");
    let mut run = spawn(&out);
    wait_for(&mut run, "heads training", || {
        heads.join("metrics.jsonl").is_file()
    });
    // While it trains, the status names the live process that holds the run.
    let live = run_status("run", &out).unwrap();
    let writer = live.writer.as_ref().expect("the live run's lock");
    assert_eq!(writer.holder.as_ref().map(|h| h.pid), Some(run.id()));
    assert!(!writer.gone, "{live:?}");
    assert!(
        live.why_unfinished()
            .is_some_and(|w| w.starts_with("still running: heads, pid ")),
        "{live:?}"
    );
    sigterm(&run);
    let o = run.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(EXIT_STOPPED), "{}", stderr_of(&o));
    assert!(stderr_of(&o).contains("heads"), "{}", stderr_of(&o));
    assert!(!out.join("logprobs.json").exists(), "stopped too late");
    let st = run_status("run", &out).unwrap();
    assert_eq!(st.stage, Stage::Heads, "{st:?}");
    assert!(st.phase1.as_ref().unwrap().done, "{st:?}");
    assert!(!st.heads.as_ref().is_some_and(|h| h.done), "{st:?}");

    let o = spawn(&out).wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr_of(&o));
    same_scores(whole(), &out);
    let st = run_status("run", &out).unwrap();
    assert_eq!(st.stage, Stage::Finished, "{st:?}");
    assert!(st.heads.as_ref().unwrap().done, "{st:?}");
    assert_eq!(st.writer, None);
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

/// `reproduce --protocol smoke --only <labels>` on `out` (emergence left out: minutes).
fn reproduce(out: &Path, only: &str, tokenizer: Option<&Path>) -> Command {
    let mut c = Command::new(example_bin("reproduce"));
    c.args([
        "--protocol",
        "smoke",
        "--no-emergence",
        "--quiet",
        "--only",
        only,
        "--out",
    ])
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
            "gpt-scoring_set.json",
            "synthetic.txt",
            "tokenizer.json",
            "tokenizer.trained_from.json"
        ],
        "stray files (temporary or lock files) in data/"
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

#[test]
fn tables_only_names_every_unfinished_run_instead_of_skipping_it() {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(example_bin("reproduce"))
        .args(["--protocol", "smoke", "--quiet", "--tables-only", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    let err = stderr_of(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    for run in [
        "gpt-s0 (never started)",
        "gpt-s1 (never started)",
        "bert-s0 (never started)",
    ] {
        assert!(err.contains(run), "{run} is not named: {err}");
    }
    assert!(err.contains("3 of 3 runs"), "{err}");
    assert!(
        !dir.path().join("data").exists(),
        "--tables-only trained or prepared something"
    );

    // --status says the same, as a table and a JSON line, and exits 0.
    let o = Command::new(example_bin("reproduce"))
        .args(["--protocol", "smoke", "--status", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr_of(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let runs: Vec<RunStatus> =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
    let labels: Vec<&str> = runs.iter().map(|r| r.label.as_str()).collect();
    assert_eq!(labels, ["gpt-s0", "gpt-s1", "bert-s0"]);
    assert!(
        runs.iter().all(|r| r.stage == Stage::NotStarted),
        "{runs:?}"
    );
    let md = std::fs::read_to_string(dir.path().join("status.md")).unwrap();
    let row = md.lines().find(|l| l.starts_with("| gpt-s1 "));
    assert!(row.is_some_and(|r| r.contains("| not started ")), "{md}");
    assert!(
        !dir.path().join("data").exists(),
        "--status prepared something"
    );
    // A study folder that is not there (a mistyped --out): all not started, and no folder made.
    let absent = dir.path().join("absent");
    let o = Command::new(example_bin("reproduce"))
        .args(["--protocol", "smoke", "--status", "--quiet", "--out"])
        .arg(&absent)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr_of(&o));
    assert!(
        stderr_of(&o).contains("no study folder at"),
        "{}",
        stderr_of(&o)
    );
    assert!(!absent.exists(), "--status created the study folder");
    // Into a pipe already closed at the other end (`... --status | head -0`): it ends quietly,
    // by SIGPIPE, where `println!` would panic.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let o = Command::new(example_bin("reproduce"))
        .args(["--protocol", "smoke", "--status", "--out"])
        .arg(dir.path())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(!stderr_of(&o).contains("panicked"), "{}", stderr_of(&o));
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(o.status.signal(), Some(libc::SIGPIPE), "{:?}", o.status);
    // A label the study does not have is refused by name.
    let o = Command::new(example_bin("reproduce"))
        .args([
            "--protocol",
            "smoke",
            "--status",
            "--only",
            "gpt-s9",
            "--out",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr_of(&o).contains("gpt-s9"), "{}", stderr_of(&o));
}

#[test]
fn stop_at_snapshot_exits_75_naming_the_run_and_a_snapshot_it_lacks_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let stop_at = |k: &str| {
        Command::new(example_bin("reproduce"))
            .args(["--protocol", "smoke", "--quiet", "--only", "gpt-s0"])
            .args(["--stop-at-snapshot", k, "--out"])
            .arg(dir.path())
            .output()
            .unwrap()
    };
    let o = stop_at("1");
    let err = stderr_of(&o);
    assert_eq!(o.status.code(), Some(EXIT_STOPPED), "{err}");
    assert!(
        err.contains("phase 1 of gpt-s0 stopped at its snapshot 1 as asked"),
        "{err}"
    );
    let st = run_status("gpt-s0", &dir.path().join("gpt-s0")).unwrap();
    assert_eq!(st.stage, Stage::Phase1, "{st:?}");
    assert_eq!(st.writer, None, "{st:?}");
    // The smoke protocol's runs have one snapshot (at 1/2).
    let o = stop_at("2");
    let err = stderr_of(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("1 to 1"), "{err}");
}
