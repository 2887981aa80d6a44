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
//! such a protocol would give on our runs: the scoring set is cut into [`SPLIT_BLOCKS`] blocks in
//! document order, half of them (a fixed draw, the same for every run and style) score tower 1
//! and the other half tower 2. A token's score then also carries how hard its contexts are in
//! one half against the other, which every model reading that text finds alike, so runs agree
//! without sharing any division of labour; the "one tower on both halves" column measures that
//! part alone (a run's tower 1 on both halves, no second tower at all).
//!
//! Runs of different styles have different scoring sets cut from the same held-out documents in
//! the same order; block k of each covers about the same stretch of text (up to one block at the
//! edges), so their halves are aligned approximately, not exactly.

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

use crate::analysis::{pair_cells, PairComparison, RunScores};
use crate::controls::r_only;
use crate::{ExperimentError, Result};

/// Blocks of the scoring set (in document order) that are dealt to the two halves.
pub const SPLIT_BLOCKS: usize = 64;

/// Seed of the draw of blocks: a constant, so the halves never depend on a run (as the released
/// code's phase-2 and phase-3 evaluation seeds do not).
const SPLIT_SEED: u64 = 0x0bad_5eed;

/// Scoring batches of `lp` (one more than its largest batch index).
fn n_batches(lp: &PositionLogProbs) -> usize {
    lp.batch_index.iter().max().map_or(0, |&b| b as usize + 1)
}

/// The side of each scored position of `lp`: `false` for the first half (scores tower 1),
/// `true` for the second. Positions are grouped into `blocks` equal stretches of the scoring
/// batches in order; a fixed draw deals half of the blocks to each side.
pub fn scoring_halves(lp: &PositionLogProbs, blocks: usize) -> Result<Vec<bool>> {
    let n_batches = n_batches(lp);
    if blocks < 2 {
        return Err(ExperimentError::BadSetting {
            field: "split-scoring blocks".into(),
            value: blocks.to_string(),
            why: "two halves need at least 2 blocks".into(),
        });
    }
    if n_batches < blocks {
        return Err(ExperimentError::TooLittleData {
            what: "the scoring set, for the split-scoring control (batches)".into(),
            have: n_batches,
            need: blocks,
        });
    }
    let mut order: Vec<usize> = (0..blocks).collect();
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(SPLIT_SEED));
    let mut second = vec![false; blocks];
    for &b in &order[blocks / 2..] {
        second[b] = true;
    }
    Ok(lp
        .batch_index
        .iter()
        .map(|&b| second[b as usize * blocks / n_batches])
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
    /// Blocks dealt to the halves ([`SPLIT_BLOCKS`], fewer when a scoring set has fewer
    /// batches).
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
/// score kind and top-`top_n` selection), over the `top_n` most frequent tokens (`freq`). The
/// halves deal [`SPLIT_BLOCKS`] blocks, or as many as the smallest scoring set of `runs` has
/// batches; with fewer than 2 there are no halves and no pairs.
pub fn split_scoring_pairs(
    runs: &[RunScores],
    pairs: &[PairComparison],
    freq: &[u64],
    top_n: usize,
) -> Result<Vec<SplitScoringPair>> {
    let fewest = runs.iter().map(|r| n_batches(&r.logprobs)).min();
    let blocks = fewest.unwrap_or(0).min(SPLIT_BLOCKS);
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
            return Err(ExperimentError::Mismatch {
                run: run.label.clone(),
                data: "the split-scoring control".into(),
                why: format!("it needs two towers, the run has {}", lp.logp.len()),
            });
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
/// eq. 4 with towers by index, once on identical positions and once with each tower on its own
/// half of `blocks` blocks (as [`split_scoring_pairs`]), each series named with its Pearson r.
pub fn split_scoring_figure(
    runs: &[RunScores],
    a: &str,
    b: &str,
    blocks: usize,
    freq: &[u64],
    top_n: usize,
    path: &Path,
) -> Result<()> {
    let find = |l: &str| {
        runs.iter()
            .find(|r| r.label == l)
            .ok_or_else(|| ExperimentError::UnknownRun {
                label: l.to_string(),
                runs: runs.iter().map(|r| r.label.clone()).collect(),
            })
    };
    let (x, y) = (
        RunSplit::new(find(a)?, blocks)?,
        RunSplit::new(find(b)?, blocks)?,
    );
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
    // The own-halves cloud is the wider one: drawn first, so the other stays visible on top.
    let s = [
        series("each tower on its own half", &x.arithmetic, &y.arithmetic)?,
        series("identical positions", &x.identical, &y.identical)?,
    ];
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
    let blocks = pairs.first().map_or(SPLIT_BLOCKS, |p| p.blocks);
    let cols = [
        "run a",
        "run b",
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
            "halves: {blocks} blocks of the scoring set in document order, dealt by one \
             fixed draw for every run (aligned approximately across styles); tower 1 (by index) \
             scored on the first half, tower 2 on the second, so a pair whose primary towers \
             differ has its sign flipped against the study's; missing = 0: the released code's \
             per-token vector, where a half that never saw a token counts log p = 0; one tower: \
             tower 1 on both halves, no division of labour at all. The paper's scoring code is \
             not released: this says what such a protocol would give, not what the paper did"
        ))
        .with_precision(3);
    for p in pairs {
        t.push_row(vec![
            Cell::from(p.a.as_str()),
            Cell::from(p.b.as_str()),
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
    use crate::ScoringSetId;

    const V: usize = 60;
    const BATCHES: usize = 128;
    const PER_BATCH: usize = 400;

    fn normal(rng: &mut ChaCha8Rng) -> f64 {
        let (u, v): (f64, f64) = (rng.random::<f64>().max(1e-12), rng.random());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    /// The shared text: targets (a skewed draw over `V` tokens, the rarest seen in a few batches
    /// only) and per-(block, token) context difficulty of spread `context` (the same for every
    /// model reading the text).
    fn text(context: f64) -> (Vec<u32>, Vec<u32>, Vec<f64>) {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let ctx: Vec<f64> = (0..SPLIT_BLOCKS * V)
            .map(|_| context * normal(&mut rng))
            .collect();
        let (mut targets, mut batch, mut difficulty) = (vec![], vec![], vec![]);
        for b in 0..BATCHES {
            for _ in 0..PER_BATCH {
                let u: f64 = rng.random();
                let mut t = ((u * u * u) * (V - 2) as f64) as usize;
                // Token V-1 occurs in the first batches only (missing from one half).
                if b < 2 && rng.random::<f64>() < 0.05 {
                    t = V - 1;
                }
                let block = b * SPLIT_BLOCKS / BATCHES;
                targets.push(t as u32);
                batch.push(b as u32);
                difficulty.push(ctx[block * V + t]);
            }
        }
        (targets, batch, difficulty)
    }

    /// A run whose towers divide the tokens by the run's own random preference.
    fn run(seed: u64, targets: &[u32], batch: &[u32], difficulty: &[f64]) -> RunScores {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let pref: Vec<f64> = (0..V).map(|_| 0.3 * normal(&mut rng)).collect();
        let mut logp = vec![vec![], vec![]];
        for (&t, &d) in targets.iter().zip(difficulty) {
            for (k, sign) in [(0, 0.5), (1, -0.5)] {
                let l = -4.0 + d + sign * pref[t as usize] + 0.3 * normal(&mut rng);
                logp[k].push(l.min(-0.01) as f32);
            }
        }
        let lp = PositionLogProbs {
            vocab_size: V,
            targets: targets.to_vec(),
            batch_index: batch.to_vec(),
            position: (0..targets.len() as u32).collect(),
            logp,
            full: None,
        };
        let id = ScoringSetId {
            style: Style::Gpt,
            fingerprint: "synthetic".into(),
            text_fingerprint: "synthetic".into(),
            positions: targets.len() as u64,
        };
        let label = format!("gpt-s{seed}");
        RunScores::from_logprobs(
            label,
            "gpt".into(),
            id,
            lp,
            None,
            false,
            ScoreKind::ArithmeticMean,
        )
        .unwrap()
    }

    fn freq_of(t: &[u32]) -> Vec<u64> {
        let mut freq = vec![0u64; V];
        for &x in t {
            freq[x as usize] += 1;
        }
        freq
    }

    fn control(context: f64) -> SplitScoringPair {
        let (t, b, d) = text(context);
        let runs = [run(1, &t, &b, &d), run(2, &t, &b, &d)];
        let dir = tempfile::tempdir().unwrap();
        let fig = dir.path().join("fig.png");
        split_scoring_figure(
            &runs,
            "gpt-s1",
            "gpt-s2",
            SPLIT_BLOCKS,
            &freq_of(&t),
            V,
            &fig,
        )
        .unwrap();
        assert!(std::fs::read(&fig).unwrap().starts_with(b"\x89PNG"));
        assert!(matches!(
            split_scoring_figure(&runs, "gpt-s1", "bert-s0", 4, &freq_of(&t), V, &fig),
            Err(ExperimentError::UnknownRun { .. })
        ));
        let freq = freq_of(&t);
        let pair = compare_runs(
            &runs[0],
            &runs[1],
            &freq,
            TokenSelection::TopFrequent(V),
            ScoreKind::ArithmeticMean,
            &r_only(&CorrOptions::default()),
        )
        .unwrap();
        let out = split_scoring_pairs(&runs, &[pair], &freq, V).unwrap();
        assert_eq!(out.len(), 1);
        out.into_iter().next().unwrap()
    }

    #[test]
    fn own_halves_make_runs_agree_through_the_text_alone() {
        // Two runs with independent divisions of labour, reading one text whose contexts make
        // each token harder in some blocks than in others.
        let p = control(1.0);
        assert!(p.same_positions.abs() < 0.3, "{p:?}");
        assert!(p.one_tower > 0.9, "{p:?}");
        assert!(p.arithmetic > 0.5 && p.geometric > 0.5, "{p:?}");
        assert!(p.arithmetic > p.same_positions + 0.3, "{p:?}");
        // The rarest token is missing from one half: only the zero rule scores it.
        assert_eq!(p.tokens_zero_rule, p.tokens + 1, "{p:?}");
        assert_eq!(p.one_sided, 1, "{p:?}");
        assert!(p.geometric_zero_rule.is_finite());
        // Without context differences between the halves, own halves make no agreement.
        let flat = control(0.0);
        assert!(flat.arithmetic.abs() < 0.3, "{flat:?}");
        assert!(flat.one_tower.abs() < 0.3, "{flat:?}");
        assert_eq!(flat.same_positions, control(0.0).same_positions);
    }

    #[test]
    fn halves_are_a_fixed_deal_of_whole_blocks() {
        let (t, b, d) = text(0.0);
        let lp = run(1, &t, &b, &d).logprobs;
        let side = scoring_halves(&lp, SPLIT_BLOCKS).unwrap();
        assert_eq!(side, scoring_halves(&lp, SPLIT_BLOCKS).unwrap());
        // Every position of a block is on one side; half of the blocks on each.
        let mut block_side = [None; SPLIT_BLOCKS];
        for (&bi, &s) in lp.batch_index.iter().zip(&side) {
            let k = bi as usize * SPLIT_BLOCKS / BATCHES;
            assert_eq!(*block_side[k].get_or_insert(s), s);
        }
        let second = block_side.iter().filter(|s| **s == Some(true)).count();
        assert_eq!(second, SPLIT_BLOCKS / 2);
        assert!(matches!(
            scoring_halves(&lp, BATCHES + 1),
            Err(ExperimentError::TooLittleData { .. })
        ));
        assert!(matches!(
            scoring_halves(&lp, 1),
            Err(ExperimentError::BadSetting { .. })
        ));
    }
}
