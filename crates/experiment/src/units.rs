//! The analysis units of a study. Each unit reads the scored runs (through [`StudyContext`]),
//! computes one kind of result, writes its tables and figures, and records the result in the
//! [`StudyOutcome`]; `run_study` runs [`UNITS`] in order. Adding a table is adding a unit here.

use std::path::{Path, PathBuf};

use prefscore::{CorrOptions, ScoreKind};
use serde::{Deserialize, Serialize};

use crate::analysis::{compare_all, PairComparison, RunScores, TokenSelection};
use crate::controls::{
    controls_table, predictability_pairs, predictability_pairs_table, run_controls, score_figures,
    scored_predictability, RunControl,
};
use crate::data::CorpusData;
use crate::emergence::{emergence, write_emergence, Emergence};
use crate::groups::{groups_by_run, groups_by_run_tables, word_groups};
use crate::orientation::{
    orientation, orientation_table, oriented_cells_table, Orientation, MAX_RUNS,
};
use crate::pieces::{piece_classes, piece_control, piece_tables, PieceControl};
use crate::pos::{lexicon, TagSource};
use crate::pos_by_run::{write_pos_by_run, RunTags};
use crate::progress::Progress;
use crate::protocol::StudySpec;
use crate::run::ScoredRun;
use crate::split_scoring::{
    split_scoring_figure, split_scoring_pairs, split_scoring_table, Deal, SplitScoringPair,
};
use crate::tables::{pos_figure, runs_table, table4, table4_figure, write_pairs, StudyRun};
use crate::Result;

/// Split-null replicates per run in the controls table.
const NULL_REPLICATES: usize = 100;
/// The most frequent training tokens of the per-run tables and figures (the paper's 5000).
const TOP_TOKENS: usize = 5000;

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

/// What a study produced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StudyOutcome {
    /// Whether the tables cover every run of the study (else a subset, see [`crate::study::run_study`]).
    pub complete: bool,
    /// Where the tables and figures went.
    pub tables: PathBuf,
    /// The runs.
    pub runs: Vec<StudyRun>,
    /// Every pair of runs, per score kind and token selection.
    pub pairs: Vec<(String, PairComparison)>,
    /// Per run: frequency correlations and the split null (first score kind).
    pub controls: Vec<RunControl>,
    /// The ICA cluster statistics of the word-group run (paper: 13% of words in no cluster,
    /// 45% in exactly one, 1.45 per word).
    pub word_groups: Option<WordGroupSummary>,
    /// How the preference emerged during phase 1, when the spec asks for it.
    pub emergence: Option<Emergence>,
    /// The word-piece control (first score kind; WordPiece vocabularies only).
    pub pieces: Option<PieceControl>,
    /// The orientation that makes the runs agree most (top tokens, first score kind), when
    /// there are at least two pairs and at most `orientation::MAX_RUNS` runs.
    pub orientation: Option<Orientation>,
    /// Files written.
    pub outputs: Vec<PathBuf>,
}

impl StudyOutcome {
    /// An outcome with no results yet, its tables going to `tables`.
    pub fn new(complete: bool, tables: PathBuf) -> Self {
        Self {
            complete,
            tables,
            runs: Vec::new(),
            pairs: Vec::new(),
            controls: Vec::new(),
            word_groups: None,
            emergence: None,
            pieces: None,
            orientation: None,
            outputs: Vec::new(),
        }
    }
}

/// What every unit reads: the study, its data and scored runs, their scores per score kind
/// (first kind: the main tables'), the correlation options and the tables folder.
pub struct StudyContext<'a> {
    /// The study.
    pub spec: &'a StudySpec,
    /// Its text, tokenizer and frequencies.
    pub data: &'a CorpusData,
    /// The scored runs, in table order.
    pub runs: &'a [ScoredRun],
    /// The runs' scores under each of `spec.kinds`.
    pub scores: Vec<(ScoreKind, Vec<RunScores>)>,
    /// Bootstrap and permutations of every correlation.
    pub copts: CorrOptions,
    /// Where tables and figures go.
    pub out: &'a Path,
    /// Messages and progress bars.
    pub progress: &'a Progress,
}

impl<'a> StudyContext<'a> {
    /// The context of `runs` of `spec`, their scores computed under every score kind.
    pub fn new(
        spec: &'a StudySpec,
        data: &'a CorpusData,
        runs: &'a [ScoredRun],
        out: &'a Path,
        progress: &'a Progress,
    ) -> Result<Self> {
        let scores = spec
            .kinds
            .iter()
            .map(|&k| {
                Ok((
                    k,
                    runs.iter()
                        .map(|r| RunScores::new(r, k))
                        .collect::<Result<_>>()?,
                ))
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            spec,
            data,
            runs,
            scores,
            copts: CorrOptions::with_resamples(spec.resamples),
            out,
            progress,
        })
    }

    /// The main score kind (the first) and the runs' scores under it.
    fn main(&self) -> Option<(ScoreKind, &[RunScores])> {
        self.scores.first().map(|(k, rs)| (*k, rs.as_slice()))
    }

    /// Writes `t` as `<stem>.{csv,md,json}` into the tables folder, says it, records the files.
    fn write(&self, t: &report::Table, stem: &str, o: &mut StudyOutcome) -> Result<()> {
        o.outputs.extend(t.write_all(self.out, stem)?);
        self.progress.say(|| t.to_markdown());
        Ok(())
    }
}

/// One analysis unit.
pub type Unit = fn(&StudyContext<'_>, &mut StudyOutcome) -> Result<()>;

/// The units of a study, in the order `run_study` runs them.
pub const UNITS: [(&str, Unit); 6] = [
    ("pairs", pairs),
    ("runs and POS", runs_and_pos),
    ("controls", controls),
    ("word pieces", pieces),
    ("word groups", groups),
    ("emergence", emergence_unit),
];

/// Every pair of runs under every score kind and token selection (Tables 2 and 4).
fn pairs(ctx: &StudyContext<'_>, o: &mut StudyOutcome) -> Result<()> {
    for (kind, rs) in &ctx.scores {
        let kname = kind_name(*kind);
        let labels: Vec<String> = rs.iter().map(|r| r.label.clone()).collect();
        for sel in &ctx.spec.selections {
            let these = compare_all(rs, &ctx.data.freq, *sel, *kind, &ctx.copts)?;
            let (t, files) = write_pairs(&these, &labels, kname, *sel, ctx.out)?;
            ctx.progress.say(|| t.to_markdown());
            o.outputs.extend(files);
            o.pairs
                .extend(these.into_iter().map(|p| (kname.to_string(), p)));
        }
    }
    Ok(())
}

/// The runs table (heads against the joint head and the unigram model) and Fig. 4 per run.
fn runs_and_pos(ctx: &StudyContext<'_>, o: &mut StudyOutcome) -> Result<()> {
    let Some((_, rs)) = ctx.main() else {
        return Ok(());
    };
    let tags = resolve_tags(&ctx.spec.tags, ctx.out);
    let lex = lexicon(ctx.data, &tags, ctx.progress.bars())?;
    let dense = lex.to_dense(ctx.data.padded_vocab());
    let mut by_run = Vec::new();
    for (r, s) in ctx.runs.iter().zip(rs) {
        let res = r.result()?;
        o.runs.push(StudyRun {
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
        let title = format!(
            "Preference score per UPOS tag, {} ({})",
            s.label,
            ctx.spec.tags.describe()
        );
        let boot = &ctx.copts.bootstrap;
        let (tags, files) =
            pos_figure(s, &ctx.data.freq, &dense, TOP_TOKENS, boot, &title, ctx.out)?;
        o.outputs.extend(files);
        by_run.push(RunTags {
            label: s.label.clone(),
            tags,
        });
    }
    // Fig. 4 tag by tag across runs, beside the paper's directions.
    if by_run.len() > 1 {
        let title = format!(
            "Preference score per UPOS class across runs, top {TOP_TOKENS} tokens ({})",
            ctx.spec.tags.describe()
        );
        o.outputs
            .extend(write_pos_by_run(&by_run, &title, ctx.out)?);
    }
    ctx.write(&runs_table(&o.runs), "runs", o)
}

/// Frequency correlations and the split null per run, and the score figures (Figs. 3, 8).
fn controls(ctx: &StudyContext<'_>, o: &mut StudyOutcome) -> Result<()> {
    let Some((kind, rs)) = ctx.main() else {
        return Ok(());
    };
    let (kname, sel0) = (kind_name(kind), ctx.spec.selections.first());
    let main: Vec<PairComparison> = o
        .pairs
        .iter()
        .filter(|(k, p)| k == kname && sel0.is_some_and(|s| p.selection == s.to_string()))
        .map(|(_, p)| p.clone())
        .collect();
    let freq = &ctx.data.freq;
    let preds = rs
        .iter()
        .map(scored_predictability)
        .collect::<Result<Vec<_>>>()?;
    o.controls = run_controls(
        rs,
        &preds,
        &main,
        freq,
        TOP_TOKENS,
        kind,
        NULL_REPLICATES,
        &ctx.copts,
    )?;
    o.outputs
        .extend(controls_table(&o.controls, NULL_REPLICATES).write_all(ctx.out, "controls")?);
    // Predictability across pairs and Table 4, over the same tokens as the frequency control
    // (the paper's top 5000).
    let top = TokenSelection::TopFrequent(TOP_TOKENS).to_string();
    let top_pairs: Vec<PairComparison> = o
        .pairs
        .iter()
        .filter(|(k, p)| k == kname && p.selection == top)
        .map(|(_, p)| p.clone())
        .collect();
    let labels: Vec<String> = rs.iter().map(|r| r.label.clone()).collect();
    let pp = predictability_pairs(&labels, &preds, &top_pairs, freq, TOP_TOKENS)?;
    if !pp.is_empty() {
        let t = predictability_pairs_table(&pp);
        o.outputs
            .extend(t.write_all(ctx.out, "controls_predictability_pairs")?);
    }
    let mut split = Vec::new();
    for deal in Deal::BOTH {
        split.extend(split_scoring_pairs(rs, &top_pairs, freq, TOP_TOKENS, deal)?);
    }
    if !split.is_empty() {
        let t = split_scoring_table(&split, TOP_TOKENS);
        o.outputs
            .extend(t.write_all(ctx.out, "controls_split_scoring")?);
        // The figure for the first pair of one model (seeds), else the first pair.
        let same = |p: &&SplitScoringPair| {
            let model = |l: &str| rs.iter().find(|r| r.label == l).map(|r| &r.model);
            model(&p.a) == model(&p.b)
        };
        let p = split.iter().find(same).unwrap_or(&split[0]);
        let fig = ctx.out.join("fig_split_scoring.png");
        let deals: Vec<(Deal, usize)> = split
            .iter()
            .filter(|q| (&q.a, &q.b) == (&p.a, &p.b))
            .map(|q| (q.deal, q.blocks))
            .collect();
        split_scoring_figure(rs, &p.a, &p.b, &deals, freq, TOP_TOKENS, &fig)?;
        o.outputs.push(fig);
    }
    if top_pairs.len() >= 2 && rs.len() > MAX_RUNS {
        ctx.progress.say(|| {
            format!(
                "agreement up to orientation skipped: {} runs, the exhaustive search takes at \
                 most {MAX_RUNS} (use --only)",
                rs.len()
            )
        });
    } else if top_pairs.len() >= 2 {
        let orient = orientation(rs, &top_pairs, freq, TOP_TOKENS, NULL_REPLICATES)?;
        let t = orientation_table(&orient, TOP_TOKENS);
        o.outputs
            .extend(t.write_all(ctx.out, "controls_orientation")?);
        o.orientation = Some(orient);
    }
    if !top_pairs.is_empty() {
        let vs_freq: Vec<Option<f64>> = labels
            .iter()
            .map(|l| {
                let c = o.controls.iter().find(|c| &c.label == l);
                c.map(|c| c.spearman_vs_frequency_rank)
            })
            .collect();
        let t = table4(&labels, &top_pairs, &vs_freq, &top);
        o.outputs.extend(t.write_all(ctx.out, "table4_spearman")?);
        let fig = ctx.out.join(format!("fig_table4_spearman_{kname}.png"));
        let title = format!("Table 4: Spearman ρ, {kname}, {top}");
        table4_figure(&labels, &top_pairs, &vs_freq, &title, &fig)?;
        o.outputs.push(fig);
    }
    o.outputs
        .extend(score_figures(rs, freq, TOP_TOKENS, ctx.out)?);
    Ok(())
}

/// The word-piece control (WordPiece vocabularies only).
fn pieces(ctx: &StudyContext<'_>, o: &mut StudyOutcome) -> Result<()> {
    let Some((_, rs)) = ctx.main() else {
        return Ok(());
    };
    let classes = piece_classes(&ctx.data.tok, ctx.data.padded_vocab())?;
    o.pieces = piece_control(rs, &ctx.data.freq, &classes, TOP_TOKENS)?;
    if let Some(pc) = &o.pieces {
        let (t, p) = piece_tables(&pc.runs, &pc.pairs, TOP_TOKENS);
        ctx.write(&t, "pieces_runs", o)?;
        ctx.write(&p, "pieces_pairs", o)?;
    }
    if let (Some(pc), Some(orient)) = (&o.pieces, &o.orientation) {
        let t = oriented_cells_table(&pc.oriented(orient)?, TOP_TOKENS);
        ctx.write(&t, "pieces_orientation", o)?;
    }
    Ok(())
}

/// The ICA word groups of one run (Table 3, Figs. 5, 6), when the study asks for them.
fn groups(ctx: &StudyContext<'_>, o: &mut StudyOutcome) -> Result<()> {
    let Some((label, settings)) = &ctx.spec.word_groups else {
        return Ok(());
    };
    let Some(run) = ctx.runs.iter().find(|r| &r.label == label) else {
        return Ok(());
    };
    let dir = ctx.out.join(format!("ica_{label}"));
    let (g, tokens, files) = word_groups(run, ctx.data, settings, &dir)?;
    // One set of groups, scored on every run of the study.
    if let Some((_, rs)) = ctx.main() {
        let runs: Vec<&RunScores> = rs.iter().collect();
        let by = groups_by_run(&g.groups, &runs, &tokens)?;
        let (t, a) = groups_by_run_tables(&g.groups, &by);
        o.outputs.extend(t.write_all(&dir, "table3_by_run")?);
        o.outputs
            .extend(a.write_all(&dir, "table3_rank_agreement")?);
    }
    o.outputs.extend(
        files
            .table3
            .iter()
            .cloned()
            .chain(files.fit.iter().cloned()),
    );
    o.outputs.extend(
        [files.fig5, files.fig6, files.trajectory, files.fig7]
            .into_iter()
            .filter(|f| f.is_file()),
    );
    o.word_groups = Some(WordGroupSummary {
        label: label.clone(),
        dim: g.dim,
        converged: g.ica.converged,
        steps: g.ica.steps,
        residual: g.ica.residual,
        within_unit: g.within_unit,
        none: g.counts.none,
        exactly_one: g.counts.exactly_one,
        mean: g.counts.mean,
    });
    Ok(())
}

/// The agreement curve over the runs' phase-1 snapshots, when the study asks for it.
fn emergence_unit(ctx: &StudyContext<'_>, o: &mut StudyOutcome) -> Result<()> {
    let Some(es) = &ctx.spec.emergence else {
        return Ok(());
    };
    if !ctx
        .runs
        .iter()
        .any(|r| es.models.contains(&r.manifest.spec.model_name()))
    {
        return Ok(());
    }
    let e = emergence(ctx.runs, &ctx.data.freq, es, &ctx.copts)?;
    o.outputs.extend(write_emergence(&e, ctx.out)?);
    o.emergence = Some(e);
    Ok(())
}

/// A relative tagger cache lives in the study folder.
fn resolve_tags(t: &TagSource, out: &Path) -> TagSource {
    match t {
        TagSource::Tagger {
            conllu,
            tagger_cache,
        } if tagger_cache.is_relative() => TagSource::Tagger {
            conllu: conllu.clone(),
            tagger_cache: out.join(tagger_cache),
        },
        other => other.clone(),
    }
}

/// `arithmetic` (eq. 4) or `geometric` (the released code).
pub fn kind_name(kind: ScoreKind) -> &'static str {
    match kind {
        ScoreKind::ArithmeticMean => "arithmetic",
        ScoreKind::GeometricMean => "geometric",
    }
}
