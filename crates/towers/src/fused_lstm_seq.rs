//! One LSTM layer over the whole sequence as one custom op with its own backward pass through
//! time: [`kernels::LstmSeq`] on the CPU, [`crate::fused_lstm_seq_cuda`] on CUDA (f32 both).
//! Written from tensor ops the layer is a loop over T steps of a matmul and a dozen small
//! elementwise ops, then a stack, and autograd walks it back node by node; on [B, 4C] tensors
//! candle's per-op cost dominated the ELMo towers (on CUDA, its per-step graph ran slower than
//! the 2-core CPU). The per-step graph ([`crate::lstm::composed_recurrence`]) stays for other
//! devices and dtypes and is the reference in the tests.

use std::sync::Mutex;

use candle_core::{CpuStorage, CustomOp3, Device, Layout, Shape, Tensor};
use kernels::host::{f32_data, not_host_f32, with_host_f32};
use kernels::LstmSeq;

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
        use crate::cuda::f32_view;
        use crate::fused_lstm_seq_cuda::forward;
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
                let (dgx, dw) = crate::fused_lstm_seq_cuda::backward_tensors(
                    seq, w_hh, mask, gates, res, c, &dh,
                )?;
                return Ok((Some(dgx), Some(dw), None));
            }
        };
        let (dgx, dw) = with_host_f32(&[w_hh, mask, res, &dh], |s| {
            let (mut dgx, mut dw) = (vec![0f32; gates.len()], vec![0f32; s[0].len()]);
            seq.backward(s[0], s[1], gates, s[2], c, s[3], &mut dgx, &mut dw);
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
