//! The agreement curve so far: the emergence analysis ([`crate::emergence`]) over the phase-1
//! snapshots that a study's runs have written up to now, while their phase 1 goes on.
//!
//! A run's snapshots (e.g. at 1/8, 1/4, 1/2 of phase 1) are written long before it finishes,
//! but the run stage trains their heads only after its own heads: a full-BiLSTM run on a
//! 2-core CPU shows its first point hours after the weights were there. Here the heads of every
//! snapshot written so far are trained in this process, beside the processes training the
//! runs (nothing of phase 1 is touched or locked), into the run folders' cache
//! (`<run>/emergence/step-N/`, one writer per snapshot), so the finished runs read them back
//! instead of training them again. Runs that have finished add their end point. The tables and
//! figures are those of the study's curve, in `<out>/curve-so-far-<labels>/`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::emergence::{
    curve_emergence, finished_curve, snapshot_points, write_emergence, Emergence, RunCurve,
};
use crate::error::{io_at, read_json, write_json_atomic};
use crate::protocol::StudySpec;
use crate::record::{RunOptions, RunRecord, RUN_FILE, STUDY_DATA_DIR};
use crate::run::{finished, read_finished};
use crate::snapshots::{record_snapshot_scores, written_snapshot_scores};
use crate::spec::{require_same, RunSpec};
use crate::study::check_labels;
use crate::workspace::Workspace;
use crate::{ExperimentError, Result, ScoringSet};

/// Which points the curve so far takes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CurvePoints {
    /// Every snapshot written so far, its heads trained here where they are not scored yet.
    Train,
    /// The heads of these snapshots (1 = the spec's first) trained here where they are written
    /// and not scored yet; the others taken only where scored already (after a loss, the
    /// missing points before those already known).
    TrainOnly(Vec<usize>),
    /// Only the snapshots whose heads are scored already: nothing is trained (a look at the
    /// curve while other processes train the heads).
    Scored,
}

impl CurvePoints {
    /// Whether the heads of the snapshot at `fraction` of `spec`'s phase 1 are trained here.
    fn trains(&self, spec: &RunSpec, fraction: f64) -> bool {
        match self {
            CurvePoints::Train => true,
            CurvePoints::Scored => false,
            CurvePoints::TrainOnly(ks) => ks
                .iter()
                .any(|&k| k >= 1 && spec.phase1.snapshots.get(k - 1) == Some(&fraction)),
        }
    }

    /// A [`CurvePoints::TrainOnly`] snapshot that `spec` lacks, as an error.
    fn check(&self, spec: &RunSpec) -> Result<()> {
        match self {
            CurvePoints::TrainOnly(ks) => {
                spec.check_snapshot_numbers("snapshots to train", format!("{ks:?}"), ks)
            }
            _ => Ok(()),
        }
    }
}

/// Where one run of the curve stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CurveRun {
    /// `<model>-s<seed>`.
    pub label: String,
    /// The fractions of phase 1 with scored heads (1 = its end, once finished).
    pub fractions: Vec<f64>,
    /// Whether the run has finished.
    pub finished: bool,
}

/// The agreement curve over what the runs have written so far.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CurveSoFar {
    /// The runs asked for, in the study's order, with the points each has.
    pub runs: Vec<CurveRun>,
    /// The emergence analysis over those points.
    pub emergence: Emergence,
    /// The folder of its tables and figures.
    pub tables: PathBuf,
    /// Every file written.
    pub outputs: Vec<PathBuf>,
}

/// The agreement curve of the study `spec` in `out` over the runs of `only` (all the curve's
/// runs when empty) as far as they have got: the heads of every phase-1 snapshot already written
/// are trained (or read from the cache; with [`CurvePoints::Scored`] only those scored already
/// are taken, nothing trained; with [`CurvePoints::TrainOnly`] only the heads of those
/// snapshots are trained), each finished run adds its end, and the emergence
/// tables and figures go to `out/curve-so-far-<label>+<label>.../`. Safe beside the processes
/// training the runs. A run not started or with no snapshot yet has no point (said in
/// [`CurveRun::fractions`]). Errors: no run has a point ([`ExperimentError::TooLittleData`]),
/// the study draws no curve, a label of `only` is not one of the curve's models' runs or a
/// snapshot of [`CurvePoints::TrainOnly`] is not one of theirs
/// ([`ExperimentError::BadSetting`]), a run folder holds another spec
/// ([`ExperimentError::SpecMismatch`]) or was scored on another set
/// ([`ExperimentError::ScoringSetMismatch`]), and a phase 1 brought from another machine with
/// a snapshot that is not its own ([`ExperimentError::BroughtSnapshot`]).
pub fn curve_so_far(
    spec: &StudySpec,
    out: &Path,
    only: &[String],
    opts: &RunOptions,
    points: CurvePoints,
) -> Result<CurveSoFar> {
    check_labels(spec, only)?;
    let es = spec.emergence.as_ref().ok_or_else(|| {
        ExperimentError::bad_setting(
            "emergence",
            "none",
            "this study draws no agreement curve (it was left out, e.g. by --no-emergence)",
        )
    })?;
    let in_curve = |r: &&RunSpec| es.models.contains(&r.model_name());
    if let Some(r) = spec
        .runs
        .iter()
        .filter(|r| only.contains(&r.label()))
        .find(|r| !in_curve(r))
    {
        return Err(ExperimentError::bad_setting(
            "--only",
            r.label(),
            format!(
                "its model is not one of the curve's ({})",
                es.models.join(", ")
            ),
        ));
    }
    let runs: Vec<&RunSpec> = spec
        .runs
        .iter()
        .filter(|r| only.is_empty() || only.contains(&r.label()))
        .filter(in_curve)
        .collect();
    for r in &runs {
        points.check(r)?;
    }
    let none_so_far = |status: &[CurveRun]| {
        ExperimentError::too_little(
            format!(
                "the agreement curve of {} so far (points of phase 1 with heads)",
                status
                    .iter()
                    .map(|s| s.label.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            0,
            1,
        )
    };
    let started = |r: &&RunSpec| out.join(r.label()).join(RUN_FILE).is_file();
    if !runs.iter().any(started) {
        // Nothing to draw: the study's data is not even opened (which could create it).
        let status: Vec<CurveRun> = runs.iter().map(|r| CurveRun::none(r)).collect();
        return Err(none_so_far(&status));
    }
    let ws = Workspace::open(&spec.corpus, out.join(STUDY_DATA_DIR))?;
    let mut sets: Vec<ScoringSet> = Vec::new();
    let (mut curves, mut status) = (Vec::new(), Vec::new());
    for r in runs {
        let curve = match started(&r) {
            true => {
                let i = match sets.iter().position(|s| s.id.style == r.style) {
                    Some(i) => i,
                    None => {
                        // Taking scored points writes nothing: a started run's set is there.
                        sets.push(match points {
                            CurvePoints::Scored => ws.saved_scoring_set(r.style)?,
                            _ => ws.scoring_set(r.style, &spec.scoring)?,
                        });
                        sets.len() - 1
                    }
                };
                let dir = out.join(r.label());
                Some(run_curve(r, &dir, &ws, &sets[i], opts, es.kind, &points)?)
            }
            false => None,
        };
        status.push(CurveRun {
            label: r.label(),
            fractions: curve
                .as_ref()
                .map(|c| c.points.iter().map(|p| p.0).collect())
                .unwrap_or_default(),
            finished: curve.as_ref().is_some_and(|c| c.ended),
        });
        curves.extend(curve.filter(|c| !c.points.is_empty()));
    }
    if curves.is_empty() {
        return Err(none_so_far(&status));
    }
    let copts = prefscore::CorrOptions::with_resamples(spec.resamples);
    let emergence = curve_emergence(&curves, &ws.data().freq, es, &copts)?;
    let names: Vec<&str> = status.iter().map(|s| s.label.as_str()).collect();
    let tables = out.join(format!("curve-so-far-{}", names.join("+")));
    std::fs::create_dir_all(&tables).map_err(io_at(&tables))?;
    let mut outputs = write_emergence(&emergence, &tables)?;
    let json = tables.join("curve_so_far.json");
    outputs.push(json.clone());
    let summary = CurveSoFar {
        runs: status,
        emergence,
        tables,
        outputs,
    };
    write_json_atomic(&json, &summary)?;
    Ok(summary)
}

impl CurveRun {
    /// A run with no point yet.
    fn none(r: &RunSpec) -> Self {
        Self {
            label: r.label(),
            fractions: Vec::new(),
            finished: false,
        }
    }
}

/// The curve of the run `spec` in `dir` so far (its record written). The record must hold this
/// spec and have been scored on `set`'s kind of set.
fn run_curve(
    spec: &RunSpec,
    dir: &Path,
    ws: &Workspace,
    set: &ScoringSet,
    opts: &RunOptions,
    kind: prefscore::ScoreKind,
    points: &CurvePoints,
) -> Result<RunCurve> {
    let record: RunRecord = read_json(&dir.join(RUN_FILE))?;
    require_same(&record.spec, spec, dir)?;
    let here = dir.display().to_string();
    record
        .scoring
        .check_comparable(&set.id, &here, "this study")?;
    let (label, model) = (spec.label(), spec.model_name());
    let data = ws.data();
    let train = |f: f64| points.trains(spec, f);
    if finished(&record, dir) {
        let snaps = record_snapshot_scores(&record, dir, data, set, opts, &train)?;
        let run = read_finished(record, dir, snaps)?;
        return finished_curve(&run, kind);
    }
    let snaps = written_snapshot_scores(&record, dir, data, set, opts, &train)?;
    Ok(RunCurve {
        points: snapshot_points(&label, &model, &record.scoring, &snaps, kind)?,
        label,
        model,
        ended: false,
    })
}
