//! The whole-sequence LSTM op's CUDA side: the recurrence of [`kernels::LstmSeq`] with one
//! cuBLAS GEMM and one elementwise kernel (`fused_lstm_seq.cu`, compiled to PTX by nvcc at build
//! time: `build.rs`) per step, forward and back, and dW_hh as one GEMM at the end. On CUDA, candle's
//! per-step graph spends about a dozen kernels and as many autograd nodes on every step; this
//! spends two kernels and no nodes.
//!
//! Layouts as on the CPU: row-major gx and gates [B, T, 4C], h and c [B, T, C], mask [B, T],
//! W_hh [4C, C]. cuBLAS is column-major, so every row-major matrix X is handed over as Xᵀ and
//! each product is written transposed (Cᵀ = Bᵀ Aᵀ).
//!
//! The chained op ([`chains_forward`], [`chains_backward_tensors`]): N chains of one layer
//! (an ELMo tower's two directions), gx [N, B, T, 4C] and h [N, B, T, C] in bf16, gates and c
//! in f32, W_hh [N, 4C, C] in bf16, the reversed chains reading time backwards by index. Per
//! step one strided-batched `cublasGemmStridedBatchedEx` over the chains (bf16 operands, f32
//! product and accumulation, `CUBLAS_COMPUTE_32F`) on per-step buffers [N, B, ·], whose chain
//! stride is the same whatever each chain's direction, and one elementwise kernel; dW_hh [N, 4C,
//! C] is one strided-batched GEMM at the end, in f32.

use candle_core::cuda_backend::cudarc::cublas::result::gemm_strided_batched_ex;
use candle_core::cuda_backend::cudarc::cublas::sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
use candle_core::cuda_backend::cudarc::cublas::sys::{
    cublasComputeType_t, cublasGemmAlgo_t, cudaDataType_t,
};
use candle_core::cuda_backend::cudarc::cublas::{Gemm, GemmConfig, StridedBatchedConfig};
use candle_core::cuda_backend::cudarc::driver::{
    CudaSlice, CudaView, DevicePtr, DevicePtrMut, PushKernelArg,
};
use candle_core::cuda_backend::WrapErr;
use candle_core::{CudaDevice, Result, Shape, Tensor};
use half::bf16;
use kernels::LstmSeq;

use crate::ops::cuda::{grid, ptx, tensor, with_cuda, with_cuda_f32, written_whole};
use crate::ops::lstm_seq::chains::Chains;

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

/// What the chained forward pass returns: the output h and what its backward pass needs.
pub(crate) struct ChainsForward {
    /// h [N, B, T, C] in time order, bf16.
    pub h: CudaSlice<bf16>,
    /// The gate pre-activations [N, B, T, 4C], f32.
    pub gates: CudaSlice<f32>,
    /// The cell states after the mask [N, B, T, C], f32.
    pub c: CudaSlice<f32>,
}

/// The sizes as the chained kernels and cuBLAS take them: (N, B, T, C), the largest index
/// (N·B·T·4C) checked against i32.
fn chain_sizes(ch: Chains) -> Result<(i32, i32, i32, i32)> {
    let seq = ch.seq;
    i32_of(ch.chains * seq.batch * seq.steps * 4 * seq.cell)?;
    Ok((
        i32_of(ch.chains)?,
        i32_of(seq.batch)?,
        i32_of(seq.steps)?,
        i32_of(seq.cell)?,
    ))
}

/// [`row_major_config`] batched over the chains: `strides` are those of cuBLAS's first operand,
/// its second and the output (for a row-major product the right factor's buffer comes first).
fn batched(
    gemm: GemmConfig<f32>,
    chains: usize,
    (first, second, out): (usize, usize, usize),
) -> Result<StridedBatchedConfig<f32>> {
    let long = |n: usize| {
        i64::try_from(n).map_err(|_| candle_core::Error::Msg(format!("{OP}: stride {n}")))
    };
    Ok(StridedBatchedConfig {
        gemm,
        batch_size: i32_of(chains)?,
        stride_a: long(first)?,
        stride_b: long(second)?,
        stride_c: long(out)?,
    })
}

/// The chained forward pass's product at a step: gs[n] [B, 4C] = hs[n] [B, C] W_hh[n]ᵀ for
/// every chain n. cuBLAS's operands: W_hh, then hs, into gs.
fn chains_forward_gemm(ch: Chains) -> Result<StridedBatchedConfig<f32>> {
    let (bn, cell) = (ch.seq.batch, ch.seq.cell);
    let gemm = row_major_config(
        (bn, 4 * cell, cell),
        (cell, false),
        (cell, true),
        4 * cell,
        0.0,
    )?;
    batched(gemm, ch.chains, (4 * cell * cell, bn * cell, bn * 4 * cell))
}

/// The chained backward pass's product at a step: dh_next[n] [B, C] = dgs[n] [B, 4C] W_hh[n].
/// cuBLAS's operands: W_hh, then dgs, into dh_next.
fn chains_backward_gemm(ch: Chains) -> Result<StridedBatchedConfig<f32>> {
    let (bn, cell) = (ch.seq.batch, ch.seq.cell);
    let gemm = row_major_config(
        (bn, cell, 4 * cell),
        (4 * cell, false),
        (cell, false),
        cell,
        0.0,
    )?;
    batched(gemm, ch.chains, (4 * cell * cell, bn * 4 * cell, bn * cell))
}

/// dW_hh[n] [4C, C] = dgx[n]ᵀ h_prev[n] over chain n's B·T rows, for every chain. cuBLAS's
/// operands: h_prev, then dgx, into dW_hh.
fn chains_dw_gemm(ch: Chains) -> Result<StridedBatchedConfig<f32>> {
    let (rows, cell) = (ch.seq.batch * ch.seq.steps, ch.seq.cell);
    let gemm = row_major_config(
        (4 * cell, cell, rows),
        (4 * cell, true),
        (cell, false),
        cell,
        0.0,
    )?;
    batched(
        gemm,
        ch.chains,
        (rows * cell, rows * 4 * cell, 4 * cell * cell),
    )
}

/// `cublasGemmStridedBatchedEx` on the device's handle and stream with bf16 operands `first`,
/// `second` and an f32 output, summed in f32 (`CUBLAS_COMPUTE_32F`; α and β are f32).
fn gemm_bf16<A: DevicePtr<bf16>, B: DevicePtr<bf16>, O: DevicePtrMut<f32>>(
    dev: &CudaDevice,
    cfg: StridedBatchedConfig<f32>,
    first: &A,
    second: &B,
    out: &mut O,
) -> Result<()> {
    let blas = dev.cublas_handle();
    let stream = dev.cuda_stream();
    let (a, _a) = first.device_ptr(&stream);
    let (b, _b) = second.device_ptr(&stream);
    let (c, _c) = out.device_ptr_mut(&stream);
    let g = cfg.gemm;
    // SAFETY: as in `gemm`: every operand reaches the last element its strides address (each
    // is a whole per-chain stack of the sizes the configuration names) and the three buffers
    // are distinct; α and β live through the call on the host.
    unsafe {
        gemm_strided_batched_ex(
            *blas.handle(),
            g.transa,
            g.transb,
            g.m,
            g.n,
            g.k,
            (&g.alpha) as *const f32 as *const _,
            a as *const _,
            cudaDataType_t::CUDA_R_16BF,
            g.lda,
            cfg.stride_a,
            b as *const _,
            cudaDataType_t::CUDA_R_16BF,
            g.ldb,
            cfg.stride_b,
            (&g.beta) as *const f32 as *const _,
            c as *mut _,
            cudaDataType_t::CUDA_R_32F,
            g.ldc,
            cfg.stride_c,
            cfg.batch_size,
            cublasComputeType_t::CUBLAS_COMPUTE_32F,
            cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .w()
}

/// The chained forward pass on CUDA, from gx [N, B, T, 4C] (bf16), W_hh [N, 4C, C] (bf16) and
/// the mask [B, T] (f32).
pub(crate) fn chains_forward(
    dev: &CudaDevice,
    ch: Chains,
    gx: &CudaView<bf16>,
    w_hh: &CudaView<bf16>,
    mask: &CudaView<f32>,
) -> Result<ChainsForward> {
    let (ni, bi, ti, ci) = chain_sizes(ch)?;
    let (bn, tn, cell) = (ch.seq.batch, ch.seq.steps, ch.seq.cell);
    let n = ch.chains * bn * tn * cell;
    let per_step = ch.chains * bn * cell;
    // SAFETY: step s's kernel writes gates, h and c at every (chain, sequence, unit) of the
    // chain's time at step s, and hs whole; each step's GEMM writes gs whole (β = 0) before the
    // kernel reads it (from step 1 on).
    let (mut gates, mut h, mut c, mut hs, mut gs) = unsafe {
        (
            written_whole::<f32>(dev, 4 * n)?,
            written_whole::<bf16>(dev, n)?,
            written_whole::<f32>(dev, n)?,
            written_whole::<bf16>(dev, per_step)?,
            written_whole::<f32>(dev, 4 * per_step)?,
        )
    };
    if n == 0 {
        return Ok(ChainsForward { h, gates, c });
    }
    let step = dev.get_or_load_custom_func("lstm_chains_step_forward_bf16", MODULE, PTX)?;
    let cfg = chains_forward_gemm(ch)?;
    for s in 0..tn {
        if s > 0 {
            gemm_bf16(dev, cfg, w_hh, &hs, &mut gs)?;
        }
        let s_i = i32_of(s)?;
        let mut launch = step.builder();
        launch
            .arg(gx)
            .arg(&gs)
            .arg(mask)
            .arg(&mut gates)
            .arg(&mut c)
            .arg(&mut h)
            .arg(&mut hs)
            .arg(&ni)
            .arg(&bi)
            .arg(&ti)
            .arg(&ci)
            .arg(&ch.reversed)
            .arg(&s_i);
        // SAFETY: the kernel's arguments match its signature in fused_lstm_seq.cu and it
        // touches only indices below N·B·T·4C.
        unsafe { launch.launch(grid(per_step)) }.w()?;
    }
    Ok(ChainsForward { h, gates, c })
}

/// The chained backward pass on CUDA: from W_hh (bf16), the mask, the forward pass's gates, h
/// and c and the output gradient dh [N, B, T, C] (bf16), the gradients (dgx [N, B, T, 4C] in
/// bf16, dW_hh [N, 4C, C] in f32).
#[allow(clippy::too_many_arguments)]
fn chains_backward(
    dev: &CudaDevice,
    ch: Chains,
    w_hh: &CudaView<bf16>,
    mask: &CudaView<f32>,
    gates: &CudaSlice<f32>,
    h: &CudaView<bf16>,
    c: &CudaSlice<f32>,
    dh: &CudaView<bf16>,
) -> Result<(CudaSlice<bf16>, CudaSlice<f32>)> {
    let (ni, bi, ti, ci) = chain_sizes(ch)?;
    let (bn, tn, cell) = (ch.seq.batch, ch.seq.steps, ch.seq.cell);
    let n = ch.chains * bn * tn * cell;
    let per_step = ch.chains * bn * cell;
    // SAFETY: step s's kernel writes dgx's four gates at every (chain, sequence, unit) of the
    // chain's time at step s, and dgs whole before the step's GEMM reads it; the last GEMM
    // writes dW_hh whole (β = 0).
    let (mut dgx, mut dw, mut dgs) = unsafe {
        (
            written_whole::<bf16>(dev, 4 * n)?,
            written_whole::<f32>(dev, 4 * cell * cell * ch.chains)?,
            written_whole::<bf16>(dev, 4 * per_step)?,
        )
    };
    if n == 0 {
        return Ok((dgx, dw));
    }
    // The gradients reaching h through the next step's GEMM (zeros before the last step's
    // kernel) and c through its cell update, f32 across the steps.
    let mut dh_next = dev.alloc_zeros::<f32>(per_step)?;
    let mut dc_next = dev.alloc_zeros::<f32>(per_step)?;
    let step = dev.get_or_load_custom_func("lstm_chains_step_backward_bf16", MODULE, PTX)?;
    let cfg = chains_backward_gemm(ch)?;
    for s in (0..tn).rev() {
        let s_i = i32_of(s)?;
        let mut launch = step.builder();
        launch
            .arg(gates)
            .arg(c)
            .arg(mask)
            .arg(dh)
            .arg(&dh_next)
            .arg(&mut dc_next)
            .arg(&mut dgx)
            .arg(&mut dgs)
            .arg(&ni)
            .arg(&bi)
            .arg(&ti)
            .arg(&ci)
            .arg(&ch.reversed)
            .arg(&s_i);
        // SAFETY: as in `chains_forward`.
        unsafe { launch.launch(grid(per_step)) }.w()?;
        if s > 0 {
            gemm_bf16(dev, cfg, w_hh, &dgs, &mut dh_next)?;
        }
    }
    // dW_hh[n] = Σ dgatesᵀ h_prev over chain n's rows, h_prev the state each step started from.
    // SAFETY: the shift kernel writes every entry (zeros where a chain starts).
    let mut h_prev = unsafe { written_whole::<bf16>(dev, n)? };
    let shift = dev.get_or_load_custom_func("lstm_chains_shift_steps_bf16", MODULE, PTX)?;
    let mut launch = shift.builder();
    launch
        .arg(h)
        .arg(&mut h_prev)
        .arg(&ni)
        .arg(&bi)
        .arg(&ti)
        .arg(&ci)
        .arg(&ch.reversed);
    // SAFETY: as in `chains_forward`.
    unsafe { launch.launch(grid(n)) }.w()?;
    gemm_bf16(dev, chains_dw_gemm(ch)?, &h_prev, &dgx, &mut dw)?;
    Ok((dgx, dw))
}

/// [`chains_backward`] on the op's tensors (the mask in f32; the output h and its gradient dh
/// in bf16; all contiguous on CUDA) and the W_hh the forward pass cast: the gradients of gx
/// (bf16) and W_hh (f32) as new CUDA tensors.
pub(crate) fn chains_backward_tensors(
    ch: Chains,
    w_hh: &CudaSlice<bf16>,
    mask: &Tensor,
    gates: &CudaSlice<f32>,
    h: &Tensor,
    c: &CudaSlice<f32>,
    dh: &Tensor,
) -> Result<(Tensor, Tensor)> {
    let seq = ch.seq;
    with_cuda_f32(&[mask], OP, |dev, m| {
        with_cuda::<bf16, _>(&[h, dh], OP, |_, v| {
            let w = w_hh.slice(..);
            let (dgx, dw) = chains_backward(dev, ch, &w, &m[0], gates, &v[0], c, &v[1])?;
            Ok((
                tensor(
                    dgx,
                    dev,
                    Shape::from((ch.chains, seq.batch, seq.steps, 4 * seq.cell)),
                ),
                tensor(dw, dev, Shape::from((ch.chains, 4 * seq.cell, seq.cell))),
            ))
        })
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
    /// [`host_sgemm`] over a strided batch: entry i reads and writes its operands from i times
    /// each stride on.
    fn host_batched(cfg: &StridedBatchedConfig<f32>, a: &[f32], b: &[f32], c: &mut [f32]) {
        for i in 0..cfg.batch_size as usize {
            let (sa, sb, sc) = (
                i * cfg.stride_a as usize,
                i * cfg.stride_b as usize,
                i * cfg.stride_c as usize,
            );
            host_sgemm(&cfg.gemm, &a[sa..], &b[sb..], &mut c[sc..]);
        }
    }

    /// The chained op's three strided-batched GEMMs (configurations and operand order as the op
    /// makes them), run with host cuBLAS semantics, against each chain's row-major product: the
    /// per-step products of the forward and the backward pass over per-step buffers [N, B, ·],
    /// and dW_hh over each chain's B·T rows.
    #[test]
    fn the_three_batched_gemms_of_the_chained_op_compute_each_chains_product() {
        let (nn, bn, tn, cell) = (3usize, 2usize, 4usize, 5usize);
        let ch = Chains {
            chains: nn,
            seq: LstmSeq {
                batch: bn,
                steps: tn,
                cell,
            },
            reversed: 0b010,
        };
        let c4 = 4 * cell;
        let w = wave(nn * c4 * cell, 0.3);
        let close = |a: f32, b: f32| (a - b).abs() <= 1e-4 * (1.0 + b.abs());

        // Forward: gs[n] = hs[n] W_hh[n]ᵀ.
        let hs = wave(nn * bn * cell, 0.7);
        let mut gs = vec![f32::NAN; nn * bn * c4];
        host_batched(&chains_forward_gemm(ch).unwrap(), &w, &hs, &mut gs);
        for n in 0..nn {
            for b in 0..bn {
                for j in 0..c4 {
                    let want: f32 = (0..cell)
                        .map(|k| hs[(n * bn + b) * cell + k] * w[(n * c4 + j) * cell + k])
                        .sum();
                    assert!(
                        close(gs[(n * bn + b) * c4 + j], want),
                        "forward ({n}, {b}, {j})"
                    );
                }
            }
        }

        // Backward: dh_next[n] = dgs[n] W_hh[n].
        let dgs = wave(nn * bn * c4, 1.1);
        let mut dh_next = vec![f32::NAN; nn * bn * cell];
        host_batched(&chains_backward_gemm(ch).unwrap(), &w, &dgs, &mut dh_next);
        for n in 0..nn {
            for b in 0..bn {
                for k in 0..cell {
                    let want: f32 = (0..c4)
                        .map(|j| dgs[(n * bn + b) * c4 + j] * w[(n * c4 + j) * cell + k])
                        .sum();
                    let got = dh_next[(n * bn + b) * cell + k];
                    assert!(close(got, want), "backward ({n}, {b}, {k})");
                }
            }
        }

        // dW_hh[n] = dgx[n]ᵀ h_prev[n] over the chain's B·T rows.
        let rows = bn * tn;
        let dgx = wave(nn * rows * c4, 0.9);
        let h_prev = wave(nn * rows * cell, 0.5);
        let mut dw = vec![f32::NAN; nn * c4 * cell];
        host_batched(&chains_dw_gemm(ch).unwrap(), &h_prev, &dgx, &mut dw);
        for n in 0..nn {
            for j in 0..c4 {
                for k in 0..cell {
                    let want: f32 = (0..rows)
                        .map(|r| dgx[(n * rows + r) * c4 + j] * h_prev[(n * rows + r) * cell + k])
                        .sum();
                    assert!(
                        close(dw[(n * c4 + j) * cell + k], want),
                        "dW ({n}, {j}, {k})"
                    );
                }
            }
        }
    }
}
