//! The split-scoring control: how much agreement between runs a scoring protocol makes when it
//! scores each tower on its own part of the text.
//!
//! Our scores put both towers of a run on identical positions. The released two-tower code
//! scores one tower per evaluation pass (phase 2 gives tower 1's head, phase 3 tower 2's) on the
//! first windows of a validation set shuffled by the process's seed; phases 2 and 3 train under
//! two fixed seeds, the same for every model, so a pass run under its own phase's seed reads
//! other windows than the other tower's pass. Its per-token vector starts at zeros, so a token
//! the pass never saw counts as log p = 0. The code that turns two such vectors into the
//! paper's score is not released, so whether the paper scored the towers on different text
//! cannot be read from it. This control says what
//! such a protocol would give on our runs: the scoring text is cut into blocks in document order,
//! half of them (a fixed draw, the same for every run and style) score tower 1 and the other half
//! tower 2. Two deals: [`Deal::Blocks`] of [`SPLIT_BLOCKS`] long stretches, and
//! [`Deal::Windows`] of about [`RELEASED_WINDOW`] scored positions each, the released code's
//! 128-token windows, drawn at random across the text (its passes of 12,800 windows from a
//! validation set of many more read nearly disjoint windows). A token's score then also carries
//! how hard its contexts are in one half against the other, which every model reading that
//! text finds alike, so runs agree without sharing any division of labour: through long-range
//! differences of the text (blocks) and through which few contexts of a rare token each half
//! happens to hold (windows as well). The "one tower on both halves" column measures that part
//! alone (a run's tower 1 on both halves, no second tower at all).
//!
//! Runs of different styles have different scoring sets cut from the same held-out documents in
//! the same order; a position's place in its set's text (its batch, and its place inside the
//! batch) cuts every set at the same fractions of the text, so block k of each covers about the
//! same stretch (up to the sets' small differences of density), aligned approximately, not
//! exactly. At the scale of a window the styles' sets do not align (each style cuts its own
//! windows), so [`Deal::Windows`] compares only runs scored on one set.

use std::path::Path;

use heads::PositionLogProbs;
use prefscore::{
    correlate, own_positions, top_tokens, CorrOptions, Method, ScoreKind, Scores, TokenStats,
};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use report::{Cell, PlotOptions, Series, Table};
use serde::{Deserialize, Serialize};

use crate::analysis::{pair_cells, PairComparison, RunScores, TopTokens};
use crate::controls::r_only;
use crate::error::{ExperimentError, Result};

/// Blocks of the scoring text (in document order) that [`Deal::Blocks`] deals to the halves.
pub const SPLIT_BLOCKS: usize = 64;

/// Scored positions per block of [`Deal::Windows`]: the released code's window (128 tokens).
pub const RELEASED_WINDOW: usize = 128;

/// Seed of the draw of blocks: a constant, so the halves never depend on a run (as the released
/// code's phase-2 and phase-3 evaluation seeds do not).
const SPLIT_SEED: u64 = 0x0bad_5eed;

/// How the scoring text is cut into blocks, which a fixed draw deals to the two halves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Deal {
    /// This many blocks in all: long stretches of text ([`SPLIT_BLOCKS`]).
    Blocks(usize),
    /// Blocks of about this many scored positions of the smallest scoring set compared
    /// ([`RELEASED_WINDOW`]: the released code's windows). Only pairs of runs scored on one
    /// scoring set: the styles' sets cut the text into windows differently, so at this scale
    /// only one set's blocks are the same text for both runs (the released code's passes read
    /// the same windows for every model).
    Windows(usize),
}

impl Deal {
    /// The two deals of the control: long stretches, and the released code's windows.
    pub const BOTH: [Deal; 2] = [Deal::Blocks(SPLIT_BLOCKS), Deal::Windows(RELEASED_WINDOW)];

    /// Blocks in all when the smallest scoring set has `positions` scored positions.
    pub fn blocks(self, positions: usize) -> usize {
        match self {
            Deal::Blocks(n) => n.min(positions),
            Deal::Windows(w) => positions / w.max(1),
        }
    }
}

impl std::fmt::Display for Deal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Deal::Blocks(n) => write!(f, "{n} blocks"),
            Deal::Windows(w) => write!(f, "windows of ~{w} positions"),
        }
    }
}

/// Where each scored position of `lp` lies in its scoring text, as a fraction in [0, 1): its
/// batch plus its flat place inside the batch (out of the largest flat place of any batch),
/// over the batches. Batches hold the text's windows in order, so this grows with the text.
fn text_coordinate(lp: &PositionLogProbs) -> Vec<f64> {
    let n_batches = n_batches(lp).max(1) as f64;
    let flat = lp.position.iter().max().map_or(1, |&p| p as usize + 1) as f64;
    lp.batch_index
        .iter()
        .zip(&lp.position)
        .map(|(&b, &p)| (b as f64 + p as f64 / flat) / n_batches)
        .collect()
}

/// Scoring batches of `lp` (one more than its largest batch index).
fn n_batches(lp: &PositionLogProbs) -> usize {
    lp.batch_index.iter().max().map_or(0, |&b| b as usize + 1)
}

/// The side of each scored position of `lp`: `false` for the first half (scores tower 1),
/// `true` for the second. Positions are grouped into `blocks` equal stretches of the scoring
/// text in order (by their place in it, `text_coordinate`); a fixed draw deals half of the
/// blocks to each side.
pub fn scoring_halves(lp: &PositionLogProbs, blocks: usize) -> Result<Vec<bool>> {
    if blocks < 2 {
        return Err(ExperimentError::BadSetting {
            field: "split-scoring blocks".into(),
            value: blocks.to_string(),
            why: "two halves need at least 2 blocks".into(),
        });
    }
    if lp.len() < blocks {
        return Err(ExperimentError::TooLittleData {
            what: "the scoring set, for the split-scoring control (positions)".into(),
            have: lp.len(),
            need: blocks,
        });
    }
    let mut order: Vec<usize> = (0..blocks).collect();
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(SPLIT_SEED));
    let mut second = vec![false; blocks];
    for &b in &order[blocks / 2..] {
        second[b] = true;
    }
    Ok(text_coordinate(lp)
        .iter()
        .map(|&c| second[((c * blocks as f64) as usize).min(blocks - 1)])
        .collect())
}

/// The control for one pair of runs (top-`n` tokens, Pearson, towers by index: tower 1 of each
/// run on the first half, tower 2 on the second).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SplitScoringPair {
    /// First run.
    pub a: String,
    /// Second run.
    pub b: String,
    /// How the text was dealt.
    pub deal: Deal,
    /// Blocks dealt to the halves ([`Deal::blocks`] of the smallest scoring set compared).
    pub blocks: usize,
    /// The runs' primary towers (eq. 3, 0-based index): where they differ, the by-index
    /// scores below are oriented oppositely to the eq. 3 scores.
    pub primary: [usize; 2],
    /// Pearson r of the pair's scores as the study measures them (identical positions, eq. 3).
    pub same_positions: f64,
    /// Tokens of the top `n` scored on both halves in both runs.
    pub tokens: usize,
    /// Arithmetic (eq. 4), tokens missing from a half left out.
    pub arithmetic: f64,
    /// Geometric (released code), tokens missing from a half left out.
    pub geometric: f64,
    /// Tokens of the top `n` with a score under the zero rule (seen on at least one half).
    pub tokens_zero_rule: usize,
    /// Of those, the tokens one half of either run never saw (scored by the zero alone).
    pub one_sided: usize,
    /// Geometric with the released code's rule: a half that never saw a token counts 0.
    pub geometric_zero_rule: f64,
    /// Arithmetic with tower 1 on both halves: the text's share alone, no second tower.
    pub one_tower: f64,
}

/// The split-scoring control for each pair of `pairs` (the study's comparisons on its main
/// score kind and top-`top_n` selection), over the `top_n` most frequent tokens (`freq`), the
/// text dealt by `deal` (the same blocks for every run: [`Deal::blocks`] of the smallest
/// scoring set of `runs`; [`Deal::Windows`] only for pairs on one scoring set); with fewer than
/// 2 blocks there are no halves and no pairs.
pub fn split_scoring_pairs(
    runs: &[RunScores],
    pairs: &[PairComparison],
    top: TopTokens<'_>,
    deal: Deal,
) -> Result<Vec<SplitScoringPair>> {
    let (freq, top_n) = (top.freq, top.n);
    let fewest = runs.iter().map(|r| r.logprobs.len()).min();
    let blocks = deal.blocks(fewest.unwrap_or(0));
    if blocks < 2 {
        return Ok(Vec::new());
    }
    let mut per_run = Vec::with_capacity(runs.len());
    for r in runs {
        per_run.push(RunSplit::new(r, blocks)?);
    }
    let labels: Vec<String> = runs.iter().map(|r| r.label.clone()).collect();
    let opts = r_only(&CorrOptions::default());
    let r = |x: &Scores, y: &Scores| {
        correlate(&x.values, &y.values, freq, top_n, Method::Pearson, &opts)
    };
    let mut out = Vec::new();
    for (i, j, p) in pair_cells(&labels, pairs) {
        let same_set = runs[i].scoring.fingerprint == runs[j].scoring.fingerprint;
        if matches!(deal, Deal::Windows(_)) && !same_set {
            continue;
        }
        let (x, y) = (&per_run[i], &per_run[j]);
        let arithmetic = r(&x.arithmetic, &y.arithmetic)?;
        let (xz, yz) = (&x.geometric_zero_rule.values, &y.geometric_zero_rule.values);
        let zero = r(&x.geometric_zero_rule, &y.geometric_zero_rule)?;
        let one_sided = top_tokens(freq, top_n, &[xz, yz])
            .iter()
            .filter(|&&t| {
                let seen = |v: &[Option<f64>]| v[t as usize].is_some();
                !(seen(&x.geometric.values) && seen(&y.geometric.values))
            })
            .count();
        out.push(SplitScoringPair {
            a: p.a.clone(),
            b: p.b.clone(),
            deal,
            blocks,
            primary: [runs[i].scores.towers[0], runs[j].scores.towers[0]],
            same_positions: p.pearson.r,
            tokens: arithmetic.n,
            arithmetic: arithmetic.r,
            geometric: r(&x.geometric, &y.geometric)?.r,
            tokens_zero_rule: zero.n,
            one_sided,
            geometric_zero_rule: zero.r,
            one_tower: r(&x.one_tower, &y.one_tower)?.r,
        });
    }
    Ok(out)
}

/// One run's scores with its towers on the two halves (and on identical positions), towers by
/// index.
struct RunSplit {
    identical: Scores,
    arithmetic: Scores,
    geometric: Scores,
    geometric_zero_rule: Scores,
    one_tower: Scores,
}

impl RunSplit {
    fn new(run: &RunScores, blocks: usize) -> Result<Self> {
        let lp = &run.logprobs;
        if lp.logp.len() != 2 {
            return Err(ExperimentError::mismatch(
                run.label.clone(),
                "the split-scoring control",
                format!("it needs two towers, the run has {}", lp.logp.len()),
            ));
        }
        let side = scoring_halves(lp, blocks)?;
        let stats = |k: [usize; 2]| -> Result<TokenStats> {
            Ok(own_positions(
                &lp.targets,
                [&lp.logp[k[0]], &lp.logp[k[1]]],
                &side,
                lp.vocab_size,
            )?)
        };
        let (two, one) = (stats([0, 1])?, stats([0, 0])?);
        let mut both = TokenStats::new(lp.vocab_size, 2)?;
        both.add(&lp.targets, &[&lp.logp[0], &lp.logp[1]])?;
        Ok(Self {
            identical: both.raw_scores(ScoreKind::ArithmeticMean, 0, 1)?,
            arithmetic: two.raw_scores(ScoreKind::ArithmeticMean, 0, 1)?,
            geometric: two.raw_scores(ScoreKind::GeometricMean, 0, 1)?,
            geometric_zero_rule: two.scores_missing_as_zero(ScoreKind::GeometricMean, 0, 1)?,
            one_tower: one.raw_scores(ScoreKind::ArithmeticMean, 0, 1)?,
        })
    }
}

/// Fig.: run `b`'s scores against run `a`'s over the `top_n` most frequent tokens (`freq`),
/// eq. 4 with towers by index, on identical positions and with each tower on its own half of
/// each of `deals` (how the text was dealt, and into how many blocks, as
/// [`split_scoring_pairs`] reports them), each series named with its Pearson r.
pub fn split_scoring_figure(
    runs: &[RunScores],
    a: &str,
    b: &str,
    deals: &[(Deal, usize)],
    top: TopTokens<'_>,
    path: &Path,
) -> Result<()> {
    let (freq, top_n) = (top.freq, top.n);
    let find = |l: &str| {
        runs.iter()
            .find(|r| r.label == l)
            .ok_or_else(|| ExperimentError::UnknownRun {
                label: l.to_string(),
                runs: runs.iter().map(|r| r.label.clone()).collect(),
            })
    };
    let (ra, rb) = (find(a)?, find(b)?);
    if deals.is_empty() {
        let why = "the figure needs at least one deal of the text";
        return Err(ExperimentError::bad_setting("split-scoring deals", 0, why));
    }
    let opts = r_only(&CorrOptions::default());
    let series = |name: &str, u: &Scores, v: &Scores| -> Result<Series> {
        let tokens = top_tokens(freq, top_n, &[&u.values, &v.values]);
        let pick = |s: &Scores| -> Vec<f64> {
            tokens
                .iter()
                .map(|&t| s.values[t as usize].unwrap_or(f64::NAN))
                .collect()
        };
        let r = correlate(&u.values, &v.values, freq, top_n, Method::Pearson, &opts)?.r;
        Ok(Series::new(
            format!("{name} (r = {r:.2})"),
            pick(u),
            pick(v),
        ))
    };
    // The own-halves clouds are the wider ones: drawn first, so the others stay visible on top.
    let mut s = Vec::with_capacity(deals.len() + 1);
    let mut identical = None;
    for &(deal, blocks) in deals {
        let (x, y) = (RunSplit::new(ra, blocks)?, RunSplit::new(rb, blocks)?);
        let name = format!("each tower on its own half, {deal}");
        s.push(series(&name, &x.arithmetic, &y.arithmetic)?);
        if identical.is_none() {
            identical = Some(series("identical positions", &x.identical, &y.identical)?);
        }
    }
    s.extend(identical);
    let po = PlotOptions {
        title: format!("Split-scoring control: {b} against {a}, top {top_n} tokens"),
        x_label: format!("{a}: log mean p, tower 1 − tower 2 (eq. 4)"),
        y_label: format!("{b}: same"),
        ..Default::default()
    };
    report::scatter(path, &s, &po)?;
    Ok(())
}

/// The control as a table.
pub fn split_scoring_table(pairs: &[SplitScoringPair], top_n: usize) -> Table {
    let cols = [
        "run a",
        "run b",
        "halves dealt as",
        "blocks",
        "primary tower a / b",
        "r, identical positions (the study)",
        "tokens",
        "r, own halves, arithmetic",
        "r, own halves, geometric",
        "tokens (zero rule)",
        "of them on one half only",
        "r, own halves, geometric, missing = 0",
        "r, one tower on both halves",
    ];
    let mut t = Table::new(cols.map(String::from).to_vec())
        .with_title(format!(
            "Split-scoring control: each tower scored on its own half of the scoring text, top \
             {top_n} tokens (Pearson)"
        ))
        .with_note(format!(
            "halves: blocks of the scoring text in document order, {SPLIT_BLOCKS} long \
             stretches (aligned approximately across styles) or windows of about \
             {RELEASED_WINDOW} scored positions (the released code's windows; pairs on one \
             scoring set only, the only windows that are the same text for both runs), dealt by \
             one fixed draw for every run; tower 1 (by index) scored on the first half, tower 2 on the \
             second, so a pair whose primary towers differ has its sign flipped against the \
             study's; missing = 0: the released code's per-token vector, where a half that never \
             saw a token counts log p = 0; one tower: tower 1 on both halves, no division of \
             labour at all. The paper's scoring code is not released: this says what such a \
             protocol would give, not what the paper did"
        ))
        .with_precision(3);
    for p in pairs {
        t.push_row(vec![
            Cell::from(p.a.as_str()),
            Cell::from(p.b.as_str()),
            Cell::from(p.deal.to_string()),
            Cell::from(p.blocks),
            Cell::from(format!("{} / {}", p.primary[0] + 1, p.primary[1] + 1)),
            Cell::from(p.same_positions),
            Cell::from(p.tokens),
            Cell::from(p.arithmetic),
            Cell::from(p.geometric),
            Cell::from(p.tokens_zero_rule),
            Cell::from(p.one_sided),
            Cell::from(p.geometric_zero_rule),
            Cell::from(p.one_tower),
        ]);
    }
    t
}

#[cfg(test)]
mod tests {
    use rand::Rng;
    use towers::Style;

    use super::*;
    use crate::analysis::{compare_runs, TokenSelection};
    use crate::test_rng::normal;

    const V: usize = 60;
    const BATCHES: usize = 128;

    /// All `V` tokens by `freq`.
    fn top(freq: &[u64]) -> TopTokens<'_> {
        TopTokens { freq, n: V }
    }

    /// A text that every model reads alike: how hard each context is, the same for every run.
    struct Text {
        /// Positions per batch.
        per_batch: usize,
        /// Spread of a token's difficulty per (block of [`SPLIT_BLOCKS`], token): long-range
        /// differences of the text.
        block_context: f64,
        /// Spread of each position's own difficulty: which contexts of a token a half holds.
        position_context: f64,
        /// Token V-1 only in the first 2 batches (missing from one half of the blocks deal).
        rare_token: bool,
    }

    /// The text's targets (skewed over `V` tokens), batch indices, flat places inside the
    /// batch, and difficulties.
    fn text(x: &Text) -> (Vec<u32>, Vec<u32>, Vec<u32>, Vec<f64>) {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let ctx: Vec<f64> = (0..SPLIT_BLOCKS * V)
            .map(|_| x.block_context * normal(&mut rng))
            .collect();
        let (mut targets, mut batch, mut place, mut difficulty) = (vec![], vec![], vec![], vec![]);
        for b in 0..BATCHES {
            for i in 0..x.per_batch {
                let u: f64 = rng.random();
                let mut t = ((u * u * u) * (V - 2) as f64) as usize;
                if x.rare_token && b < 2 && rng.random::<f64>() < 0.05 {
                    t = V - 1;
                }
                let block = b * SPLIT_BLOCKS / BATCHES;
                targets.push(t as u32);
                batch.push(b as u32);
                place.push(i as u32);
                let own = x.position_context * normal(&mut rng);
                difficulty.push(ctx[block * V + t] + own);
            }
        }
        (targets, batch, place, difficulty)
    }

    /// A run whose towers divide the tokens by the run's own random preference.
    fn run(seed: u64, x: &Text) -> RunScores {
        let (targets, batch, place, difficulty) = text(x);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let pref: Vec<f64> = (0..V).map(|_| 0.3 * normal(&mut rng)).collect();
        let mut logp = vec![vec![], vec![]];
        for (&t, &d) in targets.iter().zip(&difficulty) {
            for (k, sign) in [(0, 0.5), (1, -0.5)] {
                let l = -15.0 + d + sign * pref[t as usize] + 0.3 * normal(&mut rng);
                logp[k].push(l.min(-0.01) as f32);
            }
        }
        let lp = PositionLogProbs {
            vocab_size: V,
            targets,
            batch_index: batch,
            position: place,
            logp,
            full: None,
        };
        crate::test_runs::gpt_run(format!("gpt-s{seed}"), lp)
    }

    fn freq_of(t: &[u32]) -> Vec<u64> {
        let mut freq = vec![0u64; V];
        for &x in t {
            freq[x as usize] += 1;
        }
        freq
    }

    /// The control of two runs with independent divisions of labour reading text `x`, the
    /// text dealt by `deal`; the figure drawn on the way.
    fn control(x: &Text, deal: Deal) -> SplitScoringPair {
        let runs = [run(1, x), run(2, x)];
        let freq = freq_of(&runs[0].logprobs.targets);
        let pair = compare_runs(
            &runs[0],
            &runs[1],
            &freq,
            TokenSelection::TopFrequent(V),
            ScoreKind::ArithmeticMean,
            &r_only(&CorrOptions::default()),
        )
        .unwrap();
        let out = split_scoring_pairs(&runs, &[pair], top(&freq), deal).unwrap();
        assert_eq!(out.len(), 1);
        let p = out.into_iter().next().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let fig = dir.path().join("fig.png");
        let deals = [(deal, p.blocks)];
        split_scoring_figure(&runs, "gpt-s1", "gpt-s2", &deals, top(&freq), &fig).unwrap();
        assert!(std::fs::read(&fig).unwrap().starts_with(b"\x89PNG"));
        assert!(matches!(
            split_scoring_figure(&runs, "gpt-s1", "bert-s0", &deals, top(&freq), &fig),
            Err(ExperimentError::UnknownRun { .. })
        ));
        p
    }

    #[test]
    fn own_halves_make_runs_agree_through_the_text_alone() {
        // Two runs with independent divisions of labour, reading one text whose contexts make
        // each token harder in some long stretches than in others.
        let x = Text {
            per_batch: 400,
            block_context: 1.0,
            position_context: 0.0,
            rare_token: true,
        };
        let p = control(&x, Deal::Blocks(SPLIT_BLOCKS));
        assert_eq!(p.blocks, SPLIT_BLOCKS);
        assert!(p.same_positions.abs() < 0.3, "{p:?}");
        assert!(p.one_tower > 0.9, "{p:?}");
        assert!(p.arithmetic > 0.5 && p.geometric > 0.5, "{p:?}");
        assert!(p.arithmetic > p.same_positions + 0.3, "{p:?}");
        // The rarest token is missing from one half: only the zero rule scores it.
        assert_eq!(p.tokens_zero_rule, p.tokens + 1, "{p:?}");
        assert_eq!(p.one_sided, 1, "{p:?}");
        assert!(p.geometric_zero_rule.is_finite());
        // Without context differences between the halves, own halves make no agreement.
        let flat = Text {
            block_context: 0.0,
            ..x
        };
        let f = control(&flat, Deal::Blocks(SPLIT_BLOCKS));
        assert!(f.arithmetic.abs() < 0.3, "{f:?}");
        assert!(f.one_tower.abs() < 0.3, "{f:?}");
        assert_eq!(
            f.same_positions,
            control(&flat, Deal::Blocks(4)).same_positions
        );
    }

    #[test]
    fn short_windows_make_runs_agree_through_which_contexts_each_half_holds() {
        // No long-range differences at all: every position's context is hard or easy on its
        // own, alike for both runs. Windows of 8 positions dealt at random still give each half
        // its own few contexts of a token (about 50 per half here), and the runs agree.
        let x = Text {
            per_batch: 50,
            block_context: 0.0,
            position_context: 3.0,
            rare_token: false,
        };
        let p = control(&x, Deal::Windows(8));
        assert_eq!(p.blocks, BATCHES * 50 / 8);
        assert!(p.same_positions.abs() < 0.3, "{p:?}");
        assert!(p.one_tower > 0.5, "{p:?}");
        assert!(p.arithmetic > p.same_positions + 0.3, "{p:?}");
        // Contexts that differ only from run to run (the runs' own noise) make no agreement.
        let flat = Text {
            position_context: 0.0,
            ..x
        };
        let f = control(&flat, Deal::Windows(8));
        assert!(f.arithmetic.abs() < 0.3, "{f:?}");
        assert!(f.one_tower.abs() < 0.3, "{f:?}");
        // Runs on different scoring sets (styles) are dealt windows of different text: no row.
        let mut runs = [run(1, &x), run(2, &x)];
        runs[1].scoring.style = Style::bert();
        runs[1].scoring.fingerprint = "another set".into();
        let freq = freq_of(&runs[0].logprobs.targets);
        let opts = r_only(&CorrOptions::default());
        let sel = TokenSelection::TopFrequent(V);
        let kind = ScoreKind::ArithmeticMean;
        let pair = compare_runs(&runs[0], &runs[1], &freq, sel, kind, &opts).unwrap();
        let pairs = [pair];
        let windows = split_scoring_pairs(&runs, &pairs, top(&freq), Deal::Windows(8)).unwrap();
        assert!(windows.is_empty());
        let blocks = split_scoring_pairs(&runs, &pairs, top(&freq), Deal::Blocks(64)).unwrap();
        assert_eq!(blocks.len(), 1);
    }

    #[test]
    fn halves_are_a_fixed_deal_of_whole_blocks() {
        let x = Text {
            per_batch: 400,
            block_context: 0.0,
            position_context: 0.0,
            rare_token: false,
        };
        let lp = run(1, &x).logprobs;
        let side = scoring_halves(&lp, SPLIT_BLOCKS).unwrap();
        assert_eq!(side, scoring_halves(&lp, SPLIT_BLOCKS).unwrap());
        // Every position of a block (2 batches here) is on one side; half of the blocks on
        // each.
        let mut block_side = [None; SPLIT_BLOCKS];
        for (&bi, &s) in lp.batch_index.iter().zip(&side) {
            let k = bi as usize * SPLIT_BLOCKS / BATCHES;
            assert_eq!(*block_side[k].get_or_insert(s), s);
        }
        let second = block_side.iter().filter(|s| **s == Some(true)).count();
        assert_eq!(second, SPLIT_BLOCKS / 2);
        // Finer than a batch: blocks of 100 positions, 4 to a batch, each on one side.
        let fine = scoring_halves(&lp, BATCHES * 4).unwrap();
        for (i, (&bi, &pl)) in lp.batch_index.iter().zip(&lp.position).enumerate() {
            let first = lp
                .batch_index
                .iter()
                .zip(&lp.position)
                .position(|(&b, &q)| b == bi && q / 100 == pl / 100);
            assert_eq!(fine[first.unwrap()], fine[i]);
        }
        let halves = fine.iter().filter(|&&s| s).count();
        assert_eq!(halves, lp.len() / 2);
        assert!(matches!(
            scoring_halves(&lp, lp.len() + 1),
            Err(ExperimentError::TooLittleData { .. })
        ));
        assert!(matches!(
            scoring_halves(&lp, 1),
            Err(ExperimentError::BadSetting { .. })
        ));
        assert_eq!(Deal::Windows(RELEASED_WINDOW).blocks(1280), 10);
        assert_eq!(Deal::Blocks(SPLIT_BLOCKS).blocks(10), 10);
    }
}
