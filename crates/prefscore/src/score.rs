//! Preference scores (eq. 4 of the two-tower paper) and tower ordering (eq. 3).

use serde::{Deserialize, Serialize};

use crate::{PrefscoreError, Result, TokenStats};

/// How a tower's typical probability of a token is summarised before taking the difference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ScoreKind {
    /// The paper's eq. 4: s_a = log p̄1_a − log p̄2_a with p̄ the arithmetic mean of p over the
    /// positions whose target is a.
    ArithmeticMean,
    /// The released code: s_a = mean log p1 − mean log p2 (log of the geometric means).
    GeometricMean,
}

/// Scores of every token id: `values[a]` is `Some(s_a)`, or `None` for a token never seen as a
/// target (never NaN). Positive means the first tower of `towers` predicts the token better.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scores {
    /// Which summary was used.
    pub kind: ScoreKind,
    /// Original tower indices: `towers[0]` is the tower the score favours when positive; the
    /// rest are what it is compared against (one tower, or all others for K > 2).
    pub towers: Vec<usize>,
    /// Per token id.
    pub values: Vec<Option<f64>>,
}

impl Scores {
    /// Score of `token`, `None` when it was never a target (or is outside the vocabulary).
    pub fn get(&self, token: u32) -> Option<f64> {
        self.values.get(token as usize).copied().flatten()
    }

    /// Token ids without a score.
    pub fn unseen(&self) -> Vec<u32> {
        (0..self.values.len() as u32)
            .filter(|&a| self.values[a as usize].is_none())
            .collect()
    }

    /// Number of tokens with a score.
    pub fn n_scored(&self) -> usize {
        self.values.iter().filter(|v| v.is_some()).count()
    }

    /// The scores negated (what swapping the two sides gives).
    pub fn negated(&self) -> Scores {
        let mut towers = self.towers.clone();
        if towers.len() == 2 {
            towers.swap(0, 1);
        }
        Scores {
            kind: self.kind,
            towers,
            values: self.values.iter().map(|v| v.map(|s| -s)).collect(),
        }
    }
}

impl TokenStats {
    /// Eq. 4 for a two-tower model with the towers ordered by eq. 3: tower 1 is the primary
    /// tower (higher mean probability of the target over all positions), so
    /// `scores.towers == primary_order()`. Swapping the towers of the model leaves the result
    /// unchanged.
    pub fn scores(&self, kind: ScoreKind) -> Result<Scores> {
        if self.n_towers() != 2 {
            return Err(PrefscoreError::invalid(format!(
                "scores() needs exactly 2 towers (got {}); use scores_vs_rest for K > 2",
                self.n_towers()
            )));
        }
        let order = self.primary_order();
        self.raw_scores(kind, order[0], order[1])
    }

    /// Eq. 4 with a fixed order: s_a = log p̄_first,a − log p̄_second,a (no eq. 3 ordering).
    pub fn raw_scores(&self, kind: ScoreKind, first: usize, second: usize) -> Result<Scores> {
        self.check_pair(first, second)?;
        self.against(kind, first, &[second])
    }

    /// Eq. 4 with a fixed order where a tower that never saw a token counts its summary as 0,
    /// the rule of the released code's per-token vector (`np.zeros`, filled where a token was
    /// scored): s_a = m_first,a − m_second,a with m = log p̄ or mean log p, and a missing m
    /// taken as 0 (as if p = 1). Tokens never seen at all stay `None`. With all towers on
    /// identical positions this equals [`TokenStats::raw_scores`]; it differs only for
    /// statistics built with towers on different positions ([`crate::own_positions`]), where
    /// a token missing from one side gets the other side's summary, negated or not, as its score.
    pub fn scores_missing_as_zero(
        &self,
        kind: ScoreKind,
        first: usize,
        second: usize,
    ) -> Result<Scores> {
        self.check_pair(first, second)?;
        let m = |k: usize, a: u32| self.summary(kind, k, a).unwrap_or(0.0);
        let values = (0..self.vocab_size() as u32)
            .map(|a| (self.count(a) > 0).then(|| m(first, a) - m(second, a)))
            .collect();
        Ok(Scores {
            kind,
            towers: vec![first, second],
            values,
        })
    }

    /// Scores of every tower against the rest, for K ≥ 2 towers, in eq. 3 order (most probable
    /// tower first). For tower k and token a:
    /// - `ArithmeticMean`: s_k,a = log p̄_k,a − log( (1/(K−1)) Σ_{j≠k} p̄_j,a ), tower k's mean
    ///   probability against the average of the other towers' mean probabilities;
    /// - `GeometricMean`: s_k,a = mean log p_k,a − (1/(K−1)) Σ_{j≠k} mean log p_j,a.
    ///
    /// For K = 2 both reduce to eq. 4 (the second entry is then the first negated).
    pub fn scores_vs_rest(&self, kind: ScoreKind) -> Result<Vec<Scores>> {
        if self.n_towers() < 2 {
            return Err(PrefscoreError::invalid("scores need at least 2 towers"));
        }
        self.primary_order()
            .into_iter()
            .map(|k| {
                let rest: Vec<usize> = (0..self.n_towers()).filter(|&j| j != k).collect();
                self.against(kind, k, &rest)
            })
            .collect()
    }

    /// What `kind` takes of `tower`'s probabilities of token `a`: log p̄ (arithmetic) or mean
    /// log p (geometric); `None` when the tower never saw the token.
    fn summary(&self, kind: ScoreKind, tower: usize, a: u32) -> Option<f64> {
        match kind {
            ScoreKind::ArithmeticMean => self.log_mean_p(tower, a),
            ScoreKind::GeometricMean => self.mean_log_p(tower, a),
        }
    }

    /// Two distinct tower indices of these statistics.
    fn check_pair(&self, first: usize, second: usize) -> Result<()> {
        if first >= self.n_towers() || second >= self.n_towers() || first == second {
            return Err(PrefscoreError::invalid(format!(
                "towers ({first}, {second}) must be two distinct indices below {}",
                self.n_towers()
            )));
        }
        Ok(())
    }

    /// Tower `k` against the towers `rest` (see [`TokenStats::scores_vs_rest`]).
    fn against(&self, kind: ScoreKind, k: usize, rest: &[usize]) -> Result<Scores> {
        let summary = |tower: usize, a: u32| self.summary(kind, tower, a);
        let values = (0..self.vocab_size() as u32)
            .map(|a| {
                let own = summary(k, a)?;
                let others: Option<Vec<f64>> = rest.iter().map(|&j| summary(j, a)).collect();
                let others = others?;
                let other = match kind {
                    ScoreKind::ArithmeticMean => log_mean_exp(&others),
                    ScoreKind::GeometricMean => others.iter().sum::<f64>() / others.len() as f64,
                };
                Some(own - other)
            })
            .collect();
        let mut towers = vec![k];
        towers.extend_from_slice(rest);
        Ok(Scores {
            kind,
            towers,
            values,
        })
    }
}

/// log of the mean of exp(x), computed without underflow.
fn log_mean_exp(x: &[f64]) -> f64 {
    let m = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    m + (x.iter().map(|v| (v - m).exp()).sum::<f64>() / x.len() as f64).ln()
}
