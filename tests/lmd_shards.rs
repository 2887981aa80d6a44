//! `lmd_table` sharded as separate processes: `--shard 0/2` and `--shard 1/2`, then
//! `--shards 2 --merge-only`, write the tables of one unsharded run; merging before every shard
//! exists is refused naming the missing file.

mod common;

use std::path::Path;
use std::process::Command;

use common::{example_bin, shared};

fn lmd_table(out: &Path, extra: &[&str]) -> std::process::Output {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/lmd/tests/fixtures");
    let models = format!(
        "{},{}",
        fixtures.join("bert").display(),
        fixtures.join("distilbert").display()
    );
    let corpus = shared("data/wikitext-2/test.txt");
    let vocab = shared("data/bert-base-uncased/vocab.txt");
    Command::new(example_bin("lmd_table"))
        .args([
            "--models",
            &models,
            "--t",
            "16",
            "--n-train",
            "120",
            "--n-test",
            "40",
        ])
        .args(["--chunk", "32", "--out", &out.display().to_string()])
        .arg("--corpus")
        .arg(corpus)
        .arg("--tokenizer")
        .arg(vocab)
        .args(extra)
        .output()
        .expect("lmd_table runs")
}

fn ok(o: std::process::Output) -> String {
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        o.status.success(),
        "lmd_table failed: {text}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    text
}

/// Every number of a JSON table, in order.
fn numbers(path: &Path) -> Vec<f64> {
    fn walk(v: &serde_json::Value, out: &mut Vec<f64>) {
        match v {
            serde_json::Value::Number(n) => out.push(n.as_f64().unwrap()),
            serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            serde_json::Value::Object(o) => o.values().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    walk(&serde_json::from_str(&text).unwrap(), &mut out);
    out
}

#[test]
fn two_shard_processes_and_a_merge_equal_one_unsharded_run() {
    let dir = tempfile::tempdir().unwrap();
    let (one, sharded) = (dir.path().join("one"), dir.path().join("sharded"));
    ok(lmd_table(&one, &[]));
    ok(lmd_table(&sharded, &["--shard", "0/2"]));
    // Merging with shard 1 missing: a sentence naming its file, exit code 1.
    let early = lmd_table(&sharded, &["--shards", "2", "--merge-only"]);
    assert_eq!(early.status.code(), Some(1));
    let err = String::from_utf8_lossy(&early.stderr);
    assert!(
        err.contains("train-shard-1-of-2.safetensors") && err.contains("not been extracted"),
        "{err}"
    );
    ok(lmd_table(&sharded, &["--shard", "1/2"]));
    let merged = ok(lmd_table(&sharded, &["--shards", "2", "--merge-only"]));
    assert!(merged.contains("group rho"), "{merged}");
    for table in [
        "table2.json",
        "T16/pairwise_r2.json",
        "T16/pairwise_rho.json",
    ] {
        let (a, b) = (numbers(&one.join(table)), numbers(&sharded.join(table)));
        assert!(
            !a.is_empty() && a.len() == b.len(),
            "{table}: {a:?} vs {b:?}"
        );
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() < 1e-9, "{table}: {x} vs {y}");
        }
    }
}
