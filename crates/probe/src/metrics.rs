//! The probes' metrics (Hewitt & Manning 2019, section 3) and their bootstrap intervals over
//! sentences.
//!
//! - UUAS: the minimum spanning tree of the predicted distances over the non-punctuation words
//!   against the gold undirected edges between non-punctuation words; correct edges over gold
//!   edges, pooled over sentences.
//! - DSpr.: for each word, Spearman's ρ between its predicted and gold distances to every word
//!   of the sentence (itself included, as the authors' reporter does); averaged over the words
//!   of a sentence, then over the sentences of each length, then over lengths 5–50.
//! - Root accuracy: the share of sentences whose least deep non-punctuation word is the root.
//! - NSpr.: Spearman's ρ between predicted and gold depths of a sentence's words, averaged as
//!   DSpr.
//! - UPOS accuracy: correct tags over words.
//!
//! A ρ over a constant prediction is undefined and counts as 0.

use std::ops::RangeInclusive;

use corpus::Upos;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::error::{ProbeError, Result};
use crate::mst::minimum_spanning_tree;
use crate::spearman::spearman;
use crate::tree::GoldTree;

/// The sentence lengths over which DSpr. and NSpr. are averaged (Hewitt & Manning).
pub const SPEARMAN_LENGTHS: RangeInclusive<usize> = 5..=50;

/// A metric's value on the evaluated sentences and its bootstrap percentile interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// The value on all sentences.
    pub value: f64,
    /// Lower end of the interval.
    pub low: f64,
    /// Upper end of the interval.
    pub high: f64,
}

/// Bootstrap over sentences: `resamples` draws of as many sentences with replacement, a
/// percentile interval at `level`, every draw from `seed`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bootstrap {
    /// Number of resamples (at least 10).
    pub resamples: usize,
    /// Coverage of the interval, in (0, 1).
    pub level: f64,
    /// Seed of the resampling.
    pub seed: u64,
}

impl Default for Bootstrap {
    /// 1000 resamples, 95 %, seed 0.
    fn default() -> Self {
        Self {
            resamples: 1000,
            level: 0.95,
            seed: 0,
        }
    }
}

impl Bootstrap {
    /// Checks the settings.
    pub fn check(&self) -> Result<()> {
        if self.resamples < 10 {
            return Err(ProbeError::InvalidParams(format!(
                "bootstrap resamples {} (at least 10)",
                self.resamples
            )));
        }
        if !(self.level > 0.0 && self.level < 1.0) {
            return Err(ProbeError::InvalidParams(format!(
                "bootstrap level {} (in (0, 1))",
                self.level
            )));
        }
        Ok(())
    }

    /// The statistic `stat` of `records` with its interval, resampling records (one per
    /// sentence) with replacement.
    pub fn estimate<R>(&self, records: &[R], stat: impl Fn(&[&R]) -> f64) -> Result<Estimate> {
        self.check()?;
        if records.is_empty() {
            return Err(ProbeError::Empty("no sentence to score".into()));
        }
        let all: Vec<&R> = records.iter().collect();
        let value = stat(&all);
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let mut draws = Vec::with_capacity(self.resamples);
        let mut sample = Vec::with_capacity(records.len());
        for _ in 0..self.resamples {
            sample.clear();
            sample.extend((0..records.len()).map(|_| &records[rng.random_range(0..records.len())]));
            let s = stat(&sample);
            if s.is_finite() {
                draws.push(s);
            }
        }
        draws.sort_by(f64::total_cmp);
        let alpha = (1.0 - self.level) / 2.0;
        Ok(Estimate {
            value,
            low: quantile(&draws, alpha),
            high: quantile(&draws, 1.0 - alpha),
        })
    }
}

/// Linear-interpolated quantile of sorted values (NaN when empty).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// Scores of a distance probe.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DistanceScores {
    /// Undirected unlabelled attachment score.
    pub uuas: Estimate,
    /// Distance Spearman; `None` when no sentence has 5–50 words.
    pub dspr: Option<Estimate>,
    /// Sentences scored.
    pub sentences: usize,
}

/// Scores of a depth probe.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DepthScores {
    /// Share of sentences whose least deep non-punctuation word is the root.
    pub root_accuracy: Estimate,
    /// Norm (depth) Spearman; `None` when no sentence has 5–50 words.
    pub nspr: Option<Estimate>,
    /// Sentences scored.
    pub sentences: usize,
}

/// Scores of a UPOS probe.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct UposScores {
    /// Correct tags over words.
    pub accuracy: Estimate,
    /// Words scored.
    pub words: usize,
}

/// Correct and gold counts of one sentence.
type Count = (usize, usize);

/// Pooled ratio of counts.
fn pooled(records: &[&Count]) -> f64 {
    let (c, t) = records.iter().fold((0, 0), |(c, t), r| (c + r.0, t + r.1));
    if t == 0 {
        f64::NAN
    } else {
        c as f64 / t as f64
    }
}

/// Mean over lengths of the mean over the sentences of each length, of (length, value) pairs.
fn by_length(records: &[&(usize, f64)]) -> f64 {
    let lo = *SPEARMAN_LENGTHS.start();
    let mut sums = vec![(0.0, 0usize); SPEARMAN_LENGTHS.end() - lo + 1];
    for (len, v) in records {
        let s = &mut sums[len - lo];
        s.0 += v;
        s.1 += 1;
    }
    let means: Vec<f64> = sums
        .iter()
        .filter(|s| s.1 > 0)
        .map(|s| s.0 / s.1 as f64)
        .collect();
    if means.is_empty() {
        f64::NAN
    } else {
        means.iter().sum::<f64>() / means.len() as f64
    }
}

fn check_sizes<T>(
    what: &str,
    pred: &[Vec<T>],
    gold: &[GoldTree],
    per: impl Fn(usize) -> usize,
) -> Result<()> {
    if pred.len() != gold.len() {
        return Err(ProbeError::Mismatch(format!(
            "{} predicted {what} for {} gold sentences",
            pred.len(),
            gold.len()
        )));
    }
    for (k, (p, g)) in pred.iter().zip(gold).enumerate() {
        if p.len() != per(g.len()) {
            return Err(ProbeError::Mismatch(format!(
                "sentence {k}: {} predicted {what} for {} words",
                p.len(),
                g.len()
            )));
        }
    }
    Ok(())
}

/// UUAS counts of one sentence: (correct edges of the predicted tree, gold edges).
pub fn uuas_counts(pred: &[f64], gold: &GoldTree) -> (usize, usize) {
    let gold_edges = gold.edges_without_punct();
    let tree = minimum_spanning_tree(pred, gold.len(), &gold.scored_words());
    let correct = tree
        .iter()
        .filter(|e| gold_edges.binary_search(e).is_ok())
        .count();
    (correct, gold_edges.len())
}

/// DSpr. of one sentence: the mean over its words of ρ(predicted row, gold row).
pub fn distance_spearman(pred: &[f64], gold: &GoldTree) -> f64 {
    let n = gold.len();
    let mut total = 0.0;
    for i in 0..n {
        let g: Vec<f64> = (0..n).map(|j| gold.distance(i, j) as f64).collect();
        total += spearman(&pred[i * n..(i + 1) * n], &g).unwrap_or(0.0);
    }
    total / n as f64
}

/// UUAS and DSpr. of predicted distance matrices (row-major n × n per sentence).
pub fn score_distances(
    pred: &[Vec<f64>],
    gold: &[GoldTree],
    b: &Bootstrap,
) -> Result<DistanceScores> {
    check_sizes("distances", pred, gold, |n| n * n)?;
    let counts: Vec<Count> = pred
        .iter()
        .zip(gold)
        .map(|(p, g)| uuas_counts(p, g))
        .collect();
    let rhos: Vec<(usize, f64)> = pred
        .iter()
        .zip(gold)
        .filter(|(_, g)| SPEARMAN_LENGTHS.contains(&g.len()))
        .map(|(p, g)| (g.len(), distance_spearman(p, g)))
        .collect();
    Ok(DistanceScores {
        uuas: b.estimate(&counts, pooled)?,
        dspr: optional(b, &rhos)?,
        sentences: gold.len(),
    })
}

fn optional(b: &Bootstrap, rhos: &[(usize, f64)]) -> Result<Option<Estimate>> {
    if rhos.is_empty() {
        Ok(None)
    } else {
        b.estimate(rhos, by_length).map(Some)
    }
}

/// Root accuracy and NSpr. of predicted depths (one per word per sentence).
pub fn score_depths(pred: &[Vec<f64>], gold: &[GoldTree], b: &Bootstrap) -> Result<DepthScores> {
    check_sizes("depths", pred, gold, |n| n)?;
    let mut roots: Vec<Count> = Vec::new();
    for (p, g) in pred.iter().zip(gold) {
        let words = g.scored_words();
        if words.is_empty() {
            continue;
        }
        // The least deep word (first on ties).
        let best = words
            .iter()
            .copied()
            .fold(words[0], |a, w| if p[w] < p[a] { w } else { a });
        roots.push((usize::from(best == g.root()), 1));
    }
    let rhos: Vec<(usize, f64)> = pred
        .iter()
        .zip(gold)
        .filter(|(_, g)| SPEARMAN_LENGTHS.contains(&g.len()))
        .map(|(p, g)| {
            let d: Vec<f64> = g.depths().iter().map(|&x| x as f64).collect();
            (g.len(), spearman(p, &d).unwrap_or(0.0))
        })
        .collect();
    Ok(DepthScores {
        root_accuracy: b.estimate(&roots, pooled)?,
        nspr: optional(b, &rhos)?,
        sentences: gold.len(),
    })
}

/// UPOS accuracy of predicted tags.
pub fn score_tags(pred: &[Vec<Upos>], gold: &[GoldTree], b: &Bootstrap) -> Result<UposScores> {
    check_sizes("tags", pred, gold, |n| n)?;
    let counts: Vec<Count> = pred
        .iter()
        .zip(gold)
        .map(|(p, g)| {
            (
                p.iter().zip(g.tags()).filter(|(a, b)| a == b).count(),
                g.len(),
            )
        })
        .collect();
    Ok(UposScores {
        accuracy: b.estimate(&counts, pooled)?,
        words: counts.iter().map(|c| c.1).sum(),
    })
}

/// UUAS of the right-branching baseline: each non-punctuation word attached to the next one.
pub fn right_branching_uuas(gold: &[GoldTree], b: &Bootstrap) -> Result<Estimate> {
    let counts: Vec<Count> = gold
        .iter()
        .map(|g| {
            let words = g.scored_words();
            let edges = g.edges_without_punct();
            let correct = words
                .windows(2)
                .filter(|w| edges.binary_search(&(w[0], w[1])).is_ok())
                .count();
            (correct, edges.len())
        })
        .collect();
    b.estimate(&counts, pooled)
}
