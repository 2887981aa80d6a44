//! Small descriptive statistics and the seeded percentile bootstrap of a mean.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::{PrefscoreError, Result};

/// Arithmetic mean (NaN-free callers only; `None` for an empty slice).
pub(crate) fn mean(x: &[f64]) -> Option<f64> {
    (!x.is_empty()).then(|| x.iter().sum::<f64>() / x.len() as f64)
}

/// Sample standard deviation (n − 1); 0 for fewer than 2 values.
pub(crate) fn sample_sd(x: &[f64]) -> f64 {
    if x.len() < 2 {
        return 0.0;
    }
    let m = x.iter().sum::<f64>() / x.len() as f64;
    (x.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (x.len() - 1) as f64).sqrt()
}

/// Quantile `q` ∈ [0, 1] of sorted data by linear interpolation between order statistics
/// (the "type 7" rule of R and NumPy's default).
pub fn quantile_sorted(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() || !(0.0..=1.0).contains(&q) {
        return None;
    }
    let h = (sorted.len() - 1) as f64 * q;
    let (lo, hi) = (h.floor() as usize, h.ceil() as usize);
    Some(sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo]))
}

/// A two-sided interval at confidence `level`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// Lower end.
    pub lo: f64,
    /// Upper end.
    pub hi: f64,
    /// Confidence level, e.g. 0.95.
    pub level: f64,
}

impl Interval {
    /// The level as a percentage for headers and labels ([`level_percent`]).
    pub fn level_percent(&self) -> String {
        level_percent(self.level)
    }
}

/// A confidence level as a percentage for headers and labels: `95%`, `97.5%`.
pub fn level_percent(level: f64) -> String {
    // Rounded to 1e-4 of a percent, so that 0.95 does not print as 95.00000000000001%.
    let p = (level * 1e6).round() / 1e4;
    format!("{p}%")
}

/// The level that a table's interval columns hold, for their headers: the [`level_percent`]
/// of the intervals there when they share one, `mixed` when they do not, and the default
/// bootstrap's level when there is none (columns left empty).
pub fn common_level<'a>(intervals: impl IntoIterator<Item = Option<&'a Interval>>) -> String {
    let mut level = None;
    for i in intervals.into_iter().flatten() {
        match level {
            None => level = Some(i.level),
            Some(l) if l != i.level => return "mixed".into(),
            Some(_) => {}
        }
    }
    level_percent(level.unwrap_or(Bootstrap::default().level))
}

/// Options of the bootstrap intervals.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bootstrap {
    /// Number of resamples (0 disables the interval).
    pub resamples: usize,
    /// Confidence level in (0, 1).
    pub level: f64,
    /// Seed of the ChaCha8 generator that draws the resamples.
    pub seed: u64,
}

impl Default for Bootstrap {
    /// 1000 resamples, 95%, seed 0.
    fn default() -> Self {
        Bootstrap {
            resamples: 1000,
            level: 0.95,
            seed: 0,
        }
    }
}

impl Bootstrap {
    pub(crate) fn check(&self) -> Result<()> {
        if !(self.level > 0.0 && self.level < 1.0) {
            return Err(PrefscoreError::invalid(format!(
                "bootstrap level {} must lie in (0, 1)",
                self.level
            )));
        }
        Ok(())
    }

    /// The percentile interval of `stats` (the statistic on each resample). NaN marks a
    /// resample without a value (e.g. a constant one) and is left out; ±∞ marks an unbounded
    /// value and keeps its place at that end, so an end that falls on (or next to) one is not
    /// known and the interval is `None`.
    pub(crate) fn percentile(&self, mut stats: Vec<f64>) -> Option<Interval> {
        stats.retain(|v| !v.is_nan());
        if stats.is_empty() {
            return None;
        }
        stats.sort_by(f64::total_cmp);
        let a = (1.0 - self.level) / 2.0;
        let (lo, hi) = (
            quantile_sorted(&stats, a)?,
            quantile_sorted(&stats, 1.0 - a)?,
        );
        (lo.is_finite() && hi.is_finite()).then_some(Interval {
            lo,
            hi,
            level: self.level,
        })
    }

    /// Percentile interval of the mean of `x` (`None` when disabled or `x` is empty).
    pub fn mean_interval(&self, x: &[f64]) -> Result<Option<Interval>> {
        self.check()?;
        if self.resamples == 0 || x.is_empty() {
            return Ok(None);
        }
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let n = x.len();
        let means = (0..self.resamples)
            .map(|_| (0..n).map(|_| x[rng.random_range(0..n)]).sum::<f64>() / n as f64)
            .collect();
        Ok(self.percentile(means))
    }
}

/// A fresh generator for sub-task `stream` of a run seeded with `seed` (distinct, reproducible
/// streams for the pairs of a table).
pub(crate) fn rng_for(seed: u64, stream: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(stream);
    rng
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boot() -> Bootstrap {
        Bootstrap {
            resamples: 100,
            level: 0.95,
            seed: 0,
        }
    }

    #[test]
    fn levels_print_as_the_percentages_they_are() {
        assert_eq!(level_percent(0.95), "95%");
        assert_eq!(level_percent(0.975), "97.5%");
        assert_eq!(level_percent(0.9), "90%");
        let at = |level| Interval {
            lo: 0.0,
            hi: 1.0,
            level,
        };
        let (a, b) = (at(0.9), at(0.99));
        assert_eq!(common_level([Some(&a), None, Some(&a)]), "90%");
        assert_eq!(common_level([Some(&a), Some(&b)]), "mixed");
        assert_eq!(common_level([None]), "95%");
        assert_eq!(b.level_percent(), "99%");
    }

    #[test]
    fn unbounded_replicates_keep_their_place_at_their_end() {
        // 98 values 1..=98 and two +∞ (reliabilities at or below 0): the upper end is the
        // 97.5% point of all 100, at 96.525 between the 97th and 98th order statistics.
        let mut stats: Vec<f64> = (1..=98).map(f64::from).collect();
        stats.extend([f64::INFINITY; 2]);
        let i = boot().percentile(stats.clone()).unwrap();
        assert!((i.hi - 97.525).abs() < 1e-9, "{}", i.hi);
        assert!((i.lo - (1.0 + 0.025 * 99.0)).abs() < 1e-9, "{}", i.lo);
        // Dropping them would pull the end inward, to the 97.5% point of 98 values.
        let dropped: Vec<f64> = stats.iter().copied().filter(|v| v.is_finite()).collect();
        assert!((boot().percentile(dropped).unwrap().hi - 95.575).abs() < 1e-9);
        // A third one reaches the end itself: the end is not known, so no interval.
        stats[0] = f64::INFINITY;
        assert_eq!(boot().percentile(stats), None);
        // −∞ on the lower side likewise; NaN (no value) is left out.
        let mut low: Vec<f64> = (1..=97).map(f64::from).collect();
        low.extend([f64::NEG_INFINITY; 3]);
        assert_eq!(boot().percentile(low.clone()), None);
        low.extend([f64::NAN; 5]);
        low[97] = 0.5;
        let i = boot().percentile(low).unwrap();
        assert!(i.lo.is_finite() && i.lo < 1.0, "{}", i.lo);
    }
}
