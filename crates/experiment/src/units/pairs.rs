//! Table 2 (and the pairs behind Table 4): every pair of runs under every score kind and token
//! selection of the study, with the noise ceiling (`pairs_<kind>_<selection>`, and its run × run
//! figure `fig_table2_<kind>_<selection>.png`).

use std::path::PathBuf;

use prefscore::ScoreKind;
use serde::{Deserialize, Serialize};

use super::{kind_name, Analysis, Input, Outputs, StudyContext};
use crate::analysis::{compare_all, PairComparison, TokenSelection};
use crate::error::Result;
use crate::tables::write_pairs;

/// The pairs unit (`pairs` in `study.json`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Pairs;

/// Every pair of runs under one score kind and token selection.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PairSet {
    /// The score kind.
    pub kind: ScoreKind,
    /// The token selection.
    pub selection: TokenSelection,
    /// Every pair (i < j in run order).
    pub pairs: Vec<PairComparison>,
}

/// The pairs of a study, keyed by score kind and token selection.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunPairs(pub Vec<PairSet>);

impl RunPairs {
    /// The pairs of score kind `kind` and selection `sel` (none when the study has no such set).
    pub fn of(&self, kind: ScoreKind, sel: TokenSelection) -> &[PairComparison] {
        (self.0.iter())
            .find(|s| s.kind == kind && s.selection == sel)
            .map_or(&[], |s| &s.pairs)
    }

    /// Every pair of every set.
    pub fn all(&self) -> impl Iterator<Item = &PairComparison> {
        self.0.iter().flat_map(|s| &s.pairs)
    }
}

impl Analysis for Pairs {
    type Output = RunPairs;

    fn name(&self) -> &str {
        "pairs"
    }

    fn needs(&self) -> &[Input] {
        &[Input::Vocabulary, Input::Corpus]
    }

    fn compute(&self, ctx: &StudyContext<'_>, _: &Outputs) -> Result<Option<RunPairs>> {
        let freq = &ctx.data(self.name())?.freq;
        let mut sets = Vec::new();
        for (kind, rs) in &ctx.scores {
            for &selection in &ctx.spec.selections {
                let pairs = compare_all(rs, freq, selection, *kind, &ctx.copts)?;
                sets.push(PairSet {
                    kind: *kind,
                    selection,
                    pairs,
                });
            }
        }
        Ok(Some(RunPairs(sets)))
    }

    fn write(
        &self,
        o: &RunPairs,
        ctx: &StudyContext<'_>,
        _: &Outputs,
        files: &mut Vec<PathBuf>,
    ) -> Result<()> {
        let labels = ctx.labels();
        for s in &o.0 {
            let (t, written) =
                write_pairs(&s.pairs, &labels, kind_name(s.kind), s.selection, ctx.out)?;
            ctx.progress.say(|| t.to_markdown());
            files.extend(written);
        }
        Ok(())
    }
}
