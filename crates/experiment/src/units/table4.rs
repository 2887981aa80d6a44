//! Table 4 (`table4_spearman`, `fig_table4_spearman_<kind>.png`): Spearman ρ between every pair
//! of runs over the top tokens (first score kind), each run's ρ with the frequency rank beside
//! them.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::controls::RunControls;
use super::pairs::RunPairs;
use super::{kind_name, Analysis, Input, Outputs, StudyContext};
use crate::analysis::{PairComparison, TokenSelection};
use crate::error::Result;
use crate::tables::{table4, table4_figure};

/// The Table 4 unit (`table4` in `study.json`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Table4;

/// Table 4's cells: the pairs' Spearman ρ and each run's ρ with the frequency rank.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SpearmanTable {
    /// The score kind.
    pub kind: prefscore::ScoreKind,
    /// The token selection.
    pub selection: TokenSelection,
    /// The runs, in table order.
    pub runs: Vec<String>,
    /// Spearman ρ of each pair (`a`, `b`, ρ).
    pub pairs: Vec<(String, String, f64)>,
    /// Each run's Spearman ρ with the frequency rank (from the controls).
    pub vs_frequency_rank: Vec<Option<f64>>,
}

impl Analysis for Table4 {
    type Output = SpearmanTable;

    fn name(&self) -> &str {
        "table4"
    }

    fn needs(&self) -> &[Input] {
        &[Input::Vocabulary, Input::Corpus]
    }

    fn compute(&self, ctx: &StudyContext<'_>, earlier: &Outputs) -> Result<Option<SpearmanTable>> {
        let Some((kind, _)) = ctx.main() else {
            return Ok(None);
        };
        let selection = ctx.top(self.name())?.selection();
        let pairs = earlier.require::<RunPairs>(self.name(), "pairs")?;
        let top_pairs = pairs.of(kind, selection);
        if top_pairs.is_empty() {
            return Ok(None);
        }
        let controls = earlier.require::<RunControls>(self.name(), "controls")?;
        let runs = ctx.labels();
        let vs_frequency_rank = (runs.iter())
            .map(|l| {
                let c = controls.0.iter().find(|c| &c.label == l);
                c.map(|c| c.spearman_vs_frequency_rank)
            })
            .collect();
        Ok(Some(SpearmanTable {
            kind,
            selection,
            runs,
            pairs: (top_pairs.iter())
                .map(|p| (p.a.clone(), p.b.clone(), p.spearman.r))
                .collect(),
            vs_frequency_rank,
        }))
    }

    fn write(
        &self,
        o: &SpearmanTable,
        ctx: &StudyContext<'_>,
        all: &Outputs,
        files: &mut Vec<PathBuf>,
    ) -> Result<()> {
        let pairs: &[PairComparison] = match all.get::<RunPairs>() {
            Some(p) => p.of(o.kind, o.selection),
            None => &[],
        };
        let (kname, top) = (kind_name(o.kind), o.selection.to_string());
        let t = table4(&o.runs, pairs, &o.vs_frequency_rank, &top);
        files.extend(t.write_all(ctx.out, "table4_spearman")?);
        let fig = ctx.out.join(format!("fig_table4_spearman_{kname}.png"));
        let title = format!("Table 4: Spearman ρ, {kname}, {top}");
        table4_figure(&o.runs, pairs, &o.vs_frequency_rank, &title, &fig)?;
        files.push(fig);
        Ok(())
    }
}
