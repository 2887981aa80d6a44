//! AdamW (Loshchilov & Hutter) with the 24hBERT settings, per-parameter decay flags, global-norm
//! clipping, and a state that can be saved and restored exactly.

use std::collections::HashMap;

use candle_core::{backprop::GradStore, Tensor};
use serde::{Deserialize, Serialize};

use crate::params::Param;
use crate::{Result, TowersError};

/// Hyper-parameters of [`AdamW`] (the learning rate comes from the schedule at each step).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AdamWConfig {
    /// β₁ (0.9).
    pub beta1: f64,
    /// β₂ (0.98).
    pub beta2: f64,
    /// ε added to √v̂ (1e-6).
    pub eps: f64,
    /// Decoupled weight decay for parameters flagged `decay` (0.01).
    pub weight_decay: f64,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        Self {
            beta1: 0.9,
            beta2: 0.98,
            eps: 1e-6,
            weight_decay: 0.01,
        }
    }
}

/// AdamW over a fixed list of parameters:
/// m ← β₁m + (1−β₁)g, v ← β₂v + (1−β₂)g², θ ← θ(1 − lr·λ) − lr · m̂ / (√v̂ + ε),
/// with m̂ = m/(1−β₁ᵗ), v̂ = v/(1−β₂ᵗ), and λ = 0 for biases and LayerNorm parameters.
#[derive(Debug)]
pub struct AdamW {
    cfg: AdamWConfig,
    params: Vec<Param>,
    m: Vec<Tensor>,
    v: Vec<Tensor>,
    step: u64,
}

impl AdamW {
    /// Zero moments for every parameter.
    pub fn new(params: Vec<Param>, cfg: AdamWConfig) -> Result<Self> {
        let m = params
            .iter()
            .map(|p| Ok(p.var.as_tensor().zeros_like()?))
            .collect::<Result<Vec<_>>>()?;
        let v = m.clone();
        Ok(Self {
            cfg,
            params,
            m,
            v,
            step: 0,
        })
    }

    /// Number of updates applied so far.
    pub fn step_count(&self) -> u64 {
        self.step
    }

    /// The parameters, in order.
    pub fn params(&self) -> &[Param] {
        &self.params
    }

    /// The gradient of every parameter from a backward pass (None where none flowed).
    pub fn collect_grads(&self, grads: &GradStore) -> Vec<Option<Tensor>> {
        self.params
            .iter()
            .map(|p| grads.get(p.var.as_tensor()).map(|g| g.detach()))
            .collect()
    }

    /// One update with learning rate `lr`; parameters without a gradient are left untouched
    /// (as PyTorch does for `grad is None`).
    pub fn step(&mut self, grads: &[Option<Tensor>], lr: f64) -> Result<()> {
        if grads.len() != self.params.len() {
            return Err(TowersError::Config(format!(
                "{} gradients for {} parameters",
                grads.len(),
                self.params.len()
            )));
        }
        self.step += 1;
        let t = self.step as i32;
        let (b1, b2) = (self.cfg.beta1, self.cfg.beta2);
        let bc1 = 1.0 - b1.powi(t);
        let bc2 = 1.0 - b2.powi(t);
        for (i, g) in grads.iter().enumerate() {
            let Some(g) = g else { continue };
            let p = &self.params[i];
            let g = g.to_dtype(candle_core::DType::F32)?;
            let m = ((&self.m[i] * b1)? + (&g * (1.0 - b1))?)?;
            let v = ((&self.v[i] * b2)? + (g.sqr()? * (1.0 - b2))?)?;
            let denom = ((&v / bc2)?.sqrt()? + self.cfg.eps)?;
            let upd = ((&m / bc1)? / denom)?;
            let theta = p.var.as_tensor();
            let decayed = if p.decay && self.cfg.weight_decay != 0.0 {
                (theta * (1.0 - lr * self.cfg.weight_decay))?
            } else {
                theta.clone()
            };
            let new = (decayed - (upd * lr)?)?;
            p.var.set(&new)?;
            self.m[i] = m;
            self.v[i] = v;
        }
        Ok(())
    }

    /// Moments keyed `m.<name>` / `v.<name>` (saved with checkpoints).
    pub fn state_tensors(&self) -> HashMap<String, Tensor> {
        let mut map = HashMap::new();
        for (i, p) in self.params.iter().enumerate() {
            map.insert(format!("m.{}", p.name), self.m[i].clone());
            map.insert(format!("v.{}", p.name), self.v[i].clone());
        }
        map
    }

    /// Restores moments and the step counter saved by [`AdamW::state_tensors`].
    pub fn load_state(
        &mut self,
        map: &HashMap<String, Tensor>,
        step: u64,
        origin: &str,
    ) -> Result<()> {
        let err = |msg: String| TowersError::Checkpoint {
            path: origin.to_string(),
            msg,
        };
        if map.len() != 2 * self.params.len() {
            return Err(err(format!(
                "optimizer state has {} tensors, expected {}",
                map.len(),
                2 * self.params.len()
            )));
        }
        for (i, p) in self.params.iter().enumerate() {
            for (key, slot) in [("m", &mut self.m[i]), ("v", &mut self.v[i])] {
                let name = format!("{key}.{}", p.name);
                let t = map
                    .get(&name)
                    .ok_or_else(|| err(format!("missing {name}")))?;
                if t.dims() != p.var.dims() {
                    return Err(err(format!(
                        "{name}: shape {:?} vs {:?}",
                        t.dims(),
                        p.var.dims()
                    )));
                }
                *slot = t.to_device(p.var.device())?;
            }
        }
        self.step = step;
        Ok(())
    }
}

/// Global L2 norm of the gradients; when it exceeds `max_norm`, every gradient is scaled by
/// max_norm / (norm + 1e-6) (PyTorch `clip_grad_norm_`). Returns the norm before clipping, or
/// an error if it is not finite.
pub fn clip_grad_norm(grads: &mut [Option<Tensor>], max_norm: f64) -> Result<f64> {
    let mut sq = 0f64;
    for g in grads.iter().flatten() {
        sq += g
            .to_dtype(candle_core::DType::F32)?
            .sqr()?
            .sum_all()?
            .to_scalar::<f32>()? as f64;
    }
    let norm = sq.sqrt();
    if !norm.is_finite() {
        return Err(TowersError::NonFinite(format!("gradient norm {norm}")));
    }
    if max_norm > 0.0 && norm > max_norm {
        let s = max_norm / (norm + 1e-6);
        for g in grads.iter_mut().flatten() {
            *g = (&*g * s)?;
        }
    }
    Ok(norm)
}
