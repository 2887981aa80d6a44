//! Process-level: `scripts/curve_points_first.sh`, one run with its agreement-curve points
//! first, on a stand-in for `reproduce` that writes a phase-1 snapshot every 0.3 s, stops with
//! exit 75 at the snapshot `--stop-at-snapshot` names or on SIGTERM (as `reproduce` does after
//! its checkpoint) and records each call.

mod common;

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::ScriptRig;

/// Records its arguments in `$CALLS`. A `--curve-so-far` call exits `$CURVE_RC` (0 by default);
/// any other call writes the run's three snapshots (`$6` is the study folder, `$8` the run),
/// one every 0.3 s, unless `$FAIL_EARLY` (exit 1 at once), and with `--stop-at-snapshot K`
/// (`${11}`) exits 75 once the K-th is written. On SIGTERM it writes `stopped` and exits 75
/// after 0.4 s (its checkpoint), so that a second TERM in that time writes a second `stopped`.
const FAKE_REPRODUCE: &str = r#"#!/usr/bin/env bash
echo "$*" >> "$CALLS"
case "$*" in *--curve-so-far*) exit "${CURVE_RC:-0}" ;; esac
[ -z "${FAIL_EARLY:-}" ] || exit 1
snaps="$6/$8/phase1/snapshots"
last=3
[ "${10:-}" != --stop-at-snapshot ] || last=${11}
mkdir -p "$snaps"
stop=
trap 'echo stopped >> "$CALLS"; stop=1' TERM
for i in $(seq 1 "$last"); do
  f=$(printf '%s/step-%07d.safetensors' "$snaps" "$i")
  [ -f "$f" ] || sleep 0.3
  [ -z "$stop" ] || break
  touch "$f"
done
[ -z "$stop" ] || { sleep 0.2; sleep 0.2; exit 75; }
[ "$last" -eq 3 ] || exit 75
"#;

fn fake() -> ScriptRig {
    ScriptRig::new(FAKE_REPRODUCE)
}

fn snapshots(out: &Path, run: &str) -> usize {
    fs::read_dir(out.join(run).join("phase1/snapshots")).map_or(0, |d| d.count())
}

/// The script on the stand-in, with `env` added.
fn run(f: &ScriptRig, args: &[&str], env: &[(&str, &str)]) -> (Output, Vec<String>) {
    f.run("curve_points_first.sh", args, env)
}

/// The call for `run`, with `extra` arguments after the drivers' own.
fn call(f: &ScriptRig, run: &str, extra: &str) -> String {
    match extra {
        "" => f.call(run),
        e => format!("{} {e}", f.call(run)),
    }
}

#[test]
fn phase_one_stops_at_the_kth_snapshot_then_its_heads_then_the_rest() {
    let f = fake();
    let (out, calls) = run(&f, &["bert-s0", "2"], &[]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        calls,
        vec![
            call(&f, "bert-s0", "--stop-at-snapshot 2"),
            call(&f, "bert-s0", "--curve-so-far"),
            call(&f, "bert-s0", ""),
        ]
    );
    assert_eq!(
        snapshots(&f.out, "bert-s0"),
        3,
        "the rest of the run wrote the third"
    );
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(
        log.contains("phase 1 stopped at 2 snapshots, exit 75"),
        "{log}"
    );
    assert!(!f.logged().contains(&"stopped".to_string()), "no signal");
}

#[test]
fn a_list_scores_each_point_before_phase_one_goes_on_to_the_next() {
    let f = fake();
    let (out, calls) = run(&f, &["elmo-s0", "2,3"], &[]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        calls,
        vec![
            call(&f, "elmo-s0", "--stop-at-snapshot 2"),
            call(&f, "elmo-s0", "--curve-so-far 2"),
            call(&f, "elmo-s0", "--stop-at-snapshot 3"),
            call(&f, "elmo-s0", "--curve-so-far 3"),
            call(&f, "elmo-s0", "--curve-so-far"),
            call(&f, "elmo-s0", ""),
        ]
    );
    assert_eq!(snapshots(&f.out, "elmo-s0"), 3);
    // Restarted with the first two snapshots written: the 1/4 heads (cached by the binary,
    // which trains nothing again) and phase 1 on from the second snapshot.
    let g = fake();
    let snaps = g.out.join("elmo-s1/phase1/snapshots");
    fs::create_dir_all(&snaps).unwrap();
    for i in 1..=2 {
        fs::write(snaps.join(format!("step-{i:07}.safetensors")), b"").unwrap();
    }
    let (out, calls) = run(&g, &["elmo-s1", "2,3"], &[]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(calls[0], call(&g, "elmo-s1", "--curve-so-far 2"));
    assert_eq!(calls[1], call(&g, "elmo-s1", "--stop-at-snapshot 3"));
    assert_eq!(calls.len(), 5, "{calls:?}");
}

#[test]
fn only_the_points_asked_for_and_nothing_after_them() {
    // One point: phase 1 to the half, that snapshot's heads, then the script ends (no 1/8 and
    // 1/4 heads, no rest of the run: a pair that lacks only its 1/2 point).
    let f = fake();
    let (out, calls) = run(&f, &["elmo-s0", "3", "only"], &[]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        calls,
        vec![
            call(&f, "elmo-s0", "--stop-at-snapshot 3"),
            call(&f, "elmo-s0", "--curve-so-far 3"),
        ]
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("only the points asked for"),
        "{out:?}"
    );
    // A list the same way, and a restart after it trains nothing but asks the binary again
    // (which reads the cached heads).
    let g = fake();
    let (out, calls) = run(&g, &["elmo-s1", "1,2", "only"], &[]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(calls.len(), 4, "{calls:?}");
    assert_eq!(snapshots(&g.out, "elmo-s1"), 2);
    let (out, again) = run(&g, &["elmo-s1", "1,2", "only"], &[]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(again.len(), 6, "{again:?}");
    assert_eq!(
        again[4..],
        [
            call(&g, "elmo-s1", "--curve-so-far 1"),
            call(&g, "elmo-s1", "--curve-so-far 2"),
        ]
    );
}

#[test]
fn a_restart_with_its_snapshots_written_goes_straight_to_their_heads() {
    let f = fake();
    let snaps = f.out.join("gpt-s1/phase1/snapshots");
    fs::create_dir_all(&snaps).unwrap();
    for i in 1..=3 {
        fs::write(snaps.join(format!("step-{i:07}.safetensors")), b"").unwrap();
    }
    let (out, calls) = run(&f, &["gpt-s1", "3"], &[]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        calls,
        vec![call(&f, "gpt-s1", "--curve-so-far"), call(&f, "gpt-s1", "")]
    );
}

#[test]
fn a_failure_stops_the_script_with_its_exit_code() {
    let h = fake();
    let (point, calls) = run(&h, &["elmo-s0", "1,2"], &[("CURVE_RC", "1")]);
    assert_eq!(point.status.code(), Some(1), "{point:?}");
    assert_eq!(
        calls,
        vec![
            call(&h, "elmo-s0", "--stop-at-snapshot 1"),
            call(&h, "elmo-s0", "--curve-so-far 1"),
        ],
        "phase 1 does not go on past a point that failed"
    );
    let f = fake();
    let (early, calls) = run(&f, &["elmo-s0", "1"], &[("FAIL_EARLY", "1")]);
    assert_eq!(early.status.code(), Some(1), "{early:?}");
    assert_eq!(
        calls,
        vec![call(&f, "elmo-s0", "--stop-at-snapshot 1")],
        "no heads without the snapshot"
    );
    let g = fake();
    let (curve, calls) = run(&g, &["elmo-s0", "1"], &[("CURVE_RC", "75")]);
    assert_eq!(curve.status.code(), Some(75), "{curve:?}");
    assert_eq!(
        calls.last().unwrap(),
        &call(&g, "elmo-s0", "--curve-so-far")
    );
    assert_eq!(
        calls.len(),
        2,
        "the rest of the run is not started: {calls:?}"
    );
}

#[test]
fn the_script_without_its_binary_or_arguments_says_what_is_missing() {
    let f = fake();
    let no_bin = f
        .command("curve_points_first.sh", &["a-s0", "1"])
        .env_remove("BIN")
        .output()
        .unwrap();
    assert!(!no_bin.status.success());
    assert!(String::from_utf8_lossy(&no_bin.stderr).contains("BIN: the reproduce binary"));
    for bad in [
        &["a-s0"][..],
        &["a-s0", "0"],
        &["a-s0", "2,"],
        &["a-s0", "x"],
        &["a-s0", "3", "all"],
        &["a-s0", "3", "only", "x"],
    ] {
        let (no_k, calls) = run(&f, bad, &[]);
        assert_eq!(no_k.status.code(), Some(2), "{bad:?}");
        assert!(String::from_utf8_lossy(&no_k.stderr).contains("usage:"));
        assert!(calls.is_empty(), "{bad:?}: {calls:?}");
    }
}

#[test]
fn a_stop_of_the_group_reaches_the_binary_once_and_trains_no_heads() {
    let f = fake();
    let mut child = f
        .command("curve_points_first.sh", &["bert-s1", "3"])
        .process_group(0)
        .spawn()
        .unwrap();
    let start = Instant::now();
    while snapshots(&f.out, "bert-s1") < 1 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no snapshot came"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let group = format!("-{}", child.id());
    let kill = Command::new("kill").args(["-TERM", "--", &group]).status();
    assert!(kill.unwrap().success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(75), "the binary's exit code");
    let calls = fs::read_to_string(&f.calls).unwrap();
    let calls: Vec<&str> = calls.lines().collect();
    let phase1 = call(&f, "bert-s1", "--stop-at-snapshot 3");
    assert_eq!(calls, vec![phase1.as_str(), "stopped"]);
    assert!(snapshots(&f.out, "bert-s1") < 3);
}
