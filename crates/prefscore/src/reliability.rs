//! Reliability of preference scores and the noise ceiling of a correlation.
//!
//! A seed-to-seed score correlation (Tables 2 and 4 of the two-tower paper) is bounded by how
//! reliably each run's scores are measured: scores estimated from few occurrences are noisy, and
//! noise alone lowers a correlation. This module measures that ceiling and corrects for it:
//!
//! 1. [`split_half`] / [`split_half_reliability`]: one run's positions dealt into two halves per
//!    token; the correlation of the two halves' scores, stepped up to full length by
//!    [`spearman_brown`], is the reliability of the full-data scores against corpus sampling.
//! 2. [`retest_reliability`]: the correlation of two full measurements of the same quantity
//!    (e.g. the same frozen towers with heads retrained under another seed).
//! 3. [`disattenuate`] / [`disattenuated_correlation`]: Spearman's correction for attenuation,
//!    r_ab / √(r_aa r_bb), the correlation the two runs' scores would have without measurement
//!    noise, with a joint bootstrap interval.
//! 4. [`partial_correlation`] / [`partial_on_log_frequency`]: the correlation left once a
//!    covariate (log frequency) is controlled for, since frequency drives both reliability and,
//!    possibly, the score itself.
//! 5. [`tokens_with_min_count`]: tokens seen at least [`DEFAULT_MIN_COUNT`] times in every run
//!    (rare tokens are where scores are least reliable).

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::corr::{check_pairs, coefficient, ranks, Resampler};
use crate::sample::{rng_for, Bootstrap, Interval};
use crate::{pearson, Method, PrefscoreError, Result, ScoreKind, Scores, TokenStats};

/// Default minimum number of occurrences (in every run) of a token kept by
/// [`tokens_with_min_count`].
pub const DEFAULT_MIN_COUNT: u64 = 50;

/// Random streams of the bootstraps here, above every one [`crate::correlation`] can use (it
/// takes streams below [`crate::MAX_STREAM`] and draws on twice those, plus one), so the
/// draws of different analyses do not coincide.
const STREAM_SPLIT_HALF: u64 = 1 << 40;
const STREAM_RETEST: u64 = (1 << 40) + 1;
const STREAM_DISATTENUATED: u64 = (1 << 40) + 2;

/// The reliability of one run's scores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reliability {
    /// Correlation of the two measurements: the two halves for [`split_half_reliability`], the
    /// two full vectors for [`retest_reliability`] (then equal to `r`).
    pub half_r: f64,
    /// The reliability of a full-data score: `spearman_brown(half_r)` for split halves,
    /// `half_r` itself for test-retest.
    pub r: f64,
    /// Number of tokens used (scored in both measurements).
    pub n: usize,
    /// Percentile bootstrap interval of `r` over tokens; `None` when disabled.
    pub interval: Option<Interval>,
}

/// A correlation corrected for the unreliability of both score vectors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Disattenuated {
    /// The observed correlation r_ab of `a` and `b`.
    pub raw: f64,
    /// Reliability r_aa of `a` (its correlation with `a_retest`).
    pub rel_a: f64,
    /// Reliability r_bb of `b` (its correlation with `b_retest`).
    pub rel_b: f64,
    /// [`disattenuate`]`(raw, rel_a, rel_b)`; `None` when a reliability is ≤ 0. Not clamped: it
    /// can exceed 1 by sampling error.
    pub value: Option<f64>,
    /// Percentile bootstrap interval of `value`, every replicate recomputing r_ab, r_aa and r_bb
    /// on the same resample of tokens. A replicate with a reliability ≤ 0 counts as unbounded
    /// (±∞ on the side of its r_ab) and keeps its place at that end; `None` when disabled, or
    /// when an end falls on such replicates (about (1 − level)/2 of them on one side), so that
    /// end is unknown.
    pub interval: Option<Interval>,
    /// Number of tokens used (scored in all four vectors).
    pub n: usize,
}

/// A correlation before and after controlling for a covariate z.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartialCorrelation {
    /// The coefficient used (Spearman: everything on ranks).
    pub method: Method,
    /// Number of tokens used.
    pub n: usize,
    /// The plain correlation r_ab.
    pub raw: f64,
    /// Correlation of `a` with the covariate.
    pub r_az: f64,
    /// Correlation of `b` with the covariate.
    pub r_bz: f64,
    /// (r_ab − r_az r_bz) / √((1 − r_az²)(1 − r_bz²)).
    pub partial: f64,
}

/// Scores of two halves of one run's positions: each token's occurrences, in position order,
/// are dealt alternately, the 1st, 3rd, 5th ... to half 0 and the 2nd, 4th ... to half 1, so
/// the halves hold the same number (±1) of every token's occurrences and the same spread over
/// the corpus. `targets` and `log_probs` (exactly two towers) are as for [`TokenStats::add`].
///
/// Both halves are scored with the tower order of ALL positions (eq. 3 on the full data;
/// `towers` equal in both): a half ordered by its own eq. 3 could, when the towers' mean
/// probabilities nearly tie, pick the other tower as primary, negating all of that half's
/// scores and turning a high split-half correlation into a strongly negative one.
///
/// Errors: not two towers, no positions, or anything [`TokenStats::add`] refuses.
pub fn split_half(
    targets: &[u32],
    log_probs: &[&[f32]],
    vocab_size: usize,
    kind: ScoreKind,
) -> Result<[Scores; 2]> {
    if log_probs.len() != 2 {
        return Err(PrefscoreError::invalid(format!(
            "split_half needs the log-probs of exactly 2 towers, got {}",
            log_probs.len()
        )));
    }
    if targets.is_empty() {
        return Err(PrefscoreError::NotEnoughData(
            "split_half of no positions".into(),
        ));
    }
    // Validates every input before any half is built.
    let mut full = TokenStats::new(vocab_size, 2)?;
    full.add(targets, log_probs)?;
    let order = full.primary_order();
    let mut halves = [
        TokenStats::new(vocab_size, 2)?,
        TokenStats::new(vocab_size, 2)?,
    ];
    // Parity of the occurrences seen so far, per token.
    let mut odd_seen = vec![false; vocab_size];
    for (i, &t) in targets.iter().enumerate() {
        let a = t as usize;
        let h = usize::from(odd_seen[a]);
        odd_seen[a] = !odd_seen[a];
        halves[h].count_position(a);
        for (k, lp) in log_probs.iter().enumerate() {
            // The same clamp as TokenStats::add (rounding above 0 counts as 0).
            halves[h].push(k, a, lp[i].min(0.0) as f64);
        }
    }
    let [h0, h1] = halves;
    Ok([
        h0.raw_scores(kind, order[0], order[1])?,
        h1.raw_scores(kind, order[0], order[1])?,
    ])
}

/// The Spearman–Brown prophecy for doubling a test: the reliability 2r / (1 + r) of a
/// measurement twice as long as two halves that correlate `r_half`.
///
/// Domain: `r_half` is a correlation, clamped to [−1, 1] first. The formula is increasing and
/// maps [−1/3, 1] onto [−1, 1]; below −1/3 it leaves the range of a correlation and runs to −∞
/// at −1, so the result is clamped to [−1, 1]: every `r_half` ≤ −1/3 (−1 included, no division
/// by zero) gives −1. Any non-positive value means "no reliable signal" and
/// [`disattenuate`] refuses it, so the clamp loses nothing usable. NaN gives NaN.
pub fn spearman_brown(r_half: f64) -> f64 {
    if r_half.is_nan() {
        return f64::NAN;
    }
    let r = r_half.clamp(-1.0, 1.0);
    if r <= -1.0 / 3.0 {
        return -1.0;
    }
    (2.0 * r / (1.0 + r)).clamp(-1.0, 1.0)
}

/// Split-half reliability of one run's scores: [`split_half`] scores, correlated with `method`
/// over `tokens` (ids; those not scored in both halves are dropped, `n` counts the rest), then
/// stepped up by [`spearman_brown`]. The interval is the percentile bootstrap over tokens of
/// the corrected value, drawn from `boot.seed`.
///
/// Errors: as [`split_half`]; an empty token set or fewer than 3 kept tokens
/// ([`PrefscoreError::NotEnoughData`]); duplicate or out-of-vocabulary ids ([`PrefscoreError::InvalidArgument`]);
/// halves with constant scores ([`PrefscoreError::Undefined`]).
pub fn split_half_reliability(
    targets: &[u32],
    log_probs: &[&[f32]],
    vocab_size: usize,
    kind: ScoreKind,
    tokens: &[u32],
    method: Method,
    boot: &Bootstrap,
) -> Result<Reliability> {
    boot.check()?;
    let [h0, h1] = split_half(targets, log_probs, vocab_size, kind)?;
    let (_, cols) = pick(&[&h0.values, &h1.values], tokens)?;
    let (x, y) = (&cols[0], &cols[1]);
    check_pairs(x, y)?;
    let half_r = coefficient(method, x, y)?;
    let resample = Resampler::new(method, x, y);
    let interval = bootstrap(boot, x.len(), STREAM_SPLIT_HALF, |w| {
        resample.coefficient(w).map_or(f64::NAN, spearman_brown)
    });
    Ok(Reliability {
        half_r,
        r: spearman_brown(half_r),
        n: x.len(),
        interval,
    })
}

/// Test-retest reliability: the correlation of two full measurements of the same scores (per
/// token id, `None` = unscored), e.g. the same frozen towers with their heads retrained under a
/// second seed, over `tokens` scored in both. No Spearman–Brown step: each vector already is a
/// full-length measurement, so `half_r == r`. Interval and errors as
/// [`split_half_reliability`], plus a length mismatch ([`PrefscoreError::InvalidArgument`]) and a
/// non-finite score ([`PrefscoreError::BadValue`]).
pub fn retest_reliability(
    a: &[Option<f64>],
    a_retest: &[Option<f64>],
    tokens: &[u32],
    method: Method,
    boot: &Bootstrap,
) -> Result<Reliability> {
    boot.check()?;
    let (_, cols) = pick(&[a, a_retest], tokens)?;
    let (x, y) = (&cols[0], &cols[1]);
    check_pairs(x, y)?;
    let r = coefficient(method, x, y)?;
    let resample = Resampler::new(method, x, y);
    let interval = bootstrap(boot, x.len(), STREAM_RETEST, |w| {
        resample.coefficient(w).unwrap_or(f64::NAN)
    });
    Ok(Reliability {
        half_r: r,
        r,
        n: x.len(),
        interval,
    })
}

/// Spearman's correction for attenuation: r_ab / √(r_aa r_bb), the correlation of the
/// error-free scores given the observed correlation `r_ab` and the reliabilities `r_aa`, `r_bb`.
/// `None` when a reliability is ≤ 0 or any input is not finite. The value is NOT clamped: with
/// sampling error in the three estimates it can exceed 1 (read ≥ 1 as "as high as the noise
/// allows").
pub fn disattenuate(r_ab: f64, r_aa: f64, r_bb: f64) -> Option<f64> {
    let ok = r_ab.is_finite() && r_aa.is_finite() && r_bb.is_finite() && r_aa > 0.0 && r_bb > 0.0;
    ok.then(|| r_ab / (r_aa * r_bb).sqrt())
}

/// The disattenuated correlation of runs `a` and `b`, each with a retest (a second measurement
/// of the same run, see [`retest_reliability`]): r_ab = corr(a, b), r_aa = corr(a, a_retest),
/// r_bb = corr(b, b_retest), all with `method` over the `tokens` scored in all four vectors.
/// The bootstrap resamples tokens once per replicate and recomputes all three on that resample,
/// so the interval carries the uncertainty of the reliabilities as well as of r_ab.
///
/// For split-half reliabilities (no retest run) call [`split_half_reliability`] per run and
/// [`disattenuate`] on the results (no joint interval then).
///
/// Errors: vectors of different lengths, duplicate or out-of-vocabulary ids
/// ([`PrefscoreError::InvalidArgument`]); an empty token set or fewer than 3 kept tokens
/// ([`PrefscoreError::NotEnoughData`]); non-finite scores ([`PrefscoreError::BadValue`]); a constant vector
/// ([`PrefscoreError::Undefined`]).
pub fn disattenuated_correlation(
    a: &[Option<f64>],
    a_retest: &[Option<f64>],
    b: &[Option<f64>],
    b_retest: &[Option<f64>],
    tokens: &[u32],
    method: Method,
    boot: &Bootstrap,
) -> Result<Disattenuated> {
    boot.check()?;
    let (_, cols) = pick(&[a, a_retest, b, b_retest], tokens)?;
    let [xa, xa2, xb, xb2] = [&cols[0], &cols[1], &cols[2], &cols[3]];
    for (x, y) in [(xa, xb), (xa, xa2), (xb, xb2)] {
        check_pairs(x, y)?;
    }
    let raw = coefficient(method, xa, xb)?;
    let rel_a = coefficient(method, xa, xa2)?;
    let rel_b = coefficient(method, xb, xb2)?;
    let (ab, aa, bb) = (
        Resampler::new(method, xa, xb),
        Resampler::new(method, xa, xa2),
        Resampler::new(method, xb, xb2),
    );
    // A replicate whose reliability is at or below 0 stands for an unbounded value (r_ab over
    // a vanishing root), on the side of its r_ab: it keeps its place at that end of the
    // percentile interval, so the end is not known once (1 − level)/2 of the replicates are
    // such, and fewer of them still move the end outward as they should (dropping them would
    // pull both ends inward).
    let interval = bootstrap(boot, xa.len(), STREAM_DISATTENUATED, |w| {
        match (ab.coefficient(w), aa.coefficient(w), bb.coefficient(w)) {
            (Ok(r_ab), Ok(r_aa), Ok(r_bb)) => {
                disattenuate(r_ab, r_aa, r_bb).unwrap_or(if r_ab == 0.0 {
                    f64::NAN
                } else {
                    r_ab.signum() * f64::INFINITY
                })
            }
            _ => f64::NAN,
        }
    });
    Ok(Disattenuated {
        raw,
        rel_a,
        rel_b,
        value: disattenuate(raw, rel_a, rel_b),
        interval,
        n: xa.len(),
    })
}

/// Partial correlation of `x` and `y` controlling for `z`:
/// (r_xy − r_xz r_yz) / √((1 − r_xz²)(1 − r_yz²)), which equals the correlation of the
/// residuals of `x` and `y` after least-squares regression on `z`. For [`Method::Spearman`] all
/// three are replaced by their (average) ranks first.
///
/// Errors: different lengths ([`PrefscoreError::InvalidArgument`]); fewer than 4 triples (with 3 the
/// residuals are collinear and the value is always ±1; [`PrefscoreError::NotEnoughData`]); non-finite
/// values ([`PrefscoreError::BadValue`]); a constant variable, or `x` or `y` an exact linear function of
/// `z` (nothing left to correlate; [`PrefscoreError::Undefined`]).
pub fn partial_correlation(x: &[f64], y: &[f64], z: &[f64], method: Method) -> Result<f64> {
    Ok(partial_parts(x, y, z, method)?.3)
}

/// (r_xy, r_xz, r_yz, partial) of [`partial_correlation`].
fn partial_parts(x: &[f64], y: &[f64], z: &[f64], method: Method) -> Result<(f64, f64, f64, f64)> {
    check_pairs(x, y)?;
    check_pairs(x, z)?;
    if x.len() < 4 {
        return Err(PrefscoreError::NotEnoughData(format!(
            "a partial correlation needs at least 4 triples, got {}",
            x.len()
        )));
    }
    let (x, y, z) = match method {
        Method::Pearson => (x.to_vec(), y.to_vec(), z.to_vec()),
        Method::Spearman => (ranks(x), ranks(y), ranks(z)),
    };
    let (rxy, rxz, ryz) = (pearson(&x, &y)?, pearson(&x, &z)?, pearson(&y, &z)?);
    let (vx, vy) = (1.0 - rxz * rxz, 1.0 - ryz * ryz);
    // 1 − r² this small means a residual of pure rounding: the ratio would be noise.
    if vx <= 1e-10 || vy <= 1e-10 {
        return Err(PrefscoreError::Undefined(
            "partial correlation with a variable that is a linear function of the covariate".into(),
        ));
    }
    let partial = ((rxy - rxz * ryz) / (vx * vy).sqrt()).clamp(-1.0, 1.0);
    Ok((rxy, rxz, ryz, partial))
}

/// Correlation of two runs' scores `a`, `b` (per token id) controlling for log frequency:
/// [`partial_correlation`] with z = ln `freq[token]`, over the `tokens` scored in both. Does the
/// runs' agreement go beyond both following frequency?
///
/// A kept token with frequency 0 is an error ([`PrefscoreError::BadValue`], ln 0 is undefined) rather
/// than silently skipped: it means `freq` and the scores come from different data (a token
/// scored by a run is a target there, so it occurs), and skipping would quietly change the
/// token set. Other errors as [`partial_correlation`] and [`retest_reliability`].
pub fn partial_on_log_frequency(
    a: &[Option<f64>],
    b: &[Option<f64>],
    freq: &[u64],
    tokens: &[u32],
    method: Method,
) -> Result<PartialCorrelation> {
    if freq.len() != a.len() {
        return Err(PrefscoreError::invalid(format!(
            "a frequency list of length {} for score vectors of length {}",
            freq.len(),
            a.len()
        )));
    }
    let (kept, cols) = pick(&[a, b], tokens)?;
    let z = kept
        .iter()
        .map(|&t| match freq[t as usize] {
            0 => Err(PrefscoreError::BadValue {
                what: format!("frequency of token {t} (ln 0 is undefined)"),
                value: 0.0,
            }),
            f => Ok((f as f64).ln()),
        })
        .collect::<Result<Vec<f64>>>()?;
    let (raw, r_az, r_bz, partial) = partial_parts(&cols[0], &cols[1], &z, method)?;
    Ok(PartialCorrelation {
        method,
        n: kept.len(),
        raw,
        r_az,
        r_bz,
        partial,
    })
}

/// Token ids (ascending) whose count is at least `m` in every run; `counts` holds each run's
/// [`TokenStats::counts`]. Only ids inside every run's vocabulary are considered (the shortest
/// vector bounds them). No runs give no tokens.
/// [`DEFAULT_MIN_COUNT`] is the usual `m`.
pub fn tokens_with_min_count(counts: &[&[u64]], m: u64) -> Vec<u32> {
    let Some(len) = counts.iter().map(|c| c.len()).min() else {
        return Vec::new();
    };
    (0..len)
        .filter(|&a| counts.iter().all(|c| c[a] >= m))
        .map(|a| a as u32)
        .collect()
}

/// The values of `vectors` (indexed by token id, all the same length) at the `tokens` scored in
/// all of them: the kept ids and one column per vector.
fn pick(vectors: &[&[Option<f64>]], tokens: &[u32]) -> Result<(Vec<u32>, Vec<Vec<f64>>)> {
    let len = vectors[0].len();
    if vectors.iter().any(|v| v.len() != len) {
        let lens: Vec<usize> = vectors.iter().map(|v| v.len()).collect();
        return Err(PrefscoreError::invalid(format!(
            "score vectors of lengths {lens:?} must all cover the same vocabulary"
        )));
    }
    if tokens.is_empty() {
        return Err(PrefscoreError::NotEnoughData("empty token set".into()));
    }
    let mut seen = vec![false; len];
    let mut kept = Vec::with_capacity(tokens.len());
    for &t in tokens {
        let i = t as usize;
        if i >= len {
            return Err(PrefscoreError::invalid(format!(
                "token {t} outside the vocabulary of {len}"
            )));
        }
        // A repeated id would silently weigh that token twice.
        if std::mem::replace(&mut seen[i], true) {
            return Err(PrefscoreError::invalid(format!("token {t} listed twice")));
        }
        let mut all = true;
        for v in vectors {
            match v[i] {
                // Scores are never NaN: a non-finite value is a corrupted vector, not "unseen".
                Some(s) if !s.is_finite() => {
                    return Err(PrefscoreError::BadValue {
                        what: format!("score of token {t}"),
                        value: s,
                    })
                }
                Some(_) => {}
                None => all = false,
            }
        }
        if all {
            kept.push(t);
        }
    }
    let cols = vectors
        .iter()
        .map(|v| kept.iter().map(|&t| v[t as usize].unwrap_or(0.0)).collect())
        .collect();
    Ok((kept, cols))
}

/// Percentile interval of `stat` over `boot.resamples` resamples of `n` tokens, each given as
/// multiplicities; NaN replicates are left out, ±∞ keep their place at their end (see
/// [`Bootstrap::percentile`]). `None` when disabled.
fn bootstrap(
    boot: &Bootstrap,
    n: usize,
    stream: u64,
    mut stat: impl FnMut(&[u32]) -> f64,
) -> Option<Interval> {
    if boot.resamples == 0 || n == 0 {
        return None;
    }
    let mut rng = rng_for(boot.seed, stream);
    let mut w = vec![0u32; n];
    let stats = (0..boot.resamples)
        .map(|_| {
            w.fill(0);
            for _ in 0..n {
                w[rng.random_range(0..n)] += 1;
            }
            stat(&w)
        })
        .collect();
    boot.percentile(stats)
}
