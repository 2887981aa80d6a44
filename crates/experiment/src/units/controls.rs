//! The per-run controls (`controls`): each run's scores against the frequency rank and its
//! predictability of each token, and the split null beside the seed-to-seed r (first score kind,
//! the top tokens; the same-model r from the first token selection's pairs).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::pairs::RunPairs;
use super::{Analysis, Input, Outputs, StudyContext, NULL_REPLICATES};
use crate::controls::{
    controls_table, run_controls, scored_predictability, ControlSettings, RunControl,
};
use crate::error::Result;

/// The controls unit (`controls` in `study.json`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Controls;

/// One row per run, in run order.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunControls(pub Vec<RunControl>);

impl Analysis for Controls {
    type Output = RunControls;

    fn name(&self) -> &str {
        "controls"
    }

    fn needs(&self) -> &[Input] {
        &[Input::Vocabulary, Input::Corpus]
    }

    fn compute(&self, ctx: &StudyContext<'_>, earlier: &Outputs) -> Result<Option<RunControls>> {
        let Some((kind, rs)) = ctx.main() else {
            return Ok(None);
        };
        let pairs = earlier.require::<RunPairs>(self.name(), "pairs")?;
        let first = match ctx.spec.selections.first() {
            Some(&sel) => pairs.of(kind, sel),
            None => &[],
        };
        let preds = (rs.iter())
            .map(scored_predictability)
            .collect::<Result<Vec<_>>>()?;
        let set = ControlSettings {
            top: ctx.top(self.name())?,
            kind,
            replicates: NULL_REPLICATES,
            opts: &ctx.copts,
        };
        Ok(Some(RunControls(run_controls(rs, &preds, first, &set)?)))
    }

    fn write(
        &self,
        o: &RunControls,
        ctx: &StudyContext<'_>,
        _: &Outputs,
        files: &mut Vec<PathBuf>,
    ) -> Result<()> {
        files.extend(controls_table(&o.0, NULL_REPLICATES).write_all(ctx.out, "controls")?);
        Ok(())
    }
}
