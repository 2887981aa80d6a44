//! Process-level: `scripts/study_chain.sh`, the background chain of the `cpu` protocol's runs,
//! on a stand-in for `reproduce` that records each call and fails on a run it is told to.

mod common;

use std::process::Output;

use common::ScriptRig;

/// Records its arguments (one call a line) in `$CALLS` and exits 75 (a stopped run) when its
/// `--only` value is `$FAIL_ON`.
const FAKE_REPRODUCE: &str = r#"#!/usr/bin/env bash
echo "$*" >> "$CALLS"
[ "$8" != "${FAIL_ON:-}" ] || exit 75
"#;

/// The chain on the stand-in, with `env` added.
fn chain_run(c: &ScriptRig, runs: &[&str], env: &[(&str, &str)]) -> (Output, Vec<String>) {
    c.run("study_chain.sh", runs, env)
}

#[test]
fn the_chain_trains_each_run_in_order_then_makes_the_tables() {
    let c = ScriptRig::new(FAKE_REPRODUCE);
    let (out, calls) = chain_run(&c, &["a-s0", "b-s1"], &[("TABLES", "a-s0,b-s1,c-s0")]);
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
    let c = ScriptRig::new(FAKE_REPRODUCE);
    let (out, calls) = chain_run(
        &c,
        &["a-s0", "b-s1", "c-s0"],
        &[("TABLES", "a-s0,b-s1,c-s0"), ("FAIL_ON", "b-s1")],
    );
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    assert_eq!(calls, vec![c.call("a-s0"), c.call("b-s1")]);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("chain done"));
}

#[test]
fn the_chain_without_its_binary_or_runs_says_what_is_missing() {
    let c = ScriptRig::new(FAKE_REPRODUCE);
    let no_bin = c
        .command("study_chain.sh", &["a-s0"])
        .env_remove("BIN")
        .output()
        .unwrap();
    assert!(!no_bin.status.success());
    assert!(String::from_utf8_lossy(&no_bin.stderr).contains("BIN: the reproduce binary"));
    let (no_runs, calls) = chain_run(&c, &[], &[]);
    assert_eq!(no_runs.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&no_runs.stderr).contains("usage:"));
    assert!(calls.is_empty());
}
