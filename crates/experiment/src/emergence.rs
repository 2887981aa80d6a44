//! How the preference emerges during phase 1 (beyond the paper: no published figure shows it).
//!
//! Every phase-1 weight snapshot of a run (e.g. at 1/16, 1/8, 1/4, 1/2 of training) gets its
//! own heads, trained by the run's head rule (early stopping on the same validation batches)
//! and scored on the study's scoring set; the end of training is the run itself. For each
//! point: the share of tokens won by the primary tower, each head's gap to the joint head and
//! the split-half reliability of the scores; for each pair of runs of one style at the same
//! point: the raw seed-to-seed Pearson correlation and the correlation disattenuated by the
//! split-half reliabilities (r_ab / sqrt(r_aa r_bb)). The split-half reliability is used here
//! (not the head-seed one of the main tables) because it needs no second set of heads per
//! snapshot. Each snapshot's heads and scores are cached under `<run>/emergence/step-<N>/`.

use std::path::{Path, PathBuf};

use heads::{evaluate, PositionLogProbs};
use prefscore::{disattenuate, CorrOptions, Method, ScoreKind};
use report::{PlotOptions, Series};
use serde::{Deserialize, Serialize};
use towers::TwoTowerLm;

use crate::analysis::{compare_runs, select_tokens, RunScores, TokenSelection};
use crate::data::CorpusData;
use crate::error::{io_at, read_json, write_json_atomic};
use crate::run::{
    train_heads_in, validation_batches, HeadQuality, RunOptions, ScoredRun, Snapshot,
};
use crate::scoring::ScoringSet;
use crate::{ExperimentError, Result};

/// What the emergence analysis covers.
#[derive(Debug, Clone, PartialEq)]
pub struct EmergenceSpec {
    /// The token selection of the correlations and reliabilities.
    pub selection: TokenSelection,
    /// The styles whose runs are analysed (each snapshot costs a head training and a scoring).
    pub styles: Vec<towers::Style>,
}

/// One run at one point of phase 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmergencePoint {
    /// `<style>-s<seed>`.
    pub label: String,
    /// Fraction of phase 1's updates done (1 = the finished run).
    pub fraction: f64,
    /// Token positions trained by then.
    pub tokens: u64,
    /// The heads of that point (validation NLL, gap to the joint head, unigram flag).
    pub heads: HeadQuality,
    /// Share of scored tokens won by the primary tower.
    pub share_primary: f64,
    /// Split-half reliability (Pearson, Spearman-Brown corrected) over the selection.
    pub split_half: f64,
}

/// Two runs of one style at the same point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmergencePair {
    /// First run.
    pub a: String,
    /// Second run.
    pub b: String,
    /// Fraction of phase 1.
    pub fraction: f64,
    /// Token positions trained by then.
    pub tokens: u64,
    /// Tokens in the selection.
    pub n: usize,
    /// Raw Pearson correlation of the two runs' scores.
    pub pearson: f64,
    /// Disattenuated by the split-half reliabilities, when both are positive.
    pub disattenuated: Option<f64>,
}

/// The whole emergence analysis of a study.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Emergence {
    /// Every run at every point.
    pub points: Vec<EmergencePoint>,
    /// Every same-style pair at every common point.
    pub pairs: Vec<EmergencePair>,
}

/// The scores of one snapshot of `run`: heads trained and scored once, then read from the
/// cache folder.
pub fn snapshot_scores(
    run: &ScoredRun,
    snap: &Snapshot,
    data: &CorpusData,
    scoring: &ScoringSet,
    opts: &RunOptions,
) -> Result<(RunScores, HeadQuality)> {
    let spec = &run.record.spec;
    let dir = run
        .dir
        .join("emergence")
        .join(format!("step-{:07}", snap.step));
    let (lp_path, q_path) = (dir.join("logprobs.json"), dir.join("heads_quality.json"));
    let (lp, quality): (PositionLogProbs, HeadQuality) = if lp_path.is_file() && q_path.is_file() {
        (read_json(&lp_path)?, read_json(&q_path)?)
    } else {
        std::fs::create_dir_all(&dir).map_err(io_at(&dir))?;
        let cfg = spec.model_config(data.padded_vocab())?;
        let model = TwoTowerLm::new(&cfg, &opts.device, spec.seed)?;
        model.params().load(&snap.path)?;
        let valid = validation_batches(spec, data)?;
        let heads_dir = dir.join("heads");
        let (heads, q) =
            train_heads_in(spec, &model, data, &valid, spec.head_seed, &heads_dir, opts)?;
        let lp = evaluate(&model, &heads, &scoring.batches, false)?;
        write_json_atomic(&q_path, &q)?;
        write_json_atomic(&lp_path, &lp)?;
        (lp, q)
    };
    let label = run.label.clone();
    let scores = RunScores::from_logprobs(
        label,
        scoring.id.clone(),
        lp,
        None,
        quality.above_unigram,
        ScoreKind::ArithmeticMean,
    )?;
    Ok((scores, quality))
}

/// Every point of one run: its snapshots, then the finished run.
fn run_points(
    run: &ScoredRun,
    data: &CorpusData,
    scoring: &ScoringSet,
    opts: &RunOptions,
) -> Result<Vec<(f64, u64, RunScores, HeadQuality)>> {
    let res = run.result()?;
    let per_update = res.phase1.tokens / res.phase1.steps.max(1);
    let mut out = Vec::new();
    for snap in &res.snapshots {
        let (s, q) = snapshot_scores(run, snap, data, scoring, opts)?;
        out.push((snap.fraction, snap.step * per_update, s, q));
    }
    let last = RunScores::new(run, ScoreKind::ArithmeticMean)?;
    out.push((1.0, res.phase1.tokens, last, res.heads.clone()));
    Ok(out)
}

/// Runs the emergence analysis over the runs of `spec.styles` among `runs` (each scored on the
/// set of its style in `sets`).
pub fn emergence(
    runs: &[ScoredRun],
    data: &CorpusData,
    sets: &[ScoringSet],
    spec: &EmergenceSpec,
    opts: &RunOptions,
) -> Result<Emergence> {
    let sel = spec.selection;
    let copts = CorrOptions {
        bootstrap: prefscore::Bootstrap {
            resamples: 0,
            ..prefscore::Bootstrap::default()
        },
        permutations: 0,
    };
    let mut all = Vec::new();
    let mut out = Emergence::default();
    for run in runs {
        let style = run.record.spec.style;
        if !spec.styles.contains(&style) {
            continue;
        }
        let set = sets.iter().find(|s| s.id.style == style).ok_or_else(|| {
            ExperimentError::Invalid(format!("{}: no scoring set of its style", run.label))
        })?;
        let pts = run_points(run, data, set, opts)?;
        for (fraction, tokens, s, q) in &pts {
            let toks = select_tokens(&[s], &data.freq, sel);
            let sh = s.split_half(
                ScoreKind::ArithmeticMean,
                &toks,
                Method::Pearson,
                &copts.bootstrap,
            )?;
            out.points.push(EmergencePoint {
                label: run.label.clone(),
                fraction: *fraction,
                tokens: *tokens,
                heads: q.clone(),
                share_primary: s.share_primary,
                split_half: sh.r,
            });
        }
        all.push((run.record.spec.style, pts));
    }
    for i in 0..all.len() {
        for j in i + 1..all.len() {
            if all[i].0 != all[j].0 {
                continue;
            }
            for (fa, tokens, sa, _) in &all[i].1 {
                let Some((_, _, sb, _)) = all[j].1.iter().find(|p| p.0 == *fa) else {
                    continue;
                };
                let p = compare_runs(sa, sb, &data.freq, sel, ScoreKind::ArithmeticMean, &copts)?;
                let [ra, rb] = p.reliability_split_half;
                out.pairs.push(EmergencePair {
                    a: p.a,
                    b: p.b,
                    fraction: *fa,
                    tokens: *tokens,
                    n: p.tokens,
                    pearson: p.pearson.r,
                    disattenuated: disattenuate(p.pearson.r, ra, rb),
                });
            }
        }
    }
    Ok(out)
}

/// Writes the emergence table (`emergence.{csv,md,json}`) and two figures:
/// `fig_emergence_correlation.png` (raw and disattenuated seed-to-seed r against tokens
/// trained) and `fig_emergence_heads.png` (share won by the primary tower and the mean head
/// gap against tokens trained). Returns the files.
pub fn write_emergence(e: &Emergence, out: &Path) -> Result<Vec<PathBuf>> {
    let mut files = emergence_table(e).write_all(out, "emergence")?;
    let mut corr = Vec::new();
    let mut pairs: Vec<(&str, &str)> = e
        .pairs
        .iter()
        .map(|p| (p.a.as_str(), p.b.as_str()))
        .collect();
    pairs.dedup();
    for (a, b) in pairs {
        let ps: Vec<&EmergencePair> = e.pairs.iter().filter(|p| p.a == a && p.b == b).collect();
        let x: Vec<f64> = ps.iter().map(|p| p.tokens as f64).collect();
        corr.push(Series::new(
            format!("{a} × {b} raw"),
            x.clone(),
            ps.iter().map(|p| p.pearson).collect(),
        ));
        let dis: Vec<(f64, f64)> = ps
            .iter()
            .filter_map(|p| p.disattenuated.map(|d| (p.tokens as f64, d)))
            .collect();
        if !dis.is_empty() {
            let (x, y) = dis.into_iter().unzip();
            corr.push(Series::new(format!("{a} × {b} disattenuated"), x, y));
        }
    }
    if !corr.is_empty() {
        let f = out.join("fig_emergence_correlation.png");
        report::line_plot(
            &f,
            &corr,
            &plot(
                "Seed-to-seed correlation of the preference score during phase 1",
                "Pearson r",
            ),
        )?;
        files.push(f);
    }
    let mut runs: Vec<&str> = e.points.iter().map(|p| p.label.as_str()).collect();
    runs.dedup();
    let mut heads = Vec::new();
    for r in runs {
        let ps: Vec<&EmergencePoint> = e.points.iter().filter(|p| p.label == r).collect();
        let x: Vec<f64> = ps.iter().map(|p| p.tokens as f64).collect();
        heads.push(Series::new(
            format!("{r} share primary"),
            x.clone(),
            ps.iter().map(|p| p.share_primary).collect(),
        ));
        let gap =
            |p: &&EmergencePoint| p.heads.gap.iter().sum::<f64>() / p.heads.gap.len().max(1) as f64;
        heads.push(Series::new(
            format!("{r} mean head gap (nats)"),
            x,
            ps.iter().map(gap).collect(),
        ));
    }
    if heads.is_empty() {
        return Ok(files);
    }
    let f = out.join("fig_emergence_heads.png");
    report::line_plot(
        &f,
        &heads,
        &plot(
            "Primary tower's share and head gap during phase 1",
            "share / nats",
        ),
    )?;
    files.push(f);
    Ok(files)
}

fn plot(title: &str, y: &str) -> PlotOptions {
    PlotOptions {
        title: title.into(),
        x_label: "token positions trained in phase 1".into(),
        y_label: y.into(),
        ..PlotOptions::default()
    }
}

fn emergence_table(e: &Emergence) -> report::Table {
    let cols = [
        "what",
        "fraction",
        "tokens",
        "value",
        "disattenuated",
        "split-half",
        "head gap 1",
        "head gap 2",
        "flagged",
    ];
    let mut t = report::Table::new(cols.map(String::from).to_vec())
        .with_title("How the preference emerges: runs and seed pairs at phase-1 snapshots")
        .with_note("value: share won by the primary tower (runs) or raw Pearson r (pairs); disattenuated by split-half reliabilities; head gap: head NLL minus joint NLL (nats)")
        .with_precision(3);
    for p in &e.points {
        let gap = |k: usize| p.heads.gap.get(k).copied();
        t.push_row(vec![
            p.label.clone().into(),
            p.fraction.into(),
            (p.tokens as usize).into(),
            p.share_primary.into(),
            report::Cell::from(None::<f64>),
            p.split_half.into(),
            gap(0).into(),
            gap(1).into(),
            (if p.heads.above_unigram { "yes" } else { "" }).into(),
        ]);
    }
    for p in &e.pairs {
        t.push_row(vec![
            format!("{} × {}", p.a, p.b).into(),
            p.fraction.into(),
            (p.tokens as usize).into(),
            p.pearson.into(),
            p.disattenuated.into(),
            report::Cell::from(None::<f64>),
            report::Cell::from(None::<f64>),
            report::Cell::from(None::<f64>),
            "".into(),
        ]);
    }
    t
}
