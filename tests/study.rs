//! The smoke protocol end to end through the facade: every run trained and scored on its
//! style's fixed set, the tables written, and a second call reusing every finished run with
//! identical numbers.

mod common;

use common::quiet;
use lmsplit::experiment::{run_study, Protocol, StudySpec};

#[test]
fn smoke_study_runs_end_to_end_and_is_reused() {
    let dir = tempfile::tempdir().unwrap();
    let spec = StudySpec::protocol(Protocol::Smoke, std::path::Path::new("unused")).unwrap();
    let out = run_study(&spec, dir.path(), &[], &quiet()).unwrap();
    assert!(out.complete);
    assert_eq!(out.tables, dir.path());
    let labels: Vec<&str> = out.runs.iter().map(|r| r.label.as_str()).collect();
    assert_eq!(labels, ["gpt-s0", "gpt-s1", "bert-s0"]);
    // Runs of one style share one scoring set; the styles' sets differ.
    assert_eq!(
        out.runs[0].scoring_fingerprint,
        out.runs[1].scoring_fingerprint
    );
    assert_ne!(
        out.runs[0].scoring_fingerprint,
        out.runs[2].scoring_fingerprint
    );
    // The GPT heads learn the synthetic grammar: better than the unigram model.
    for r in &out.runs[..2] {
        assert!(!r.heads.above_unigram, "{}: {:?}", r.label, r.heads);
        assert!(r.positions > 1000);
    }
    // 3 pairs × 2 score kinds × 2 token selections, each with finite correlations.
    assert_eq!(out.pairs.len(), 12);
    for (_, p) in &out.pairs {
        assert!(p.pearson.r.is_finite() && p.spearman.r.is_finite());
        assert!(p.reliability_split_half.iter().all(|r| r.is_finite()));
        assert!(p.reliability_head_seed.is_some());
    }
    for f in &out.outputs {
        assert!(f.is_file(), "{} was not written", f.display());
    }
    assert!(dir.path().join("study.json").is_file());
    // The emergence analysis: both GPT runs at the snapshot (1/2) and at the end; its end
    // point is the main table's correlation of the same pair and selection.
    let e = out
        .emergence
        .as_ref()
        .expect("the smoke protocol asks for emergence");
    let fractions: Vec<(&str, f64)> = e
        .points
        .iter()
        .map(|p| (p.label.as_str(), p.fraction))
        .collect();
    assert_eq!(
        fractions,
        [
            ("gpt-s0", 0.5),
            ("gpt-s0", 1.0),
            ("gpt-s1", 0.5),
            ("gpt-s1", 1.0)
        ]
    );
    assert_eq!(e.pairs.len(), 2);
    let main = out
        .pairs
        .iter()
        .find(|(k, p)| k == "arithmetic" && p.selection == "min-count-5" && p.b == "gpt-s1")
        .unwrap();
    assert_eq!(e.pairs[1].pearson, main.1.pearson.r);
    assert!(e.pairs[0].tokens < e.pairs[1].tokens);
    // ICA word groups of gpt-s0 and the per-run controls.
    let g = out
        .word_groups
        .as_ref()
        .expect("the smoke protocol asks for word groups");
    assert_eq!((g.label.as_str(), g.dim), ("gpt-s0", 16));
    assert!((g.none + g.exactly_one) <= 1.0 + 1e-12 && g.mean >= g.exactly_one);
    assert_eq!(out.controls.len(), 3);
    assert!(out.controls.iter().all(|c| c.null_q975.is_finite()));
    // The word-piece control: present exactly when continuation pieces were scored.
    let pieces_md = dir.path().join("pieces_pairs.md");
    match &out.pieces {
        Some(p) => {
            assert_eq!((p.runs.len(), p.pairs.len()), (3, 3));
            assert!(p.runs.iter().any(|r| r.continuation > 0));
            assert!(p.pairs[0].r_all.is_finite() && pieces_md.is_file());
        }
        None => assert!(!pieces_md.exists()),
    }

    let again = run_study(&spec, dir.path(), &[], &quiet()).unwrap();
    assert!(again.runs.iter().all(|r| r.reused));
    let r = |o: &lmsplit::experiment::StudyOutcome| -> Vec<f64> {
        o.pairs.iter().map(|(_, p)| p.pearson.r).collect()
    };
    assert_eq!(r(&again), r(&out));
}

#[test]
fn some_runs_write_their_tables_to_a_subset_folder() {
    let dir = tempfile::tempdir().unwrap();
    let spec = StudySpec::protocol(Protocol::Smoke, std::path::Path::new("unused")).unwrap();
    let only = vec!["bert-s0".to_string()];
    let out = run_study(&spec, dir.path(), &only, &quiet()).unwrap();
    assert!(!out.complete);
    assert_eq!(out.tables, dir.path().join("subset-bert-s0"));
    assert!(out.tables.join("runs.md").is_file());
    assert!(out.pairs.is_empty());
    assert!(dir.path().join("bert-s0/run.json").is_file());
    assert!(!dir.path().join("gpt-s0").exists());
    let err = run_study(&spec, dir.path(), &["elmo-s9".into()], &quiet()).unwrap_err();
    assert!(err.to_string().contains("elmo-s9 is not a run"), "{err}");
}
