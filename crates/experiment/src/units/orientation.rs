//! Agreement up to orientation (`controls_orientation`): one sign per run that makes the runs
//! agree most, against a null of permuted scores (top tokens, first score kind), when there are
//! at least two pairs and at most [`MAX_RUNS`] runs.

use std::path::PathBuf;

use super::pairs::RunPairs;
use super::{Analysis, Input, Outputs, StudyContext, NULL_REPLICATES, TOP_TOKENS};
use crate::error::Result;
use crate::orientation::{orientation, orientation_table, Orientation, MAX_RUNS};

/// The orientation unit (`orientation` in `study.json`); its output is an [`Orientation`].
#[derive(Debug, Clone, Copy, Default)]
pub struct BestOrientation;

impl Analysis for BestOrientation {
    type Output = Orientation;

    fn name(&self) -> &str {
        "orientation"
    }

    fn needs(&self) -> &[Input] {
        &[Input::Vocabulary, Input::Corpus]
    }

    fn compute(&self, ctx: &StudyContext<'_>, earlier: &Outputs) -> Result<Option<Orientation>> {
        let Some((kind, rs)) = ctx.main() else {
            return Ok(None);
        };
        let top = ctx.top(self.name())?;
        let pairs = earlier.require::<RunPairs>(self.name(), "pairs")?;
        let top_pairs = pairs.of(kind, top.selection());
        if top_pairs.len() < 2 {
            return Ok(None);
        }
        if rs.len() > MAX_RUNS {
            ctx.progress.say(|| {
                format!(
                    "agreement up to orientation skipped: {} runs, the exhaustive search takes \
                     at most {MAX_RUNS} (use --only)",
                    rs.len()
                )
            });
            return Ok(None);
        }
        Ok(Some(orientation(rs, top_pairs, top, NULL_REPLICATES)?))
    }

    fn write(
        &self,
        o: &Orientation,
        ctx: &StudyContext<'_>,
        _: &Outputs,
        files: &mut Vec<PathBuf>,
    ) -> Result<()> {
        let t = orientation_table(o, TOP_TOKENS);
        files.extend(t.write_all(ctx.out, "controls_orientation")?);
        Ok(())
    }
}
