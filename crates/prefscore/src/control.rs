//! Controls that tell a real preference from noise.
//!
//! 1. Single-tower pseudo-towers ([`random_partition`]): split the hidden units of a
//!    single-tower model of the same total width at random into two halves, retrain one head
//!    per half (as for real towers), and score the halves like towers. If the two-tower
//!    preference only reflected "two heads on one representation", pseudo-towers would show it
//!    just as consistently across seeds.
//! 2. Sampling noise ([`split_positions`], [`split_null`]): one model's positions split at random
//!    into two pseudo-towers. Their scores differ only by sampling, so the correlation between
//!    two independent splits is the null distribution of a score correlation at this corpus
//!    size.
//! 3. A permutation p-value for every correlation ([`crate::correlation`]).
//! 4. Each tower on its own positions ([`own_positions`]): tower 1 scored on one fixed part of
//!    the text and tower 2 on another, as a protocol that scores each tower in its own
//!    evaluation pass would. The score then carries how hard the two parts' contexts are, which
//!    is the same for every model that reads them, so it measures how much agreement such a
//!    protocol makes from the text alone.
//!
//! The baseline of two single-tower models trained with different seeds needs no helper: pass
//! their per-position log-probs as two "towers" to [`TokenStats::add`].

use rand::seq::SliceRandom;
use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::corr::{correlation, top_tokens, CorrOptions, Method};
use crate::sample::{mean, quantile_sorted, rng_for, sample_sd};
use crate::{PrefscoreError, Result, ScoreKind, TokenStats};

/// A seeded random partition of `0..n` into two halves of sizes ⌈n/2⌉ and ⌊n/2⌋, each sorted
/// (e.g. hidden-unit indices of a single-tower model for two pseudo-towers).
pub fn random_partition(n: usize, seed: u64) -> [Vec<usize>; 2] {
    let mut idx: Vec<usize> = (0..n).collect();
    idx.shuffle(&mut rng_for(seed, 0));
    let mut second = idx.split_off(n.div_ceil(2));
    idx.sort_unstable();
    second.sort_unstable();
    [idx, second]
}

/// Two-tower statistics from ONE model: each position (target `targets[i]`, log-prob
/// `log_probs[i]`) goes to pseudo-tower 0 or 1 with probability ½, drawn from `seed`.
/// `count(a)` counts every position; each pseudo-tower averages over its own positions.
pub fn split_positions(
    targets: &[u32],
    log_probs: &[f32],
    vocab_size: usize,
    seed: u64,
) -> Result<TokenStats> {
    let mut rng = rng_for(seed, 1);
    let side: Vec<bool> = targets.iter().map(|_| rng.random::<bool>()).collect();
    own_positions(targets, [log_probs, log_probs], &side, vocab_size)
}

/// Two-tower statistics with each tower scored on its own positions: position i counts for
/// tower `side[i]` alone (`false`: tower 0, `true`: tower 1), with that tower's log-prob
/// `log_probs[side[i]][i]`. `count(a)` counts every position; a token seen on one side only has
/// a summary for that tower only (see [`TokenStats::scores_missing_as_zero`]).
///
/// Errors: `side`, a log-prob vector and `targets` of different lengths, targets outside the
/// vocabulary, or log-probs that are NaN or above 0 beyond rounding.
pub fn own_positions(
    targets: &[u32],
    log_probs: [&[f32]; 2],
    side: &[bool],
    vocab_size: usize,
) -> Result<TokenStats> {
    let mut st = TokenStats::new(vocab_size, 2)?;
    for lp in log_probs {
        st.check_single(targets, lp)?;
    }
    if side.len() != targets.len() {
        return Err(PrefscoreError::invalid(format!(
            "{} sides for {} targets",
            side.len(),
            targets.len()
        )));
    }
    for (i, (&t, &s)) in targets.iter().zip(side).enumerate() {
        let k = usize::from(s);
        st.count_position(t as usize);
        st.push(k, t as usize, f64::from(log_probs[k][i].min(0.0)));
    }
    Ok(st)
}

/// The null distribution of score correlations from sampling noise alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NullDistribution {
    /// Correlation of each replicate (two independent position splits of the same model).
    pub correlations: Vec<f64>,
    /// Their mean.
    pub mean: f64,
    /// Their sample standard deviation.
    pub sd: f64,
    /// Their 2.5% and 97.5% quantiles.
    pub q025: f64,
    /// See `q025`.
    pub q975: f64,
}

impl NullDistribution {
    /// Share of null correlations at least as large as `r` (one-sided, with the +1 rule):
    /// how surprising an observed seed-to-seed correlation is under pure sampling noise.
    pub fn p_value(&self, r: f64) -> f64 {
        let hits = self.correlations.iter().filter(|&&c| c >= r).count();
        (1 + hits) as f64 / (1 + self.correlations.len()) as f64
    }
}

/// The settings of a [`split_null`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SplitNull {
    /// The `top_n` most frequent tokens are correlated.
    pub top_n: usize,
    /// The score of each split (towers ordered by eq. 3).
    pub kind: ScoreKind,
    /// The correlation of the two splits' scores.
    pub method: Method,
    /// How many replicates (at least one).
    pub replicates: usize,
    /// The seed the replicates' splits are derived from.
    pub seed: u64,
}

/// `null.replicates` times: split the single model's positions twice at random (independent
/// seeds derived from `null.seed`), score both splits with `null.kind` (towers ordered by eq.
/// 3), and correlate the two score vectors over the `null.top_n` most frequent tokens (`freq`)
/// with `null.method`.
pub fn split_null(
    targets: &[u32],
    log_probs: &[f32],
    vocab_size: usize,
    freq: &[u64],
    null: &SplitNull,
) -> Result<NullDistribution> {
    let SplitNull {
        top_n,
        kind,
        method,
        replicates,
        seed,
    } = *null;
    if replicates == 0 {
        return Err(PrefscoreError::invalid(
            "split_null needs at least one replicate",
        ));
    }
    if freq.len() != vocab_size {
        return Err(PrefscoreError::invalid(format!(
            "frequency list of length {} for a vocabulary of {vocab_size}",
            freq.len()
        )));
    }
    let plain = CorrOptions {
        permutations: 0,
        bootstrap: crate::Bootstrap {
            resamples: 0,
            ..Default::default()
        },
    };
    let mut correlations = Vec::with_capacity(replicates);
    for r in 0..replicates as u64 {
        let s = |k: u64| -> Result<Vec<Option<f64>>> {
            let sub = seed
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .wrapping_add(2 * r + k);
            Ok(split_positions(targets, log_probs, vocab_size, sub)?
                .scores(kind)?
                .values)
        };
        let (a, b) = (s(0)?, s(1)?);
        let tokens = top_tokens(freq, top_n, &[&a, &b]);
        let pick = |v: &[Option<f64>]| -> Vec<f64> {
            tokens
                .iter()
                .map(|&t| v[t as usize].unwrap_or(f64::NAN))
                .collect()
        };
        correlations.push(correlation(&pick(&a), &pick(&b), method, &plain, 0)?.r);
    }
    let mut sorted = correlations.clone();
    sorted.sort_by(f64::total_cmp);
    Ok(NullDistribution {
        mean: mean(&correlations).unwrap_or(f64::NAN),
        sd: sample_sd(&correlations),
        q025: quantile_sorted(&sorted, 0.025).unwrap_or(f64::NAN),
        q975: quantile_sorted(&sorted, 0.975).unwrap_or(f64::NAN),
        correlations,
    })
}
