//! Linear warmup to the peak learning rate, then linear decay to zero.

use serde::{Deserialize, Serialize};

/// lr(s) = peak · s / warmup for s < warmup, then peak · (total − s) / (total − warmup),
/// reaching 0 at `total` (s counts from 1 for the first update).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LinearSchedule {
    /// Peak learning rate.
    pub peak: f64,
    /// Warmup updates.
    pub warmup: u64,
    /// Total updates.
    pub total: u64,
}

impl LinearSchedule {
    /// Learning rate of update number `step` (1-based).
    pub fn lr(&self, step: u64) -> f64 {
        self.lr_at_fraction(step as f64, self.warmup as f64, self.total as f64)
    }

    /// Same shape driven by a continuous position (used by wall-clock budgets, where `pos` and
    /// `total` are seconds).
    pub fn lr_at_fraction(&self, pos: f64, warmup: f64, total: f64) -> f64 {
        if pos < warmup && warmup > 0.0 {
            self.peak * pos / warmup
        } else if total > warmup {
            (self.peak * (total - pos) / (total - warmup)).max(0.0)
        } else {
            self.peak
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmup_then_decay() {
        let s = LinearSchedule {
            peak: 1e-3,
            warmup: 10,
            total: 110,
        };
        assert!((s.lr(5) - 5e-4).abs() < 1e-12);
        assert!((s.lr(10) - 1e-3).abs() < 1e-12);
        assert!((s.lr(60) - 5e-4).abs() < 1e-12);
        assert_eq!(s.lr(110), 0.0);
        assert_eq!(s.lr(200), 0.0);
    }
}
