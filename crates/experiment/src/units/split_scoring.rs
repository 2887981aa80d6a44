//! The split-scoring control (`controls_split_scoring`, `fig_split_scoring.png`): each pair's
//! agreement with each tower scored on its own half of the text, both deals (top tokens, first
//! score kind).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::pairs::RunPairs;
use super::{Analysis, Input, Outputs, StudyContext, TOP_TOKENS};
use crate::error::Result;
use crate::split_scoring::{
    split_scoring_figure, split_scoring_pairs, split_scoring_table, Deal, SplitScoringPair,
};

/// The split-scoring unit (`split_scoring` in `study.json`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SplitScoring;

/// One row per pair and deal.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SplitScoringPairs(pub Vec<SplitScoringPair>);

impl Analysis for SplitScoring {
    type Output = SplitScoringPairs;

    fn name(&self) -> &str {
        "split_scoring"
    }

    fn needs(&self) -> &[Input] {
        &[Input::Vocabulary, Input::Corpus]
    }

    fn compute(
        &self,
        ctx: &StudyContext<'_>,
        earlier: &Outputs,
    ) -> Result<Option<SplitScoringPairs>> {
        let Some((kind, rs)) = ctx.main() else {
            return Ok(None);
        };
        let top = ctx.top(self.name())?;
        let pairs = earlier.require::<RunPairs>(self.name(), "pairs")?;
        let top_pairs = pairs.of(kind, top.selection());
        let mut rows = Vec::new();
        for deal in Deal::BOTH {
            rows.extend(split_scoring_pairs(rs, top_pairs, top, deal)?);
        }
        Ok(Some(SplitScoringPairs(rows)))
    }

    fn write(
        &self,
        o: &SplitScoringPairs,
        ctx: &StudyContext<'_>,
        _: &Outputs,
        files: &mut Vec<PathBuf>,
    ) -> Result<()> {
        let (Some((_, rs)), Some(first)) = (ctx.main(), o.0.first()) else {
            return Ok(());
        };
        let out = ctx.out;
        let t = split_scoring_table(&o.0, TOP_TOKENS);
        files.extend(t.write_all(out, "controls_split_scoring")?);
        // The figure for the first pair of one model (seeds), else the first pair.
        let same = |p: &&SplitScoringPair| {
            let model = |l: &str| rs.iter().find(|r| r.label == l).map(|r| &r.model);
            model(&p.a) == model(&p.b)
        };
        let p = o.0.iter().find(same).unwrap_or(first);
        let fig = out.join("fig_split_scoring.png");
        let deals: Vec<(Deal, usize)> = (o.0.iter())
            .filter(|q| (&q.a, &q.b) == (&p.a, &p.b))
            .map(|q| (q.deal, q.blocks))
            .collect();
        split_scoring_figure(rs, &p.a, &p.b, &deals, ctx.top(self.name())?, &fig)?;
        files.push(fig);
        Ok(())
    }
}
