//! The ICA word groups of one run (Table 3, Figs. 5–7, in `ica_<label>/`), when the study names
//! a run for them, scored on every run of the study (`table3_by_run`,
//! `table3_rank_agreement`). Reads the run's trained embedding.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{Analysis, Input, Outputs, StudyContext};
use crate::analysis::RunScores;
use crate::error::Result;
use crate::groups::{
    groups_by_run, groups_by_run_tables, word_groups, write_word_groups, GroupsByRun, IcaGroups,
};

/// The word-groups unit (`word_groups` in `study.json`).
#[derive(Debug, Clone, Copy, Default)]
pub struct WordGroups;

/// The cluster statistics of a study's ICA word groups.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WordGroupSummary {
    /// The run.
    pub label: String,
    /// PCA dimension.
    pub dim: usize,
    /// Whether the ICA met its convergence rule.
    pub converged: bool,
    /// Steps the ICA took.
    pub steps: usize,
    /// Its final off-diagonal residual.
    pub residual: f64,
    /// Share of source values in [−1, 1] (paper: 80%).
    pub within_unit: f64,
    /// Share of words in no cluster.
    pub none: f64,
    /// Share of words in exactly one cluster.
    pub exactly_one: f64,
    /// Mean clusters per word.
    pub mean: f64,
}

/// The word groups of one run with the words they were found among and their means on every
/// run of the study; `study.json` holds the summary (the sources are a matrix over the words).
#[derive(Serialize)]
pub struct GroupAnalysis {
    /// The cluster statistics (paper: 13% of words in no cluster, 45% in exactly one, 1.45 per
    /// word).
    #[serde(flatten)]
    pub summary: WordGroupSummary,
    /// The groups (Table 3).
    #[serde(skip)]
    pub groups: IcaGroups,
    /// The analysed words, most frequent first.
    #[serde(skip)]
    pub tokens: Vec<u32>,
    /// The groups scored on every run of the study.
    #[serde(skip)]
    pub by_run: GroupsByRun,
}

impl Analysis for WordGroups {
    type Output = GroupAnalysis;

    fn name(&self) -> &str {
        "word_groups"
    }

    fn needs(&self) -> &[Input] {
        &[Input::Vocabulary, Input::Corpus, Input::Weights]
    }

    fn compute(&self, ctx: &StudyContext<'_>, _: &Outputs) -> Result<Option<GroupAnalysis>> {
        let Some((label, settings)) = &ctx.spec.word_groups else {
            return Ok(None);
        };
        let (Some(run), Some((_, rs))) = (ctx.runs.iter().find(|r| &r.label == label), ctx.main())
        else {
            return Ok(None);
        };
        let (g, tokens) = word_groups(run, ctx.data(self.name())?, settings)?;
        let runs: Vec<&RunScores> = rs.iter().collect();
        let by_run = groups_by_run(&g.groups, &runs, &tokens)?;
        let summary = WordGroupSummary {
            label: label.clone(),
            dim: g.dim,
            converged: g.ica.converged,
            steps: g.ica.steps,
            residual: g.ica.residual,
            within_unit: g.within_unit,
            none: g.counts.none,
            exactly_one: g.counts.exactly_one,
            mean: g.counts.mean,
        };
        Ok(Some(GroupAnalysis {
            summary,
            groups: g,
            tokens,
            by_run,
        }))
    }

    fn write(
        &self,
        ga: &GroupAnalysis,
        ctx: &StudyContext<'_>,
        _: &Outputs,
        files: &mut Vec<PathBuf>,
    ) -> Result<()> {
        let Some((_, settings)) = &ctx.spec.word_groups else {
            return Ok(());
        };
        let dir = ctx.out.join(format!("ica_{}", ga.summary.label));
        let data = ctx.data(self.name())?;
        let written = write_word_groups(&ga.groups, &ga.tokens, data, settings, &dir)?;
        let (t, r) = groups_by_run_tables(&ga.groups.groups, &ga.by_run);
        files.extend(t.write_all(&dir, "table3_by_run")?);
        files.extend(r.write_all(&dir, "table3_rank_agreement")?);
        files.extend(written.table3.into_iter().chain(written.fit));
        files.extend(
            [written.fig5, written.fig6, written.trajectory, written.fig7]
                .into_iter()
                .filter(|f| f.is_file()),
        );
        Ok(())
    }
}
