//! Process-level: the `gpu_check` example with the CPU as its target (tiny shapes, 3 steps, no
//! MiniLM) passes every check with exit code 0 and lists each one as PASS in its JSON report;
//! a broken model folder becomes one named failed check, exit code 1 and an error sentence.
//! (`cargo build --example gpu_check` first when running this test alone.)

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::example_bin;
use serde_json::Value;

/// The repository's parity fixtures.
fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/lmd/tests/fixtures")
}

/// Runs `gpu_check` on the CPU over `fixtures`, `steps` updates, tiny shapes, into `out`.
fn run(fixtures: &Path, steps: &str, out: &Path) -> Output {
    Command::new(example_bin("gpu_check"))
        .args([
            "--device",
            "cpu",
            "--no-minilm",
            "--shapes",
            "tiny",
            "--steps",
            steps,
        ])
        .arg("--fixtures")
        .arg(fixtures)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap()
}

/// The JSON report written under `out`.
fn report(out: &Path) -> Value {
    let text = std::fs::read_to_string(out.join("gpu_check.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The checks the example must report for tiny shapes and the fixture folders.
fn expected_names() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for style in ["elmo", "gpt", "bert"] {
        for aspect in [
            "grad/{s}/tiny/init",
            "grad/{s}/tiny/f32",
            "grad/{s}/tiny/finite-nonzero",
        ]
        .iter()
        .chain(&["train/{s}/tiny/f32", "train/{s}/tiny/bf16"])
        {
            names.insert(aspect.replace("{s}", style));
        }
    }
    for entry in std::fs::read_dir(fixtures()).unwrap() {
        let dir = entry.unwrap().path();
        if dir.join("config.json").is_file() {
            let model = dir.file_name().unwrap().to_string_lossy().into_owned();
            for aspect in ["f32/rel", "f32/cos", "bf16/rel", "bf16/cos", "transformers"] {
                names.insert(format!("enc/{model}/{aspect}"));
            }
        }
    }
    for m in [
        "adamw/f32",
        "update/f32",
        "update/f32/norm",
        "nll/f32/value",
        "nll/f32/grad",
        "nll/bf16/value",
        "nll/f32/scores",
        "attn/f32/value",
        "attn/f32/grad",
        "attn/bf16/value",
        "attn/bf16/grad",
        "linear/f32/value",
        "linear/f32/grad",
        "linear/bf16/value",
        "linear/bf16/grad",
        "lstm/tiny/value",
        "lstm/tiny/grad",
        "lstm_bf16/tiny/value",
        "lstm_bf16/tiny/grad",
        "moments/embed/mean",
        "moments/embed/cov",
        "moments/f64/mean",
        "moments/f64/cov",
    ] {
        names.insert(m.to_string());
    }
    names
}

#[test]
fn gpu_check_on_the_cpu_passes_every_check() {
    let out = tempfile::tempdir().unwrap();
    let o = run(&fixtures(), "3", out.path());
    let (stdout, stderr) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let r = report(out.path());
    assert_eq!(r["passed"], Value::Bool(true));
    assert_eq!(r["failed"].as_array().unwrap().len(), 0);
    assert_eq!(r["meta"]["target"], "cpu");
    // The CPU has no CUDA memory pool: the field is there, and null.
    assert_eq!(r["meta"]["cuda_pool_release_threshold"], Value::Null);
    assert!(r["meta"]
        .as_object()
        .unwrap()
        .contains_key("cuda_pool_release_threshold"));
    let checks = r["checks"].as_array().unwrap();
    let names: BTreeSet<String> = checks
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, expected_names());
    assert_eq!(names.len(), checks.len(), "a check is listed twice");
    for c in checks {
        assert_eq!(c["result"], "PASS", "{c}");
        let line = stdout
            .lines()
            .find(|l| l.split_whitespace().next() == c["name"].as_str())
            .unwrap_or_else(|| panic!("no table line for {}", c["name"]));
        assert!(line.contains(" PASS "), "{line}");
    }
}

#[test]
fn no_encoders_runs_the_two_tower_checks_alone_and_says_so() {
    let out = tempfile::tempdir().unwrap();
    // No fixtures folder at all: with --no-encoders it is never read.
    let o = Command::new(example_bin("gpu_check"))
        .args([
            "--device",
            "cpu",
            "--no-encoders",
            "--shapes",
            "tiny",
            "--steps",
            "1",
        ])
        .args(["--fixtures", "/nonexistent/fixtures", "--out"])
        .arg(out.path())
        // Two kernels switched off by name: the report says which (the CPU runs none of them).
        .env("LMSPLIT_CUDA_KERNELS", "off:nll,gelu")
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let r = report(out.path());
    // The switched-off set, in the kernels' own order.
    assert_eq!(
        r["meta"]["cuda_kernels_off"],
        serde_json::json!(["gelu", "nll"])
    );
    assert_eq!(r["meta"]["cuda_kernels"], Value::Bool(false));
    let names: BTreeSet<String> = r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    let towers: BTreeSet<String> = expected_names()
        .into_iter()
        .filter(|n| !n.starts_with("enc/") && !n.starts_with("moments/"))
        .collect();
    assert_eq!(names, towers);
    let notices = r["notices"].to_string();
    assert!(notices.contains("--no-encoders"), "{notices}");
}

/// A mistyped kernel switch stops the example before any check, naming the variable, the
/// value and the kernels it could have named.
#[test]
fn a_mistyped_kernel_switch_is_refused_before_any_check() {
    let out = tempfile::tempdir().unwrap();
    let o = Command::new(example_bin("gpu_check"))
        .args(["--device", "cpu", "--no-encoders", "--shapes", "tiny"])
        .arg("--out")
        .arg(out.path())
        .env("LMSPLIT_CUDA_KERNELS", "off:nl")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_ne!(o.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("LMSPLIT_CUDA_KERNELS")
            && stderr.contains("\"nl\"")
            && stderr.contains("layer_norm"),
        "{stderr}"
    );
    assert!(!stderr.contains("gpu_check: two-tower"), "{stderr}");
    assert!(!out.path().join("gpu_check.json").exists());
}

#[test]
fn a_broken_model_folder_is_a_named_failed_check_with_exit_code_1() {
    let dir = tempfile::tempdir().unwrap();
    let bert = dir.path().join("fixtures/bert");
    std::fs::create_dir_all(&bert).unwrap();
    for f in [
        "config.json",
        "tokenizer.json",
        "texts.json",
        "expected.safetensors",
    ] {
        std::fs::copy(fixtures().join("bert").join(f), bert.join(f)).unwrap();
    }
    let weights = std::fs::read(fixtures().join("bert/model.safetensors")).unwrap();
    std::fs::write(
        bert.join("model.safetensors"),
        &weights[..weights.len() / 2],
    )
    .unwrap();
    let out = dir.path().join("out");
    let o = run(&dir.path().join("fixtures"), "1", &out);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: 1 of ") && last.ends_with("checks failed: enc/bert/load"),
        "{last}"
    );
    let r = report(&out);
    assert_eq!(r["passed"], Value::Bool(false));
    assert_eq!(r["failed"], serde_json::json!(["enc/bert/load"]));
    let check = r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "enc/bert/load")
        .unwrap();
    assert_eq!(check["result"], "FAIL");
    let detail = check["detail"].as_str().unwrap();
    assert!(detail.contains("model.safetensors"), "{detail}");
    assert!(!detail.contains(" {"), "a Debug struct in {detail}");
}
