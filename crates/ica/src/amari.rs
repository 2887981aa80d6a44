//! Amari's natural-gradient ICA with the Laplace score and Frobenius renormalisation.
//!
//! On whitened data `X` (`[n, d]`, one sample per row), with `Y = W Xᵀ` (`[d, n]`) and
//! `g(y) = ½ sgn(y)(1 − exp(−√2|y|))`, each step is (paper §5.3)
//!
//! ```text
//! C = g(Y) Yᵀ / n,    W ← W + lr (I − C) W,    W ← √d · W / ‖W‖_F   (when renormalising)
//! ```
//!
//! starting from `W0 = I`. A fixed point has `C = c·I`: the off-diagonal part vanishes while
//! the diagonal stays near 0.3 (so `I − C` keeps ≈ 0.7 on its diagonal and never goes to 0
//! under renormalisation). Convergence is therefore judged on `max_{i≠j} |C_ij| / mean_i C_ii`
//! ([`StopRule::OffDiagonal`]) or on the relative change of `W` ([`StopRule::WeightChange`]).

use std::ops::ControlFlow;

use candle_core::Device;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::engine::{make_engine, Engine, Gemm};
use crate::error::{IcaError, Result};
use crate::matrix::Matrix;

/// Which samples each step uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Batch {
    /// Every sample, every step (deterministic).
    Full,
    /// `size` samples drawn without replacement each step by a ChaCha8 RNG seeded with `seed`.
    ///
    /// Each step costs `size/n` of a full one, but `C` then carries sampling noise of order
    /// `1/√size`, so the residual and the change of `W` stay far above the default
    /// tolerances: pair minibatches with [`StopRule::StepCap`] (or a tolerance above that
    /// noise floor). At d = 128, n = 5000, size 1000, lr 4 the Amari index reaches 0.016 after
    /// 1500 steps (full batch: 0.013 at convergence, 1467 steps).
    Mini {
        /// Samples per step.
        size: usize,
        /// RNG seed: the same seed gives the same sequence of batches and the same `W`.
        seed: u64,
    },
}

/// When to stop before the step cap.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum StopRule {
    /// Run exactly `max_steps` steps (the paper: no stopping rule).
    StepCap,
    /// Stop when `max_{i≠j} |C_ij| / mean_i C_ii < tol`, `C = g(Y)Yᵀ/n`.
    OffDiagonal {
        /// Tolerance on the relative off-diagonal residual.
        tol: f64,
    },
    /// Stop when `‖W_new − W‖_F / ‖W‖_F < tol`.
    WeightChange {
        /// Tolerance on the relative change of `W`.
        tol: f64,
    },
}

/// Settings of [`AmariIca`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AmariConfig {
    /// Step size `lr`.
    pub learning_rate: f64,
    /// Step cap.
    pub max_steps: usize,
    /// Rescale `W` to `‖W‖_F = √d` after each step (the authors' GPU version; keeps the
    /// recovered sources near unit scale so a fixed threshold such as 2.5 means something).
    pub renormalize: bool,
    /// Full batch or seeded minibatches.
    pub batch: Batch,
    /// Early stopping rule.
    pub stop: StopRule,
    /// `‖W‖_F / √d` above this (or non-finite) is [`IcaError::Diverged`].
    pub divergence_limit: f64,
}

impl AmariConfig {
    /// The paper's settings: lr 0.01, 10⁴ full-batch steps, renormalisation, no early stop.
    /// (Slow to separate: see `docs/ica.md` for the Amari index against steps.)
    pub fn paper() -> Self {
        Self {
            learning_rate: 0.01,
            max_steps: 10_000,
            renormalize: true,
            batch: Batch::Full,
            stop: StopRule::StepCap,
            divergence_limit: 1e6,
        }
    }
}

impl Default for AmariConfig {
    /// A setting that converges: lr 4 with renormalisation, full batch, stop when the relative
    /// off-diagonal residual falls below 1e-5, at most 10⁴ steps.
    ///
    /// Why lr 4: after renormalisation the step rotates `W` by about `lr/(1 + 0.7 lr)` times
    /// the off-diagonal gradient (the diagonal of `I − C`, ≈ 0.7, only rescales `W` and is
    /// divided out), so larger rates help less and less: at d = 128, n = 5000 it converges in
    /// ≈ 2500 steps at lr 1, ≈ 1800 at lr 2, ≈ 1450 at lr 4 (`docs/ica.md`). The residual
    /// hovers around 1e-2..5e-3 while components are still being separated and then falls
    /// geometrically to the f32 floor (≈ 5e-8), so 1e-5 is a safe, cheap threshold.
    fn default() -> Self {
        Self {
            learning_rate: 4.0,
            max_steps: 10_000,
            renormalize: true,
            batch: Batch::Full,
            stop: StopRule::OffDiagonal { tol: 1e-5 },
            divergence_limit: 1e6,
        }
    }
}

/// What one step reports to an observer of [`AmariIca::fit_observed`].
#[derive(Debug)]
pub struct StepInfo<'a> {
    /// 1-based step number.
    pub step: usize,
    /// `max_{i≠j} |C_ij| / mean_i C_ii` of this step's `C` (computed before the update).
    pub residual: f64,
    /// `‖W_new − W‖_F / ‖W‖_F` of this step.
    pub weight_change: f64,
    /// The unmixing matrix after this step, `[d, d]`.
    pub unmixing: &'a Matrix,
}

/// Outcome of [`AmariIca::fit`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IcaResult {
    /// Unmixing matrix `W` `[d, d]`: estimated sources are `y = W x` for a whitened sample `x`.
    pub unmixing: Matrix,
    /// Whether the stopping rule fired before the cap (always `false` under
    /// [`StopRule::StepCap`]).
    pub converged: bool,
    /// Steps taken.
    pub steps: usize,
    /// Final relative off-diagonal residual `max_{i≠j} |C_ij| / mean_i C_ii`.
    pub residual: f64,
    /// Final relative change of `W`.
    pub weight_change: f64,
    /// The residual and the change of `W` at about 100 evenly spaced steps and the last one:
    /// how the fit got where it ended, converged or not.
    #[serde(default)]
    pub trajectory: Vec<TrajectoryPoint>,
}

/// One recorded step of a fit's trajectory.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrajectoryPoint {
    /// 1-based step number.
    pub step: usize,
    /// The step's relative off-diagonal residual.
    pub residual: f64,
    /// The step's relative change of `W`.
    pub weight_change: f64,
}

impl IcaResult {
    /// Estimated sources `Y = X Wᵀ` `[n, d]` of whitened data `x` `[n, d]`.
    pub fn sources(&self, x: &Matrix) -> Result<Matrix> {
        x.matmul(&self.unmixing.transpose())
    }
}

/// Amari's natural-gradient ICA (see the module docs for the rule).
#[derive(Clone, Debug)]
pub struct AmariIca {
    config: AmariConfig,
    device: Device,
    gemm: Gemm,
}

impl AmariIca {
    /// ICA with `config` on the CPU.
    pub fn new(config: AmariConfig) -> Self {
        Self {
            config,
            device: Device::Cpu,
            gemm: Gemm::Auto,
        }
    }

    /// Runs the step's products on `device` (e.g. a CUDA device with the `cuda` feature).
    pub fn with_device(mut self, device: Device) -> Self {
        self.device = device;
        self
    }

    /// Chooses the GEMM backend explicitly (default [`Gemm::Auto`]).
    pub fn with_gemm(mut self, gemm: Gemm) -> Self {
        self.gemm = gemm;
        self
    }

    /// The settings.
    pub fn config(&self) -> &AmariConfig {
        &self.config
    }

    /// Fits on whitened data `x` `[n, d]` (e.g. from [`crate::Pca::transform`]).
    ///
    /// Errors: `n < d`, NaN/Inf input, a bad configuration (`max_steps` 0 included), or
    /// divergence.
    pub fn fit(&self, x: &Matrix) -> Result<IcaResult> {
        self.fit_observed(x, |_| ControlFlow::Continue(()))
    }

    /// [`AmariIca::fit`] calling `observer` after every step; returning
    /// `ControlFlow::Break(())` stops the run (reported as not converged).
    pub fn fit_observed(
        &self,
        x: &Matrix,
        mut observer: impl FnMut(&StepInfo<'_>) -> ControlFlow<()>,
    ) -> Result<IcaResult> {
        if self.config.max_steps == 0 {
            // No step would leave W = I: the PCA directions, reported as a fit.
            return Err(IcaError::Config("max_steps must be at least 1".into()));
        }
        let mut stepper = self.stepper(x)?;
        let mut converged = false;
        let every = (self.config.max_steps / 100).max(1);
        let mut trajectory = Vec::new();
        let mut last = None;
        while stepper.steps() < self.config.max_steps {
            let (residual, weight_change) = stepper.step()?;
            let point = TrajectoryPoint {
                step: stepper.steps(),
                residual,
                weight_change,
            };
            if point.step.is_multiple_of(every) || point.step == 1 {
                trajectory.push(point);
            }
            last = Some(point);
            let flow = observer(&StepInfo {
                step: stepper.steps(),
                residual,
                weight_change,
                unmixing: stepper.unmixing(),
            });
            converged = match self.config.stop {
                StopRule::StepCap => false,
                StopRule::OffDiagonal { tol } => residual < tol,
                StopRule::WeightChange { tol } => weight_change < tol,
            };
            if converged || flow.is_break() {
                break;
            }
        }
        if let Some(p) = last.filter(|p| trajectory.last() != Some(p)) {
            trajectory.push(p);
        }
        Ok(IcaResult {
            trajectory,
            converged,
            steps: stepper.steps(),
            residual: stepper.residual,
            weight_change: stepper.weight_change,
            unmixing: stepper.w_f32,
        })
    }

    /// A [`Stepper`] over whitened data `x` `[n, d]`, at `W = I`, for driving the steps
    /// yourself (progress bars, benchmarks). It ignores `max_steps` and `stop`.
    pub fn stepper(&self, x: &Matrix) -> Result<Stepper> {
        let (n, d) = x.shape();
        self.validate(n, d)?;
        x.check_finite()?;
        let engine = make_engine(self.gemm, &self.device, x.transpose().into_vec(), d, n)?;
        let rng = match self.config.batch {
            Batch::Mini { seed, .. } => Some(ChaCha8Rng::seed_from_u64(seed)),
            Batch::Full => None,
        };
        Ok(Stepper {
            config: self.config.clone(),
            engine,
            rng,
            n,
            d,
            w: identity_f64(d),
            w_f32: Matrix::identity(d),
            next: vec![0.0; d * d],
            steps: 0,
            residual: f64::INFINITY,
            weight_change: f64::INFINITY,
        })
    }

    fn validate(&self, n: usize, d: usize) -> Result<()> {
        let cfg = &self.config;
        if d == 0 {
            return Err(IcaError::Config("data have zero columns".into()));
        }
        if n < d {
            return Err(IcaError::TooFewSamples { samples: n, dim: d });
        }
        if !(cfg.learning_rate > 0.0 && cfg.learning_rate.is_finite()) {
            return Err(IcaError::Config(format!(
                "learning rate must be positive and finite, got {}",
                cfg.learning_rate
            )));
        }
        if cfg.divergence_limit.partial_cmp(&1.0) != Some(std::cmp::Ordering::Greater) {
            return Err(IcaError::Config("divergence limit must exceed 1".into()));
        }
        if let Batch::Mini { size, .. } = cfg.batch {
            if size < d || size > n {
                return Err(IcaError::Config(format!(
                    "minibatch size {size} must be in {d}..={n} (d..=n)"
                )));
            }
        }
        match cfg.stop {
            StopRule::OffDiagonal { tol } | StopRule::WeightChange { tol }
                if tol.is_nan() || tol <= 0.0 =>
            {
                Err(IcaError::Config(format!(
                    "stopping tolerance must be positive, got {tol}"
                )))
            }
            _ => Ok(()),
        }
    }
}

/// One ICA run advanced a step at a time (from [`AmariIca::stepper`]).
pub struct Stepper {
    config: AmariConfig,
    engine: Box<dyn Engine>,
    rng: Option<ChaCha8Rng>,
    n: usize,
    d: usize,
    /// Master copy of `W` in f64; `w_f32` is what the GEMMs see.
    w: Vec<f64>,
    w_f32: Matrix,
    next: Vec<f64>,
    steps: usize,
    residual: f64,
    weight_change: f64,
}

impl Stepper {
    /// Performs one step; returns `(residual, weight_change)` of it (see [`StepInfo`]).
    /// Errors with [`IcaError::Diverged`] when `W` blows up.
    pub fn step(&mut self) -> Result<(f64, f64)> {
        let (cfg, d) = (&self.config, self.d);
        let cols = match (&mut self.rng, cfg.batch) {
            (Some(rng), Batch::Mini { size, .. }) => {
                Some(rand::seq::index::sample(rng, self.n, size).into_vec())
            }
            _ => None,
        };
        let c = self.engine.moment(self.w_f32.as_slice(), cols.as_deref())?;
        let residual = off_diagonal_residual(&c, d);
        self.steps += 1;

        natural_gradient_update(&self.w, &c, cfg.learning_rate, &mut self.next, d);
        let norm = frobenius(&self.next);
        let target_norm = (d as f64).sqrt();
        if !norm.is_finite() || norm / target_norm > cfg.divergence_limit || !residual.is_finite() {
            return Err(IcaError::Diverged {
                step: self.steps,
                norm,
                learning_rate: cfg.learning_rate,
            });
        }
        if cfg.renormalize {
            let s = target_norm / norm;
            self.next.iter_mut().for_each(|v| *v *= s);
        }
        let change = self
            .w
            .iter()
            .zip(&self.next)
            .map(|(a, b)| (a - b) * (a - b))
            .sum::<f64>()
            .sqrt()
            / frobenius(&self.w).max(f64::MIN_POSITIVE);
        std::mem::swap(&mut self.w, &mut self.next);
        for (dst, &src) in self.w_f32.as_mut_slice().iter_mut().zip(&self.w) {
            *dst = src as f32;
        }
        self.residual = residual;
        self.weight_change = change;
        Ok((residual, change))
    }

    /// Steps taken so far.
    pub fn steps(&self) -> usize {
        self.steps
    }

    /// The current unmixing matrix `[d, d]`.
    pub fn unmixing(&self) -> &Matrix {
        &self.w_f32
    }
}

/// `max_{i≠j} |C_ij| / mean_i C_ii` (`C_ii = E[g(y_i) y_i] > 0` since `g` is odd and
/// increasing). Zero for `d = 1`.
pub(crate) fn off_diagonal_residual(c: &[f32], d: usize) -> f64 {
    let mut off = 0.0f64;
    let mut diag = 0.0f64;
    for i in 0..d {
        for j in 0..d {
            let v = f64::from(c[i * d + j]);
            if i == j {
                diag += v;
            } else {
                off = off.max(v.abs());
            }
        }
    }
    off / (diag / d as f64)
}

/// `next = (1 + lr) W − lr C W`, in f64 through faer.
fn natural_gradient_update(w: &[f64], c: &[f32], lr: f64, next: &mut [f64], d: usize) {
    use faer::{Accum, MatMut, MatRef, Par};
    let c64: Vec<f64> = c.iter().map(|&v| f64::from(v)).collect();
    for (n, &v) in next.iter_mut().zip(w) {
        *n = (1.0 + lr) * v;
    }
    faer::linalg::matmul::matmul(
        MatMut::from_row_major_slice_mut(next, d, d),
        Accum::Add,
        MatRef::from_row_major_slice(&c64, d, d),
        MatRef::from_row_major_slice(w, d, d),
        -lr,
        Par::Seq,
    );
}

fn identity_f64(d: usize) -> Vec<f64> {
    let mut w = vec![0.0; d * d];
    for i in 0..d {
        w[i * d + i] = 1.0;
    }
    w
}

fn frobenius(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}
