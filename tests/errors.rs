//! Each documented error of the public experiment API on bad input: a typed error whose
//! sentence names what is wrong, never a panic.

mod common;

use std::path::PathBuf;

use common::tiny_spec;
use lmsplit::corpus::Format;
use lmsplit::experiment::{
    Corpus, CorpusData, CorpusSpec, ExperimentError, Protocol, ScoredRun, ScoringSpec, ScoringText,
    StudySpec,
};

#[test]
fn a_missing_corpus_or_tokenizer_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let spec = CorpusSpec::text("/nope/corpus.txt", Format::Plain, None);
    let err = CorpusData::load(&spec, dir.path()).unwrap_err();
    assert!(matches!(err, ExperimentError::Missing { .. }), "{err:?}");
    assert!(err.to_string().contains("/nope/corpus.txt"), "{err}");

    let mut spec = CorpusSpec::synthetic(20, 0);
    spec.tokenizer = Some(PathBuf::from("/nope/tokenizer.json"));
    let err = CorpusData::load(&spec, dir.path()).unwrap_err();
    assert!(err.to_string().contains("/nope/tokenizer.json"), "{err}");
}

#[test]
fn a_corpus_too_small_to_hold_out_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("one.txt");
    std::fs::write(&text, "a single document\n").unwrap();
    let spec = CorpusSpec::text(text, Format::Plain, None);
    let err = CorpusData::load(&spec, &dir.path().join("data")).unwrap_err();
    assert!(
        matches!(
            err,
            ExperimentError::TooLittleData {
                have: 1,
                need: 2,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("at least 2 needed"), "{err}");
}

#[test]
fn a_folder_without_a_run_is_not_a_run() {
    let dir = tempfile::tempdir().unwrap();
    let err = ScoredRun::load(dir.path()).unwrap_err();
    assert!(matches!(err, ExperimentError::NotA { .. }), "{err:?}");
    assert!(err.to_string().contains("manifest.json"), "{err}");
}

#[test]
fn a_truncated_manifest_is_a_json_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("manifest.json"), "{\"spec\": {").unwrap();
    let err = ScoredRun::load(dir.path()).unwrap_err();
    assert!(matches!(err, ExperimentError::Json { .. }), "{err:?}");
    assert!(err.to_string().contains("manifest.json"), "{err}");
}

#[test]
fn a_missing_scoring_corpus_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let data = CorpusData::load(&tiny_spec(0).corpus, dir.path()).unwrap();
    let spec = ScoringSpec {
        text: Some(ScoringText {
            paths: vec!["/nope/scoring.txt".into()],
            format: Format::Plain,
        }),
        ..ScoringSpec::new(32)
    };
    let err = spec.documents(&data).unwrap_err();
    assert!(err.to_string().contains("/nope/scoring.txt"), "{err}");
}

#[test]
fn invalid_settings_and_protocols_are_refused() {
    let mut spec = tiny_spec(0);
    spec.phase1.lr = 0.0;
    assert!(
        matches!(spec.validate(), Err(ExperimentError::BadSetting { ref field, .. }) if field == "phase1.lr")
    );
    let err = "fast".parse::<Protocol>().unwrap_err();
    assert!(err.to_string().contains("smoke, cpu, gpu"), "{err}");
    assert!(
        matches!(&err, ExperimentError::UnknownChoice { what: "protocol", given, .. } if given == "fast"),
        "{err:?}"
    );
    // The cpu protocol reads the shared data; its spec names the paths it will need.
    let cpu = StudySpec::protocol(Protocol::Cpu, std::path::Path::new("/nope")).unwrap();
    let Corpus::Text { path, .. } = &cpu.corpus.source else {
        panic!(
            "the cpu protocol reads a text corpus: {:?}",
            cpu.corpus.source
        )
    };
    assert!(path.starts_with("/nope/"), "{}", path.display());
}
