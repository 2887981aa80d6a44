//! How the preference emerged during phase 1 (`emergence`, its figures): the agreement curve
//! over the runs' phase-1 snapshots, when the study asks for it.

use std::path::PathBuf;

use super::{Analysis, Input, Outputs, StudyContext};
use crate::emergence::{emergence, write_emergence, Emergence};
use crate::error::Result;

/// The emergence unit (`emergence` in `study.json`); its output is an [`Emergence`].
#[derive(Debug, Clone, Copy, Default)]
pub struct EmergenceCurve;

impl Analysis for EmergenceCurve {
    type Output = Emergence;

    fn name(&self) -> &str {
        "emergence"
    }

    fn needs(&self) -> &[Input] {
        &[Input::Vocabulary, Input::Corpus]
    }

    fn compute(&self, ctx: &StudyContext<'_>, _: &Outputs) -> Result<Option<Emergence>> {
        let Some(es) = &ctx.spec.emergence else {
            return Ok(None);
        };
        let models = (ctx.runs.iter()).map(|r| r.manifest.spec.model_name());
        if !models.into_iter().any(|m| es.models.contains(&m)) {
            return Ok(None);
        }
        let freq = &ctx.data(self.name())?.freq;
        Ok(Some(emergence(ctx.runs, freq, es, &ctx.copts)?))
    }

    fn write(
        &self,
        e: &Emergence,
        ctx: &StudyContext<'_>,
        _: &Outputs,
        files: &mut Vec<PathBuf>,
    ) -> Result<()> {
        files.extend(write_emergence(e, ctx.out)?);
        Ok(())
    }
}
