//! The analysis units of a study, in two halves. [`StudyContext::compute`] runs each unit's
//! computation over the loaded runs ([`UNITS`], in order) into an [`Analysis`] and writes
//! nothing; [`StudyContext::write`] draws every table and figure from it. Adding a table is
//! adding a unit and its writer here.

use std::path::{Path, PathBuf};

use prefscore::{CorrOptions, ScoreKind};
use serde::{Deserialize, Serialize};

use crate::analysis::{compare_all, PairComparison, RunScores, TokenSelection};
use crate::controls::{
    controls_table, predictability_pairs, predictability_pairs_table, run_controls, score_figures,
    scored_predictability, PredictabilityPair, RunControl,
};
use crate::data::CorpusData;
use crate::emergence::{emergence, write_emergence, Emergence};
use crate::groups::{
    groups_by_run, groups_by_run_tables, word_groups, write_word_groups, GroupsByRun, IcaGroups,
};
use crate::orientation::{
    orientation, orientation_table, oriented_cells_table, Orientation, OrientedCells, MAX_RUNS,
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
use crate::tables::{
    pos_tags, runs_table, table4, table4_figure, write_pairs, write_pos, StudyRun,
};
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

/// What a study produced: every number of its tables (`study.json`), and the files written.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StudyOutcome {
    /// Whether the tables cover every run of the study (else a subset, see
    /// [`crate::study::run_study`]).
    pub complete: bool,
    /// Where the tables and figures went.
    pub tables: PathBuf,
    /// The runs.
    pub runs: Vec<StudyRun>,
    /// Every pair of runs, per score kind and token selection.
    pub pairs: Vec<(String, PairComparison)>,
    /// Fig. 4 per run: the main score's summaries per UPOS tag over the top tokens.
    pub pos: Vec<RunTags>,
    /// Per run: frequency correlations and the split null (first score kind).
    pub controls: Vec<RunControl>,
    /// Predictability across pairs: how alike two runs' per-token predictabilities are beside
    /// how alike their scores are (top tokens, first score kind).
    pub predictability: Vec<PredictabilityPair>,
    /// Each pair's agreement with each tower scored on its own half of the text, both deals.
    pub split_scoring: Vec<SplitScoringPair>,
    /// The ICA cluster statistics of the word-group run (paper: 13% of words in no cluster,
    /// 45% in exactly one, 1.45 per word).
    pub word_groups: Option<WordGroupSummary>,
    /// How the preference emerged during phase 1, when the spec asks for it.
    pub emergence: Option<Emergence>,
    /// The word-piece control (first score kind; WordPiece vocabularies only).
    pub pieces: Option<PieceControl>,
    /// The word-piece pairs under [`StudyOutcome::orientation`].
    pub pieces_oriented: Option<Vec<OrientedCells>>,
    /// The orientation that makes the runs agree most (top tokens, first score kind), when
    /// there are at least two pairs and at most `orientation::MAX_RUNS` runs.
    pub orientation: Option<Orientation>,
    /// Files written.
    pub outputs: Vec<PathBuf>,
}

impl StudyOutcome {
    /// The pairs of score kind `kname` and token selection `sel`.
    pub fn pairs_of(&self, kname: &str, sel: &str) -> Vec<PairComparison> {
        self.pairs
            .iter()
            .filter(|(k, p)| k == kname && p.selection == sel)
            .map(|(_, p)| p.clone())
            .collect()
    }
}

/// The ICA word groups of one run with the words they were found among and their means on
/// every run of the study.
pub struct GroupAnalysis {
    /// The run the groups were found on.
    pub label: String,
    /// The groups (Table 3).
    pub groups: IcaGroups,
    /// The analysed words, most frequent first.
    pub tokens: Vec<u32>,
    /// The groups scored on every run of the study.
    pub by_run: GroupsByRun,
}

/// Every result of a study's analyses, computed from the loaded runs ([`StudyContext::compute`]);
/// [`StudyContext::write`] writes it.
pub struct Analysis {
    /// The numbers of every table.
    pub outcome: StudyOutcome,
    /// The word groups, when the study asks for them (not in `study.json`: their sources are a
    /// matrix over the analysed words).
    pub groups: Option<GroupAnalysis>,
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

    /// Writes `t` as `<stem>.{csv,md,json}` into `dir`, says it, records the files.
    fn table(&self, t: &report::Table, dir: &Path, stem: &str, o: &mut StudyOutcome) -> Result<()> {
        o.outputs.extend(t.write_all(dir, stem)?);
        self.progress.say(|| t.to_markdown());
        Ok(())
    }

    /// Every unit's results over the runs ([`UNITS`], in order); nothing is written (a tagger
    /// named by the spec is trained once and kept in its cache).
    pub fn compute(&self, complete: bool) -> Result<Analysis> {
        let mut a = Analysis {
            outcome: StudyOutcome {
                complete,
                tables: self.out.to_path_buf(),
                ..StudyOutcome::default()
            },
            groups: None,
        };
        for (_, compute, _) in UNITS {
            compute(self, &mut a)?;
        }
        Ok(a)
    }

    /// Every table and figure of `a` into the tables folder ([`UNITS`]' writers, in order), the
    /// files recorded in `a.outcome.outputs`.
    pub fn write(&self, a: &mut Analysis) -> Result<()> {
        std::fs::create_dir_all(self.out).map_err(crate::error::io_at(self.out))?;
        for (_, _, write) in UNITS {
            write(self, a)?;
        }
        Ok(())
    }
}

/// One half of an analysis unit: its computation into the [`Analysis`] (writing nothing), or
/// its writer (the unit's tables and figures from the [`Analysis`]).
pub type Step = fn(&StudyContext<'_>, &mut Analysis) -> Result<()>;

/// The units of a study as (name, computation, writer), in the order [`StudyContext::compute`]
/// and [`StudyContext::write`] run them (controls read the pairs; word pieces the orientation).
pub const UNITS: [(&str, Step, Step); 6] = [
    ("pairs", pairs, write_pairs_unit),
    ("runs and POS", runs_and_pos, write_runs_and_pos),
    ("controls", controls, write_controls),
    ("word pieces", pieces, write_pieces),
    ("word groups", groups, write_groups),
    ("emergence", emergence_unit, write_emergence_unit),
];

/// Every pair of runs under every score kind and token selection (Tables 2 and 4).
fn pairs(ctx: &StudyContext<'_>, a: &mut Analysis) -> Result<()> {
    for (kind, rs) in &ctx.scores {
        let kname = kind_name(*kind);
        for sel in &ctx.spec.selections {
            let these = compare_all(rs, &ctx.data.freq, *sel, *kind, &ctx.copts)?;
            a.outcome
                .pairs
                .extend(these.into_iter().map(|p| (kname.to_string(), p)));
        }
    }
    Ok(())
}

fn write_pairs_unit(ctx: &StudyContext<'_>, a: &mut Analysis) -> Result<()> {
    for (kind, rs) in &ctx.scores {
        let kname = kind_name(*kind);
        let labels: Vec<String> = rs.iter().map(|r| r.label.clone()).collect();
        for sel in &ctx.spec.selections {
            let these = a.outcome.pairs_of(kname, &sel.to_string());
            let (t, files) = write_pairs(&these, &labels, kname, *sel, ctx.out)?;
            ctx.progress.say(|| t.to_markdown());
            a.outcome.outputs.extend(files);
        }
    }
    Ok(())
}

/// The runs table (heads against the joint head and the unigram model) and Fig. 4 per run.
fn runs_and_pos(ctx: &StudyContext<'_>, a: &mut Analysis) -> Result<()> {
    let Some((_, rs)) = ctx.main() else {
        return Ok(());
    };
    let tags = resolve_tags(&ctx.spec.tags, ctx.out);
    let lex = lexicon(ctx.data, &tags, ctx.progress.bars())?;
    let dense = lex.to_dense(ctx.data.padded_vocab());
    let o = &mut a.outcome;
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
        let boot = &ctx.copts.bootstrap;
        o.pos.push(RunTags {
            label: s.label.clone(),
            tags: pos_tags(s, &ctx.data.freq, &dense, TOP_TOKENS, boot)?,
        });
    }
    Ok(())
}

fn write_runs_and_pos(ctx: &StudyContext<'_>, a: &mut Analysis) -> Result<()> {
    let Some((_, rs)) = ctx.main() else {
        return Ok(());
    };
    let o = &mut a.outcome;
    for (s, tags) in rs.iter().zip(&o.pos) {
        let title = format!(
            "Preference score per UPOS tag, {} ({})",
            s.label,
            ctx.spec.tags.describe()
        );
        o.outputs.extend(write_pos(s, &tags.tags, &title, ctx.out)?);
    }
    // Fig. 4 tag by tag across runs, beside the paper's directions.
    if o.pos.len() > 1 {
        let title = format!(
            "Preference score per UPOS class across runs, top {TOP_TOKENS} tokens ({})",
            ctx.spec.tags.describe()
        );
        o.outputs.extend(write_pos_by_run(&o.pos, &title, ctx.out)?);
    }
    let t = runs_table(&o.runs);
    ctx.table(&t, ctx.out, "runs", o)
}

/// The main score kind's name and the pairs of its first selection (the frequency control's
/// and the split null's) and of the top tokens (the controls across pairs and Table 4).
fn main_pairs(
    ctx: &StudyContext<'_>,
    o: &StudyOutcome,
) -> Option<(ScoreKind, Vec<PairComparison>, Vec<PairComparison>)> {
    let (kind, _) = ctx.main()?;
    let kname = kind_name(kind);
    let first = match ctx.spec.selections.first() {
        Some(s) => o.pairs_of(kname, &s.to_string()),
        None => Vec::new(),
    };
    let top = o.pairs_of(kname, &TokenSelection::TopFrequent(TOP_TOKENS).to_string());
    Some((kind, first, top))
}

/// Frequency correlations and the split null per run; predictability, split scoring and the
/// orientation across pairs (the paper's top 5000 tokens).
fn controls(ctx: &StudyContext<'_>, a: &mut Analysis) -> Result<()> {
    let (Some((_, rs)), Some((kind, main, top_pairs))) = (ctx.main(), main_pairs(ctx, &a.outcome))
    else {
        return Ok(());
    };
    let freq = &ctx.data.freq;
    let preds = rs
        .iter()
        .map(scored_predictability)
        .collect::<Result<Vec<_>>>()?;
    let o = &mut a.outcome;
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
    let labels: Vec<String> = rs.iter().map(|r| r.label.clone()).collect();
    o.predictability = predictability_pairs(&labels, &preds, &top_pairs, freq, TOP_TOKENS)?;
    for deal in Deal::BOTH {
        o.split_scoring
            .extend(split_scoring_pairs(rs, &top_pairs, freq, TOP_TOKENS, deal)?);
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
        o.orientation = Some(orientation(
            rs,
            &top_pairs,
            freq,
            TOP_TOKENS,
            NULL_REPLICATES,
        )?);
    }
    Ok(())
}

/// The controls' tables, Table 4 and the score figures (Figs. 3, 8).
fn write_controls(ctx: &StudyContext<'_>, a: &mut Analysis) -> Result<()> {
    let (Some((_, rs)), Some((kind, _, top_pairs))) = (ctx.main(), main_pairs(ctx, &a.outcome))
    else {
        return Ok(());
    };
    let (kname, freq, out) = (kind_name(kind), &ctx.data.freq, ctx.out);
    let o = &mut a.outcome;
    o.outputs
        .extend(controls_table(&o.controls, NULL_REPLICATES).write_all(out, "controls")?);
    if !o.predictability.is_empty() {
        let t = predictability_pairs_table(&o.predictability);
        o.outputs
            .extend(t.write_all(out, "controls_predictability_pairs")?);
    }
    if let Some(first) = o.split_scoring.first() {
        let t = split_scoring_table(&o.split_scoring, TOP_TOKENS);
        o.outputs
            .extend(t.write_all(out, "controls_split_scoring")?);
        // The figure for the first pair of one model (seeds), else the first pair.
        let same = |p: &&SplitScoringPair| {
            let model = |l: &str| rs.iter().find(|r| r.label == l).map(|r| &r.model);
            model(&p.a) == model(&p.b)
        };
        let p = o.split_scoring.iter().find(same).unwrap_or(first);
        let fig = out.join("fig_split_scoring.png");
        let deals: Vec<(Deal, usize)> = o
            .split_scoring
            .iter()
            .filter(|q| (&q.a, &q.b) == (&p.a, &p.b))
            .map(|q| (q.deal, q.blocks))
            .collect();
        split_scoring_figure(rs, &p.a, &p.b, &deals, freq, TOP_TOKENS, &fig)?;
        o.outputs.push(fig);
    }
    if let Some(orient) = &o.orientation {
        let t = orientation_table(orient, TOP_TOKENS);
        o.outputs.extend(t.write_all(out, "controls_orientation")?);
    }
    if !top_pairs.is_empty() {
        let labels: Vec<String> = rs.iter().map(|r| r.label.clone()).collect();
        let top = TokenSelection::TopFrequent(TOP_TOKENS).to_string();
        let vs_freq: Vec<Option<f64>> = labels
            .iter()
            .map(|l| {
                let c = o.controls.iter().find(|c| &c.label == l);
                c.map(|c| c.spearman_vs_frequency_rank)
            })
            .collect();
        let t = table4(&labels, &top_pairs, &vs_freq, &top);
        o.outputs.extend(t.write_all(out, "table4_spearman")?);
        let fig = out.join(format!("fig_table4_spearman_{kname}.png"));
        let title = format!("Table 4: Spearman ρ, {kname}, {top}");
        table4_figure(&labels, &top_pairs, &vs_freq, &title, &fig)?;
        o.outputs.push(fig);
    }
    o.outputs.extend(score_figures(rs, freq, TOP_TOKENS, out)?);
    Ok(())
}

/// The word-piece control (WordPiece vocabularies only).
fn pieces(ctx: &StudyContext<'_>, a: &mut Analysis) -> Result<()> {
    let Some((_, rs)) = ctx.main() else {
        return Ok(());
    };
    let classes = piece_classes(&ctx.data.tok, ctx.data.padded_vocab())?;
    let o = &mut a.outcome;
    o.pieces = piece_control(rs, &ctx.data.freq, &classes, TOP_TOKENS)?;
    if let (Some(pc), Some(orient)) = (&o.pieces, &o.orientation) {
        o.pieces_oriented = Some(pc.oriented(orient)?);
    }
    Ok(())
}

fn write_pieces(ctx: &StudyContext<'_>, a: &mut Analysis) -> Result<()> {
    let o = &mut a.outcome;
    let tables = o
        .pieces
        .as_ref()
        .map(|pc| piece_tables(&pc.runs, &pc.pairs, TOP_TOKENS));
    if let Some((t, p)) = tables {
        ctx.table(&t, ctx.out, "pieces_runs", o)?;
        ctx.table(&p, ctx.out, "pieces_pairs", o)?;
    }
    if let Some(rows) = &o.pieces_oriented {
        let t = oriented_cells_table(rows, TOP_TOKENS);
        ctx.table(&t, ctx.out, "pieces_orientation", o)?;
    }
    Ok(())
}

/// The ICA word groups of one run (Table 3, Figs. 5, 6), when the study asks for them, scored
/// on every run of the study.
fn groups(ctx: &StudyContext<'_>, a: &mut Analysis) -> Result<()> {
    let Some((label, settings)) = &ctx.spec.word_groups else {
        return Ok(());
    };
    let (Some(run), Some((_, rs))) = (ctx.runs.iter().find(|r| &r.label == label), ctx.main())
    else {
        return Ok(());
    };
    let (g, tokens) = word_groups(run, ctx.data, settings)?;
    let runs: Vec<&RunScores> = rs.iter().collect();
    let by_run = groups_by_run(&g.groups, &runs, &tokens)?;
    a.outcome.word_groups = Some(WordGroupSummary {
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
    a.groups = Some(GroupAnalysis {
        label: label.clone(),
        groups: g,
        tokens,
        by_run,
    });
    Ok(())
}

fn write_groups(ctx: &StudyContext<'_>, a: &mut Analysis) -> Result<()> {
    let (Some(ga), Some((_, settings))) = (&a.groups, &ctx.spec.word_groups) else {
        return Ok(());
    };
    let dir = ctx.out.join(format!("ica_{}", ga.label));
    let files = write_word_groups(&ga.groups, &ga.tokens, ctx.data, settings, &dir)?;
    let o = &mut a.outcome;
    let (t, r) = groups_by_run_tables(&ga.groups.groups, &ga.by_run);
    o.outputs.extend(t.write_all(&dir, "table3_by_run")?);
    o.outputs
        .extend(r.write_all(&dir, "table3_rank_agreement")?);
    o.outputs.extend(files.table3.into_iter().chain(files.fit));
    o.outputs.extend(
        [files.fig5, files.fig6, files.trajectory, files.fig7]
            .into_iter()
            .filter(|f| f.is_file()),
    );
    Ok(())
}

/// The agreement curve over the runs' phase-1 snapshots, when the study asks for it.
fn emergence_unit(ctx: &StudyContext<'_>, a: &mut Analysis) -> Result<()> {
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
    a.outcome.emergence = Some(emergence(ctx.runs, &ctx.data.freq, es, &ctx.copts)?);
    Ok(())
}

fn write_emergence_unit(ctx: &StudyContext<'_>, a: &mut Analysis) -> Result<()> {
    if let Some(e) = &a.outcome.emergence {
        let files = write_emergence(e, ctx.out)?;
        a.outcome.outputs.extend(files);
    }
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
