//! Figs. 3 and 8 (`fig3_sorted_scores.png`, `fig8_score_vs_frequency.png`): every run's scores
//! in the order of the first run's, and against the frequency index, over the top tokens scored
//! in every run (first score kind).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{Analysis, Input, Outputs, StudyContext};
use crate::controls::score_figures;
use crate::error::Result;

/// The score-figures unit (`score_figures` in `study.json`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ScoreFigures;

/// What the figures show: the top tokens scored in every run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CommonTokens {
    /// How many tokens.
    pub tokens: usize,
}

impl Analysis for ScoreFigures {
    type Output = CommonTokens;

    fn name(&self) -> &str {
        "score_figures"
    }

    fn needs(&self) -> &[Input] {
        &[Input::Vocabulary, Input::Corpus]
    }

    fn compute(&self, ctx: &StudyContext<'_>, _: &Outputs) -> Result<Option<CommonTokens>> {
        let Some((_, rs)) = ctx.main() else {
            return Ok(None);
        };
        let top = ctx.top(self.name())?;
        let all: Vec<&[Option<f64>]> = rs.iter().map(|r| r.scores.values.as_slice()).collect();
        let tokens = prefscore::top_tokens(top.freq, top.n, &all).len();
        Ok(Some(CommonTokens { tokens }))
    }

    fn write(
        &self,
        _: &CommonTokens,
        ctx: &StudyContext<'_>,
        _: &Outputs,
        files: &mut Vec<PathBuf>,
    ) -> Result<()> {
        let Some((_, rs)) = ctx.main() else {
            return Ok(());
        };
        files.extend(score_figures(rs, ctx.top(self.name())?, ctx.out)?);
        Ok(())
    }
}
