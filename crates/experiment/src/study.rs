//! A two-tower study: several runs (styles × seeds) on one corpus, each scored on its style's
//! fixed scoring set (the run stage), then the analysis units over the scored runs (`units`:
//! pairs with the noise ceiling, runs and POS, controls, word pieces, word groups, the agreement
//! curve), their tables, figures and a JSON summary written to one folder.

use std::path::Path;

use towers::Style;

use crate::error::{io_at, write_json_atomic};
pub use crate::protocol::{Protocol, StudySpec};
use crate::record::STUDY_DATA_DIR;
use crate::run::{RunOptions, ScoredRun};
use crate::scoring::ScoringSet;
use crate::spec::RunSpec;
pub use crate::tables::StudyRun;
pub use crate::units::{kind_name, StudyOutcome, WordGroupSummary};
use crate::units::{StudyContext, UNITS};
use crate::workspace::Workspace;
use crate::{ExperimentError, Result};

/// Runs (or resumes, or reuses) every run of `spec` whose label is in `only` (all when
/// empty) under `out/<label>/`, then writes the tables and figures over those runs: to `out/`
/// when they are all the study's runs, else to `out/subset-<label>+<label>.../` (so a study
/// can be run and read in parts). A label in `only` that is not a run of the study is an error.
/// With [`RunOptions::stop_at_snapshot`] the runs not finished yet stop at that snapshot of
/// phase 1 and the call ends with [`ExperimentError::StoppedAtSnapshot`], no tables written.
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
    let complete = runs.len() == spec.runs.len();
    let tables = match complete {
        true => out.to_path_buf(),
        false => {
            let names: Vec<&str> = runs.iter().map(|r| r.label.as_str()).collect();
            out.join(format!("subset-{}", names.join("+")))
        }
    };
    std::fs::create_dir_all(&tables).map_err(io_at(&tables))?;
    let ctx = StudyContext::new(spec, ws.data(), &runs, &tables, &opts.progress)?;
    let mut outcome = StudyOutcome::new(complete, tables.clone());
    for (_, unit) in UNITS {
        unit(&ctx, &mut outcome)?;
    }
    write_json_atomic(&tables.join("study.json"), &outcome)?;
    Ok(outcome)
}

/// Where each run of `spec` whose label is in `only` (all when empty) stands under
/// `out/<label>/` ([`crate::status::run_status`]), in the study's order: nothing is trained,
/// locked or written, so it may run beside the processes that train them.
pub fn study_status(
    spec: &StudySpec,
    out: &Path,
    only: &[String],
) -> Result<Vec<crate::status::RunStatus>> {
    check_labels(spec, only)?;
    spec.runs
        .iter()
        .map(RunSpec::label)
        .filter(|l| only.is_empty() || only.contains(l))
        .map(|l| crate::status::run_status(&l, &out.join(&l)))
        .collect()
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
/// `out/<label>/` and scored on its style's scoring set (built once per style in `out/data/`);
/// runs stopped at a snapshot as asked ([`RunOptions::stop_at_snapshot`]) are named together
/// once the others have had their turn.
fn run_stage(
    spec: &StudySpec,
    out: &Path,
    only: &[String],
    ws: &Workspace,
    opts: &RunOptions,
) -> Result<Vec<ScoredRun>> {
    let mut scored = Vec::new();
    let mut sets: Vec<ScoringSet> = Vec::new();
    let (mut stopped, mut at) = (Vec::new(), 0);
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
        match ws.ensure_run(r, &out.join(&label), set, opts) {
            Ok(run) => scored.push(run),
            // Asked to stop there: the next runs still go to their own snapshot.
            Err(ExperimentError::StoppedAtSnapshot { runs, snapshot }) => {
                stopped.extend(runs);
                at = snapshot;
            }
            Err(e) => return Err(e),
        }
    }
    match stopped.is_empty() {
        true => Ok(scored),
        false => Err(ExperimentError::StoppedAtSnapshot {
            runs: stopped,
            snapshot: at,
        }),
    }
}

fn set_of(sets: &[ScoringSet], style: Style) -> Result<&ScoringSet> {
    sets.iter()
        .find(|s| s.id.style == style)
        .ok_or_else(|| ExperimentError::Mismatch {
            run: format!("a {style} run"),
            data: "the study's scoring sets".into(),
            why: "no set was cut for its style".into(),
        })
}
