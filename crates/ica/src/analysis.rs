//! Sparsity, clusters and typical words of independent components (paper §5.3, Table 3).
//!
//! `sources` is always `[n, d]`: one word per row, one independent component per column, as
//! returned by [`crate::IcaResult::sources`].

use serde::{Deserialize, Serialize};

use crate::error::{IcaError, Result};
use crate::matrix::Matrix;

/// The paper's cluster threshold: word `i` belongs to component `k` when `|y_ik| > 2.5`.
pub const PAPER_THRESHOLD: f32 = 2.5;

/// Fraction of `values` with `|v| ≤ bound` (the paper's sparsity measure uses `bound = 1`).
/// An empty slice gives 0.
pub fn fraction_within(values: &[f32], bound: f32) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.iter().filter(|v| v.abs() <= bound).count() as f64 / values.len() as f64
}

/// Equal-width histogram over `[lo, hi)`, with the values outside counted apart.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Histogram {
    /// `bins + 1` bin edges from `lo` to `hi`.
    pub edges: Vec<f64>,
    /// Count per bin (`hi` itself falls in the last bin).
    pub counts: Vec<u64>,
    /// Values below `lo`.
    pub below: u64,
    /// Values above `hi`.
    pub above: u64,
}

impl Histogram {
    /// Counts `values` into `bins` equal bins over `[lo, hi]`; non-finite values are an error.
    pub fn new(values: &[f32], lo: f64, hi: f64, bins: usize) -> Result<Self> {
        if bins == 0
            || hi.partial_cmp(&lo) != Some(std::cmp::Ordering::Greater)
            || !hi.is_finite()
            || !lo.is_finite()
        {
            return Err(IcaError::Config(format!(
                "histogram needs bins > 0 and finite lo < hi, got {bins} bins over [{lo}, {hi}]"
            )));
        }
        let width = (hi - lo) / bins as f64;
        let mut h = Self {
            edges: (0..=bins).map(|i| lo + width * i as f64).collect(),
            counts: vec![0; bins],
            below: 0,
            above: 0,
        };
        for (i, &v) in values.iter().enumerate() {
            let v = f64::from(v);
            if !v.is_finite() {
                return Err(IcaError::NonFinite {
                    row: i,
                    col: 0,
                    value: v as f32,
                });
            }
            if v < lo {
                h.below += 1;
            } else if v > hi {
                h.above += 1;
            } else {
                let bin = (((v - lo) / width) as usize).min(bins - 1);
                h.counts[bin] += 1;
            }
        }
        Ok(h)
    }
}

/// Sample skewness `E[(y − ȳ)³] / E[(y − ȳ)²]^(3/2)` of each column (0 for a constant column).
pub fn column_skewness(sources: &Matrix) -> Vec<f64> {
    let (n, d) = sources.shape();
    (0..d)
        .map(|k| {
            let mean = (0..n).map(|i| f64::from(sources.get(i, k))).sum::<f64>() / n as f64;
            let (mut m2, mut m3) = (0.0, 0.0);
            for i in 0..n {
                let c = f64::from(sources.get(i, k)) - mean;
                m2 += c * c;
                m3 += c * c * c;
            }
            let (m2, m3) = (m2 / n as f64, m3 / n as f64);
            if m2 > 0.0 {
                m3 / m2.powf(1.5)
            } else {
                0.0
            }
        })
        .collect()
}

/// Flips the sign of every column with negative skewness, so each component's heavy tail is
/// positive (ICA recovers sources only up to sign). Returns which columns were flipped.
pub fn sign_to_positive_skew(sources: &mut Matrix) -> Vec<bool> {
    let d = sources.cols();
    let flip: Vec<bool> = column_skewness(sources).iter().map(|&s| s < 0.0).collect();
    for row in sources.as_mut_slice().chunks_exact_mut(d) {
        for (v, &f) in row.iter_mut().zip(&flip) {
            if f {
                *v = -*v;
            }
        }
    }
    flip
}

fn check_threshold(threshold: f32) -> Result<()> {
    if threshold >= 0.0 && threshold.is_finite() {
        Ok(())
    } else {
        Err(IcaError::Config(format!(
            "cluster threshold must be finite and non-negative, got {threshold}"
        )))
    }
}

/// For each word (row), the components `k` with `|y_k| > threshold`, in increasing `k`.
pub fn clusters(sources: &Matrix, threshold: f32) -> Result<Vec<Vec<usize>>> {
    check_threshold(threshold)?;
    sources.check_finite()?;
    Ok((0..sources.rows())
        .map(|i| {
            sources
                .row(i)
                .iter()
                .enumerate()
                .filter(|(_, v)| v.abs() > threshold)
                .map(|(k, _)| k)
                .collect()
        })
        .collect())
}

/// How many clusters words belong to (the paper: 45% exactly one, 13% none, 1.45 on average).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterCounts {
    /// `words_with[c]` = number of words in exactly `c` clusters.
    pub words_with: Vec<usize>,
    /// Fraction of words in no cluster.
    pub none: f64,
    /// Fraction of words in exactly one cluster.
    pub exactly_one: f64,
    /// Mean number of clusters per word.
    pub mean: f64,
}

/// Distribution of the number of clusters per word, from [`clusters`]' output.
pub fn cluster_counts(per_word: &[Vec<usize>]) -> ClusterCounts {
    let max = per_word.iter().map(Vec::len).max().unwrap_or(0);
    let mut words_with = vec![0usize; max + 1];
    for c in per_word {
        words_with[c.len()] += 1;
    }
    let n = per_word.len().max(1) as f64;
    let total: usize = per_word.iter().map(Vec::len).sum();
    ClusterCounts {
        none: words_with[0] as f64 / n,
        exactly_one: words_with.get(1).copied().unwrap_or(0) as f64 / n,
        mean: total as f64 / n,
        words_with,
    }
}

/// One component's words: members sorted by loading and the most frequent among them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ComponentWords {
    /// Component (column) index.
    pub component: usize,
    /// `(word, loading y_k)` of the words with `|y_k| > threshold`, loading descending.
    pub members: Vec<(usize, f32)>,
    /// The `typical` most frequent members, most frequent first (ties: higher loading first):
    /// Table 3's "typical words".
    pub typical: Vec<usize>,
}

/// For every component, its member words (`|y_k| > threshold`) sorted by loading and its
/// `typical` most frequent members by `frequencies` (one count per word/row; the paper shows
/// 5). Sign the components first ([`sign_to_positive_skew`]) so high loadings are the tail.
pub fn component_words(
    sources: &Matrix,
    threshold: f32,
    frequencies: &[u64],
    typical: usize,
) -> Result<Vec<ComponentWords>> {
    check_threshold(threshold)?;
    sources.check_finite()?;
    let (n, d) = sources.shape();
    if frequencies.len() != n {
        return Err(IcaError::Shape(format!(
            "{} word frequencies for {n} words",
            frequencies.len()
        )));
    }
    Ok((0..d)
        .map(|k| {
            let mut members: Vec<(usize, f32)> = (0..n)
                .map(|i| (i, sources.get(i, k)))
                .filter(|(_, y)| y.abs() > threshold)
                .collect();
            members.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            // `members` is loading-descending, and the sort is stable: ties keep that order.
            let mut by_freq: Vec<usize> = members.iter().map(|&(i, _)| i).collect();
            by_freq.sort_by_key(|&i| std::cmp::Reverse(frequencies[i]));
            by_freq.truncate(typical);
            ComponentWords {
                component: k,
                members,
                typical: by_freq,
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fraction_and_histogram() {
        let v = [-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0, 10.0];
        assert_eq!(fraction_within(&v, 1.0), 5.0 / 8.0);
        let h = Histogram::new(&v, -1.0, 1.0, 4).unwrap();
        assert_eq!(h.counts, vec![1, 1, 1, 2]);
        assert_eq!((h.below, h.above), (1, 2));
        assert_eq!(h.edges, vec![-1.0, -0.5, 0.0, 0.5, 1.0]);
        assert!(Histogram::new(&[f32::NAN], -1.0, 1.0, 4).is_err());
        assert!(Histogram::new(&v, 1.0, 1.0, 4).is_err());
    }

    #[test]
    fn skew_signing_clusters_and_typical_words() {
        // Column 0 has a heavy negative tail, column 1 a heavy positive one.
        let rows = [
            [-5.0, 0.1],
            [0.5, 4.0],
            [0.4, -0.2],
            [0.3, 3.0],
            [-3.0, 0.0],
            [0.2, -0.3],
        ];
        let mut y = Matrix::from_fn(6, 2, |i, k| rows[i][k]);
        let flipped = sign_to_positive_skew(&mut y);
        assert_eq!(flipped, vec![true, false]);
        assert!(column_skewness(&y).iter().all(|&s| s > 0.0));
        assert_eq!(y.get(0, 0), 5.0);

        let per_word = clusters(&y, 2.5).unwrap();
        assert_eq!(
            per_word,
            vec![vec![0], vec![1], vec![], vec![1], vec![0], vec![]]
        );
        let counts = cluster_counts(&per_word);
        assert_eq!(counts.words_with, vec![2, 4]);
        assert!((counts.none - 2.0 / 6.0).abs() < 1e-12);
        assert!((counts.exactly_one - 4.0 / 6.0).abs() < 1e-12);
        assert!((counts.mean - 4.0 / 6.0).abs() < 1e-12);

        let freqs = [1, 50, 7, 50, 9, 100];
        let words = component_words(&y, 2.5, &freqs, 5).unwrap();
        assert_eq!(words[0].members, vec![(0, 5.0), (4, 3.0)]);
        assert_eq!(words[0].typical, vec![4, 0]);
        // Equal frequencies: the higher loading comes first.
        assert_eq!(words[1].typical, vec![1, 3]);
        assert!(component_words(&y, 2.5, &freqs[..3], 5).is_err());
        assert!(clusters(&y, -1.0).is_err());
    }
}
