//! AdamW (Loshchilov & Hutter) with the 24hBERT settings, per-parameter decay flags, global-norm
//! clipping, and a state that can be saved and restored exactly.

use std::collections::HashMap;

use candle_core::{backprop::GradStore, DType, Tensor};

use serde::{Deserialize, Serialize};

use crate::layers::params::Param;
use crate::{Result, TowersError};
use kernels::host::{with_host_f32, with_host_f32_mut};
use kernels::par::{for_each_chunk_mut, pieces, take};

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
        // Each moment its own storage: the CPU update writes them in place.
        let zeros = || {
            params
                .iter()
                .map(|p| Ok(p.var.as_tensor().zeros_like()?))
                .collect::<Result<Vec<_>>>()
        };
        let (m, v) = (zeros()?, zeros()?);
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
        self.step_scaled(grads, lr, 1.0)
    }

    /// [`AdamW::step`] on the gradients multiplied by `grad_scale` (the clipping factor of
    /// `clip_factor`, applied inside the update instead of as a separate pass). On CPU with f32
    /// tensors each parameter and its moments are overwritten in place in one fused pass; on
    /// CUDA one kernel (`optim_cuda`); elsewhere tensor ops with the same f32 arithmetic.
    pub fn step_scaled(
        &mut self,
        grads: &[Option<Tensor>],
        lr: f64,
        grad_scale: f64,
    ) -> Result<()> {
        self.check_count(grads)?;
        self.step += 1;
        for (i, g) in grads.iter().enumerate() {
            let Some(g) = g else { continue };
            let p = &self.params[i];
            let k = self.coeffs(lr, grad_scale, p.decay);
            let theta = p.var.as_tensor();
            let g = g.to_dtype(DType::F32)?;
            let (m0, v0) = (&self.m[i], &self.v[i]);
            if update_in_place(theta, &g, m0, v0, &k)? {
                continue;
            }
            // On CUDA, one kernel per parameter where it applies.
            #[cfg(feature = "cuda")]
            let on_device =
                match crate::ops::switch::on_cuda_kernel(crate::CudaKernel::AdamW, theta) {
                    true => {
                        crate::ops::adamw::cuda::cuda_update(theta, &g, m0, v0, &k.kernel_args())?
                    }
                    false => None,
                };
            #[cfg(not(feature = "cuda"))]
            let on_device: Option<Updated> = None;
            let (new, m, v) = match on_device {
                Some(r) => r,
                None => composed_update(theta, &g, m0, v0, &k)?,
            };
            p.var.set(&new)?;
            self.m[i] = m;
            self.v[i] = v;
        }
        Ok(())
    }

    /// One update with the gradients clipped to the global norm `max_norm` (≤ 0: no clipping),
    /// as PyTorch's `clip_grad_norm_` then `step`: returns the norm before clipping, or an
    /// error, with nothing updated, if it is not finite. On CUDA (switch `update`, f32
    /// contiguous gradients) the norm, the clip factor and every parameter's update are three
    /// launches over all parameters (`adamw_multi.cu`) and the host reads the norm only after
    /// the update; elsewhere [`grad_norm`], [`clip_factor`] and [`AdamW::step_scaled`].
    pub fn step_clipped(
        &mut self,
        grads: &[Option<Tensor>],
        lr: f64,
        max_norm: f64,
    ) -> Result<f64> {
        self.check_count(grads)?;
        #[cfg(feature = "cuda")]
        if let Some(norm) = self.step_in_one_pass(grads, lr, max_norm)? {
            return Ok(norm);
        }
        let norm = grad_norm(grads)?;
        self.step_scaled(grads, lr, clip_factor(norm, max_norm))?;
        Ok(norm)
    }

    /// [`AdamW::step_clipped`] by `adamw_multi.cu` where the switch is on and every gradient,
    /// parameter and moment is a contiguous f32 tensor on one CUDA device, none overlapping a
    /// buffer that is written: the norm, or `None` with nothing done (not even the step
    /// counted).
    #[cfg(feature = "cuda")]
    fn step_in_one_pass(
        &mut self,
        grads: &[Option<Tensor>],
        lr: f64,
        max_norm: f64,
    ) -> Result<Option<f64>> {
        let Some(first) = grads.iter().position(Option::is_some) else {
            return Ok(None);
        };
        let theta = self.params[first].var.as_tensor();
        if !crate::ops::switch::on_cuda_kernel(crate::CudaKernel::Update, theta) {
            return Ok(None);
        }
        self.step += 1;
        let shared = self.coeffs(lr, 1.0, false).multi_args();
        let mut rows = Vec::new();
        let mut keep = Vec::new();
        let moments = self.m.iter().zip(&self.v);
        for ((p, g), (m, v)) in self.params.iter().zip(grads).zip(moments) {
            if let Some(g) = g {
                rows.push([p.var.as_tensor(), g, m, v]);
                keep.push(self.coeffs(lr, 1.0, p.decay).keep);
            }
        }
        let norm = crate::ops::adamw::cuda::cuda_update_all(&rows, &keep, &shared, max_norm)?;
        match norm {
            Some(n) if n.is_finite() => Ok(Some(n)),
            // The kernels wrote nothing: as on the CPU path, the step did not happen.
            Some(n) => {
                self.step -= 1;
                Err(TowersError::NonFinite(format!("gradient norm {n}")))
            }
            None => {
                self.step -= 1;
                Ok(None)
            }
        }
    }

    /// A [`TowersError::Config`] unless there is one gradient slot per parameter.
    fn check_count(&self, grads: &[Option<Tensor>]) -> Result<()> {
        if grads.len() != self.params.len() {
            return Err(TowersError::Config(format!(
                "{} gradients for {} parameters",
                grads.len(),
                self.params.len()
            )));
        }
        Ok(())
    }

    /// The scalars of the update that `self.step` counts, for a parameter with or without
    /// weight decay.
    fn coeffs(&self, lr: f64, grad_scale: f64, decay: bool) -> Coeffs {
        let t = self.step as i32;
        let (b1, b2) = (self.cfg.beta1, self.cfg.beta2);
        let decay = if decay { self.cfg.weight_decay } else { 0.0 };
        Coeffs {
            grad_scale: grad_scale as f32,
            b1: b1 as f32,
            one_minus_b1: (1.0 - b1) as f32,
            b2: b2 as f32,
            one_minus_b2: (1.0 - b2) as f32,
            inv_bc1: (1.0 / (1.0 - b1.powi(t))) as f32,
            inv_bc2: (1.0 / (1.0 - b2.powi(t))) as f32,
            eps: self.cfg.eps as f32,
            keep: (1.0 - lr * decay) as f32,
            lr: lr as f32,
        }
    }

    /// Copies of the moments keyed `m.<name>` / `v.<name>` (saved with checkpoints; copies,
    /// since the next update writes the moments in place).
    pub fn state_tensors(&self) -> Result<HashMap<String, Tensor>> {
        let mut map = HashMap::new();
        for (i, p) in self.params.iter().enumerate() {
            map.insert(format!("m.{}", p.name), self.m[i].copy()?);
            map.insert(format!("v.{}", p.name), self.v[i].copy()?);
        }
        Ok(map)
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
                // A copy: the update writes the moments in place, never the caller's tensors.
                *slot = t.to_device(p.var.device())?.copy()?;
            }
        }
        self.step = step;
        Ok(())
    }
}

/// Global L2 norm of the gradients (squares summed in f64), or an error if it is not finite.
/// Off the host the per-gradient sums stay on the device and are read back once: a read per
/// gradient would wait for the device hundreds of times a step.
pub fn grad_norm(grads: &[Option<Tensor>]) -> Result<f64> {
    let mut sq = 0f64;
    let mut on_device = Vec::new();
    for g in grads.iter().flatten() {
        match with_host_f32(&[g], |s| sum_sq(s[0])) {
            Some(s) => sq += s,
            None => on_device.push(device_sum_sq(g)?),
        }
    }
    if !on_device.is_empty() {
        sq += Tensor::stack(&on_device, 0)?
            .sum_all()?
            .to_scalar::<f64>()?;
    }
    let norm = sq.sqrt();
    if !norm.is_finite() {
        return Err(TowersError::NonFinite(format!("gradient norm {norm}")));
    }
    Ok(norm)
}

/// The sum of squares of `g` in f64, as a 0-d tensor left on `g`'s device. The rows are
/// summed first: candle's CUDA reduction gives each output element one block, so a `sum_all`
/// over a whole gradient runs on one multiprocessor, while a sum over the last dimension
/// spreads the rows over all of them (an ELMo `base_2tower` step's norm: 174 ms → 5 ms on an
/// H100, 27 Nov; docs/gpu.md).
pub(crate) fn device_sum_sq(g: &Tensor) -> Result<Tensor> {
    let sq = g.to_dtype(DType::F64)?.sqr()?;
    Ok(match sq.rank() {
        0 | 1 => sq.sum_all()?,
        _ => sq.sum(candle_core::D::Minus1)?.sum_all()?,
    })
}

/// The factor PyTorch's `clip_grad_norm_` applies: max_norm / (norm + 1e-6) when the norm
/// exceeds `max_norm` (> 0), else 1.
pub fn clip_factor(norm: f64, max_norm: f64) -> f64 {
    if max_norm > 0.0 && norm > max_norm {
        max_norm / (norm + 1e-6)
    } else {
        1.0
    }
}

/// Global L2 norm of the gradients; when it exceeds `max_norm`, every gradient is scaled by
/// `clip_factor` (PyTorch `clip_grad_norm_`). Returns the norm before clipping, or an error
/// if it is not finite.
pub fn clip_grad_norm(grads: &mut [Option<Tensor>], max_norm: f64) -> Result<f64> {
    let norm = grad_norm(grads)?;
    let s = clip_factor(norm, max_norm);
    if s != 1.0 {
        for g in grads.iter_mut().flatten() {
            *g = (&*g * s)?;
        }
    }
    Ok(norm)
}

/// Σ x² in f64 over fixed chunks summed in order (deterministic with any thread count).
fn sum_sq(x: &[f32]) -> f64 {
    const CH: usize = 1 << 16;
    let mut parts = vec![0f64; x.len().div_ceil(CH)];
    for_each_chunk_mut(&mut parts, 1, |p, out| {
        let c = &x[p * CH..((p + 1) * CH).min(x.len())];
        out[0] = c.iter().map(|&v| (v as f64) * (v as f64)).sum();
    });
    parts.iter().sum()
}

/// The scalars of one AdamW update, in the f32 arithmetic of the update itself.
struct Coeffs {
    grad_scale: f32,
    b1: f32,
    one_minus_b1: f32,
    b2: f32,
    one_minus_b2: f32,
    inv_bc1: f32,
    inv_bc2: f32,
    eps: f32,
    keep: f32,
    lr: f32,
}

impl Coeffs {
    /// The scalars in the CUDA kernel's argument order (`adamw.cu`).
    #[cfg(feature = "cuda")]
    fn kernel_args(&self) -> [f32; 10] {
        [
            self.grad_scale,
            self.b1,
            self.one_minus_b1,
            self.b2,
            self.one_minus_b2,
            self.inv_bc1,
            self.inv_bc2,
            self.eps,
            self.keep,
            self.lr,
        ]
    }

    /// The scalars every parameter shares in `adamw_multi.cu`'s argument order (b1, 1 − b1,
    /// b2, 1 − b2, 1/bc1, 1/bc2, eps, lr): the clip factor comes from device memory, `keep`
    /// from the parameter's row of the table.
    #[cfg(feature = "cuda")]
    fn multi_args(&self) -> [f32; 8] {
        [
            self.b1,
            self.one_minus_b1,
            self.b2,
            self.one_minus_b2,
            self.inv_bc1,
            self.inv_bc2,
            self.eps,
            self.lr,
        ]
    }
}

/// One element of the update (the same operation order as [`composed_update`]).
#[inline(always)]
fn adamw_elem(theta: f32, g: f32, m: f32, v: f32, k: &Coeffs) -> (f32, f32, f32) {
    let g = g * k.grad_scale;
    let m = m * k.b1 + g * k.one_minus_b1;
    let v = v * k.b2 + (g * g) * k.one_minus_b2;
    let denom = (v * k.inv_bc2).sqrt() + k.eps;
    let upd = (m * k.inv_bc1) / denom;
    (theta * k.keep - upd * k.lr, m, v)
}

/// θ', m', v' of one parameter's update.
type Updated = (Tensor, Tensor, Tensor);

/// The fused CPU update in place: θ, m and v are overwritten in one parallel pass that reads g
/// (false, nothing touched, when not all four are distinct contiguous f32 CPU tensors of one
/// size). Writing in place spares three fresh parameter-sized buffers a parameter and step
/// (their zeroing and page faults, and the copy into the variable), which were a fifth of a
/// BERT head step on CPU.
fn update_in_place(theta: &Tensor, g: &Tensor, m: &Tensor, v: &Tensor, k: &Coeffs) -> Result<bool> {
    let n = theta.elem_count();
    let ts = [theta, g, m, v];
    let ids: Vec<_> = ts.iter().map(|t| t.id()).collect();
    let distinct = (1..ids.len()).all(|i| !ids[..i].contains(&ids[i]));
    if !distinct || ts.iter().any(|t| t.elem_count() != n) {
        return Ok(false);
    }
    let done = with_host_f32(&[g], |gs| {
        let gs = gs[0];
        in_place(m, |ms| {
            in_place(v, |vs| {
                in_place(theta, |th| {
                    const CH: usize = 1 << 14;
                    let (ms, vs) = (pieces(ms, CH), pieces(vs, CH));
                    for_each_chunk_mut(th, CH, |c, th| {
                        let (mut ms, mut vs) = (take(&ms[c]), take(&vs[c]));
                        let gs = &gs[c * CH..c * CH + th.len()];
                        let all = th.iter_mut().zip(gs).zip(ms.iter_mut()).zip(vs.iter_mut());
                        for (((t, &g), m), v) in all {
                            (*t, *m, *v) = adamw_elem(*t, g, *m, *v, k);
                        }
                    });
                    Ok(true)
                })
            })
        })
    });
    Ok(done.transpose()?.unwrap_or(false))
}

/// `f` on `t`'s data borrowed in place: false where `t` is not a contiguous host f32 tensor
/// (only the innermost of the nested calls writes, so then nothing was written).
fn in_place(
    t: &Tensor,
    f: impl FnOnce(&mut [f32]) -> candle_core::Result<bool>,
) -> candle_core::Result<bool> {
    Ok(with_host_f32_mut(t, f)?.transpose()?.unwrap_or(false))
}

/// The update from tensor ops (any device).
fn composed_update(
    theta: &Tensor,
    g: &Tensor,
    m: &Tensor,
    v: &Tensor,
    k: &Coeffs,
) -> Result<Updated> {
    let g = if k.grad_scale != 1.0 {
        (g * k.grad_scale as f64)?
    } else {
        g.clone()
    };
    let m = ((m * k.b1 as f64)? + (&g * k.one_minus_b1 as f64)?)?;
    let v = ((v * k.b2 as f64)? + (g.sqr()? * k.one_minus_b2 as f64)?)?;
    let denom = ((&v * k.inv_bc2 as f64)?.sqrt()? + k.eps as f64)?;
    let upd = ((&m * k.inv_bc1 as f64)? / denom)?;
    let new = ((theta * k.keep as f64)? - (upd * k.lr as f64)?)?;
    Ok((new, m, v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn t(n: usize, k: usize, s: f32) -> Tensor {
        let d: Vec<f32> = (0..n)
            .map(|i| (((i * k) % 997) as f32 / 498.5 - 1.0) * s)
            .collect();
        Tensor::from_vec(d, n, &Device::Cpu).unwrap()
    }

    #[test]
    fn fused_update_equals_composed_update() {
        let n = 50_001; // several parallel chunks and a ragged tail
        let (theta, g, m) = (t(n, 7, 1.0), t(n, 13, 0.3), t(n, 17, 0.01));
        let v = t(n, 19, 0.001).abs().unwrap();
        let k = Coeffs {
            grad_scale: 0.7,
            b1: 0.9,
            one_minus_b1: 0.1,
            b2: 0.98,
            one_minus_b2: 0.02,
            inv_bc1: 1.0 / (1.0 - 0.9f32.powi(3)),
            inv_bc2: 1.0 / (1.0 - 0.98f32.powi(3)),
            eps: 1e-6,
            keep: 1.0 - 1e-3 * 0.01,
            lr: 1e-3,
        };
        let comp = composed_update(&theta, &g, &m, &v, &k).unwrap();
        let host = |t: &Tensor| t.to_vec1::<f32>().unwrap();
        // The element rule on host copies: what the in-place pass must give bit for bit.
        let (th0, g0, m0, v0) = (host(&theta), host(&g), host(&m), host(&v));
        let by_elem: Vec<(f32, f32, f32)> = (0..n)
            .map(|j| adamw_elem(th0[j], g0[j], m0[j], v0[j], &k))
            .collect();
        let moments_before = m.copy().unwrap();
        assert!(update_in_place(&theta, &g, &m, &v, &k).unwrap());
        let got = [host(&theta), host(&m), host(&v)];
        for (which, out) in got.iter().enumerate() {
            let want: Vec<f32> = by_elem.iter().map(|e| [e.0, e.1, e.2][which]).collect();
            assert!(out
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits()));
        }
        for (a, b) in got.iter().zip([&comp.0, &comp.1, &comp.2]) {
            let b = host(b);
            let worst = a
                .iter()
                .zip(&b)
                .map(|(x, y)| (x - y).abs() / y.abs().max(1e-6))
                .fold(0f32, f32::max);
            assert!(worst < 1e-6, "relative difference {worst}");
        }
        // The gradient is read, never written; a copy taken before is its own storage.
        assert_eq!(host(&g), g0);
        assert_eq!(host(&moments_before), m0);
        // A strided (non-contiguous) tensor, or one storage in two roles, takes the composed
        // path, nothing written.
        let theta2 = Tensor::from_vec(vec![1f32; 6], (2, 3), &Device::Cpu).unwrap();
        let tt = theta2.t().unwrap();
        let (g2, m2) = (tt.contiguous().unwrap(), tt.contiguous().unwrap());
        assert!(!update_in_place(&tt, &g2, &m2, &m2.copy().unwrap(), &k).unwrap());
        let flat = theta2.flatten_all().unwrap();
        assert!(!update_in_place(&flat, &flat.copy().unwrap(), &m2, &m2, &k).unwrap());
        assert_eq!(host(&flat), vec![1f32; 6]);
        assert_eq!(host(&m2.flatten_all().unwrap()), vec![1f32; 6]);
    }

    #[test]
    fn saved_moments_are_copies_and_loaded_moments_are_the_optimizers_own() {
        let param = || Param {
            name: "w".into(),
            var: candle_core::Var::from_tensor(&t(10, 7, 1.0)).unwrap(),
            decay: true,
        };
        let mut a = AdamW::new(vec![param()], AdamWConfig::default()).unwrap();
        let g = vec![Some(t(10, 13, 0.3))];
        a.step(&g, 1e-3).unwrap();
        let saved = a.state_tensors().unwrap();
        let m_saved = saved["m.w"].to_vec1::<f32>().unwrap();
        // b: a's weights and moments after its first step, in storage of its own.
        let w = |o: &AdamW| o.params()[0].var.as_tensor().to_vec1::<f32>().unwrap();
        let resumed = Param {
            var: candle_core::Var::new(w(&a), &Device::Cpu).unwrap(),
            ..param()
        };
        let mut b = AdamW::new(vec![resumed], AdamWConfig::default()).unwrap();
        b.load_state(&saved, 1, "test").unwrap();
        a.step(&g, 1e-3).unwrap();
        b.step(&g, 1e-3).unwrap();
        // Neither update moved the saved map; each optimizer moved its own moments once, to
        // the same values, and its own weights.
        assert_eq!(saved["m.w"].to_vec1::<f32>().unwrap(), m_saved);
        let (ma, mb) = (
            &a.state_tensors().unwrap()["m.w"],
            &b.state_tensors().unwrap()["m.w"],
        );
        assert_eq!(ma.to_vec1::<f32>().unwrap(), mb.to_vec1::<f32>().unwrap());
        assert_ne!(ma.to_vec1::<f32>().unwrap(), m_saved);
        assert_eq!(w(&a), w(&b));
    }

    #[test]
    fn grad_norm_sums_host_and_device_style_gradients_alike() {
        // f64 and strided gradients take the tensor-op path (read back once, at the end).
        let host = Tensor::from_vec(vec![3f32, 4.0], 2, &Device::Cpu).unwrap();
        let f64s = Tensor::from_vec(vec![1f64, 2.0], 2, &Device::Cpu).unwrap();
        let strided = Tensor::from_vec(vec![2f32, 0.0, 0.0, 2.0, 1.0, 0.0], (2, 3), &Device::Cpu)
            .unwrap()
            .t()
            .unwrap();
        let n = grad_norm(&[Some(host), None, Some(f64s), Some(strided)]).unwrap();
        assert_eq!(n, (25.0f64 + 5.0 + 9.0).sqrt());
        let bad = Tensor::from_vec(vec![f64::INFINITY], 1, &Device::Cpu).unwrap();
        assert!(matches!(
            grad_norm(&[Some(bad)]),
            Err(TowersError::NonFinite(_))
        ));
    }

    #[test]
    fn device_sums_of_squares_match_a_host_sum_at_every_rank() {
        // The device path sums rows first; each rank must still give every square once.
        let vals: Vec<f64> = (0..24).map(|i| (i as f64 - 7.5) * 0.37).collect();
        let want: f64 = vals.iter().map(|x| x * x).sum();
        for shape in [vec![], vec![24], vec![4, 6], vec![2, 3, 4], vec![1, 24]] {
            let n: usize = shape.iter().product();
            let t = Tensor::from_vec(vals[..n].to_vec(), shape.as_slice(), &Device::Cpu).unwrap();
            let got = device_sum_sq(&t).unwrap();
            assert_eq!(got.rank(), 0, "shape {shape:?}");
            let want_n: f64 = vals[..n].iter().map(|x| x * x).sum();
            let got = got.to_scalar::<f64>().unwrap();
            assert!(
                (got - want_n).abs() <= 1e-12 * want,
                "shape {shape:?}: {got} vs {want_n}"
            );
        }
    }

    #[test]
    fn step_clipped_is_the_norm_the_factor_and_the_scaled_step() {
        let param = |name: &str, n: usize, k: usize, decay: bool| Param {
            name: name.into(),
            var: candle_core::Var::from_tensor(&t(n, k, 1.0)).unwrap(),
            decay,
        };
        let params = || vec![param("w", 33, 7, true), param("b", 1, 3, false)];
        let (mut a, mut b) = (
            AdamW::new(params(), AdamWConfig::default()).unwrap(),
            AdamW::new(params(), AdamWConfig::default()).unwrap(),
        );
        let grads = vec![Some(t(33, 13, 0.9)), Some(t(1, 5, 0.4))];
        // 0.5 clips (the norm is about 3), 10 does not, 0 never does.
        for max_norm in [0.5, 10.0, 0.0] {
            let norm = a.step_clipped(&grads, 1e-2, max_norm).unwrap();
            let want = grad_norm(&grads).unwrap();
            assert_eq!(norm, want);
            b.step_scaled(&grads, 1e-2, clip_factor(want, max_norm))
                .unwrap();
            for (pa, pb) in a.params().iter().zip(b.params()) {
                let w = |p: &Param| p.var.as_tensor().to_vec1::<f32>().unwrap();
                assert_eq!(w(pa), w(pb));
            }
        }
        assert!(clip_factor(grad_norm(&grads).unwrap(), 0.5) < 0.2);
        // A gradient slot short, or a gradient not finite: an error, nothing updated, the
        // step not counted.
        assert!(matches!(
            a.step_clipped(&grads[..1], 1e-2, 1.0),
            Err(TowersError::Config(_))
        ));
        let before = a.params()[0].var.as_tensor().to_vec1::<f32>().unwrap();
        let mut bad = grads.clone();
        bad[1] = Some(Tensor::from_vec(vec![f32::INFINITY], 1, &Device::Cpu).unwrap());
        assert!(matches!(
            a.step_clipped(&bad, 1e-2, 1.0),
            Err(TowersError::NonFinite(_))
        ));
        assert_eq!(a.step_count(), 3);
        assert_eq!(
            a.params()[0].var.as_tensor().to_vec1::<f32>().unwrap(),
            before
        );
    }

    #[test]
    fn grad_norm_is_exact_and_rejects_non_finite() {
        let g = Tensor::from_vec(vec![3f32, 4.0], 2, &Device::Cpu).unwrap();
        assert_eq!(grad_norm(&[Some(g.clone()), None]).unwrap(), 5.0);
        assert_eq!(clip_factor(5.0, 1.0), 1.0 / (5.0 + 1e-6));
        assert_eq!(clip_factor(0.5, 1.0), 1.0);
        let bad = Tensor::from_vec(vec![f32::NAN], 1, &Device::Cpu).unwrap();
        assert!(matches!(
            grad_norm(&[Some(bad)]),
            Err(TowersError::NonFinite(_))
        ));
    }
}
