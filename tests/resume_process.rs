//! Process-level resume: the `two_tower` example is killed in the middle of phase 1, started
//! again with the same arguments, and ends with the scores of an uninterrupted run, bit for bit.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{example_bin, small_gpt_run_args};

/// A phase-1 checkpoint exists (the trainer checkpoints at every validation).
fn has_checkpoint(out: &Path) -> bool {
    std::fs::read_dir(out.join("phase1/checkpoint"))
        .map(|d| d.count() > 0)
        .unwrap_or(false)
}

#[test]
fn a_killed_two_tower_run_resumes_to_identical_scores() {
    let bin = example_bin("two_tower");
    let dir = tempfile::tempdir().unwrap();
    let (whole, killed) = (dir.path().join("whole"), dir.path().join("killed"));
    let ok = Command::new(&bin)
        .args(small_gpt_run_args(&whole, None))
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(ok.success());

    // WordPiece training is not bit-reproducible: the second run takes the first one's vocabulary.
    let tok = whole.join("data/tokenizer.json");
    let mut child = Command::new(&bin)
        .args(small_gpt_run_args(&killed, Some(&tok)))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !has_checkpoint(&killed) {
        assert!(
            t0.elapsed() < Duration::from_secs(300),
            "no checkpoint after 5 minutes"
        );
        if child.try_wait().unwrap().is_some() {
            panic!("the run finished before it could be killed; raise its budget");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        !killed.join("scores.safetensors").exists(),
        "killed too late to test a resume"
    );
    let ok = Command::new(&bin)
        .args(small_gpt_run_args(&killed, Some(&tok)))
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(ok.success());

    let read = |d: &Path| lmsplit::heads::ScoresFile::load(&d.join("scores.safetensors")).unwrap();
    assert_eq!(
        read(&whole),
        read(&killed),
        "scores differ after the resume"
    );
}

#[test]
fn command_line_errors_are_sentences_with_exit_code_1() {
    let bin = example_bin("two_tower");
    let out = Command::new(&bin)
        .args(["--style", "gpt", "--corpus", "/nope/text.txt", "--out"])
        .arg(tempfile::tempdir().unwrap().path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("error: /nope/text.txt is missing"), "{err}");
    assert!(
        !err.contains("Missing {"),
        "a Debug struct was printed: {err}"
    );
}
