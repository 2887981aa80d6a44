//! Finished runs compared wherever their folders lie: the pair statistics of a study's Table 2
//! ([`crate::analysis::compare_runs`]) for runs that no one study holds, e.g. one spec trained on two machines
//! (the same label in two output folders), or runs of two studies.
//!
//! Nothing is trained: a folder that has not finished is [`ExperimentError::Unfinished`]. The
//! runs must share one corpus (the token frequencies come from its training text) and one
//! scoring set ([`ExperimentError::ScoringSetMismatch`] otherwise).

use std::path::{Path, PathBuf};

use prefscore::{CorrOptions, ScoreKind};

use crate::analysis::{compare_all, PairComparison, RunScores, TokenSelection};
use crate::run::{check_finished, open_run, require_run_folder, RunOptions};
use crate::tables::write_pairs;
use crate::{CorpusData, ExperimentError, Progress, Result};

/// A finished run folder under the name it is compared by (its label in the tables).
#[derive(Debug, Clone)]
pub struct NamedRun {
    /// The name in the tables (unique among the runs compared).
    pub name: String,
    /// The run's folder (with `run.json` and its scores).
    pub dir: PathBuf,
}

impl NamedRun {
    /// `dir` under the name `<parent folder>/<run folder>`, e.g. `cpu-paper/gpt-s0`.
    pub fn from_dir(dir: impl Into<PathBuf>) -> Self {
        let dir = dir.into();
        let part = |p: Option<&Path>| {
            p.and_then(|p| p.file_name())
                .map(|n| n.to_string_lossy().into_owned())
        };
        let name = match (part(dir.parent()), part(Some(&dir))) {
            (Some(parent), Some(run)) => format!("{parent}/{run}"),
            (None, Some(run)) => run,
            _ => dir.display().to_string(),
        };
        Self { name, dir }
    }
}

/// What [`compare_run_folders`] found and wrote.
#[derive(Debug, Clone)]
pub struct FolderComparison {
    /// Every pair under every selection, in the order of the runs given.
    pub pairs: Vec<PairComparison>,
    /// The tables (`pairs_<score>_<selection>.{md,csv,json}`) and matrix figures written.
    pub outputs: Vec<PathBuf>,
}

/// Compares every pair of the finished runs `runs` under each token selection in
/// `selections` and the score `kind` (eq. 4 for `ArithmeticMean`), with `resamples`
/// bootstrap resamples and permutations, as a study's pairs unit does; writes the pair
/// tables and the Table 2 matrix figure of each selection into `out`. Refused: fewer than two
/// runs, a name given twice, a folder that is not there or holds no `run.json`, an unfinished
/// run (each named with why), and runs of another corpus.
pub fn compare_run_folders(
    runs: &[NamedRun],
    selections: &[TokenSelection],
    kind: ScoreKind,
    resamples: usize,
    out: &Path,
    progress: &Progress,
) -> Result<FolderComparison> {
    if runs.len() < 2 {
        return Err(ExperimentError::too_little(
            "the runs to compare",
            runs.len(),
            2,
        ));
    }
    for (i, r) in runs.iter().enumerate() {
        if runs[..i].iter().any(|o| o.name == r.name) {
            return Err(ExperimentError::DuplicateRun(r.name.clone()));
        }
    }
    // Folders named by hand: a typo is a missing folder, not a run that never started.
    for r in runs {
        if !r.dir.is_dir() {
            return Err(ExperimentError::Missing {
                path: r.dir.clone(),
                what: format!("the run folder of {}", r.name),
            });
        }
        require_run_folder(&r.dir)?;
    }
    let named: Vec<_> = runs
        .iter()
        .map(|r| (r.name.clone(), r.dir.clone()))
        .collect();
    // The comparison reads the runs' scores, not their curves.
    check_finished(&named, false)?;
    let opts = RunOptions {
        progress: Progress::silent(),
        snapshot_heads: false,
        ..RunOptions::default()
    };
    let open = |r: &NamedRun| -> Result<(CorpusData, RunScores)> {
        progress.say(|| format!("reading {} ({})", r.name, r.dir.display()));
        let (data, run) = open_run(&r.dir, &opts)?;
        let mut s = RunScores::new(&run, kind)?;
        s.label = r.name.clone();
        Ok((data, s))
    };
    let (data, first) = open(&runs[0])?;
    let mut scores = vec![first];
    for r in &runs[1..] {
        let (d, s) = open(r)?;
        if d.freq != data.freq {
            return Err(ExperimentError::Mismatch {
                run: r.name.clone(),
                data: runs[0].name.clone(),
                why: "trained on another corpus (the token frequencies differ)".into(),
            });
        }
        scores.push(s);
    }
    let freq = &data.freq;
    let copts = CorrOptions::with_resamples(resamples);
    std::fs::create_dir_all(out).map_err(crate::error::io_at(out))?;
    let labels: Vec<String> = runs.iter().map(|r| r.name.clone()).collect();
    let kname = crate::units::kind_name(kind);
    let (mut pairs, mut outputs) = (Vec::new(), Vec::new());
    for &sel in selections {
        let these = compare_all(&scores, freq, sel, kind, &copts)?;
        let (t, files) = write_pairs(&these, &labels, kname, sel, out)?;
        progress.say(|| t.to_markdown());
        outputs.extend(files);
        pairs.extend(these);
    }
    Ok(FolderComparison { pairs, outputs })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_named_by_its_study_folder_and_its_own() {
        assert_eq!(
            NamedRun::from_dir("/r/gpu-twin/gpt-s0").name,
            "gpu-twin/gpt-s0"
        );
        assert_eq!(NamedRun::from_dir("gpt-s0").name, "gpt-s0");
    }
}
