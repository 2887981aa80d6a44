//! A two-tower study: several runs (styles × seeds) on one corpus, each scored on its style's
//! fixed scoring set (the run stage), then a list of analyses ([`crate::units`]: the built-ins
//! and any of the caller's own) computed from the loaded scores ([`StudyContext::compute`]) and
//! then written as tables, figures and a JSON summary into one folder
//! ([`StudyContext::write`]).

use std::path::Path;

use towers::Style;

use report::Progress;

use crate::data::CorpusData;
use crate::disk::write_json_atomic;
use crate::error::{io_at, ExperimentError, Result};
use crate::manifest::{MANIFEST_FILE, STUDY_DATA_DIR};
pub use crate::protocol::{Protocol, StudySpec};
use crate::run::{RunOptions, ScoredRun};
use crate::scoring::ScoringSet;
use crate::snapshots::load_snapshots;
use crate::spec::RunSpec;
pub use crate::tables::StudyRun;
pub use crate::units::{builtin, StudyContext, StudyOutcome, Unit};
use crate::workspace::Workspace;

/// Runs (or resumes, or reuses) the jobs of `spec` that `only` names ([`Job`]: all of them
/// when empty, every run's job and then its snapshots' jobs) under `out/<label>/`, then writes
/// the built-in analyses' tables and figures over the runs they touched (as [`analyze`] does,
/// [`builtin`]): to `out/` when they
/// are all the study's runs, else to `out/subset-<label>+<label>.../` (so a study can be run
/// and read in parts). A job in `only` that is not one of the study's is an error.
pub fn run_study(
    spec: &StudySpec,
    out: &Path,
    only: &[String],
    opts: &RunOptions,
) -> Result<StudyOutcome> {
    let jobs = check_labels(spec, only)?;
    std::fs::create_dir_all(out).map_err(io_at(out))?;
    let ws = Workspace::open(&spec.corpus, out.join(STUDY_DATA_DIR))?;
    let runs = run_stage(spec, out, jobs.as_deref(), &ws, opts)?;
    let tables = match runs.len() == spec.runs.len() {
        true => out.to_path_buf(),
        false => {
            let names: Vec<&str> = runs.iter().map(|r| r.label.as_str()).collect();
            out.join(format!("subset-{}", names.join("+")))
        }
    };
    analyze_with(
        spec,
        Some(ws.data()),
        &runs,
        &builtin(),
        &tables,
        &opts.progress,
    )
}

/// The analyses `units` (e.g. [`builtin`], with units of the caller's own pushed on) of
/// `spec` over the finished runs `runs` (loaded with [`ScoredRun::load`] from any folders),
/// their tables and figures written to `out` with a JSON summary (`study.json`: each unit's
/// output by name). The runs' corpus is read again from their manifests (the synthetic corpus
/// regenerated, a text corpus read from its path) with the vocabulary each run folder carries,
/// into `out/data/`; nothing is trained.
///
/// A unit whose inputs are missing is left out ([`crate::units::Input`]; e.g. a run folder
/// copied without its vocabulary or checkpoints): the outcome lists it with the reason, said
/// in one line through `progress`, and the units that need only the scores run.
pub fn analyze(
    spec: &StudySpec,
    runs: &[ScoredRun],
    units: &[Box<dyn Unit + '_>],
    out: &Path,
    progress: &Progress,
) -> Result<StudyOutcome> {
    let data = match crate::units::corpus_readable(runs) {
        true => Some(CorpusData::for_runs(runs, &out.join(STUDY_DATA_DIR))?),
        false => None,
    };
    analyze_with(spec, data.as_ref(), runs, units, out, progress)
}

/// [`analyze`] over runs of the corpus `data` (`None`: not readable).
fn analyze_with(
    spec: &StudySpec,
    data: Option<&CorpusData>,
    runs: &[ScoredRun],
    units: &[Box<dyn Unit + '_>],
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
    let mut outcome = ctx.compute(units, complete)?;
    ctx.write(units, &mut outcome)?;
    write_json_atomic(&out.join("study.json"), &outcome)?;
    Ok(outcome)
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

/// One job of a study, as `--only` names it: a run (`<label>`, e.g. `gpt-s0`), or the heads of
/// one of its phase-1 snapshots (`<label>@<fraction>`, e.g. `gpt-s0@0.5`;
/// [`Workspace::ensure_snapshot`]), which needs the run finished.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// The run's label.
    pub run: String,
    /// The fraction of phase 1 of the snapshot, for a snapshot's job.
    pub snapshot: Option<f64>,
}

impl Job {
    /// The job of `s` (`<label>` or `<label>@<fraction>`) in `spec`, or an error naming the
    /// study's runs or the run's snapshots.
    fn parse(s: &str, spec: &StudySpec, labels: &[String]) -> Result<Self> {
        let (label, fraction) = s.split_once('@').map_or((s, None), |(l, f)| (l, Some(f)));
        let Some(run) = spec.runs.iter().find(|r| r.label() == label) else {
            return Err(ExperimentError::UnknownRun {
                label: label.into(),
                runs: labels.to_vec(),
            });
        };
        let snaps = &run.phase1.snapshots;
        let snapshot = match fraction.map(str::parse::<f64>) {
            None => None,
            Some(Ok(f)) if snaps.contains(&f) => Some(f),
            Some(_) => {
                let why = format!("{label} has snapshots at {snaps:?} of phase 1");
                return Err(ExperimentError::bad_setting("a snapshot job", s, why));
            }
        };
        let run = label.to_string();
        Ok(Job { run, snapshot })
    }
}

/// Labels are unique, and every job of `only` is one of the study's; `None` for every job
/// (`only` empty).
pub(crate) fn check_labels(spec: &StudySpec, only: &[String]) -> Result<Option<Vec<Job>>> {
    let labels: Vec<String> = spec.runs.iter().map(RunSpec::label).collect();
    if let Some(dup) = labels
        .iter()
        .enumerate()
        .find(|(i, l)| labels[..*i].contains(l))
    {
        return Err(ExperimentError::DuplicateRun(dup.1.clone()));
    }
    match only.is_empty() {
        true => Ok(None),
        false => Some(only.iter().map(|s| Job::parse(s, spec, &labels)).collect()).transpose(),
    }
}

/// The run stage: the jobs of `jobs` (all when `None`) in spec order, each run's folder
/// `out/<label>/`: its run job trained, resumed or reused and scored on its style's scoring
/// set (built once per style in `out/data/`), then its snapshot jobs; the runs touched are
/// given back.
fn run_stage(
    spec: &StudySpec,
    out: &Path,
    jobs: Option<&[Job]>,
    ws: &Workspace,
    opts: &RunOptions,
) -> Result<Vec<ScoredRun>> {
    let mut scored = Vec::new();
    let mut sets: Vec<ScoringSet> = Vec::new();
    for r in &spec.runs {
        let label = r.label();
        let mine: Vec<&Job> = (jobs.unwrap_or_default().iter())
            .filter(|j| j.run == label)
            .collect();
        if jobs.is_some() && mine.is_empty() {
            continue;
        }
        let key = r.style.scoring_style()?;
        if !sets.iter().any(|s| s.id.style == key) {
            let set = ws.scoring_set(&r.style, &spec.scoring)?;
            opts.progress.say(|| {
                format!(
                    "{label}: scoring set {} ({} positions)",
                    set.id.short(),
                    set.id.positions
                )
            });
            sets.push(set);
        }
        let (set, dir) = (set_of(&sets, &key)?, out.join(&label));
        let mut run = match jobs.is_none() || mine.iter().any(|j| j.snapshot.is_none()) {
            true => ws.ensure_run(r, &dir, set, opts)?,
            false if dir.join(MANIFEST_FILE).is_file() => ScoredRun::load(&dir)?,
            false => {
                return Err(ExperimentError::Unfinished {
                    runs: vec![format!("{label} (not started)")],
                    total: 1,
                })
            }
        };
        let asked: Vec<f64> = match jobs {
            None => run.result()?.snapshots.iter().map(|s| s.fraction).collect(),
            Some(_) => mine.iter().filter_map(|j| j.snapshot).collect(),
        };
        // A snapshot the run loaded with its folder has finished: nothing to run or read again.
        let fractions: Vec<f64> = (asked.into_iter())
            .filter(|f| !run.snapshots.iter().any(|s| s.fraction == *f))
            .collect();
        for f in &fractions {
            ws.ensure_snapshot(&dir, *f, set, opts)?;
        }
        if !fractions.is_empty() {
            run.snapshots = load_snapshots(&run.manifest, &dir)?;
        }
        scored.push(run);
    }
    Ok(scored)
}

fn set_of<'a>(sets: &'a [ScoringSet], style: &Style) -> Result<&'a ScoringSet> {
    sets.iter().find(|s| s.id.style == *style).ok_or_else(|| {
        ExperimentError::mismatch(
            format!("a {style} run"),
            "the study's scoring sets",
            "no set was cut for its style",
        )
    })
}
