//! The whole-sequence LSTM op's CUDA side: the recurrence of [`kernels::LstmSeq`] with one
//! cuBLAS GEMM and one elementwise kernel (`fused_lstm_seq.cu`, compiled to PTX by nvcc at build
//! time: `build.rs`) per step, forward and back, and dW_hh as one GEMM at the end. On CUDA, candle's
//! per-step graph spends about a dozen kernels and as many autograd nodes on every step; this
//! spends two kernels and no nodes.
//!
//! Layouts as on the CPU: row-major gx and gates [B, T, 4C], h and c [B, T, C], mask [B, T],
//! W_hh [4C, C]. cuBLAS is column-major, so every row-major matrix X is handed over as Xᵀ and
//! each product is written transposed (Cᵀ = Bᵀ Aᵀ).

use candle_core::cuda_backend::cudarc::cublas::sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
use candle_core::cuda_backend::cudarc::cublas::{Gemm, GemmConfig};
use candle_core::cuda_backend::cudarc::driver::{
    CudaSlice, CudaView, DevicePtr, DevicePtrMut, PushKernelArg,
};
use candle_core::cuda_backend::WrapErr;
use candle_core::{CudaDevice, Result, Shape, Tensor};
use kernels::LstmSeq;

use crate::cuda::{grid, ptx, tensor, with_cuda_f32, written_whole};

/// The kernels' PTX, from `build.rs`.
const PTX: &str = ptx!("fused_lstm_seq");

/// The module name the kernels are loaded under, once per device.
const MODULE: &str = "lmsplit_fused_lstm_seq";

/// The op's name, in its errors.
const OP: &str = "fused-lstm-seq";

/// What the forward pass returns: the output h and what the backward pass needs.
pub(crate) struct Forward {
    /// h [B, T, C], the layer's output.
    pub h: CudaSlice<f32>,
    /// The gate pre-activations [B, T, 4C].
    pub gates: CudaSlice<f32>,
    /// The cell states after the mask [B, T, C].
    pub c: CudaSlice<f32>,
}

fn i32_of(n: usize) -> Result<i32> {
    i32::try_from(n).map_err(|_| candle_core::Error::Msg(format!("{OP}: size {n} beyond i32")))
}

/// The sizes as the kernels and cuBLAS take them: (B, T, C).
fn sizes(seq: LstmSeq) -> Result<(i32, i32, i32)> {
    // The largest index a kernel or GEMM forms is B·T·4C.
    i32_of(seq.batch * seq.steps * 4 * seq.cell)?;
    Ok((i32_of(seq.batch)?, i32_of(seq.steps)?, i32_of(seq.cell)?))
}

/// A row-major matrix operand: its row stride, and whether the buffer holds its transpose.
type Operand = (usize, bool);

/// cuBLAS's column-major call for row-major out [rows, cols] (row stride `ldo`) = or += (β = 1)
/// A [rows, inner] times B [inner, cols]: outᵀ = Bᵀ Aᵀ, so cuBLAS's first operand is B's buffer
/// and its second A's. A buffer holding X row-major is Xᵀ column-major with the same stride.
fn row_major_config(
    (rows, cols, inner): (usize, usize, usize),
    (lda, a_t): Operand,
    (ldb, b_t): Operand,
    ldo: usize,
    beta: f32,
) -> Result<GemmConfig<f32>> {
    let op = |t: bool| if t { CUBLAS_OP_T } else { CUBLAS_OP_N };
    Ok(GemmConfig {
        transa: op(b_t),
        transb: op(a_t),
        m: i32_of(cols)?,
        n: i32_of(rows)?,
        k: i32_of(inner)?,
        alpha: 1.0f32,
        lda: i32_of(ldb)?,
        ldb: i32_of(lda)?,
        beta,
        ldc: i32_of(ldo)?,
    })
}

/// The forward pass's recurrent product at a step t: gates[:, t] += h[:, t−1] W_hhᵀ. cuBLAS's
/// operands: W_hh, then h from step t − 1 on, into gates from step t on.
fn forward_step_gemm(seq: LstmSeq) -> Result<GemmConfig<f32>> {
    let (bn, tn, cell) = (seq.batch, seq.steps, seq.cell);
    row_major_config(
        (bn, 4 * cell, cell),
        (tn * cell, false),
        (cell, true),
        tn * 4 * cell,
        1.0,
    )
}

/// The backward pass's recurrent product at a step t: dh_next [B, C] = dgx[:, t] W_hh. cuBLAS's
/// operands: W_hh, then dgx from step t on, into dh_next.
fn backward_step_gemm(seq: LstmSeq) -> Result<GemmConfig<f32>> {
    let (tn, cell) = (seq.steps, seq.cell);
    row_major_config(
        (seq.batch, cell, 4 * cell),
        (tn * 4 * cell, false),
        (cell, false),
        cell,
        0.0,
    )
}

/// dW_hh [4C, C] = dgxᵀ h_prev over all B·T (sequence, step) rows. cuBLAS's operands: h_prev,
/// then dgx, into dW_hh.
fn dw_gemm(seq: LstmSeq) -> Result<GemmConfig<f32>> {
    let cell = seq.cell;
    row_major_config(
        (4 * cell, cell, seq.batch * seq.steps),
        (4 * cell, true),
        (cell, false),
        cell,
        0.0,
    )
}

/// cuBLAS's sgemm on the device's handle: `first` and `second` are its A and B (for a
/// row-major product, the right factor's buffer comes first: [`row_major_config`]).
fn gemm<A: DevicePtr<f32>, B: DevicePtr<f32>, O: DevicePtrMut<f32>>(
    dev: &CudaDevice,
    cfg: GemmConfig<f32>,
    first: &A,
    second: &B,
    out: &mut O,
) -> Result<()> {
    // SAFETY: every view reaches the last element its strides address (callers slice from an
    // offset to the buffer's end), and the three buffers are distinct.
    unsafe { dev.cublas_handle().gemm(cfg, first, second, out) }.w()
}

/// The forward pass of [`LstmSeq::forward`] on CUDA, from gx [B, T, 4C], W_hh [4C, C] and the
/// mask [B, T].
pub(crate) fn forward(
    dev: &CudaDevice,
    seq: LstmSeq,
    gx: &CudaView<f32>,
    w_hh: &CudaView<f32>,
    mask: &CudaView<f32>,
) -> Result<Forward> {
    let (bi, ti, ci) = sizes(seq)?;
    let (bn, tn, cell) = (seq.batch, seq.steps, seq.cell);
    let n = bn * tn * cell;
    // SAFETY: gates is copied from gx whole, and step t's kernel writes h and c at every
    // (sequence, unit) of step t, for every t.
    let (mut gates, mut h, mut c) = unsafe {
        (
            written_whole::<f32>(dev, 4 * n)?,
            written_whole::<f32>(dev, n)?,
            written_whole::<f32>(dev, n)?,
        )
    };
    if n == 0 {
        return Ok(Forward { h, gates, c });
    }
    dev.memcpy_dtod(gx, &mut gates)?;
    let step = dev.get_or_load_custom_func("lstm_seq_step_forward", MODULE, PTX)?;
    for t in 0..tn {
        if t > 0 {
            gemm(
                dev,
                forward_step_gemm(seq)?,
                w_hh,
                &h.slice((t - 1) * cell..),
                &mut gates.slice_mut(t * 4 * cell..),
            )?;
        }
        let t_i = i32_of(t)?;
        let mut launch = step.builder();
        launch
            .arg(&gates)
            .arg(mask)
            .arg(&mut h)
            .arg(&mut c)
            .arg(&bi)
            .arg(&ti)
            .arg(&ci)
            .arg(&t_i);
        // SAFETY: the kernel's arguments match its signature in fused_lstm_seq.cu and it
        // touches only indices below B·T·4C.
        unsafe { launch.launch(grid(bn * cell)) }.w()?;
    }
    Ok(Forward { h, gates, c })
}

/// The backward pass of [`LstmSeq::backward`] on CUDA: from W_hh, the mask, the forward pass's
/// gates, h and c and the output gradient dh [B, T, C], the gradients (dgx [B, T, 4C],
/// dW_hh [4C, C]).
#[allow(clippy::too_many_arguments)]
fn backward(
    dev: &CudaDevice,
    seq: LstmSeq,
    w_hh: &CudaView<f32>,
    mask: &CudaView<f32>,
    gates: &CudaSlice<f32>,
    h: &CudaView<f32>,
    c: &CudaSlice<f32>,
    dh: &CudaView<f32>,
) -> Result<(CudaSlice<f32>, CudaSlice<f32>)> {
    let (bi, ti, ci) = sizes(seq)?;
    let (bn, tn, cell) = (seq.batch, seq.steps, seq.cell);
    let n = bn * tn * cell;
    // SAFETY: step t's kernel writes dgx's four gates at every (sequence, unit) of step t, for
    // every t; the last GEMM writes dW_hh whole (β = 0).
    let (mut dgx, mut dw) = unsafe {
        (
            written_whole::<f32>(dev, 4 * n)?,
            written_whole::<f32>(dev, 4 * cell * cell)?,
        )
    };
    if n == 0 {
        return Ok((dgx, dw));
    }
    // The gradients reaching h_t through step t + 1's recurrent GEMM, and c_t through its
    // cell update.
    let mut dh_next = dev.alloc_zeros::<f32>(bn * cell)?;
    let mut dc_next = dev.alloc_zeros::<f32>(bn * cell)?;
    let step = dev.get_or_load_custom_func("lstm_seq_step_backward", MODULE, PTX)?;
    for t in (0..tn).rev() {
        let t_i = i32_of(t)?;
        let mut launch = step.builder();
        launch
            .arg(gates)
            .arg(c)
            .arg(mask)
            .arg(dh)
            .arg(&dh_next)
            .arg(&mut dc_next)
            .arg(&mut dgx)
            .arg(&bi)
            .arg(&ti)
            .arg(&ci)
            .arg(&t_i);
        // SAFETY: as in `forward`.
        unsafe { launch.launch(grid(bn * cell)) }.w()?;
        if t > 0 {
            gemm(
                dev,
                backward_step_gemm(seq)?,
                w_hh,
                &dgx.slice(t * 4 * cell..),
                &mut dh_next,
            )?;
        }
    }
    // dW_hh = Σ_t dgates_tᵀ h_{t−1}: one GEMM over all (sequence, step) rows against h shifted
    // one step.
    // SAFETY: the shift kernel writes every entry (zeros at step 0).
    let mut h_prev = unsafe { written_whole::<f32>(dev, n)? };
    let shift = dev.get_or_load_custom_func("lstm_seq_shift_steps", MODULE, PTX)?;
    let mut launch = shift.builder();
    launch.arg(h).arg(&mut h_prev).arg(&bi).arg(&ti).arg(&ci);
    // SAFETY: as in `forward`.
    unsafe { launch.launch(grid(n)) }.w()?;
    gemm(dev, dw_gemm(seq)?, &h_prev, &dgx, &mut dw)?;
    Ok((dgx, dw))
}

/// [`backward`] on the op's tensors (W_hh, the mask, the output h and its gradient dh, all
/// contiguous f32 on CUDA): the gradients of gx and W_hh as new CUDA tensors.
pub(crate) fn backward_tensors(
    seq: LstmSeq,
    w_hh: &Tensor,
    mask: &Tensor,
    gates: &CudaSlice<f32>,
    h: &Tensor,
    c: &CudaSlice<f32>,
    dh: &Tensor,
) -> Result<(Tensor, Tensor)> {
    with_cuda_f32(&[w_hh, mask, h, dh], OP, |dev, v| {
        let (dgx, dw) = backward(dev, seq, &v[0], &v[1], gates, &v[2], c, &v[3])?;
        Ok((
            tensor(dgx, dev, Shape::from((seq.batch, seq.steps, 4 * seq.cell))),
            tensor(dw, dev, w_hh.shape().clone()),
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// cuBLAS's sgemm as its documentation defines it, on the host: column-major C (m × n,
    /// leading dimension ldc) = α op(A) op(B) + β C, op(X)(i, l) = X[i + l·ld] untransposed and
    /// X[l + i·ld] transposed; with β = 0, C is not read (the tests fill it with NaN).
    fn host_sgemm(cfg: &GemmConfig<f32>, a: &[f32], b: &[f32], c: &mut [f32]) {
        let at = |x: &[f32], t: bool, ld: i32, i: usize, l: usize| {
            let ld = ld as usize;
            if t {
                x[l + i * ld]
            } else {
                x[i + l * ld]
            }
        };
        let (m, n, k) = (cfg.m as usize, cfg.n as usize, cfg.k as usize);
        for j in 0..n {
            for i in 0..m {
                let mut acc = 0f32;
                for l in 0..k {
                    acc += at(a, cfg.transa == CUBLAS_OP_T, cfg.lda, i, l)
                        * at(b, cfg.transb == CUBLAS_OP_T, cfg.ldb, l, j);
                }
                let o = &mut c[i + j * cfg.ldc as usize];
                *o = cfg.alpha * acc + if cfg.beta == 0.0 { 0.0 } else { cfg.beta * *o };
            }
        }
    }

    fn wave(n: usize, f: f32) -> Vec<f32> {
        (0..n).map(|i| (i as f32 * f).sin()).collect()
    }

    /// The op's three cuBLAS calls (their configurations, operand order and offsets as the op
    /// makes them), run with host cuBLAS semantics, against the same products written out on
    /// the row-major buffers: the recurrent GEMM of the forward pass, the one of the backward
    /// pass and dW_hh.
    #[test]
    fn the_three_gemms_of_the_op_compute_its_row_major_products() {
        let (bn, tn, cell, t) = (3usize, 4usize, 5usize, 2usize);
        let seq = LstmSeq {
            batch: bn,
            steps: tn,
            cell,
        };
        let c4 = 4 * cell;
        let w = wave(c4 * cell, 0.3);
        let h = wave(bn * tn * cell, 0.7);
        let g0 = wave(bn * tn * c4, 1.1);
        let close = |a: f32, b: f32| (a - b).abs() <= 1e-4 * (1.0 + b.abs());

        // Forward: gates[:, t] += h[:, t−1] W_hhᵀ; the other steps untouched.
        let mut gates = g0.clone();
        let cfg = forward_step_gemm(seq).unwrap();
        host_sgemm(&cfg, &w, &h[(t - 1) * cell..], &mut gates[t * c4..]);
        for b in 0..bn {
            for s in 0..tn {
                for j in 0..c4 {
                    let at = (b * tn + s) * c4 + j;
                    let product: f32 = (0..cell)
                        .map(|k| h[(b * tn + t - 1) * cell + k] * w[j * cell + k])
                        .sum();
                    let want = g0[at] + if s == t { product } else { 0.0 };
                    assert!(close(gates[at], want), "forward ({b}, {s}, {j})");
                }
            }
        }

        // Backward: dh_next [B, C] = dgx[:, t] W_hh.
        let dg = g0;
        let mut dh_next = vec![f32::NAN; bn * cell];
        let cfg = backward_step_gemm(seq).unwrap();
        host_sgemm(&cfg, &w, &dg[t * c4..], &mut dh_next);
        for b in 0..bn {
            for k in 0..cell {
                let want: f32 = (0..c4)
                    .map(|j| dg[(b * tn + t) * c4 + j] * w[j * cell + k])
                    .sum();
                assert!(close(dh_next[b * cell + k], want), "backward ({b}, {k})");
            }
        }

        // dW_hh [4C, C] = dgxᵀ h_prev over all B·T rows (any [B·T, C] stands in for h_prev).
        let rows = bn * tn;
        let mut dw = vec![f32::NAN; c4 * cell];
        host_sgemm(&dw_gemm(seq).unwrap(), &h, &dg, &mut dw);
        for j in 0..c4 {
            for k in 0..cell {
                let want: f32 = (0..rows).map(|r| dg[r * c4 + j] * h[r * cell + k]).sum();
                assert!(close(dw[j * cell + k], want), "dW ({j}, {k})");
            }
        }
    }
}
