//! `examples/custom_tower.rs`: a GRU tower style written outside the library, registered with
//! one call, trained, scored and compared beside GPT by the library's own functions. Run as a
//! real process at smoke size (`cargo test` builds the examples first).

mod common;

use std::process::Command;

use common::example_bin;

#[test]
fn a_gru_style_of_the_users_own_trains_scores_and_is_compared_beside_gpt() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(example_bin("custom_tower"))
        .args(["--out", dir.path().to_str().unwrap()])
        .args(["--budget-tokens", "40000", "--head-tokens", "12000"])
        .args(["--documents", "120", "--min-count", "2"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "custom_tower failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().unwrap_or_default();
    let s: serde_json::Value = serde_json::from_str(last).unwrap();

    // The GRU learned: its phase-1 loss fell well below where it started.
    let (first, last) = (
        s["gru"]["phase1_loss_first"].as_f64().unwrap(),
        s["gru"]["phase1_loss_last"].as_f64().unwrap(),
    );
    assert!(last < first - 0.3, "GRU phase-1 loss {first} -> {last}");
    // Every GRU variable (two towers x one layer x input/recurrent weight and bias) got a
    // finite, non-zero gradient.
    let g = &s["gru_gradients"];
    assert_eq!(g["variables"].as_u64(), Some(8), "{g}");
    assert_eq!(g["finite_nonzero"], g["variables"], "{g}");
    // Its run folder names its style and config, and the two runs were scored on one set.
    assert_eq!(s["gru"]["config"]["style"], "gru");
    assert_eq!(s["gru"]["config"]["tower"]["hidden_size"], 32);
    assert_eq!(
        s["gru"]["scored_positions"], s["gpt"]["scored_positions"],
        "both runs are scored on the same positions"
    );
    let r = s["gpt_gru_agreement"]["pearson"].as_f64().unwrap();
    assert!((-1.0..=1.0).contains(&r), "{r}");
    assert!(s["gpt_gru_agreement"]["tokens"].as_u64().unwrap() >= 20);

    // Reading the GRU run in a process that never registered the style is refused with one
    // sentence naming it and how to register it.
    let gru_dir = dir.path().join(s["gru"]["run"].as_str().unwrap());
    let err = lmsplit::experiment::ScoredRun::load(&gru_dir)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("\"gru\"") && err.contains("towers::register"),
        "{err}"
    );
}
