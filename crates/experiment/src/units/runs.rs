//! The runs table (`runs`): each run's heads against the joint head and the unigram model, its
//! share of tokens won by the primary tower, budget, throughput and device. Reads the scores
//! and manifests only.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{Analysis, Outputs, StudyContext};
use crate::error::Result;
use crate::tables::{runs_table, StudyRun};

/// The runs unit (`runs` in `study.json`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Runs;

/// One row per run, in table order.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StudyRuns(pub Vec<StudyRun>);

impl Analysis for Runs {
    type Output = StudyRuns;

    fn name(&self) -> &str {
        "runs"
    }

    fn compute(&self, ctx: &StudyContext<'_>, _: &Outputs) -> Result<Option<StudyRuns>> {
        let Some((_, rs)) = ctx.main() else {
            return Ok(None);
        };
        let mut rows = Vec::new();
        for (r, s) in ctx.runs.iter().zip(rs) {
            let res = r.result()?;
            rows.push(StudyRun {
                label: r.label.clone(),
                dir: r.dir.clone(),
                scoring_fingerprint: r.manifest.scoring.short(),
                positions: res.positions,
                heads: res.heads.clone(),
                retest: res.retest.clone(),
                share_primary: s.share_primary,
                reused: r.reused,
                phase1_tokens: res.phase1.tokens,
                phase1_tokens_per_s: res.phase1.tokens_per_s,
                device: r.manifest.device.clone(),
            });
        }
        Ok(Some(StudyRuns(rows)))
    }

    fn write(
        &self,
        o: &StudyRuns,
        ctx: &StudyContext<'_>,
        _: &Outputs,
        files: &mut Vec<PathBuf>,
    ) -> Result<()> {
        ctx.table(&runs_table(&o.0), ctx.out, "runs", files)
    }
}
