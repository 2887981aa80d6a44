//! Process-level: `scripts/study_chain.sh`, the background chain of the `cpu` protocol's runs,
//! on a stand-in for `reproduce` that records each call and fails on a run it is told to.

mod common;

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Output};

/// Records its arguments (one call a line) in `$CALLS` and exits 75 (a stopped run) when its
/// `--only` value is `$FAIL_ON`.
const FAKE_REPRODUCE: &str = r#"#!/usr/bin/env bash
echo "$*" >> "$CALLS"
[ "$8" != "${FAIL_ON:-}" ] || exit 75
"#;

struct Chain {
    _tmp: tempfile::TempDir,
    calls: PathBuf,
    bin: PathBuf,
    out: PathBuf,
}

fn chain() -> Chain {
    let tmp = tempfile::tempdir().unwrap();
    let bin = common::stand_in(tmp.path(), "reproduce", FAKE_REPRODUCE);
    let (calls, out) = (tmp.path().join("calls"), tmp.path().join("study"));
    Chain {
        _tmp: tmp,
        calls,
        bin,
        out,
    }
}

impl Chain {
    fn run(&self, runs: &[&str], env: &[(&str, &str)]) -> (Output, Vec<String>) {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/study_chain.sh");
        let out = Command::new("bash")
            .arg(script)
            .args(runs)
            .env("BIN", &self.bin)
            .env("OUT", &self.out)
            .env("CALLS", &self.calls)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let calls = fs::read_to_string(&self.calls).unwrap_or_default();
        (out, calls.lines().map(|l| l.to_string()).collect())
    }

    fn call(&self, only: &str) -> String {
        format!(
            "--protocol cpu --device cpu --out {} --only {only} --quiet",
            self.out.display()
        )
    }
}

#[test]
fn the_chain_trains_each_run_in_order_then_makes_the_tables() {
    let c = chain();
    let (out, calls) = c.run(&["a-s0", "b-s1"], &[("TABLES", "a-s0,b-s1,c-s0")]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        calls,
        vec![c.call("a-s0"), c.call("b-s1"), c.call("a-s0,b-s1,c-s0")]
    );
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(log.contains("tables of a-s0,b-s1,c-s0 exit 0"), "{log}");
    assert!(log.contains("chain done"), "{log}");
}

#[test]
fn the_chain_stops_at_the_first_failed_run_without_tables() {
    let c = chain();
    let (out, calls) = c.run(
        &["a-s0", "b-s1", "c-s0"],
        &[("TABLES", "a-s0,b-s1,c-s0"), ("FAIL_ON", "b-s1")],
    );
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    assert_eq!(calls, vec![c.call("a-s0"), c.call("b-s1")]);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("chain done"));
}

#[test]
fn the_chain_without_its_binary_or_runs_says_what_is_missing() {
    let c = chain();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/study_chain.sh");
    let no_bin = Command::new("bash")
        .arg(&script)
        .arg("a-s0")
        .env_remove("BIN")
        .env("OUT", &c.out)
        .output()
        .unwrap();
    assert!(!no_bin.status.success());
    assert!(String::from_utf8_lossy(&no_bin.stderr).contains("BIN: the reproduce binary"));
    let (no_runs, calls) = c.run(&[], &[]);
    assert_eq!(no_runs.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&no_runs.stderr).contains("usage:"));
    assert!(calls.is_empty());
}
