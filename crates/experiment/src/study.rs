//! A two-tower study: several runs (styles × seeds) on one corpus, each scored on its style's
//! fixed scoring set (the run stage), then the analysis units over the scored runs (`units`:
//! pairs with the noise ceiling, runs and POS, controls, word pieces, word groups, the agreement
//! curve) computed from the loaded scores ([`StudyContext::compute`]) and then written as
//! tables, figures and a JSON summary into one folder ([`StudyContext::write`]).

use std::path::Path;

use towers::Style;

use crate::data::CorpusData;
use crate::error::{io_at, write_json_atomic};
use crate::manifest::STUDY_DATA_DIR;
use crate::progress::Progress;
pub use crate::protocol::{Protocol, StudySpec};
use crate::run::{RunOptions, ScoredRun};
use crate::scoring::ScoringSet;
use crate::spec::RunSpec;
pub use crate::tables::StudyRun;
pub use crate::units::{
    kind_name, Analysis, GroupAnalysis, StudyContext, StudyOutcome, WordGroupSummary,
};
use crate::workspace::Workspace;
use crate::{ExperimentError, Result};

/// Runs (or resumes, or reuses) every run of `spec` whose label is in `only` (all when
/// empty) under `out/<label>/`, then writes the tables and figures over those runs
/// ([`analyze_with`]): to `out/` when they are all the study's runs, else to
/// `out/subset-<label>+<label>.../` (so a study can be run and read in parts). A label in
/// `only` that is not a run of the study is an error.
pub fn run_study(
    spec: &StudySpec,
    out: &Path,
    only: &[String],
    opts: &RunOptions,
) -> Result<StudyOutcome> {
    check_labels(spec, only)?;
    std::fs::create_dir_all(out).map_err(io_at(out))?;
    let ws = Workspace::open(&spec.corpus, out.join(STUDY_DATA_DIR))?;
    let runs = run_stage(spec, out, only, &ws, opts)?;
    let tables = match runs.len() == spec.runs.len() {
        true => out.to_path_buf(),
        false => {
            let names: Vec<&str> = runs.iter().map(|r| r.label.as_str()).collect();
            out.join(format!("subset-{}", names.join("+")))
        }
    };
    analyze_with(spec, ws.data(), &runs, &tables, &opts.progress)
}

/// Every table and figure of `spec`'s analyses over the finished runs `runs` (loaded with
/// [`ScoredRun::load`] from any folders), written to `out` with a JSON summary
/// (`study.json`). The runs' corpus is read again from their manifests (the synthetic corpus
/// regenerated, a text corpus read from its path) with the vocabulary each run folder carries,
/// into `out/data/`; nothing is trained.
pub fn analyze(
    spec: &StudySpec,
    runs: &[ScoredRun],
    out: &Path,
    progress: &Progress,
) -> Result<StudyOutcome> {
    let data = CorpusData::for_runs(runs, &out.join(STUDY_DATA_DIR))?;
    analyze_with(spec, &data, runs, out, progress)
}

/// [`analyze`] over runs of the corpus `data`.
fn analyze_with(
    spec: &StudySpec,
    data: &CorpusData,
    runs: &[ScoredRun],
    out: &Path,
    progress: &Progress,
) -> Result<StudyOutcome> {
    check_distinct(runs)?;
    std::fs::create_dir_all(out).map_err(io_at(out))?;
    let ctx = StudyContext::new(spec, data, runs, out, progress)?;
    let complete = spec
        .runs
        .iter()
        .all(|r| runs.iter().any(|s| s.label == r.label()));
    let mut analysis = ctx.compute(complete)?;
    ctx.write(&mut analysis)?;
    write_json_atomic(&out.join("study.json"), &analysis.outcome)?;
    Ok(analysis.outcome)
}

/// No two runs of an analysis share a label (the tables name runs by it).
fn check_distinct(runs: &[ScoredRun]) -> Result<()> {
    let dup =
        (runs.iter().enumerate()).find(|(i, r)| runs[..*i].iter().any(|s| s.label == r.label));
    match dup {
        Some((_, r)) => Err(ExperimentError::DuplicateRun(r.label.clone())),
        None => Ok(()),
    }
}

/// Labels are unique, and every label of `only` is a run of the study.
pub(crate) fn check_labels(spec: &StudySpec, only: &[String]) -> Result<()> {
    let labels: Vec<String> = spec.runs.iter().map(RunSpec::label).collect();
    if let Some(dup) = labels
        .iter()
        .enumerate()
        .find(|(i, l)| labels[..*i].contains(l))
    {
        return Err(ExperimentError::DuplicateRun(dup.1.clone()));
    }
    if let Some(bad) = only.iter().find(|l| !labels.contains(l)) {
        return Err(ExperimentError::UnknownRun {
            label: bad.clone(),
            runs: labels,
        });
    }
    Ok(())
}

/// The run stage: each run of `only` (all when empty) trained, resumed or reused in
/// `out/<label>/` and scored on its style's scoring set (built once per style in `out/data/`).
fn run_stage(
    spec: &StudySpec,
    out: &Path,
    only: &[String],
    ws: &Workspace,
    opts: &RunOptions,
) -> Result<Vec<ScoredRun>> {
    let mut scored = Vec::new();
    let mut sets: Vec<ScoringSet> = Vec::new();
    for r in &spec.runs {
        let label = r.label();
        if !only.is_empty() && !only.contains(&label) {
            continue;
        }
        if !sets.iter().any(|s| s.id.style == r.style) {
            let set = ws.scoring_set(r.style, &spec.scoring)?;
            opts.progress.say(|| {
                format!(
                    "{label}: scoring set {} ({} positions)",
                    set.id.short(),
                    set.id.positions
                )
            });
            sets.push(set);
        }
        let set = set_of(&sets, r.style)?;
        scored.push(ws.ensure_run(r, &out.join(&label), set, opts)?);
    }
    Ok(scored)
}

fn set_of(sets: &[ScoringSet], style: Style) -> Result<&ScoringSet> {
    sets.iter().find(|s| s.id.style == style).ok_or_else(|| {
        ExperimentError::mismatch(
            format!("a {style} run"),
            "the study's scoring sets",
            "no set was cut for its style",
        )
    })
}
