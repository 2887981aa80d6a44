//! Fused multi-head self-attention on CPU: from the fused QKV projection [B, T, 3H] and the
//! additive bias [B, 1, T, T] straight to the merged heads [B, T, H], with its own backward
//! pass. Per (batch, head): S = Q Kᵀ/√d + bias, P = softmax(S), O = P V; backward
//! dV = Pᵀ dO, dP = dO Vᵀ, dS = P ⊙ (dP − rowsum(dP ⊙ P)), dQ = dS K/√d, dK = dSᵀ Q/√d.
//! Heads are read and written in place through strided views (no split, transpose or
//! merge copies) and P is kept from the forward pass. The composed graph spent ~30% of a
//! small GPT training step in these reshapes and its per-op softmax; the composed
//! [`crate::layers::attention::SelfAttention`] path stays for other devices and dtypes and is the
//! reference in the tests.

/// The CUDA side (its kernels in `attention.cu`; the module gates itself on `cuda`).
pub(crate) mod cuda;

use std::sync::Mutex;

use candle_core::{CpuStorage, CustomOp2, Device, Layout, Shape, Tensor};
use faer::linalg::matmul::matmul;
use faer::{Accum, MatMut, MatRef, Par};

use kernels::host::{f32_data, not_host_f32, with_host_f32};
use kernels::par::{for_each_chunk_mut, pieces, take};
use kernels::softmax_row;

/// The custom op (inputs: qkv [B, T, 3H] and bias [B, 1, T, T], contiguous f32).
pub(crate) struct FusedAttention {
    n_heads: usize,
    probs: Mutex<Option<Vec<f32>>>,
}

impl FusedAttention {
    pub(crate) fn new(n_heads: usize) -> Self {
        Self {
            n_heads,
            probs: Mutex::new(None),
        }
    }
}

/// Shapes of one call.
#[derive(Clone, Copy)]
struct Dims {
    b: usize,
    t: usize,
    h: usize,
    nh: usize,
    hd: usize,
}

impl Dims {
    fn scale(&self) -> f32 {
        1.0 / (self.hd as f32).sqrt()
    }
}

/// A [t, hd] head block at column `col` of row-major rows of width `stride`.
fn head<'a>(x: &'a [f32], d: Dims, col: usize, stride: usize) -> MatRef<'a, f32> {
    MatRef::from_row_major_slice_with_stride(&x[col..], d.t, d.hd, stride)
}

fn head_mut<'a>(x: &'a mut [f32], d: Dims, col: usize, stride: usize) -> MatMut<'a, f32> {
    // As a transposed column-major view: faer 0.24's `from_row_major_slice_with_stride_mut`
    // swaps the two strides.
    MatMut::from_column_major_slice_with_stride_mut(&mut x[col..], d.hd, d.t, stride)
        .transpose_mut()
}

/// Forward: fills `out` [B, T, H] and returns P [B, nh, T, T].
fn forward(qkv: &[f32], bias: &[f32], out: &mut [f32], d: Dims) -> Vec<f32> {
    let (t, h) = (d.t, d.h);
    let mut probs = vec![0f32; d.b * d.nh * t * t];
    let prob_rows = pieces(&mut probs, d.nh * t * t);
    for_each_chunk_mut(out, t * h, |bi, o| {
        let mut p = take(&prob_rows[bi]);
        let x = &qkv[bi * t * 3 * h..(bi + 1) * t * 3 * h];
        let bias = &bias[bi * t * t..(bi + 1) * t * t];
        for (hi, p) in p.chunks_mut(t * t).enumerate() {
            let c = hi * d.hd;
            matmul(
                MatMut::from_row_major_slice_mut(p, t, t),
                Accum::Replace,
                head(x, d, c, 3 * h),
                head(x, d, h + c, 3 * h).transpose(),
                d.scale(),
                Par::Seq,
            );
            for (row, brow) in p.chunks_mut(t).zip(bias.chunks(t)) {
                softmax_row(row, brow, 1.0);
            }
            matmul(
                head_mut(o, d, c, h),
                Accum::Replace,
                MatRef::from_row_major_slice(p, t, t),
                head(x, d, 2 * h + c, 3 * h),
                1.0,
                Par::Seq,
            );
        }
    });
    drop(prob_rows);
    probs
}

/// Backward: the gradient of qkv [B, T, 3H] from the output gradient `dout` [B, T, H].
fn backward(qkv: &[f32], probs: &[f32], dout: &[f32], d: Dims) -> Vec<f32> {
    let (t, h) = (d.t, d.h);
    let mut dqkv = vec![0f32; d.b * t * 3 * h];
    for_each_chunk_mut(&mut dqkv, t * 3 * h, |bi, dx| {
        let x = &qkv[bi * t * 3 * h..(bi + 1) * t * 3 * h];
        let go = &dout[bi * t * h..(bi + 1) * t * h];
        let mut ds = vec![0f32; t * t];
        for hi in 0..d.nh {
            let c = hi * d.hd;
            let p = &probs[(bi * d.nh + hi) * t * t..(bi * d.nh + hi + 1) * t * t];
            let pm = MatRef::from_row_major_slice(p, t, t);
            matmul(
                head_mut(dx, d, 2 * h + c, 3 * h),
                Accum::Replace,
                pm.transpose(),
                head(go, d, c, h),
                1.0,
                Par::Seq,
            );
            matmul(
                MatMut::from_row_major_slice_mut(&mut ds, t, t),
                Accum::Replace,
                head(go, d, c, h),
                head(x, d, 2 * h + c, 3 * h).transpose(),
                1.0,
                Par::Seq,
            );
            for (dsr, pr) in ds.chunks_mut(t).zip(p.chunks(t)) {
                let dot: f32 = dsr.iter().zip(pr).map(|(a, b)| a * b).sum();
                for (g, &pv) in dsr.iter_mut().zip(pr) {
                    *g = pv * (*g - dot);
                }
            }
            let dsm = MatRef::from_row_major_slice(&ds, t, t);
            matmul(
                head_mut(dx, d, c, 3 * h),
                Accum::Replace,
                dsm,
                head(x, d, h + c, 3 * h),
                d.scale(),
                Par::Seq,
            );
            matmul(
                head_mut(dx, d, h + c, 3 * h),
                Accum::Replace,
                dsm.transpose(),
                head(x, d, c, 3 * h),
                d.scale(),
                Par::Seq,
            );
        }
    });
    dqkv
}

impl FusedAttention {
    fn dims(&self, qkv: &Shape, bias: &Shape) -> candle_core::Result<Dims> {
        let (b, t, h3) = qkv.dims3()?;
        let nh = self.n_heads;
        if h3 % 3 != 0 || nh == 0 || (h3 / 3) % nh != 0 || bias.dims() != [b, 1, t, t] {
            candle_core::bail!("fused-attention: qkv {qkv:?}, bias {bias:?}, {nh} heads")
        }
        Ok(Dims {
            b,
            t,
            h: h3 / 3,
            nh,
            hd: h3 / 3 / nh,
        })
    }
}

impl CustomOp2 for FusedAttention {
    fn name(&self) -> &'static str {
        "fused-attention"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let d = self.dims(l1.shape(), l2.shape())?;
        let mut out = vec![0f32; d.b * d.t * d.h];
        let probs = forward(
            f32_data(s1, l1, "fused-attention")?,
            f32_data(s2, l2, "fused-attention")?,
            &mut out,
            d,
        );
        *self.probs.lock().unwrap_or_else(|p| p.into_inner()) = Some(probs);
        Ok((CpuStorage::F32(out), Shape::from((d.b, d.t, d.h))))
    }

    fn bwd(
        &self,
        qkv: &Tensor,
        bias: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let d = self.dims(qkv.shape(), bias.shape())?;
        // Taken, not cloned: a second backward pass over the same graph recomputes P.
        let stored = self.probs.lock().unwrap_or_else(|p| p.into_inner()).take();
        let go = grad_res.to_dtype(candle_core::DType::F32)?.contiguous()?;
        let dqkv = with_host_f32(&[qkv, bias, &go], |s| {
            let probs =
                stored.unwrap_or_else(|| forward(s[0], s[1], &mut vec![0f32; d.b * d.t * d.h], d));
            backward(s[0], &probs, s[2], d)
        })
        .ok_or_else(|| not_host_f32("fused-attention"))?;
        Ok((
            Some(Tensor::from_vec(dqkv, qkv.shape(), &Device::Cpu)?),
            None,
        ))
    }
}
