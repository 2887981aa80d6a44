//! Learning-rate schedules: linear warmup to the peak, then linear decay to zero at the end of
//! the budget (the 24hBERT recipe), or a constant rate after a warmup of fixed length (a run
//! under it can be continued to a larger budget bit-exactly: no rate depends on the total).

use serde::{Deserialize, Serialize};

/// Which learning-rate schedule a [`crate::TrainConfig`] follows.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Schedule {
    /// Warmup over `warmup_frac` of the budget, then linear decay to 0 at its end
    /// ([`LinearSchedule`]).
    #[default]
    LinearDecay,
    /// Warmup over `warmup_steps` updates, then the peak rate until the budget is spent.
    Constant {
        /// Updates of the linear warmup.
        warmup_steps: u64,
    },
}

impl Schedule {
    /// Learning rate of update `step` (1-based) under [`Schedule::Constant`].
    pub fn constant_lr(peak: f64, warmup_steps: u64, step: u64) -> f64 {
        if step < warmup_steps {
            peak * step as f64 / warmup_steps as f64
        } else {
            peak
        }
    }
}

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
        assert_eq!(Schedule::constant_lr(1e-3, 10, 5), 5e-4);
        assert_eq!(Schedule::constant_lr(1e-3, 10, 10_000), 1e-3);
        assert!((s.lr(10) - 1e-3).abs() < 1e-12);
        assert!((s.lr(60) - 5e-4).abs() < 1e-12);
        assert_eq!(s.lr(110), 0.0);
        assert_eq!(s.lr(200), 0.0);
    }
}
