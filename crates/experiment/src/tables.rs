//! The paper's tables and figures from scores: Fig. 4's per-tag table and histograms, and the
//! pair and run tables of the study with their reliability columns (Table 3's word groups are
//! in `groups`).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::run::HeadQuality;

/// One run of a finished study: a row of the runs table.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StudyRun {
    /// `<model>-s<seed>`.
    pub label: String,
    /// Its folder.
    pub dir: std::path::PathBuf,
    /// Scoring-set fingerprint (short).
    pub scoring_fingerprint: String,
    /// Scored positions.
    pub positions: u64,
    /// Head quality (validation).
    pub heads: HeadQuality,
    /// Retest heads' quality.
    pub retest: Option<HeadQuality>,
    /// Share of scored tokens won by the primary tower.
    pub share_primary: f64,
    /// Whether the run was reused.
    pub reused: bool,
    /// Token positions of phase 1.
    pub phase1_tokens: u64,
    /// Phase 1's throughput (`towers::TrainSummary::tokens_per_s`).
    pub phase1_tokens_per_s: f64,
    /// The device that last trained the run ([`crate::Manifest::device`]).
    pub device: String,
}

impl StudyRun {
    /// A head of the run, main or retest, ended no better than the unigram model (as
    /// `RunScores::flagged`, which flags its pairs).
    pub fn flagged(&self) -> bool {
        crate::manifest::heads_flagged(&self.heads, self.retest.as_ref())
    }
}

/// Fig. 4 for one run ([`crate::pos::pos_tags`]' summaries `per_tag` of `scores`) written to `out` as the
/// table `pos_<label>` and the figure `fig4_pos_<label>.png`; returns the files.
pub fn write_pos(
    scores: &crate::analysis::RunScores,
    per_tag: &[prefscore::TagSummary],
    title: &str,
    out: &Path,
) -> Result<Vec<std::path::PathBuf>> {
    let title = match scores.flagged {
        true => format!("{title} [FLAGGED: a head no better than unigram]"),
        false => title.to_string(),
    };
    let t = tag_table(per_tag, &title);
    let mut files = t.write_all(out, &format!("pos_{}", scores.label))?;
    let fig = out.join(format!("fig4_pos_{}.png", scores.label));
    tag_histograms(&fig, per_tag, &title)?;
    files.push(fig);
    Ok(files)
}

/// Table of `prefscore::by_tag` results: per tag n, mean score with interval, share primary.
pub fn tag_table(per_tag: &[prefscore::TagSummary], title: &str) -> report::Table {
    let level = prefscore::common_level(per_tag.iter().map(|g| g.interval.as_ref()));
    let mut t = report::Table::new(vec![
        "tag".into(),
        "tokens".into(),
        "mean score".into(),
        format!("{level} low"),
        format!("{level} high"),
        "median".into(),
        "share primary".into(),
    ])
    .with_title(title)
    .with_note("score s_a = log p̄1_a − log p̄2_a (eq. 4); tower 1 is the primary tower (eq. 3)")
    .with_precision(3);
    for g in per_tag {
        let (lo, hi) = g.interval.map(|i| (i.lo, i.hi)).unzip();
        t.push_row(vec![
            report::Cell::from(g.tag.as_str()),
            report::Cell::from(g.n),
            report::Cell::from(g.mean),
            report::Cell::from(lo),
            report::Cell::from(hi),
            report::Cell::from(g.quantiles[2]),
            report::Cell::from(g.share_primary),
        ]);
    }
    t
}

/// Fig. 4: one histogram of scores per tag.
pub fn tag_histograms(path: &Path, per_tag: &[prefscore::TagSummary], title: &str) -> Result<()> {
    let groups: Vec<(String, Vec<f64>)> = per_tag
        .iter()
        .map(|t| (t.tag.clone(), t.scores.clone()))
        .collect();
    report::histogram_grid(
        path,
        &groups,
        &report::HistogramOptions {
            title: title.into(),
            x_label: "score (primary − secondary)".into(),
            bins: 20,
            columns: 4,
            mark_zero: true,
            ..report::HistogramOptions::default()
        },
    )?;
    Ok(())
}

/// One row per pair of runs: the raw correlations, the reliabilities, the disattenuated value
/// and the frequency partial.
pub fn pairs_table(
    pairs: &[crate::analysis::PairComparison],
    title: &str,
) -> Result<report::Table> {
    let level = prefscore::common_level(pairs.iter().flat_map(|p| {
        let d = p.disattenuated.as_ref().and_then(|d| d.interval.as_ref());
        [p.pearson.interval.as_ref(), d]
    }));
    let mut t = report::Table::new(
        [
            "run a",
            "run b",
            "tokens",
            "Pearson",
            &format!("{level} low"),
            &format!("{level} high"),
            "Spearman",
            "head-seed rel. a",
            "head-seed rel. b",
            "split-half rel. a",
            "split-half rel. b",
            "disattenuated",
            &format!("disatt. {level} low"),
            &format!("disatt. {level} high"),
            "partial (log freq)",
            "paper",
            "flagged",
        ]
        .map(String::from)
        .to_vec(),
    )
    .with_title(title)
    .with_note(
        "disattenuated = r / sqrt(r_aa r_bb) with head-seed (test-retest) reliabilities; \
         split-half reliabilities Spearman-Brown corrected; paper: the paper's Pearson for the \
         same kind of pair in its Table 2 (ELMo, GPT, Bert-base, Bert-large ×2), where it ran \
         one; flagged: a head of a run ended no better than the unigram model",
    )
    .with_precision(3);
    for p in pairs {
        let (lo, hi) = p.pearson.interval.map(|i| (i.lo, i.hi)).unzip();
        let rel = p.reliability_head_seed;
        let d = p.disattenuated.as_ref();
        let (dlo, dhi) = d.and_then(|d| d.interval).map(|i| (i.lo, i.hi)).unzip();
        t.push_row(vec![
            report::Cell::from(p.a.as_str()),
            report::Cell::from(p.b.as_str()),
            report::Cell::from(p.tokens),
            report::Cell::from(p.pearson.r),
            report::Cell::from(lo),
            report::Cell::from(hi),
            report::Cell::from(p.spearman.r),
            report::Cell::from(rel.map(|r| r[0])),
            report::Cell::from(rel.map(|r| r[1])),
            report::Cell::from(p.reliability_split_half[0]),
            report::Cell::from(p.reliability_split_half[1]),
            report::Cell::from(d.and_then(|d| d.value)),
            report::Cell::from(dlo),
            report::Cell::from(dhi),
            report::Cell::from(p.partial_log_freq),
            report::Cell::from(paper_table2(&p.models[0], &p.models[1]).unwrap_or("—")),
            report::Cell::from(if p.flagged { "yes" } else { "" }),
        ]);
    }
    Ok(t)
}

/// The pairs of one score kind (`kname`) and selection as Table 2: `pairs_<kname>_<sel>` (md,
/// csv, json) and, when there is a pair, `fig_table2_<kname>_<sel>.png` (the run × run matrix
/// of `labels`) in `out`. Returns the table and the files written.
pub fn write_pairs(
    pairs: &[crate::analysis::PairComparison],
    labels: &[String],
    kname: &str,
    sel: crate::analysis::TokenSelection,
    out: &Path,
) -> Result<(report::Table, Vec<std::path::PathBuf>)> {
    let t = pairs_table(pairs, &format!("Run pairs, {kname} score, {sel} tokens"))?;
    let mut files = t.write_all(out, &format!("pairs_{kname}_{sel}"))?;
    if !pairs.is_empty() {
        let fig = out.join(format!("fig_table2_{kname}_{sel}.png"));
        pairs_matrix_figure(labels, pairs, &format!("Table 2: {kname}, {sel}"), &fig)?;
        files.push(fig);
    }
    Ok((t, files))
}

/// The paper's Pearson correlation of the preference scores for a pair of models (He &
/// Toyoizumi, Table 2), where the paper ran that kind of pair; `None` where it did not.
///
/// Its five runs (ELMo, GPT, Bert-base, Bert-large ×2) give: Bert-large × Bert-large 0.94 (its
/// only seed-to-seed cell, given to two seeds of one BERT size), Bert-base × Bert-large 0.72,
/// ELMo × GPT 0.91, Bert-large × GPT 0.57–0.63 and × ELMo 0.57–0.61, Bert-base × GPT 0.26 and
/// × ELMo 0.27; nothing for GPT × GPT, ELMo × ELMo or a second GPT or ELMo size. A name ending
/// in `_large` is the large size, any other the base size; ELMo in either mode is ELMo.
pub fn paper_table2(model_a: &str, model_b: &str) -> Option<&'static str> {
    // (family, large size)
    fn kind(model: &str) -> (&str, bool) {
        let (family, large) = match model.strip_suffix("_large") {
            Some(family) => (family, true),
            None => (model.strip_suffix("_base").unwrap_or(model), false),
        };
        let family = match family {
            "elmo_released" => "elmo",
            family => family,
        };
        (family, large)
    }
    let (a, b) = (kind(model_a), kind(model_b));
    let (x, y) = if a <= b { (a, b) } else { (b, a) };
    match (x, y) {
        (("bert", a), ("bert", b)) => Some(if a == b { "0.94" } else { "0.72" }),
        (("elmo", false), ("gpt", false)) => Some("0.91"),
        (("bert", large), ("gpt", false)) => Some(if large { "0.57–0.63" } else { "0.26" }),
        (("bert", large), ("elmo", false)) => Some(if large { "0.57–0.61" } else { "0.27" }),
        _ => None,
    }
}

/// One row per run: scored positions, head quality against the joint head and the unigram
/// model, early stopping, the primary tower's share.
pub fn runs_table(runs: &[StudyRun]) -> report::Table {
    let mut t = report::Table::new(
        [
            "run",
            "phase-1 tokens",
            "tokens/s",
            "phase-1 update time (min)",
            "scoring set",
            "positions",
            "head 1 NLL",
            "head 2 NLL",
            "joint NLL",
            "gap 1",
            "gap 2",
            "unigram NLL",
            "head updates",
            "stopped early",
            "share primary",
            "flagged",
            "device",
        ]
        .map(String::from)
        .to_vec(),
    )
    .with_title("Runs: heads against the joint head and the unigram model (validation, nats)")
    .with_note(
        "budget: tokens of phase 1 (the paper's rule was equal wall-clock, about a day each); \
         tokens/s: phase 1's tokens over its update time (validation and checkpoints excluded), \
         and that time in minutes; device: the one that last trained the run",
    )
    .with_precision(3);
    for r in runs {
        let h = &r.heads;
        t.push_row(vec![
            report::Cell::from(r.label.as_str()),
            report::Cell::from(r.phase1_tokens as usize),
            report::Cell::from(r.phase1_tokens_per_s),
            report::Cell::from(
                (r.phase1_tokens_per_s > 0.0)
                    .then(|| r.phase1_tokens as f64 / r.phase1_tokens_per_s / 60.0),
            ),
            report::Cell::from(r.scoring_fingerprint.as_str()),
            report::Cell::from(r.positions as usize),
            report::Cell::from(h.nll.first().copied()),
            report::Cell::from(h.nll.get(1).copied()),
            report::Cell::from(h.joint_nll),
            report::Cell::from(h.gap.first().copied()),
            report::Cell::from(h.gap.get(1).copied()),
            report::Cell::from(h.unigram_nll),
            report::Cell::from(h.steps as usize),
            report::Cell::from(if h.stopped_early { "yes" } else { "no" }),
            report::Cell::from(r.share_primary),
            report::Cell::from(if r.flagged() { "yes" } else { "" }),
            report::Cell::from(r.device.as_str()),
        ]);
    }
    t
}

/// Table 2 as a matrix figure over `labels` (the runs in table order): each pair's Pearson r
/// below the diagonal, its disattenuated value (head-seed reliabilities) above it and each run's
/// head-seed reliability (the ceiling of its correlations) on it, annotated, on one colour
/// scale from −1 to 1 (a disattenuated value beyond it keeps its number and takes the end
/// colour); cells without a value are grey. Written to `path` (PNG or SVG).
pub fn pairs_matrix_figure(
    labels: &[String],
    pairs: &[crate::analysis::PairComparison],
    title: &str,
    path: &Path,
) -> Result<()> {
    run_matrix_figure(
        labels,
        &pairs_matrix(labels, pairs),
        title,
        "below: r · diagonal: reliability · above: disattenuated",
        path,
    )
}

/// A run × run matrix (row-major, NaN = no value) as an annotated heat map on −1..1.
fn run_matrix_figure(
    labels: &[String],
    matrix: &[f64],
    title: &str,
    x_label: &str,
    path: &Path,
) -> Result<()> {
    let n = labels.len();
    report::heatmap(
        path,
        matrix,
        n,
        n,
        labels,
        labels,
        &report::HeatmapOptions {
            title: title.into(),
            x_label: x_label.into(),
            y_label: "run".into(),
            value_range: Some((-1.0, 1.0)),
            annotate: true,
        },
    )?;
    Ok(())
}

/// The row-major matrix of [`pairs_matrix_figure`]: Pearson r at (later run, earlier run),
/// the disattenuated value at (earlier, later), the head-seed reliability at (run, run), NaN
/// where a value is missing.
pub(crate) fn pairs_matrix(
    labels: &[String],
    pairs: &[crate::analysis::PairComparison],
) -> Vec<f64> {
    let n = labels.len();
    let mut m = vec![f64::NAN; n * n];
    for (i, j, p) in crate::analysis::pair_cells(labels, pairs) {
        let (late, early) = (i.max(j), i.min(j));
        m[late * n + early] = p.pearson.r;
        if let Some([ra, rb]) = p.reliability_head_seed {
            m[i * n + i] = ra;
            m[j * n + j] = rb;
        }
        if let Some(v) = p.disattenuated.as_ref().and_then(|d| d.value) {
            m[early * n + late] = v;
        }
    }
    m
}

/// Table 4 as the paper lays it out: Spearman ρ of every pair of runs below the diagonal, and on
/// the diagonal each run's Spearman ρ with the frequency rank (`vs_frequency`, in the order of
/// `labels`); NaN above the diagonal and where a value is missing. Row-major.
pub(crate) fn spearman_matrix(
    labels: &[String],
    pairs: &[crate::analysis::PairComparison],
    vs_frequency: &[Option<f64>],
) -> Vec<f64> {
    let n = labels.len();
    let mut m = vec![f64::NAN; n * n];
    for (i, j, p) in crate::analysis::pair_cells(labels, pairs) {
        m[i.max(j) * n + i.min(j)] = p.spearman.r;
    }
    for (i, f) in vs_frequency.iter().enumerate().take(n) {
        m[i * n + i] = f.unwrap_or(f64::NAN);
    }
    m
}

/// Table 4 as a table (`table4_spearman.{csv,md,json}`): one row per run, its Spearman ρ with
/// every earlier run and with the frequency rank, over `selection`'s tokens.
pub fn table4(
    labels: &[String],
    pairs: &[crate::analysis::PairComparison],
    vs_frequency: &[Option<f64>],
    selection: &str,
) -> report::Table {
    let n = labels.len();
    let m = spearman_matrix(labels, pairs, vs_frequency);
    let mut cols = vec!["run".to_string()];
    cols.extend(labels.iter().take(n.saturating_sub(1)).cloned());
    cols.push("vs frequency rank".into());
    let mut t = report::Table::new(cols)
        .with_title(format!(
            "Table 4: Spearman ρ between runs, {selection} tokens"
        ))
        .with_note(
            "each cell: Spearman ρ of the two runs' preference scores; vs frequency rank: the \
             run's ρ with the tokens' frequency rank (1 = most frequent), over the 5000 most \
             frequent tokens",
        )
        .with_precision(3);
    for (i, l) in labels.iter().enumerate() {
        let mut row = vec![report::Cell::from(l.as_str())];
        for j in 0..n.saturating_sub(1) {
            let v = m[i * n + j];
            row.push(match j < i && v.is_finite() {
                true => report::Cell::from(v),
                false => report::Cell::from(""),
            });
        }
        row.push(report::Cell::from(vs_frequency.get(i).copied().flatten()));
        t.push_row(row);
    }
    t
}

/// `fig_table4_spearman.png`: the Spearman matrix (`spearman_matrix`) as an annotated heat map.
pub fn table4_figure(
    labels: &[String],
    pairs: &[crate::analysis::PairComparison],
    vs_frequency: &[Option<f64>],
    title: &str,
    path: &Path,
) -> Result<()> {
    run_matrix_figure(
        labels,
        &spearman_matrix(labels, pairs, vs_frequency),
        title,
        "below: Spearman ρ between runs · diagonal: ρ with frequency rank",
        path,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::PairComparison;

    fn pair(a: &str, b: &str, r: f64, disattenuated: Option<f64>) -> PairComparison {
        let corr = |method: &str| serde_json::json!({"method": method, "n": 100, "r": r, "interval": null, "p_value": null});
        let d = disattenuated.map(|v| {
            serde_json::json!({"raw": r, "rel_a": 0.9, "rel_b": 0.8, "value": v, "interval": null, "n": 100})
        });
        serde_json::from_value(serde_json::json!({
            "a": a, "b": b, "models": ["gpt", "gpt"], "selection": "top-5000", "tokens": 100,
            "pearson": corr("Pearson"), "spearman": corr("Spearman"),
            "reliability_head_seed": [0.9, 0.8], "reliability_split_half": [0.7, 0.6],
            "disattenuated": d, "partial_log_freq": r, "flagged": false
        }))
        .unwrap()
    }

    #[test]
    fn the_paper_column_has_a_cell_only_for_the_kinds_of_pair_the_paper_ran() {
        let cases = [
            ("gpt", "gpt", None),
            ("gpt", "gpt_large", None),
            ("elmo", "elmo", None),
            ("elmo_released", "elmo_released", None),
            ("elmo", "elmo_released", None),
            ("bert", "bert", Some("0.94")),
            ("bert_large", "bert_large", Some("0.94")),
            ("bert", "bert_large", Some("0.72")),
            ("bert_base", "bert_large", Some("0.72")),
            ("gpt", "elmo", Some("0.91")),
            ("gpt", "elmo_released", Some("0.91")),
            ("gpt", "bert", Some("0.26")),
            ("gpt", "bert_large", Some("0.57–0.63")),
            ("elmo", "bert", Some("0.27")),
            ("elmo_released", "bert", Some("0.27")),
            ("elmo_released", "bert_large", Some("0.57–0.61")),
            ("gpt_large", "elmo", None),
            ("gpt_large", "bert", None),
            ("elmo_large", "gpt", None),
        ];
        for (a, b, paper) in cases {
            assert_eq!(paper_table2(a, b), paper, "{a} × {b}");
            assert_eq!(paper_table2(b, a), paper, "{b} × {a}");
        }
    }

    #[test]
    fn interval_columns_name_the_level_the_intervals_were_drawn_at() {
        let tag = |level| prefscore::TagSummary {
            tag: "NOUN".into(),
            n: 3,
            mean: 0.1,
            interval: Some(prefscore::Interval {
                lo: 0.0,
                hi: 0.2,
                level,
            }),
            sd: 0.1,
            quantiles: [0.1; 5],
            share_primary: 0.5,
            scores: vec![0.0, 0.1, 0.2],
            tokens: vec![1, 2, 3],
        };
        let head = |t: report::Table| {
            let md = t.to_markdown();
            md.lines().find(|l| l.starts_with('|')).unwrap().to_string()
        };
        let at90 = head(tag_table(&[tag(0.9)], "t"));
        assert!(
            at90.contains("90% low") && at90.contains("90% high"),
            "{at90}"
        );
        assert!(!at90.contains("95%"), "{at90}");
        let mixed = head(tag_table(&[tag(0.9), tag(0.99)], "t"));
        assert!(mixed.contains("mixed low"), "{mixed}");
    }

    #[test]
    fn the_runs_table_flags_a_run_whose_retest_heads_are_no_better_than_unigram() {
        let heads = |above_unigram| HeadQuality {
            nll: vec![5.0, 5.1],
            joint_nll: 4.9,
            gap: vec![0.1, 0.2],
            unigram_nll: 7.0,
            above_unigram,
            steps: 10,
            stopped_early: true,
        };
        let run = |label: &str, retest| StudyRun {
            label: label.into(),
            dir: "runs".into(),
            scoring_fingerprint: "f".into(),
            positions: 100,
            heads: heads(false),
            retest,
            share_primary: 0.5,
            reused: true,
            phase1_tokens: 1000,
            phase1_tokens_per_s: 10.0,
            device: "cpu".into(),
        };
        let runs = [
            run("gpt-s0", Some(heads(false))),
            run("gpt-s1", Some(heads(true))),
            run("gpt-s2", None),
        ];
        let t = runs_table(&runs);
        let col = t.header().iter().position(|c| c == "flagged").unwrap();
        let flags: Vec<String> = (t.rows().iter())
            .map(|r| match &r[col] {
                report::Cell::Text(s) => s.clone(),
                other => panic!("the flagged column holds text, not {other:?}"),
            })
            .collect();
        assert_eq!(flags, ["", "yes", ""]);
    }

    #[test]
    fn the_matrix_has_raw_r_below_and_disattenuated_above_the_diagonal() {
        let labels: Vec<String> = ["gpt-s0", "gpt-s1", "bert-s0"].map(String::from).to_vec();
        // Pairs in any order; one without a disattenuated value.
        let pairs = [
            pair("gpt-s1", "gpt-s0", 0.5, Some(0.6)),
            pair("gpt-s0", "bert-s0", -0.2, None),
            pair("gpt-s1", "bert-s0", 0.1, Some(1.2)),
        ];
        let m = pairs_matrix(&labels, &pairs);
        let at = |i: usize, j: usize| m[i * 3 + j];
        assert_eq!((at(1, 0), at(0, 1)), (0.5, 0.6));
        assert_eq!(at(2, 0), -0.2);
        assert!(at(0, 2).is_nan());
        assert_eq!((at(2, 1), at(1, 2)), (0.1, 1.2));
        // Each run's head-seed reliability on the diagonal (a 0.9, b 0.8 in every pair).
        assert_eq!((at(0, 0), at(1, 1), at(2, 2)), (0.9, 0.9, 0.8));
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("t2.png");
        pairs_matrix_figure(&labels, &pairs, "Table 2", &f).unwrap();
        assert!(std::fs::metadata(&f).unwrap().len() > 1000);
    }

    #[test]
    fn table4_has_spearman_below_and_the_frequency_rank_on_the_diagonal() {
        let labels: Vec<String> = ["gpt-s0", "gpt-s1", "bert-s0"].map(String::from).to_vec();
        let pairs = [
            pair("gpt-s1", "gpt-s0", 0.5, Some(0.6)),
            pair("gpt-s0", "bert-s0", -0.2, None),
        ];
        let freq = [Some(0.1), None, Some(-0.3)];
        let m = spearman_matrix(&labels, &pairs, &freq);
        let at = |i: usize, j: usize| m[i * 3 + j];
        assert_eq!((at(1, 0), at(2, 0)), (0.5, -0.2));
        assert!(at(0, 1).is_nan() && at(2, 1).is_nan() && at(1, 1).is_nan());
        assert_eq!((at(0, 0), at(2, 2)), (0.1, -0.3));
        let md = table4(&labels, &pairs, &freq, "top-5000").to_markdown();
        let row = |l: &str| {
            md.lines()
                .find(|r| r.starts_with(&format!("| {l}")))
                .unwrap()
                .to_string()
        };
        // bert-s0: ρ with gpt-s0, none with gpt-s1, then its frequency ρ.
        let cells: Vec<String> = row("bert-s0")
            .split('|')
            .map(|c| c.trim().to_string())
            .collect();
        assert_eq!(cells[2..5], ["-0.200", "", "-0.300"]);
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("t4.png");
        table4_figure(&labels, &pairs, &freq, "Table 4", &f).unwrap();
        assert!(std::fs::metadata(&f).unwrap().len() > 1000);
    }
}
