//! One LSTM layer over the whole sequence as one custom op with its own backward pass through
//! time: [`kernels::LstmSeq`] on the CPU, [`crate::ops::lstm_seq::cuda`] on CUDA (f32 both).
//! Written from tensor ops the layer is a loop over T steps of a matmul and a dozen small
//! elementwise ops, then a stack, and autograd walks it back node by node; on [B, 4C] tensors
//! candle's per-op cost dominated the ELMo towers (on CUDA, its per-step graph ran slower than
//! the 2-core CPU). The per-step graph ([`crate::layers::lstm::composed_recurrence`]) stays for other
//! devices and dtypes and is the reference in the tests.
//!
//! [`FusedLstmChains`] runs a layer's independent chains (an ELMo tower's two directions) as one
//! op: on CUDA in bf16 with f32 gates and cell state, one batched GEMM per step for all chains
//! ([`crate::ops::lstm_seq::cuda::chains_forward`]); on the CPU in f32, [`kernels::LstmSeq`]
//! chain by chain, the reference of the CUDA path.

pub(crate) mod chains;
/// The CUDA side (`fused_lstm_seq.cu`).
#[cfg(feature = "cuda")]
pub(crate) mod cuda;

use std::sync::Mutex;

use candle_core::{CpuStorage, CustomOp3, Device, Layout, Shape, Tensor};
use kernels::host::{f32_data, not_host_f32, with_host_f32};
use kernels::{LstmSaved, LstmSeq};

use crate::ops::lstm_seq::chains::Chains;

/// The op's name, in its errors too.
const OP: &str = "fused-lstm-seq";

/// What the backward pass needs besides the inputs and the output h: the gate
/// pre-activations [B, T, 4C] and the cell states [B, T, C] of the forward pass, where it ran.
enum Saved {
    Host {
        gates: Vec<f32>,
        c: Vec<f32>,
    },
    #[cfg(feature = "cuda")]
    Cuda {
        gates: candle_core::cuda_backend::cudarc::driver::CudaSlice<f32>,
        c: candle_core::cuda_backend::cudarc::driver::CudaSlice<f32>,
    },
}

/// The custom op: gx [B, T, 4C] (the input part W_ih x + b of the gates), W_hh [4C, C] and the
/// mask [B, T] or [B, T, 1] (1 real, 0 PAD; contiguous f32) to the hidden states h [B, T, C].
/// The mask gets no gradient.
pub(crate) struct FusedLstmSeq {
    saved: Mutex<Option<Saved>>,
}

impl FusedLstmSeq {
    pub(crate) fn new() -> Self {
        Self {
            saved: Mutex::new(None),
        }
    }
}

fn dims(gx: &Shape, w_hh: &Shape, mask: &Shape) -> candle_core::Result<LstmSeq> {
    let (batch, steps, c4) = gx.dims3()?;
    let cell = c4 / 4;
    let mask_ok = mask.elem_count() == batch * steps && mask.dims().starts_with(&[batch, steps]);
    if c4 % 4 != 0 || w_hh.dims() != [c4, cell] || !mask_ok {
        candle_core::bail!("{OP}: gx {gx:?}, W_hh {w_hh:?}, mask {mask:?}")
    }
    Ok(LstmSeq { batch, steps, cell })
}

impl FusedLstmSeq {
    fn save(&self, saved: Saved) {
        *self.saved.lock().unwrap_or_else(|e| e.into_inner()) = Some(saved);
    }
}

impl CustomOp3 for FusedLstmSeq {
    fn name(&self) -> &'static str {
        OP
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let seq = dims(l1.shape(), l2.shape(), l3.shape())?;
        let (gx, w_hh, mask) = (
            f32_data(s1, l1, OP)?,
            f32_data(s2, l2, OP)?,
            f32_data(s3, l3, OP)?,
        );
        let n = seq.batch * seq.steps * seq.cell;
        let (mut gates, mut h, mut c) = (vec![0f32; 4 * n], vec![0f32; n], vec![0f32; n]);
        seq.forward(gx, w_hh, mask, &mut gates, &mut h, &mut c);
        self.save(Saved::Host { gates, c });
        Ok((
            CpuStorage::F32(h),
            Shape::from((seq.batch, seq.steps, seq.cell)),
        ))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        use crate::ops::cuda::f32_view;
        use crate::ops::lstm_seq::cuda::forward;
        let seq = dims(l1.shape(), l2.shape(), l3.shape())?;
        let dev = &s1.device;
        let out = forward(
            dev,
            seq,
            &f32_view(s1, l1, OP)?,
            &f32_view(s2, l2, OP)?,
            &f32_view(s3, l3, OP)?,
        )?;
        self.save(Saved::Cuda {
            gates: out.gates,
            c: out.c,
        });
        Ok((
            candle_core::CudaStorage::wrap_cuda_slice(out.h, dev.clone()),
            Shape::from((seq.batch, seq.steps, seq.cell)),
        ))
    }

    fn bwd(
        &self,
        gx: &Tensor,
        w_hh: &Tensor,
        mask: &Tensor,
        res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let seq = dims(gx.shape(), w_hh.shape(), mask.shape())?;
        let saved = self.saved.lock().unwrap_or_else(|e| e.into_inner());
        let dh = grad_res.to_dtype(candle_core::DType::F32)?.contiguous()?;
        let (gates, c) = match saved.as_ref() {
            None => candle_core::bail!("{OP}: backward without a forward pass"),
            Some(Saved::Host { gates, c }) => (gates, c),
            #[cfg(feature = "cuda")]
            Some(Saved::Cuda { gates, c }) => {
                let (dgx, dw) = crate::ops::lstm_seq::cuda::backward_tensors(
                    seq, w_hh, mask, gates, res, c, &dh,
                )?;
                return Ok((Some(dgx), Some(dw), None));
            }
        };
        let (dgx, dw) = with_host_f32(&[w_hh, mask, res, &dh], |s| {
            let (mut dgx, mut dw) = (vec![0f32; gates.len()], vec![0f32; s[0].len()]);
            let saved = LstmSaved { gates, h: s[2], c };
            seq.backward(s[0], s[1], saved, s[3], &mut dgx, &mut dw);
            (dgx, dw)
        })
        .ok_or_else(|| not_host_f32(OP))?;
        let dev = Device::Cpu;
        Ok((
            Some(Tensor::from_vec(dgx, gx.shape(), &dev)?),
            Some(Tensor::from_vec(dw, w_hh.shape(), &dev)?),
            None,
        ))
    }
}

/// `x` [B, T, width] with each sequence's steps in reverse order (a host copy: the CPU
/// reference's way to run a reversed chain with [`LstmSeq`]).
fn reverse_steps(x: &[f32], seq: LstmSeq, width: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(x.len());
    for b in 0..seq.batch {
        for t in (0..seq.steps).rev() {
            let at = (b * seq.steps + t) * width;
            out.extend_from_slice(&x[at..at + width]);
        }
    }
    out
}

/// Chain n's part of a stacked [N, B, T, width] buffer, in the chain's step order (reversed in
/// time for a reversed chain).
fn chain_steps(x: &[f32], ch: Chains, n: usize, width: usize) -> Vec<f32> {
    let len = ch.seq.batch * ch.seq.steps * width;
    let part = &x[n * len..(n + 1) * len];
    if ch.is_reversed(n) {
        reverse_steps(part, ch.seq, width)
    } else {
        part.to_vec()
    }
}

/// Writes `steps` (chain n's [B, T, width] in its step order) into chain n's part of `out`
/// in time order.
fn put_chain(out: &mut [f32], steps: &[f32], ch: Chains, n: usize, width: usize) {
    let len = steps.len();
    let part = &mut out[n * len..(n + 1) * len];
    if ch.is_reversed(n) {
        part.copy_from_slice(&reverse_steps(steps, ch.seq, width));
    } else {
        part.copy_from_slice(steps);
    }
}

/// What the chained op's backward pass needs besides its inputs and output.
enum ChainsSaved {
    /// Per chain, in the chain's step order: the gate pre-activations [B, T, 4C] and the cell
    /// states [B, T, C].
    Host {
        gates: Vec<Vec<f32>>,
        c: Vec<Vec<f32>>,
    },
    /// The gate pre-activations [N, B, T, 4C] and cell states [N, B, T, C] in time order (f32),
    /// and W_hh as the GEMMs read it (bf16).
    #[cfg(feature = "cuda")]
    Cuda {
        gates: candle_core::cuda_backend::cudarc::driver::CudaSlice<f32>,
        c: candle_core::cuda_backend::cudarc::driver::CudaSlice<f32>,
        w_hh: candle_core::cuda_backend::cudarc::driver::CudaSlice<half::bf16>,
    },
}

/// The chained custom op: gx [N, B, T, 4C] (each chain's input part of the gates, in time
/// order), W_hh [N, 4C, C] (f32: its gradient is the f32 master's) and the mask [B, T] or
/// [B, T, 1] (f32, shared by the chains) to h [N, B, T, C] in time order. On CUDA gx is bf16 and
/// so are h and the gradient of gx; on the CPU all are f32. The mask gets no gradient.
pub(crate) struct FusedLstmChains {
    reversed: u32,
    saved: Mutex<Option<ChainsSaved>>,
}

impl FusedLstmChains {
    /// The op over chains whose bit is set in `reversed` reading time reversed.
    pub(crate) fn new(reversed: u32) -> Self {
        Self {
            reversed,
            saved: Mutex::new(None),
        }
    }

    fn chains(&self, gx: &Shape, w_hh: &Shape, mask: &Shape) -> candle_core::Result<Chains> {
        let (chains, batch, steps, c4) = gx.dims4()?;
        let cell = c4 / 4;
        let mask_ok =
            mask.elem_count() == batch * steps && mask.dims().starts_with(&[batch, steps]);
        let reversed_ok = chains <= Chains::MAX && u64::from(self.reversed) < 1u64 << chains;
        if c4 % 4 != 0 || w_hh.dims() != [chains, c4, cell] || !mask_ok || !reversed_ok {
            candle_core::bail!(
                "{CHAINS_OP}: gx {gx:?}, W_hh {w_hh:?}, mask {mask:?}, reversed {:#b}",
                self.reversed
            )
        }
        Ok(Chains {
            chains,
            seq: LstmSeq { batch, steps, cell },
            reversed: self.reversed,
        })
    }

    fn save(&self, saved: ChainsSaved) {
        *self.saved.lock().unwrap_or_else(|e| e.into_inner()) = Some(saved);
    }
}

/// The chained op's name, in its errors too.
const CHAINS_OP: &str = "fused-lstm-chains";

impl CustomOp3 for FusedLstmChains {
    fn name(&self) -> &'static str {
        CHAINS_OP
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let ch = self.chains(l1.shape(), l2.shape(), l3.shape())?;
        let (gx, w_hh, mask) = (
            f32_data(s1, l1, CHAINS_OP)?,
            f32_data(s2, l2, CHAINS_OP)?,
            f32_data(s3, l3, CHAINS_OP)?,
        );
        let (seq, n) = (ch.seq, ch.states());
        let w_len = 4 * seq.cell * seq.cell;
        let mut h = vec![0f32; ch.chains * n];
        let (mut all_gates, mut all_c) = (Vec::new(), Vec::new());
        for k in 0..ch.chains {
            let gx_k = chain_steps(gx, ch, k, 4 * seq.cell);
            let mask_k = if ch.is_reversed(k) {
                reverse_steps(mask, seq, 1)
            } else {
                mask.to_vec()
            };
            let (mut gates, mut h_k, mut c) = (vec![0f32; 4 * n], vec![0f32; n], vec![0f32; n]);
            let w_k = &w_hh[k * w_len..(k + 1) * w_len];
            seq.forward(&gx_k, w_k, &mask_k, &mut gates, &mut h_k, &mut c);
            put_chain(&mut h, &h_k, ch, k, seq.cell);
            all_gates.push(gates);
            all_c.push(c);
        }
        self.save(ChainsSaved::Host {
            gates: all_gates,
            c: all_c,
        });
        Ok((
            CpuStorage::F32(h),
            Shape::from((ch.chains, seq.batch, seq.steps, seq.cell)),
        ))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        use crate::ops::cuda::{f32_view, view};
        use crate::ops::lstm_seq::cuda::chains_forward;
        use candle_core::backend::BackendStorage;
        use candle_core::cuda_backend::CudaStorageSlice;
        let ch = self.chains(l1.shape(), l2.shape(), l3.shape())?;
        let dev = &s1.device;
        // The GEMMs read W_hh in bf16: one cast per call, kept for the backward pass.
        let CudaStorageSlice::BF16(w_hh) = s2.to_dtype(l2, candle_core::DType::BF16)?.slice else {
            candle_core::bail!("{CHAINS_OP}: W_hh did not cast to bf16")
        };
        let out = chains_forward(
            dev,
            ch,
            &view::<half::bf16>(s1, l1, CHAINS_OP)?,
            &w_hh.slice(..),
            &f32_view(s3, l3, CHAINS_OP)?,
        )?;
        self.save(ChainsSaved::Cuda {
            gates: out.gates,
            c: out.c,
            w_hh,
        });
        let seq = ch.seq;
        Ok((
            candle_core::CudaStorage::wrap_cuda_slice(out.h, dev.clone()),
            Shape::from((ch.chains, seq.batch, seq.steps, seq.cell)),
        ))
    }

    fn bwd(
        &self,
        gx: &Tensor,
        w_hh: &Tensor,
        mask: &Tensor,
        res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let ch = self.chains(gx.shape(), w_hh.shape(), mask.shape())?;
        let saved = self.saved.lock().unwrap_or_else(|e| e.into_inner());
        let (gates, c) = match saved.as_ref() {
            None => candle_core::bail!("{CHAINS_OP}: backward without a forward pass"),
            Some(ChainsSaved::Host { gates, c }) => (gates, c),
            #[cfg(feature = "cuda")]
            Some(ChainsSaved::Cuda { gates, c, w_hh: w }) => {
                let dh = grad_res.to_dtype(candle_core::DType::BF16)?.contiguous()?;
                let (dgx, dw) = crate::ops::lstm_seq::cuda::chains_backward_tensors(
                    ch, w, mask, gates, res, c, &dh,
                )?;
                return Ok((Some(dgx), Some(dw), None));
            }
        };
        let dh = grad_res.to_dtype(candle_core::DType::F32)?.contiguous()?;
        let (seq, n) = (ch.seq, ch.states());
        let w_len = 4 * seq.cell * seq.cell;
        let (dgx, dw) = with_host_f32(&[w_hh, mask, res, &dh], |s| {
            let (mut dgx, mut dw) = (vec![0f32; 4 * ch.chains * n], vec![0f32; s[0].len()]);
            for k in 0..ch.chains {
                let mask_k = if ch.is_reversed(k) {
                    reverse_steps(s[1], seq, 1)
                } else {
                    s[1].to_vec()
                };
                let (h_k, dh_k) = (
                    chain_steps(s[2], ch, k, seq.cell),
                    chain_steps(s[3], ch, k, seq.cell),
                );
                let mut dgx_k = vec![0f32; 4 * n];
                let w_k = &s[0][k * w_len..(k + 1) * w_len];
                let dw_k = &mut dw[k * w_len..(k + 1) * w_len];
                let saved = LstmSaved {
                    gates: &gates[k],
                    h: &h_k,
                    c: &c[k],
                };
                seq.backward(w_k, &mask_k, saved, &dh_k, &mut dgx_k, dw_k);
                put_chain(&mut dgx, &dgx_k, ch, k, 4 * seq.cell);
            }
            (dgx, dw)
        })
        .ok_or_else(|| not_host_f32(CHAINS_OP))?;
        let dev = Device::Cpu;
        Ok((
            Some(Tensor::from_vec(dgx, gx.shape(), &dev)?),
            Some(Tensor::from_vec(dw, w_hh.shape(), &dev)?),
            None,
        ))
    }
}
