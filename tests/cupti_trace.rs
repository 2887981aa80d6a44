//! The kernel profile's arithmetic (`tools/cupti_trace/profile.cpp`: the window of a trace, the
//! union of the device's busy intervals, the per-kernel sums, the JSON), compiled for the host
//! by the system C++ compiler under AddressSanitizer and UBSan beside a harness of constructed
//! intervals whose answers are worked out by hand (`tests/cupti_trace/harness.cpp`: overlaps,
//! nesting, gaps, windows by synchronisation). The harness fails on planted defects (each a
//! one-line change of the source, compiled as a copy), and the PyTorch peers' profile
//! (`scripts/peer_common.py`, torch.profiler) agrees with it on the same activities. On the GPU
//! machine `cupti_trace.cpp` feeds the same code from CUPTI (`scripts/gpu_measure.sh`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Builds the harness around the profile source in `src_dir` and runs it.
fn build_and_run(src_dir: &Path, work: &Path) -> Output {
    let exe = work.join("harness");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let built = Command::new(&cxx)
        .args(["-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror"])
        .args(["-fsanitize=address,undefined", "-fno-sanitize-recover=all"])
        .args(["-fno-omit-frame-pointer", "-o"])
        .arg(&exe)
        .arg("-I")
        .arg(src_dir)
        .arg(root().join("tests/cupti_trace/harness.cpp"))
        .arg(src_dir.join("profile.cpp"))
        .output()
        .unwrap_or_else(|e| {
            panic!("this test needs a C++ compiler ({cxx}; set CXX to another): {e}")
        });
    assert!(
        built.status.success(),
        "{cxx} could not build the profile harness:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    Command::new(&exe).output().unwrap()
}

/// The harness's report on the profile source as it is.
fn report() -> String {
    let work = tempfile::tempdir().unwrap();
    let run = build_and_run(&root().join("tools/cupti_trace"), work.path());
    let out = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "the profile does not match: {out}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    out
}

/// The rest of the report's line that starts with `prefix`.
fn line<'a>(report: &'a str, prefix: &str) -> &'a str {
    report
        .lines()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no line {prefix:?} in {report}"))
}

fn json(report: &str, prefix: &str) -> serde_json::Value {
    serde_json::from_str(line(report, prefix)).unwrap_or_else(|e| panic!("{prefix} {e}"))
}

#[test]
fn the_profile_of_constructed_intervals_is_the_one_worked_out_by_hand() {
    let r = report();
    for case in ["ok unions", "ok windows", "ok all", "ok sync windows"] {
        assert!(r.lines().any(|l| l == case), "{case} missing: {r}");
    }
    // The JSON is JSON (names with quotes, backslashes and control characters escaped) and
    // says what the harness computed.
    let all = json(&r, "json all: ");
    assert_eq!(all["tool"], "cupti");
    assert_eq!(all["span_ns"], 420);
    assert_eq!(all["busy_ns"], 330);
    assert!((all["busy_share"].as_f64().unwrap() - 330.0 / 420.0).abs() < 1e-6);
    assert_eq!(all["incomplete"], 2);
    assert_eq!(all["dropped"], 2);
    let names: Vec<&str> = all["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["gemm", "softmax<\"bf16\">\\x", "nll\n\u{1}"]);
    assert_eq!(all["kernels"][0]["count"], 2);
    assert_eq!(all["kernels"][0]["mean_ns"], 110);
    let sync = json(&r, "json sync: ");
    assert_eq!(sync["window"], "sync:1:2");
    assert_eq!(sync["window_found"], true);
    assert_eq!(sync["syncs"], 3);
    assert_eq!(sync["steps"], 1);
    assert_eq!(
        (&sync["span_ns"], &sync["busy_ns"]),
        (&500.into(), &410.into())
    );
}

/// Planted defects, each a one-line change of `profile.cpp` that the harness must catch.
const DEFECTS: [(&str, &str, &str); 6] = [
    (
        "a nested interval ends the covered stretch",
        "cur_end = std::max(cur_end, end);",
        "cur_end = end;",
    ),
    (
        "the window leaves out work starting as its opening synchronisation returns",
        "if (a.start < lo || a.start >= hi) continue;",
        "if (a.start <= lo || a.start >= hi) continue;",
    ),
    (
        "the window takes in work starting as its closing synchronisation returns",
        "if (a.start < lo || a.start >= hi) continue;",
        "if (a.start < lo || a.start > hi) continue;",
    ),
    (
        "the window opens when its synchronisation starts, not when it returns",
        "lo = syncs[from - 1].second;",
        "lo = syncs[from - 1].first;",
    ),
    (
        "an index from the last is one off",
        "return back <= n ? n + 1 - back : 0;",
        "return back <= n ? n - back : 0;",
    ),
    (
        "the span starts at the first activity of the trace, not of the window",
        "if (a.start < lo || a.start >= hi) continue;",
        "first = std::min(first, a.start);\n    if (a.start < lo || a.start >= hi) continue;",
    ),
];

#[test]
fn the_harness_fails_on_each_planted_defect() {
    let src = root().join("tools/cupti_trace");
    let text = fs::read_to_string(src.join("profile.cpp")).unwrap();
    for (what, from, to) in DEFECTS {
        assert_eq!(
            text.matches(from).count(),
            1,
            "{from:?} not once in profile.cpp"
        );
        let work = tempfile::tempdir().unwrap();
        let dir: PathBuf = work.path().join("src");
        fs::create_dir_all(&dir).unwrap();
        fs::copy(src.join("profile.h"), dir.join("profile.h")).unwrap();
        fs::write(dir.join("profile.cpp"), text.replace(from, to)).unwrap();
        let run = build_and_run(&dir, work.path());
        let out = String::from_utf8_lossy(&run.stdout);
        assert!(
            !run.status.success() && out.contains("FAIL"),
            "planted defect not caught ({what}): {out}"
        );
    }
}

#[test]
fn the_pytorch_peers_profile_equals_the_tracers_on_the_same_activities() {
    let r = report();
    let acts = line(&r, "acts: ");
    let want = json(&r, "json all: ");
    // peer_common imports torch only to train: its profile arithmetic runs without it.
    let code = format!(
        "import json, sys\nsys.path.insert(0, {scripts:?})\nfrom peer_common import kernel_profile\n\
         acts = [tuple(a) for a in json.loads({acts:?})]\n\
         print(json.dumps(kernel_profile(acts, 'cupti', 'all', 0)))\n",
        scripts = root().join("scripts").display().to_string(),
    );
    let out = Command::new("python3")
        .arg("-c")
        .arg(code)
        .output()
        .expect("this test needs python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in [
        "span_ns",
        "busy_ns",
        "kernel_count",
        "kernel_ns",
        "memcpy_count",
        "memcpy_ns",
        "memset_count",
        "memset_ns",
        "incomplete",
        "kernels",
        "window_found",
    ] {
        assert_eq!(got[key], want[key], "{key}");
    }
    let share = |v: &serde_json::Value| v["busy_share"].as_f64().unwrap();
    assert!((share(&got) - share(&want)).abs() < 1e-6);
}
