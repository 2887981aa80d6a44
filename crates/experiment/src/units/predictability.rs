//! Predictability across pairs (`controls_predictability_pairs`): how alike two runs'
//! per-token predictabilities are beside how alike their scores are (top tokens, first score
//! kind).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::pairs::RunPairs;
use super::{Analysis, Input, Outputs, StudyContext};
use crate::controls::{
    predictability_pairs, predictability_pairs_table, scored_predictability, PredictabilityPair,
};
use crate::error::Result;

/// The predictability unit (`predictability` in `study.json`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Predictability;

/// One row per pair of the top-token pairs.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PredictabilityPairs(pub Vec<PredictabilityPair>);

impl Analysis for Predictability {
    type Output = PredictabilityPairs;

    fn name(&self) -> &str {
        "predictability"
    }

    fn needs(&self) -> &[Input] {
        &[Input::Vocabulary, Input::Corpus]
    }

    fn compute(
        &self,
        ctx: &StudyContext<'_>,
        earlier: &Outputs,
    ) -> Result<Option<PredictabilityPairs>> {
        let Some((kind, rs)) = ctx.main() else {
            return Ok(None);
        };
        let top = ctx.top(self.name())?;
        let pairs = earlier.require::<RunPairs>(self.name(), "pairs")?;
        let preds = (rs.iter())
            .map(scored_predictability)
            .collect::<Result<Vec<_>>>()?;
        let top_pairs = pairs.of(kind, top.selection());
        let rows = predictability_pairs(&ctx.labels(), &preds, top_pairs, top)?;
        Ok(Some(PredictabilityPairs(rows)))
    }

    fn write(
        &self,
        o: &PredictabilityPairs,
        ctx: &StudyContext<'_>,
        _: &Outputs,
        files: &mut Vec<PathBuf>,
    ) -> Result<()> {
        if !o.0.is_empty() {
            let t = predictability_pairs_table(&o.0);
            files.extend(t.write_all(ctx.out, "controls_predictability_pairs")?);
        }
        Ok(())
    }
}
