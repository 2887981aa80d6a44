//! Per-token, per-tower sufficient statistics of the target probabilities.

use serde::{Deserialize, Serialize};

use crate::{PrefscoreError, Result};

/// Largest log-probability accepted as "0 up to rounding" (log-softmax in f32 can return a few
/// ulps above 0); anything larger is refused as not a log-probability.
const LOGP_TOLERANCE: f32 = 1e-3;

/// Per token `a` and tower `k`: the number of positions whose target is `a`, Σ p and Σ log p of
/// tower `k`'s probability of that target (the statistics behind eqs. 3 and 4 of the two-tower
/// paper), plus the totals over all positions per tower.
///
/// Σ p is kept in a shifted log-domain form (a running maximum m and Σ exp(log p − m)), so mean
/// probabilities of tokens that every tower finds very unlikely do not underflow to 0.
/// Statistics of disjoint position sets [`merge`](TokenStats::merge) into those of their union.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawStats")]
pub struct TokenStats {
    vocab_size: usize,
    n_towers: usize,
    /// Positions whose target is the token, per token.
    count: Vec<u64>,
    /// Positions seen by tower k with target a, at `[k * vocab + a]` (equal to `count` unless
    /// positions were split between pseudo-towers, see [`crate::split_positions`]).
    tower_count: Vec<u64>,
    /// Running max of log p, at `[k * vocab + a]` (meaningless while the cell's count is 0;
    /// kept finite so the statistics serialise to JSON).
    max_logp: Vec<f64>,
    /// Σ exp(log p − max_logp), at `[k * vocab + a]`.
    sum_p_shifted: Vec<f64>,
    /// Σ log p, at `[k * vocab + a]`.
    sum_logp: Vec<f64>,
}

impl TokenStats {
    /// Empty statistics for token ids `0..vocab_size` and `n_towers` towers.
    pub fn new(vocab_size: usize, n_towers: usize) -> Result<Self> {
        let cells = cells(vocab_size, n_towers)?;
        Ok(TokenStats {
            vocab_size,
            n_towers,
            count: vec![0; vocab_size],
            tower_count: vec![0; cells],
            max_logp: vec![0.0; cells],
            sum_p_shifted: vec![0.0; cells],
            sum_logp: vec![0.0; cells],
        })
    }

    /// Add positions: `targets[i]` is the target token at position i and `log_probs[k][i]` is
    /// tower k's log p(target) there. Every tower must cover exactly the same positions (same
    /// masks). Nothing is added when any input is invalid (length mismatch, token id out of
    /// range, non-finite log-probability or one above 0 by more than rounding, 1e-3; values in
    /// (0, 1e-3] count as 0).
    pub fn add(&mut self, targets: &[u32], log_probs: &[&[f32]]) -> Result<()> {
        self.check_batch(targets, log_probs)?;
        for &t in targets {
            self.count[t as usize] += 1;
        }
        for (k, lp) in log_probs.iter().enumerate() {
            for (&t, &l) in targets.iter().zip(lp.iter()) {
                self.push(k, t as usize, l.min(0.0) as f64);
            }
        }
        Ok(())
    }

    /// Validate a batch before touching any state.
    fn check_batch(&self, targets: &[u32], log_probs: &[&[f32]]) -> Result<()> {
        if log_probs.len() != self.n_towers {
            return Err(PrefscoreError::invalid(format!(
                "got log-probs of {} towers, statistics have {}",
                log_probs.len(),
                self.n_towers
            )));
        }
        for (k, lp) in log_probs.iter().enumerate() {
            if lp.len() != targets.len() {
                return Err(PrefscoreError::invalid(format!(
                    "tower {k} has {} log-probs for {} targets",
                    lp.len(),
                    targets.len()
                )));
            }
            check_log_probs(lp, k)?;
        }
        self.check_targets(targets)
    }

    fn check_targets(&self, targets: &[u32]) -> Result<()> {
        if let Some((i, &t)) = targets
            .iter()
            .enumerate()
            .find(|(_, &t)| t as usize >= self.vocab_size)
        {
            return Err(PrefscoreError::invalid(format!(
                "target {t} at position {i} is outside the vocabulary of {}",
                self.vocab_size
            )));
        }
        Ok(())
    }

    /// Add one observation of tower `k` (shifted log-sum-exp update).
    pub(crate) fn push(&mut self, k: usize, a: usize, l: f64) {
        let c = k * self.vocab_size + a;
        let first = self.tower_count[c] == 0;
        self.tower_count[c] += 1;
        self.sum_logp[c] += l;
        let m = self.max_logp[c];
        if first {
            self.max_logp[c] = l;
            self.sum_p_shifted[c] = 1.0;
        } else if l <= m {
            self.sum_p_shifted[c] += (l - m).exp();
        } else {
            // New maximum: rescale what was summed so far.
            self.sum_p_shifted[c] = self.sum_p_shifted[c] * (m - l).exp() + 1.0;
            self.max_logp[c] = l;
        }
    }

    /// Count a position for token `a` without any tower (used by pseudo-tower splits).
    pub(crate) fn count_position(&mut self, a: usize) {
        self.count[a] += 1;
    }

    /// Check targets and one tower's log-probs (for callers building statistics by hand).
    pub(crate) fn check_single(&self, targets: &[u32], log_probs: &[f32]) -> Result<()> {
        if log_probs.len() != targets.len() {
            return Err(PrefscoreError::invalid(format!(
                "{} log-probs for {} targets",
                log_probs.len(),
                targets.len()
            )));
        }
        check_log_probs(log_probs, 0)?;
        self.check_targets(targets)
    }

    /// Add `other` (statistics of other positions, same vocabulary and towers) into `self`.
    pub fn merge(&mut self, other: &TokenStats) -> Result<()> {
        if other.vocab_size != self.vocab_size || other.n_towers != self.n_towers {
            return Err(PrefscoreError::invalid(format!(
                "cannot merge statistics of {}x{} (vocab x towers) into {}x{}",
                other.vocab_size, other.n_towers, self.vocab_size, self.n_towers
            )));
        }
        for (a, b) in self.count.iter_mut().zip(&other.count) {
            *a += b;
        }
        for c in 0..self.tower_count.len() {
            if other.tower_count[c] == 0 {
                continue;
            }
            if self.tower_count[c] == 0 {
                self.max_logp[c] = other.max_logp[c];
                self.sum_p_shifted[c] = other.sum_p_shifted[c];
            } else {
                let (m1, m2) = (self.max_logp[c], other.max_logp[c]);
                let m = m1.max(m2);
                self.sum_p_shifted[c] = self.sum_p_shifted[c] * (m1 - m).exp()
                    + other.sum_p_shifted[c] * (m2 - m).exp();
                self.max_logp[c] = m;
            }
            self.tower_count[c] += other.tower_count[c];
            self.sum_logp[c] += other.sum_logp[c];
        }
        Ok(())
    }

    /// Size of the vocabulary (token ids are `0..vocab_size`).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Number of towers.
    pub fn n_towers(&self) -> usize {
        self.n_towers
    }

    /// Number of positions whose target is `token` (0 for ids outside the vocabulary).
    pub fn count(&self, token: u32) -> u64 {
        self.count.get(token as usize).copied().unwrap_or(0)
    }

    /// Target counts of every token (a frequency list usable by [`crate::correlate`]).
    pub fn counts(&self) -> &[u64] {
        &self.count
    }

    /// Total number of positions added.
    pub fn total_positions(&self) -> u64 {
        self.count.iter().sum()
    }

    /// Tokens that never occurred as a target (they have no score).
    pub fn unseen_tokens(&self) -> Vec<u32> {
        (0..self.vocab_size as u32)
            .filter(|&a| self.count[a as usize] == 0)
            .collect()
    }

    fn cell(&self, tower: usize, token: u32) -> Option<usize> {
        (tower < self.n_towers && (token as usize) < self.vocab_size)
            .then(|| tower * self.vocab_size + token as usize)
    }

    /// Σ p of `tower` over the positions whose target is `token` (may underflow to 0 for very
    /// unlikely tokens; [`TokenStats::log_mean_p`] does not).
    pub fn sum_p(&self, tower: usize, token: u32) -> f64 {
        self.cell(tower, token).map_or(0.0, |c| {
            if self.tower_count[c] == 0 {
                0.0
            } else {
                self.sum_p_shifted[c] * self.max_logp[c].exp()
            }
        })
    }

    /// Σ log p of `tower` over the positions whose target is `token`.
    pub fn sum_log_p(&self, tower: usize, token: u32) -> f64 {
        self.cell(tower, token).map_or(0.0, |c| self.sum_logp[c])
    }

    /// log p̄: the log of the arithmetic mean probability `tower` gives `token` where it is the
    /// target (eq. 4's log p̄_a); `None` when the token was never a target.
    pub fn log_mean_p(&self, tower: usize, token: u32) -> Option<f64> {
        let c = self.cell(tower, token)?;
        let n = self.tower_count[c];
        (n > 0).then(|| self.max_logp[c] + self.sum_p_shifted[c].ln() - (n as f64).ln())
    }

    /// Mean of log p (the log of the geometric mean probability, the released code's score
    /// ingredient); `None` when the token was never a target.
    pub fn mean_log_p(&self, tower: usize, token: u32) -> Option<f64> {
        let c = self.cell(tower, token)?;
        let n = self.tower_count[c];
        (n > 0).then(|| self.sum_logp[c] / n as f64)
    }

    /// Mean probability of the target over all positions for `tower` (eq. 3's criterion);
    /// `None` before any position was added.
    pub fn tower_mean_p(&self, tower: usize) -> Option<f64> {
        if tower >= self.n_towers {
            return None;
        }
        let n: u64 = self.tower_count[tower * self.vocab_size..(tower + 1) * self.vocab_size]
            .iter()
            .sum();
        let s: f64 = (0..self.vocab_size as u32)
            .map(|a| self.sum_p(tower, a))
            .sum();
        (n > 0).then(|| s / n as f64)
    }

    /// Tower indices sorted by [`TokenStats::tower_mean_p`], highest first (ties keep index
    /// order): element 0 is the primary tower of eq. 3.
    pub fn primary_order(&self) -> Vec<usize> {
        let means: Vec<f64> = (0..self.n_towers)
            .map(|k| self.tower_mean_p(k).unwrap_or(0.0))
            .collect();
        let mut order: Vec<usize> = (0..self.n_towers).collect();
        order.sort_by(|&i, &j| means[j].total_cmp(&means[i]));
        order
    }

    /// The same statistics with towers re-indexed: new tower i is old tower `order[i]`.
    pub fn reorder_towers(&self, order: &[usize]) -> Result<TokenStats> {
        let mut seen = vec![false; self.n_towers];
        if order.len() != self.n_towers
            || order
                .iter()
                .any(|&k| k >= self.n_towers || std::mem::replace(&mut seen[k], true))
        {
            return Err(PrefscoreError::invalid(format!(
                "{order:?} is not a permutation of the {} towers",
                self.n_towers
            )));
        }
        let v = self.vocab_size;
        let pick = |x: &Vec<f64>| -> Vec<f64> {
            order
                .iter()
                .flat_map(|&k| x[k * v..(k + 1) * v].iter().copied())
                .collect()
        };
        Ok(TokenStats {
            vocab_size: v,
            n_towers: self.n_towers,
            count: self.count.clone(),
            tower_count: order
                .iter()
                .flat_map(|&k| self.tower_count[k * v..(k + 1) * v].iter().copied())
                .collect(),
            max_logp: pick(&self.max_logp),
            sum_p_shifted: pick(&self.sum_p_shifted),
            sum_logp: pick(&self.sum_logp),
        })
    }
}

/// The serialised form, checked for consistent lengths before it becomes a [`TokenStats`].
#[derive(Deserialize)]
struct RawStats {
    vocab_size: usize,
    n_towers: usize,
    count: Vec<u64>,
    tower_count: Vec<u64>,
    max_logp: Vec<f64>,
    sum_p_shifted: Vec<f64>,
    sum_logp: Vec<f64>,
}

impl TryFrom<RawStats> for TokenStats {
    type Error = PrefscoreError;

    fn try_from(r: RawStats) -> Result<Self> {
        let cells = cells(r.vocab_size, r.n_towers)?;
        let lens_ok = r.count.len() == r.vocab_size
            && [r.max_logp.len(), r.sum_p_shifted.len(), r.sum_logp.len()]
                .iter()
                .all(|&l| l == cells)
            && r.tower_count.len() == cells;
        if !lens_ok {
            return Err(PrefscoreError::invalid(
                "serialised TokenStats has inconsistent sizes",
            ));
        }
        Ok(TokenStats {
            vocab_size: r.vocab_size,
            n_towers: r.n_towers,
            count: r.count,
            tower_count: r.tower_count,
            max_logp: r.max_logp,
            sum_p_shifted: r.sum_p_shifted,
            sum_logp: r.sum_logp,
        })
    }
}

/// The number of (tower, token) cells, refusing zero sizes and a product that overflows.
fn cells(vocab_size: usize, n_towers: usize) -> Result<usize> {
    if vocab_size == 0 || n_towers == 0 {
        return Err(PrefscoreError::invalid(format!(
            "TokenStats needs vocab_size > 0 and n_towers > 0 (got {vocab_size}, {n_towers})"
        )));
    }
    vocab_size.checked_mul(n_towers).ok_or_else(|| {
        PrefscoreError::invalid(format!(
            "TokenStats of {vocab_size} tokens and {n_towers} towers overflows usize"
        ))
    })
}

/// Refuse NaN, ±∞ and log-probabilities clearly above 0 in tower `k`'s values.
fn check_log_probs(lp: &[f32], k: usize) -> Result<()> {
    match lp
        .iter()
        .enumerate()
        .find(|(_, &l)| !l.is_finite() || l > LOGP_TOLERANCE)
    {
        None => Ok(()),
        Some((i, &l)) => Err(PrefscoreError::BadValue {
            what: format!("log-prob of tower {k}, position {i} (must be finite and <= 0)"),
            value: l as f64,
        }),
    }
}
