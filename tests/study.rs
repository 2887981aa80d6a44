//! The smoke protocol end to end through the facade: every run trained and scored on its
//! style's fixed set, the tables written, and a second call reusing every finished run with
//! identical numbers; `reproduce analyze` over copies of the run folders gives the same tables.

mod common;

use common::{copy_dir, quiet, shared};
use lmsplit::experiment::analysis::TokenSelection;
use lmsplit::experiment::emergence::Emergence;
use lmsplit::experiment::orientation::Orientation;
use lmsplit::experiment::spec::Vocabulary;
use lmsplit::experiment::units::controls::RunControls;
use lmsplit::experiment::units::pairs::RunPairs;
use lmsplit::experiment::units::pieces::WordPieces;
use lmsplit::experiment::units::pos::PosByRun;
use lmsplit::experiment::units::runs::StudyRuns;
use lmsplit::experiment::units::word_groups::GroupAnalysis;
use lmsplit::experiment::{
    analyze, builtin, run_study, CorpusData, ExperimentError, Manifest, Protocol, ScoredRun,
    ScoringSet, Stage, StudyContext, StudyOutcome, StudySpec,
};
use lmsplit::prefscore::ScoreKind;
use lmsplit::towers::{ElmoConfig, ElmoMode, Preset, Style};

#[test]
fn smoke_study_runs_end_to_end_and_is_reused() {
    let dir = tempfile::tempdir().unwrap();
    let spec = StudySpec::protocol(Protocol::Smoke, std::path::Path::new("unused")).unwrap();
    let out = run_study(&spec, dir.path(), &[], &quiet()).unwrap();
    assert!(
        out.complete && out.left_out.is_empty(),
        "{:?}",
        out.left_out
    );
    assert_eq!(out.tables, dir.path());
    let runs = &out.get::<StudyRuns>().unwrap().0;
    let labels: Vec<&str> = runs.iter().map(|r| r.label.as_str()).collect();
    assert_eq!(labels, ["gpt-s0", "gpt-s1", "bert-s0"]);
    // Runs of one style share one scoring set; the styles' sets differ.
    assert_eq!(runs[0].scoring_fingerprint, runs[1].scoring_fingerprint);
    assert_ne!(runs[0].scoring_fingerprint, runs[2].scoring_fingerprint);
    // The GPT heads learn the synthetic grammar: better than the unigram model.
    for r in &runs[..2] {
        assert!(!r.heads.above_unigram, "{}: {:?}", r.label, r.heads);
        assert!(r.positions > 1000);
    }
    // Each run states its budget, throughput and device, in its manifest and the runs table.
    let runs_md = std::fs::read_to_string(dir.path().join("runs.md")).unwrap();
    for r in runs {
        assert_eq!(r.phase1_tokens, 120_320, "{}", r.label);
        assert!(r.phase1_tokens_per_s > 0.0, "{}", r.label);
        assert_eq!(r.device, "cpu", "{}", r.label);
        let text = std::fs::read_to_string(r.dir.join("manifest.json")).unwrap();
        let m: Manifest = serde_json::from_str(&text).unwrap();
        assert_eq!((m.id.to_string(), m.stage), (r.label.clone(), Stage::Done));
        assert!(
            m.weights_sha256.is_some_and(|h| h.len() == 64),
            "{}",
            r.label
        );
        assert!(runs_md.contains(&r.label), "{runs_md}");
    }
    // Fig. 4 tag by tag across the runs, beside the paper's directions.
    let pos = std::fs::read_to_string(dir.path().join("pos_by_run.md")).unwrap();
    for label in ["gpt-s0", "gpt-s1", "bert-s0"] {
        assert!(pos.contains(&format!("{label} rank")), "{pos}");
    }
    assert!(pos.contains("| VERB ") && pos.contains("primary"), "{pos}");
    assert!(dir.path().join("fig4_pos_by_run.png").is_file());
    // Table 2 as a matrix figure for each score kind and selection.
    assert!(dir
        .path()
        .join("fig_table2_arithmetic_min-count-5.png")
        .is_file());
    // Table 4: Spearman between runs, each run's ρ with the frequency rank in its last column.
    let t4 = std::fs::read_to_string(dir.path().join("table4_spearman.md")).unwrap();
    assert!(
        t4.contains("vs frequency rank") && t4.contains("| bert-s0"),
        "{t4}"
    );
    assert!(dir
        .path()
        .join("fig_table4_spearman_arithmetic.png")
        .is_file());
    // The runs' folders copied elsewhere and analysed from there (nothing trained) give the
    // study's tables, every one of them byte for byte.
    let elsewhere = tempfile::tempdir().unwrap();
    let copies: Vec<std::path::PathBuf> = runs
        .iter()
        .map(|r| {
            let to = elsewhere.path().join("runs").join(&r.label);
            copy_dir(&r.dir, &to);
            to
        })
        .collect();
    let loaded = ScoredRun::load_all(&copies).unwrap();
    let tables = elsewhere.path().join("tables");
    analyze(
        &spec,
        &loaded,
        &builtin(),
        &tables,
        &lmsplit::experiment::Progress::silent(),
    )
    .unwrap();
    // And by the command line: `reproduce analyze <the copies> --protocol smoke --out cli`.
    let cli = elsewhere.path().join("cli");
    let o = std::process::Command::new(common::example_bin("reproduce"))
        .args(["analyze", "--protocol", "smoke", "--out"])
        .arg(&cli)
        .args(&copies)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for again in [&tables, &cli] {
        let mut compared = 0;
        for e in std::fs::read_dir(dir.path()).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "md" || x == "csv")
                && !p.ends_with("runs.md")
                && !p.ends_with("runs.csv")
            {
                let name = p.file_name().unwrap();
                let made = std::fs::read_to_string(again.join(name)).unwrap();
                let want = std::fs::read_to_string(&p).unwrap();
                assert_eq!(want, made, "{} in {}", p.display(), again.display());
                compared += 1;
            }
        }
        assert!(compared >= 20, "{compared} tables compared");
    }
    // A unit of the user's own beside the built-ins (examples/custom_analysis.rs, the facade
    // only): its table and figure next to theirs, its output in study.json by its name.
    let custom = elsewhere.path().join("custom");
    let o = std::process::Command::new(common::example_bin("custom_analysis"))
        .arg(dir.path())
        .arg(&custom)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let printed = String::from_utf8_lossy(&o.stdout);
    for f in [
        "score_by_length.md",
        "fig_score_by_length.png",
        "table4_spearman.md",
    ] {
        assert!(
            custom.join(f).is_file() && printed.contains(f),
            "{f}: {printed}"
        );
    }
    let by_length = std::fs::read_to_string(custom.join("score_by_length.md")).unwrap();
    assert!(["gpt-s0", "gpt-s1", "bert-s0"]
        .iter()
        .all(|l| by_length.contains(l)));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(custom.join("study.json")).unwrap()).unwrap();
    let runs_of = &json["units"]["score_by_length"];
    assert_eq!(runs_of.as_array().map(Vec::len), Some(3), "{runs_of}");
    assert!(runs_of[0]["pearson"]
        .as_f64()
        .is_some_and(|r| r.abs() <= 1.0));
    assert_eq!(
        std::fs::read_to_string(custom.join("table4_spearman.md")).unwrap(),
        std::fs::read_to_string(dir.path().join("table4_spearman.md")).unwrap()
    );
    // Computing writes nothing: the analysis of the copies toward a folder that does not exist
    // leaves it absent, and holds the written study's numbers.
    let data = CorpusData::for_runs(&loaded, &tables.join("data")).unwrap();
    let never = elsewhere.path().join("never");
    let silent = lmsplit::experiment::Progress::silent();
    let ctx = StudyContext::new(&spec, Some(&data), &loaded, &never, &silent).unwrap();
    let c = ctx.compute(&builtin(), true).unwrap();
    assert!(!never.exists(), "compute wrote into {}", never.display());
    assert!(c.outputs.is_empty() && c.get::<PosByRun>().unwrap().0.len() == 3);
    assert_eq!(c.get::<StudyRuns>().unwrap().0.len(), 3);
    let rs = |o: &StudyOutcome| -> Vec<(String, f64)> {
        let sets = &o.get::<RunPairs>().unwrap().0;
        (sets.iter())
            .flat_map(|s| {
                s.pairs
                    .iter()
                    .map(move |p| (format!("{:?}", s.kind), p.pearson.r))
            })
            .collect()
    };
    assert_eq!(rs(&c), rs(&out));
    let controls = |o: &StudyOutcome| o.get::<RunControls>().unwrap().0.clone();
    assert_eq!(controls(&c), controls(&out));
    let pairs = out.get::<RunPairs>().unwrap();
    // The tables of the smoke study as the 0.1 layer wrote them (tests/fixtures/smoke-tables):
    // every cell the same but the paper column (now a cell only where the paper has that
    // kind of pair); numbers within one unit of their last printed digit (another CPU's
    // matrix kernels may round one differently).
    let fixtures =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/smoke-tables");
    for e in std::fs::read_dir(&fixtures).unwrap() {
        let p = e.unwrap().path();
        let now = std::fs::read_to_string(dir.path().join(p.file_name().unwrap())).unwrap();
        same_table_cells(&std::fs::read_to_string(&p).unwrap(), &now, &p);
    }
    // 3 pairs × 2 score kinds × 2 token selections, each with finite correlations.
    assert_eq!(pairs.all().count(), 12);
    for p in pairs.all() {
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
        .get::<Emergence>()
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
    let min5 = TokenSelection::MinCount(5);
    let main = (pairs.of(ScoreKind::ArithmeticMean, min5).iter())
        .find(|p| p.b == "gpt-s1")
        .unwrap();
    assert_eq!(e.pairs[1].pearson, main.pearson.r);
    assert!(e.pairs[0].tokens < e.pairs[1].tokens);
    // The curve is disattenuated as the main tables are: by the head-seed reliabilities
    // (each snapshot has its retest heads), not the split-half ones.
    let d = main.disattenuated.as_ref().unwrap();
    assert_eq!(e.pairs[1].reliability, Some([d.rel_a, d.rel_b]));
    assert_eq!(e.pairs[1].disattenuated, d.value);
    assert_ne!(e.pairs[1].reliability.unwrap(), main.reliability_split_half);
    for p in &e.points {
        assert!(p.head_seed.is_some_and(f64::is_finite), "{p:?}");
        // Each point against its own run's end: exactly 1 at the end, and below 1 at the
        // snapshot (its scores are not the end's).
        let w = p.with_end.expect("every point has its r with the end");
        match p.fraction {
            1.0 => assert!((w - 1.0).abs() < 1e-12, "{p:?}"),
            _ => assert!(w.is_finite() && w.abs() < 1.0 - 1e-9, "{p:?}"),
        }
    }
    let snap = e.pairs[0].reliability.expect("snapshot retest heads");
    assert!(
        e.pairs[0].disattenuated
            == lmsplit::prefscore::disattenuate(e.pairs[0].pearson, snap[0], snap[1])
    );
    assert!(e.pairs[0].interval.is_some());
    // ICA word groups of gpt-s0 and the per-run controls.
    let g = &out
        .get::<GroupAnalysis>()
        .expect("the smoke protocol asks for word groups")
        .summary;
    assert_eq!((g.label.as_str(), g.dim), ("gpt-s0", 16));
    assert!((g.none + g.exactly_one) <= 1.0 + 1e-12 && g.mean >= g.exactly_one);
    // The fit's record: its steps, residual and the paper's share of values in [-1, 1], in a
    // table beside the paper's numbers and a trajectory figure.
    assert!(g.steps > 0 && g.residual.is_finite(), "{g:?}");
    assert!(g.within_unit > 0.0 && g.within_unit < 1.0, "{g:?}");
    let ica_dir = dir.path().join("ica_gpt-s0");
    assert!(
        ica_dir.join("ica_fit.md").is_file()
            && ica_dir.join("fig_ica_trajectory.png").is_file()
            && ica_dir.join("fig7_group_words.png").is_file()
    );
    // One set of groups scored on every run, with each run's group ranks and their agreement.
    let by_run = std::fs::read_to_string(ica_dir.join("table3_by_run.md")).unwrap();
    assert!(
        ["gpt-s0 rank", "gpt-s1 rank", "bert-s0 rank"]
            .iter()
            .all(|c| by_run.contains(c)),
        "{by_run}"
    );
    let agree = std::fs::read_to_string(ica_dir.join("table3_rank_agreement.md")).unwrap();
    assert!(
        agree.contains("gpt-s0 | gpt-s1") || agree.contains("gpt-s0 |"),
        "{agree}"
    );
    let fit = std::fs::read_to_string(ica_dir.join("ica_fit.md")).unwrap();
    assert!(fit.contains("0.8") && fit.contains("1.45"), "{fit}");
    let run_controls = controls(&out);
    assert_eq!(run_controls.len(), 3);
    assert!(run_controls.iter().all(|c| c.null_q975.is_finite()));
    // Every run's scores against its predictability: computed, a correlation, in the table.
    assert!(run_controls
        .iter()
        .all(|c| c.pearson_vs_predictability.is_some_and(|r| r.abs() <= 1.0)));
    let controls_md = std::fs::read_to_string(dir.path().join("controls.md")).unwrap();
    assert!(
        controls_md.contains("Pearson vs predictability"),
        "{controls_md}"
    );
    // Across runs: every pair, and the two GPT seeds find the same tokens predictable (the
    // tokens are aligned by id, so a misaligned or per-run-scaled predictability would not).
    let pp: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("controls_predictability_pairs.json")).unwrap(),
    )
    .unwrap();
    let rows = pp["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3, "{pp}");
    let gpt = rows
        .iter()
        .find(|r| r[0] == "gpt-s0" && r[1] == "gpt-s1")
        .unwrap();
    assert!(gpt[3].as_f64().unwrap() > 0.8, "{pp}");
    // The split-scoring control: every pair, each column a correlation.
    let ss: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("controls_split_scoring.json")).unwrap(),
    )
    .unwrap();
    let rows = ss["rows"].as_array().unwrap();
    // Every pair with the text dealt in 64 long blocks; the pair on one scoring set (the GPT
    // seeds) also in the released code's windows.
    assert_eq!(rows.len(), 4, "{ss}");
    let deals: Vec<&str> = rows.iter().map(|r| r[2].as_str().unwrap()).collect();
    let blocks = deals.iter().filter(|d| **d == "64 blocks").count();
    assert_eq!(blocks, 3, "{ss}");
    assert_eq!(
        (rows[3][0].as_str(), rows[3][1].as_str()),
        (Some("gpt-s0"), Some("gpt-s1"))
    );
    assert!(dir.path().join("fig_split_scoring.png").is_file());
    for row in rows {
        for j in [5, 7, 8, 11, 12] {
            assert!(row[j].as_f64().is_some_and(|r| r.abs() <= 1.0), "{ss}");
        }
    }
    // Agreement up to orientation: one sign per run (the first +1), and a null p.
    let or: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("controls_orientation.json")).unwrap(),
    )
    .unwrap();
    let rows = or["rows"].as_array().unwrap();
    let value = |what: &str| rows.iter().find(|r| r[0] == what).map(|r| r[1].clone());
    assert_eq!(value("orientation of gpt-s0"), Some("+1".into()), "{or}");
    assert!(value("orientation of bert-s0").is_some(), "{or}");
    let p = value("null: p").and_then(|v| v.as_f64()).unwrap();
    assert!(p > 0.0 && p <= 1.0, "{or}");
    let oriented = value("mean oriented r").and_then(|v| v.as_f64()).unwrap();
    let measured = value("mean r as measured")
        .and_then(|v| v.as_f64())
        .unwrap();
    assert!(oriented >= measured, "{or}");
    // The word-piece control: present exactly when continuation pieces were scored.
    let pieces_md = dir.path().join("pieces_pairs.md");
    match out.get::<WordPieces>().map(|w| &w.control) {
        Some(p) => {
            assert_eq!((p.runs.len(), p.pairs.len()), (3, 3));
            assert!(p.runs.iter().any(|r| r.continuation > 0));
            assert!(p.pairs[0].r_all.is_finite() && pieces_md.is_file());
            // The orientation read within each piece class.
            let po = std::fs::read_to_string(dir.path().join("pieces_orientation.md")).unwrap();
            assert!(po.contains("within word-initial pieces"), "{po}");
            assert!(out.get::<Orientation>().is_some());
        }
        None => assert!(!pieces_md.exists()),
    }

    assert_eq!(e.kind, Some(ScoreKind::ArithmeticMean));

    // Again, the curve on the released code's score this time: every run reused, the main
    // tables the same, and the curve's end point the geometric table's pair, not the
    // arithmetic one's.
    let mut geometric = spec.clone();
    geometric.emergence.as_mut().unwrap().kind = ScoreKind::GeometricMean;
    let again = run_study(&geometric, dir.path(), &[], &quiet()).unwrap();
    assert!(again.get::<StudyRuns>().unwrap().0.iter().all(|r| r.reused));
    assert_eq!(rs(&again), rs(&out));
    let eg = again.get::<Emergence>().unwrap();
    assert_eq!(eg.kind, Some(ScoreKind::GeometricMean));
    let again_pairs = again.get::<RunPairs>().unwrap();
    let main_geometric = (again_pairs.of(ScoreKind::GeometricMean, min5).iter())
        .find(|p| p.b == "gpt-s1")
        .unwrap();
    assert_eq!(eg.pairs[1].pearson, main_geometric.pearson.r);
    assert_ne!(eg.pairs[1].pearson, e.pairs[1].pearson);
    let note = std::fs::read_to_string(dir.path().join("emergence.md")).unwrap();
    assert!(note.contains("scores: mean log probability"), "{note}");
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
    assert!(out.get::<RunPairs>().unwrap().all().next().is_none());
    assert!(dir.path().join("bert-s0/manifest.json").is_file());
    assert!(!dir.path().join("gpt-s0").exists());
    // A snapshot job names one of the run's snapshots, and needs its run finished.
    let err = run_study(&spec, dir.path(), &["gpt-s0@0.3".into()], &quiet()).unwrap_err();
    assert!(
        err.to_string().contains("gpt-s0 has snapshots at [0.5]"),
        "{err}"
    );
    let err = run_study(&spec, dir.path(), &["gpt-s1@0.5".into()], &quiet()).unwrap_err();
    assert!(err.to_string().contains("gpt-s1 (not started)"), "{err}");
    let err = run_study(&spec, dir.path(), &["elmo-s9".into()], &quiet()).unwrap_err();
    assert!(err.to_string().contains("elmo-s9 is not a run"), "{err}");
    assert!(
        matches!(&err, ExperimentError::UnknownRun { label, runs } if label == "elmo-s9" && runs.len() == 3),
        "{err:?}"
    );
    // Two runs under one label would share a folder: refused before anything runs.
    let mut twice = spec.clone();
    twice.runs.push(twice.runs[0].clone());
    let err = run_study(&twice, dir.path(), &[], &quiet()).unwrap_err();
    assert!(
        matches!(err, ExperimentError::DuplicateRun(ref l) if l == "gpt-s0"),
        "{err:?}"
    );
}

#[test]
fn a_study_given_a_tokenizer_uses_it_in_every_run_and_scoring_set() {
    let dir = tempfile::tempdir().unwrap();
    let bert = shared("data/bert-base-uncased/bert_base_uncased.json");
    let trained = StudySpec::protocol(Protocol::Smoke, std::path::Path::new("unused")).unwrap();
    let mut spec = trained
        .clone()
        .with_vocabulary(&Vocabulary::File(bert.clone()));
    // What is checked is where the vocabulary goes, not what the run learns: a few updates of
    // phase 1 and of one head pair (a 30,528-way output layer at the smoke budgets took five
    // minutes of CI's two cores).
    spec.emergence = None;
    for r in &mut spec.runs {
        r.phase1.budget_tokens = 4_096;
        r.phase1.snapshots.clear();
        r.heads.max_budget_tokens = 4_096;
        r.retest_heads = false;
    }
    assert!(spec
        .runs
        .iter()
        .all(|r| r.corpus.tokenizer.as_ref() == Some(&bert)));
    assert_eq!(spec.corpus.tokenizer.as_ref(), Some(&bert));
    let out = run_study(&spec, dir.path(), &["gpt-s0".into()], &quiet()).unwrap();
    // The run was trained on that vocabulary (V 30,522 padded to 30,528) and says so.
    let rec: Manifest = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("gpt-s0/manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(rec.spec.corpus.tokenizer.as_ref(), Some(&bert));
    let data = CorpusData::load(&spec.corpus, &dir.path().join("data")).unwrap();
    assert_eq!((data.tok.vocab_size(), data.padded_vocab()), (30522, 30528));
    assert!(!dir.path().join("data/tokenizer.json").exists());
    // Its scoring set is the one cut with that vocabulary: another vocabulary cuts another
    // set, with another fingerprint.
    let other_dir = tempfile::tempdir().unwrap();
    let other = CorpusData::load(&trained.corpus, other_dir.path()).unwrap();
    let a = ScoringSet::load_or_build(
        &dir.path().join("data"),
        &Style::gpt(),
        &data,
        &spec.scoring,
    )
    .unwrap();
    let b = ScoringSet::load_or_build(other_dir.path(), &Style::gpt(), &other, &trained.scoring)
        .unwrap();
    let runs = &out.get::<StudyRuns>().unwrap().0;
    assert_eq!(runs[0].scoring_fingerprint, a.id.short());
    assert_ne!(a.id.fingerprint, b.id.fingerprint);
}

#[test]
fn the_cpu_protocol_runs_the_papers_vocabulary_both_elmo_modes_one_budget_and_a_size_pair() {
    let shared = std::path::Path::new("/shared-data");
    let spec = StudySpec::protocol(Protocol::Cpu, shared).unwrap();
    let labels: Vec<String> = spec.runs.iter().map(|r| r.label()).collect();
    assert_eq!(
        labels,
        [
            "gpt-s0",
            "gpt-s1",
            "gpt-s2",
            "elmo_released-s0",
            "elmo_released-s1",
            "bert-s0",
            "bert-s1",
            "elmo-s0",
            "elmo-s1",
            "gpt_large-s0"
        ]
    );
    let bert = Vocabulary::bert_base_uncased(shared);
    for r in &spec.runs {
        assert_eq!(r.corpus, spec.corpus.clone());
        assert_eq!(r.phase1.budget_tokens, 8_000_000, "{}", r.label());
        // The heads' cap and validation interval in targets: BERT labels 15% of its positions.
        let (cap, every) = match r.style == Style::bert() {
            true => (13_333_333, 667),
            false => (2_000_000, 100),
        };
        let h = &r.heads;
        assert_eq!(
            (h.max_budget_tokens, h.eval_every),
            (cap, every),
            "{}",
            r.label()
        );
        assert_eq!(
            r.tower_config()
                .unwrap()
                .get::<ElmoConfig>()
                .ok()
                .map(|c| c.mode)
                == Some(ElmoMode::AsReleased),
            r.label().starts_with("elmo_released")
        );
    }
    assert_eq!(
        spec.corpus.tokenizer,
        match bert {
            Vocabulary::File(p) => Some(p),
            Vocabulary::Trained(_) => None,
        }
    );
    let large = spec.runs.last().unwrap();
    assert_eq!(
        (&large.style, large.preset),
        (&Style::gpt(), Preset::PeerLarge)
    );
    // The 8k vocabulary of the earlier CPU results, by name.
    let eight = spec.with_vocabulary(&Vocabulary::Trained(8192));
    assert!(eight
        .runs
        .iter()
        .all(|r| r.corpus.tokenizer.is_none() && r.corpus.train_vocab == 8192));
}

/// The rows of two Markdown tables hold the same cells, but their `paper` column; numbers
/// within one unit of their last printed digit.
fn same_table_cells(old: &str, new: &str, what: &std::path::Path) {
    let rows = |t: &str| -> Vec<Vec<String>> {
        (t.lines().filter(|l| l.starts_with('|')))
            .map(|l| l.split('|').map(|c| c.trim().to_string()).collect())
            .collect()
    };
    let (a, b) = (rows(old), rows(new));
    assert_eq!(a.len(), b.len(), "{}: rows", what.display());
    let paper = a.first().and_then(|h| h.iter().position(|c| c == "paper"));
    for (ra, rb) in a.iter().zip(&b) {
        assert_eq!(ra.len(), rb.len(), "{}: {ra:?}", what.display());
        for (i, (x, y)) in ra.iter().zip(rb).enumerate() {
            if Some(i) == paper || x == y {
                continue;
            }
            let (fx, fy) = (x.parse::<f64>(), y.parse::<f64>());
            let decimals = x.split('.').nth(1).map_or(0, str::len) as i32;
            let ulp = 10f64.powi(-decimals);
            match (fx, fy) {
                (Ok(fx), Ok(fy)) => assert!(
                    (fx - fy).abs() <= ulp * 1.01,
                    "{}: {x} vs {y}",
                    what.display()
                ),
                _ => panic!("{}: {x:?} became {y:?}", what.display()),
            }
        }
    }
}
