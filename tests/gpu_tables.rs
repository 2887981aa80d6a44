//! Process-level: the `gpu_tables` example turns the JSON lines a lent GPU session brings back
//! into its tables (Markdown on stdout, files under `--out`, a JSON summary last), and a log
//! without a benchmark line is one error sentence with exit code 1.
//! (`cargo build --example gpu_tables` first when running this test alone.)

mod common;

use std::process::Command;

use common::example_bin;

#[test]
fn the_tables_come_from_the_session_logs_and_a_log_without_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("throughput.jsonl");
    std::fs::write(
        &log,
        concat!(
            r#"{"style":"Bert","shape":"base_2tower","batch":64,"seq":128,"dtype":"BF16","tokens_per_s":19401.0,"s_per_step":0.42,"cuda_kernels_off":[],"forward_s":0.1,"backward_s":0.3,"update_s":0.02,"model_gflop_per_token":0.417,"model_tflop_per_s":8.09,"mfu":0.008177}"#,
            "\n",
            r#"{"shape": "base", "batch": 64, "seq": 128, "device": "cuda", "dtype": "bf16", "tokens_per_s": 104746.0, "threads": null, "style": "bert"}"#,
            "\n"
        ),
    )
    .unwrap();
    let out = dir.path().join("tables");
    let o = Command::new(example_bin("gpu_tables"))
        .arg(&log)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // PyTorch's 104,746 tokens/s against our 19,401: 5.4 times.
    let row = stdout.lines().find(|l| l.starts_with("| bert "));
    assert!(
        row.is_some_and(|r| r.contains("19401") && r.contains("104746") && r.contains("5.4x")),
        "{stdout}"
    );
    let md = std::fs::read_to_string(out.join("training.md")).unwrap();
    assert!(md.contains("5.4x"), "{md}");
    assert!(out.join("step_split.csv").is_file());
    assert!(
        stdout.lines().last().unwrap().starts_with("{\"lines\":2"),
        "{stdout}"
    );

    let other = dir.path().join("other.txt");
    std::fs::write(&other, "not a benchmark line\n").unwrap();
    let o = Command::new(example_bin("gpu_tables"))
        .arg(&other)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("error: no benchmark line in") && err.contains("other.txt"),
        "{err}"
    );
}
