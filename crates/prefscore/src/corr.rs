//! Correlations of score vectors over the most frequent tokens (Tables 2 and 4 of the two-tower
//! paper), with a seeded bootstrap interval and a permutation p-value.

use rand::seq::SliceRandom;
use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::sample::{rng_for, Bootstrap, Interval};
use crate::{PrefscoreError, Result};

/// Which correlation coefficient.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Method {
    /// Pearson's product-moment correlation (Table 2).
    Pearson,
    /// Spearman's rank correlation: Pearson's r of the ranks, ties given their average rank
    /// (Table 4).
    Spearman,
}

/// Pearson's r of `x` and `y`; an error for fewer than 3 pairs, non-finite values or a constant
/// variable (r undefined).
pub fn pearson(x: &[f64], y: &[f64]) -> Result<f64> {
    check_pairs(x, y)?;
    pearson_unchecked(x, y)
}

/// Spearman's ρ of `x` and `y` (Pearson's r of average ranks); errors as [`pearson`].
pub fn spearman(x: &[f64], y: &[f64]) -> Result<f64> {
    check_pairs(x, y)?;
    pearson_unchecked(&ranks(x), &ranks(y))
}

/// 1-based ranks of `x` in ascending order, tied values sharing the mean of their ranks
/// (so `[10, 20, 20, 30]` ranks as `[1, 2.5, 2.5, 4]`).
pub fn ranks(x: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..x.len()).collect();
    idx.sort_by(|&i, &j| x[i].total_cmp(&x[j]));
    let mut r = vec![0.0; x.len()];
    let mut start = 0;
    while start < idx.len() {
        let mut end = start + 1;
        while end < idx.len() && x[idx[end]] == x[idx[start]] {
            end += 1;
        }
        // Positions start..end (0-based) share the mean of ranks start+1 ..= end.
        let avg = (start + 1 + end) as f64 / 2.0;
        for &i in &idx[start..end] {
            r[i] = avg;
        }
        start = end;
    }
    r
}

pub(crate) fn check_pairs(x: &[f64], y: &[f64]) -> Result<()> {
    if x.len() != y.len() {
        return Err(PrefscoreError::invalid(format!(
            "correlation of {} values with {} values",
            x.len(),
            y.len()
        )));
    }
    if x.len() < 3 {
        return Err(PrefscoreError::NotEnoughData(format!(
            "a correlation needs at least 3 pairs, got {}",
            x.len()
        )));
    }
    if let Some(&v) = x.iter().chain(y).find(|v| !v.is_finite()) {
        return Err(PrefscoreError::BadValue {
            what: "correlation input".into(),
            value: v,
        });
    }
    Ok(())
}

fn pearson_unchecked(x: &[f64], y: &[f64]) -> Result<f64> {
    let n = x.len() as f64;
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in x.iter().zip(y) {
        let (dx, dy) = (a - mx, b - my);
        sxy += dx * dy;
        sxx += dx * dx;
        syy += dy * dy;
    }
    finish(sxy, sxx, syy, n, mx, my)
}

/// r from the centred sums, refusing a constant variable. Equal values leave only rounding
/// residue (about (2.2e-16 · mean)² per item) in the sum of squares: anything below a margin
/// far above that counts as constant.
fn finish(sxy: f64, sxx: f64, syy: f64, n: f64, mx: f64, my: f64) -> Result<f64> {
    let constant = |ss: f64, m: f64| ss <= 1e-24 * n * (1.0 + m * m);
    if constant(sxx, mx) || constant(syy, my) {
        return Err(PrefscoreError::Undefined(
            "correlation with a constant variable".into(),
        ));
    }
    Ok((sxy / (sxx * syy).sqrt()).clamp(-1.0, 1.0))
}

/// r of paired data for `method`, ranking inside (used on resamples).
pub(crate) fn coefficient(method: Method, x: &[f64], y: &[f64]) -> Result<f64> {
    match method {
        Method::Pearson => pearson_unchecked(x, y),
        Method::Spearman => pearson_unchecked(&ranks(x), &ranks(y)),
    }
}

/// Ascending order of a sample and its runs of tied values, for re-ranking resamples in O(n).
struct TieGroups {
    order: Vec<usize>,
    /// Start of each tie group in `order`, then `order.len()`.
    bounds: Vec<usize>,
}

impl TieGroups {
    fn new(x: &[f64]) -> Self {
        let mut order: Vec<usize> = (0..x.len()).collect();
        order.sort_by(|&i, &j| x[i].total_cmp(&x[j]));
        let mut bounds = vec![0];
        for k in 1..order.len() {
            if x[order[k]] != x[order[k - 1]] {
                bounds.push(k);
            }
        }
        bounds.push(order.len());
        TieGroups { order, bounds }
    }

    /// Average ranks, within the resample holding `w[i]` copies of item i, of every item
    /// (what [`ranks`] gives on the explicit resample: copies and equal values are ties).
    fn ranks_into(&self, w: &[u32], out: &mut [f64]) {
        let mut below = 0.0;
        for g in self.bounds.windows(2) {
            let members = &self.order[g[0]..g[1]];
            let weight: f64 = members.iter().map(|&i| w[i] as f64).sum();
            let r = below + (weight + 1.0) / 2.0;
            for &i in members {
                out[i] = r;
            }
            below += weight;
        }
    }
}

/// Computes the coefficient of a bootstrap resample given as multiplicities, without building
/// the resample (Spearman re-ranks in O(n) from presorted tie groups).
pub(crate) struct Resampler<'a> {
    method: Method,
    x: &'a [f64],
    y: &'a [f64],
    ties: Option<(TieGroups, TieGroups)>,
    buf: std::cell::RefCell<(Vec<f64>, Vec<f64>)>,
}

impl<'a> Resampler<'a> {
    pub(crate) fn new(method: Method, x: &'a [f64], y: &'a [f64]) -> Self {
        let ties = (method == Method::Spearman).then(|| (TieGroups::new(x), TieGroups::new(y)));
        Resampler {
            method,
            x,
            y,
            ties,
            buf: std::cell::RefCell::new((vec![0.0; x.len()], vec![0.0; y.len()])),
        }
    }

    pub(crate) fn coefficient(&self, w: &[u32]) -> Result<f64> {
        match (&self.ties, self.method) {
            (Some((tx, ty)), Method::Spearman) => {
                let mut buf = self.buf.borrow_mut();
                let (rx, ry) = &mut *buf;
                tx.ranks_into(w, rx);
                ty.ranks_into(w, ry);
                weighted_pearson(rx, ry, w)
            }
            _ => weighted_pearson(self.x, self.y, w),
        }
    }
}

/// Pearson's r of the sample holding `w[i]` copies of pair i.
fn weighted_pearson(x: &[f64], y: &[f64], w: &[u32]) -> Result<f64> {
    let n: f64 = w.iter().map(|&c| c as f64).sum();
    let (mut mx, mut my) = (0.0, 0.0);
    for ((a, b), &c) in x.iter().zip(y).zip(w) {
        mx += c as f64 * a;
        my += c as f64 * b;
    }
    mx /= n;
    my /= n;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for ((a, b), &c) in x.iter().zip(y).zip(w) {
        if c == 0 {
            continue;
        }
        let (dx, dy, c) = (a - mx, b - my, c as f64);
        sxy += c * dx * dy;
        sxx += c * dx * dx;
        syy += c * dy * dy;
    }
    finish(sxy, sxx, syy, n, mx, my)
}

/// Options of [`correlate`] and the tables built from it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CorrOptions {
    /// Bootstrap interval over tokens (resampled with replacement).
    pub bootstrap: Bootstrap,
    /// Number of random permutations for the p-value (0: none).
    pub permutations: usize,
}

impl CorrOptions {
    /// `n` bootstrap resamples (95%, seed 0) and `n` permutations.
    pub fn with_resamples(n: usize) -> Self {
        CorrOptions {
            bootstrap: Bootstrap {
                resamples: n,
                ..Bootstrap::default()
            },
            permutations: n,
        }
    }
}

impl Default for CorrOptions {
    /// 1000 bootstrap resamples at 95%, 1000 permutations, seed 0.
    fn default() -> Self {
        CorrOptions {
            bootstrap: Bootstrap::default(),
            permutations: 1000,
        }
    }
}

/// Streams of [`correlation`] lie below this: it draws on streams `2 stream` and `2 stream + 1`,
/// which stay below the reliabilities' streams from 2^40 on.
pub const MAX_STREAM: u64 = 1 << 39;

/// A correlation with its uncertainty.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Correlation {
    /// The coefficient used.
    pub method: Method,
    /// Number of tokens (pairs) it was computed on.
    pub n: usize,
    /// The coefficient.
    pub r: f64,
    /// Percentile bootstrap interval over tokens; `None` when disabled.
    pub interval: Option<Interval>,
    /// Two-sided permutation p-value (1 + #{|r_perm| ≥ |r|}) / (1 + permutations), the null
    /// being "no association"; `None` when disabled.
    pub p_value: Option<f64>,
}

/// Correlation of paired samples `x`, `y` with the interval and p-value of `opts`; the random
/// draws come from `opts.bootstrap.seed` (stream `stream`, so the cells of a table differ).
/// `stream` must lie below [`MAX_STREAM`].
pub fn correlation(
    x: &[f64],
    y: &[f64],
    method: Method,
    opts: &CorrOptions,
    stream: u64,
) -> Result<Correlation> {
    check_pairs(x, y)?;
    opts.bootstrap.check()?;
    if stream >= MAX_STREAM {
        return Err(PrefscoreError::invalid(format!(
            "correlation stream {stream} must lie below 2^39 (streams above are the reliabilities')"
        )));
    }
    let r = coefficient(method, x, y)?;
    let n = x.len();
    let interval = if opts.bootstrap.resamples > 0 {
        let mut rng = rng_for(opts.bootstrap.seed, 2 * stream);
        let resample = Resampler::new(method, x, y);
        let mut w = vec![0u32; n];
        let stats = (0..opts.bootstrap.resamples)
            .map(|_| {
                // A resample as multiplicities of the original pairs.
                w.fill(0);
                for _ in 0..n {
                    w[rng.random_range(0..n)] += 1;
                }
                // A resample can be constant (tiny n): it has no r and is left out.
                resample.coefficient(&w).unwrap_or(f64::NAN)
            })
            .collect();
        opts.bootstrap.percentile(stats)
    } else {
        None
    };
    let p_value = (opts.permutations > 0).then(|| {
        let mut rng = rng_for(opts.bootstrap.seed, 2 * stream + 1);
        // Spearman: ranks are fixed under permutation, so permute ranks once ranked.
        let (px, mut py) = match method {
            Method::Pearson => (x.to_vec(), y.to_vec()),
            Method::Spearman => (ranks(x), ranks(y)),
        };
        // Compare with a small tolerance so permutations that reproduce r exactly count.
        let threshold = r.abs() - 1e-12;
        let hits = (0..opts.permutations)
            .filter(|_| {
                py.shuffle(&mut rng);
                pearson_unchecked(&px, &py).is_ok_and(|rp| rp.abs() >= threshold)
            })
            .count();
        (1 + hits) as f64 / (1 + opts.permutations) as f64
    });
    Ok(Correlation {
        method,
        n,
        r,
        interval,
        p_value,
    })
}

/// The `top_n` most frequent tokens (by `freq[token]`, ties by token id) among those scored in
/// every one of `scores`; fewer when fewer are scored.
pub fn top_tokens(freq: &[u64], top_n: usize, scores: &[&[Option<f64>]]) -> Vec<u32> {
    let mut ids: Vec<u32> = (0..freq.len() as u32)
        .filter(|&a| {
            scores.iter().all(|s| {
                s.get(a as usize)
                    .copied()
                    .flatten()
                    .is_some_and(f64::is_finite)
            })
        })
        .collect();
    ids.sort_by(|&a, &b| freq[b as usize].cmp(&freq[a as usize]).then(a.cmp(&b)));
    ids.truncate(top_n);
    ids
}

/// Correlation of two runs' scores (per token id, `None` = unseen) over the `top_n` most
/// frequent tokens scored in both (frequencies `freq` per token id, e.g. training-corpus
/// counts). Errors when fewer than 3 such tokens exist.
pub fn correlate(
    a: &[Option<f64>],
    b: &[Option<f64>],
    freq: &[u64],
    top_n: usize,
    method: Method,
    opts: &CorrOptions,
) -> Result<Correlation> {
    check_vocab(&[a.len(), b.len()], freq.len())?;
    let tokens = top_tokens(freq, top_n, &[a, b]);
    let pick = |s: &[Option<f64>]| -> Vec<f64> {
        tokens
            .iter()
            .map(|&t| s[t as usize].unwrap_or(f64::NAN))
            .collect()
    };
    correlation(&pick(a), &pick(b), method, opts, 0)
}

/// Correlation of scores with frequency rank (1 = most frequent) over the `top_n` most frequent
/// scored tokens: does the preference follow frequency?
pub fn correlate_with_frequency(
    scores: &[Option<f64>],
    freq: &[u64],
    top_n: usize,
    method: Method,
    opts: &CorrOptions,
) -> Result<Correlation> {
    check_vocab(&[scores.len()], freq.len())?;
    let tokens = top_tokens(freq, top_n, &[scores]);
    let s: Vec<f64> = tokens
        .iter()
        .map(|&t| scores[t as usize].unwrap_or(f64::NAN))
        .collect();
    // Ranks among the selected tokens, ties in frequency sharing their average rank.
    let neg_freq: Vec<f64> = tokens.iter().map(|&t| -(freq[t as usize] as f64)).collect();
    correlation(&ranks(&neg_freq), &s, method, opts, 0)
}

fn check_vocab(lens: &[usize], freq_len: usize) -> Result<()> {
    if lens.iter().any(|&l| l != freq_len) {
        return Err(PrefscoreError::invalid(format!(
            "score vectors of lengths {lens:?} and a frequency list of length {freq_len} must all cover the same vocabulary"
        )));
    }
    Ok(())
}

/// All-pairs correlations of several runs (Tables 2 and 4): row-major `len × len` matrices,
/// entry (i, j) the correlation of run i with run j over the top-N frequent tokens scored in
/// both; the diagonal is 1 with the run's own token count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CorrelationMatrix {
    /// Run names, in row and column order.
    pub labels: Vec<String>,
    /// The coefficient used.
    pub method: Method,
    /// Coefficients, row-major.
    pub r: Vec<f64>,
    /// Bootstrap interval ends (NaN when disabled), row-major.
    pub lo: Vec<f64>,
    /// See `lo`.
    pub hi: Vec<f64>,
    /// Permutation p-values (NaN when disabled; 0 on the diagonal), row-major.
    pub p_value: Vec<f64>,
    /// Tokens used per pair, row-major.
    pub n: Vec<usize>,
}

impl CorrelationMatrix {
    /// Number of runs.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// True when there are no runs.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Entry (i, j) of the coefficient matrix.
    pub fn get(&self, i: usize, j: usize) -> f64 {
        self.r[i * self.len() + j]
    }

    /// Mean of the off-diagonal coefficients (the summary a table's caption quotes).
    pub fn mean_off_diagonal(&self) -> Option<f64> {
        let n = self.len();
        let v: Vec<f64> = (0..n)
            .flat_map(|i| (0..n).filter(move |&j| j != i).map(move |j| (i, j)))
            .map(|(i, j)| self.get(i, j))
            .collect();
        crate::sample::mean(&v)
    }
}

/// Correlations of every pair of `runs` (name, scores per token id) over the `top_n` most
/// frequent tokens scored in both, each pair with its own seeded random stream.
pub fn pairwise(
    runs: &[(String, &[Option<f64>])],
    freq: &[u64],
    top_n: usize,
    method: Method,
    opts: &CorrOptions,
) -> Result<CorrelationMatrix> {
    if runs.len() < 2 {
        return Err(PrefscoreError::invalid(
            "a pairwise table needs at least 2 runs",
        ));
    }
    let lens: Vec<usize> = runs.iter().map(|(_, s)| s.len()).collect();
    check_vocab(&lens, freq.len())?;
    let m = runs.len();
    let mut out = CorrelationMatrix {
        labels: runs.iter().map(|(l, _)| l.clone()).collect(),
        method,
        r: vec![1.0; m * m],
        lo: vec![f64::NAN; m * m],
        hi: vec![f64::NAN; m * m],
        p_value: vec![f64::NAN; m * m],
        n: vec![0; m * m],
    };
    for i in 0..m {
        let own = top_tokens(freq, top_n, &[runs[i].1]).len();
        out.n[i * m + i] = own;
        out.lo[i * m + i] = 1.0;
        out.hi[i * m + i] = 1.0;
        out.p_value[i * m + i] = 0.0;
        for j in i + 1..m {
            let tokens = top_tokens(freq, top_n, &[runs[i].1, runs[j].1]);
            let pick = |s: &[Option<f64>]| -> Vec<f64> {
                tokens
                    .iter()
                    .map(|&t| s[t as usize].unwrap_or(f64::NAN))
                    .collect()
            };
            let c = correlation(
                &pick(runs[i].1),
                &pick(runs[j].1),
                method,
                opts,
                (i * m + j) as u64,
            )?;
            for (a, b) in [(i, j), (j, i)] {
                let k = a * m + b;
                out.r[k] = c.r;
                out.n[k] = c.n;
                if let Some(iv) = c.interval {
                    out.lo[k] = iv.lo;
                    out.hi[k] = iv.hi;
                }
                if let Some(p) = c.p_value {
                    out.p_value[k] = p;
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// The O(n) resample path equals ranking the explicit resample.
    #[test]
    fn weighted_resamples_match_explicit_resamples() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let n = 60;
        // Rounded values: plenty of ties in both variables.
        let x: Vec<f64> = (0..n)
            .map(|_| (rng.random_range(0.0..8.0f64)).floor())
            .collect();
        let y: Vec<f64> = x
            .iter()
            .map(|v| (v + rng.random_range(0.0..4.0f64)).floor())
            .collect();
        for method in [Method::Pearson, Method::Spearman] {
            let rs = Resampler::new(method, &x, &y);
            for _ in 0..20 {
                let mut w = vec![0u32; n];
                let (mut bx, mut by) = (Vec::new(), Vec::new());
                for _ in 0..n {
                    let i = rng.random_range(0..n);
                    w[i] += 1;
                    bx.push(x[i]);
                    by.push(y[i]);
                }
                let fast = rs.coefficient(&w).unwrap();
                let slow = coefficient(method, &bx, &by).unwrap();
                assert!((fast - slow).abs() < 1e-12, "{method:?}: {fast} vs {slow}");
            }
            let all = vec![1u32; n];
            let full = coefficient(method, &x, &y).unwrap();
            assert!((rs.coefficient(&all).unwrap() - full).abs() < 1e-12);
        }
        // A resample of one repeated pair is constant: no r.
        let mut w = vec![0u32; n];
        w[3] = n as u32;
        assert!(Resampler::new(Method::Spearman, &x, &y)
            .coefficient(&w)
            .is_err());
    }
}
