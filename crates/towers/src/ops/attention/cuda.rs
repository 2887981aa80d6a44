//! Fused multi-head self-attention on CUDA (`attention.cu`), the counterpart of the CPU's
//! [`crate::ops::attention::FusedAttention`] with the same interface: qkv [B, T, 3H] and the
//! model's additive bias [B, 1, T, T] (f32) to the merged heads [B, T, H], f32 or bf16 in and
//! out with f32 inside. One block per (sequence, head) reads its head strided from qkv and
//! writes it merged; the forward pass keeps the log-sum-exp of every row (f32 [B, nh, T]) and
//! the backward pass recomputes the probabilities from it, writing dq, dk and dv into one
//! dqkv [B, T, 3H], each entry summed by one thread (no atomics: the same numbers every run).
//! On CUDA the composed graph ([`crate::layers::attention::attend_composed`]) spends split copies, a
//! scale, casts to f32 and back, the mask, our softmax and a merge copy forward, and its
//! backward passes [B, nh, T, T] tensors in f32 through as many kernels; this spends one kernel
//! each way.
//!
//! The kernels take T ≤ 128 and any head width whose block fits the 48 KiB of shared memory
//! every CUDA GPU gives without opting in (at T 128: up to 36 in f32, 69 in bf16);
//! [`crate::layers::attention::attend`] runs the composed graph for any other call. The mask is the
//! bias the model already builds (`attention_bias`: causal and padding as −1e9, a query keeps
//! itself), read once per block and pass; a key mask would save reading it but would change
//! every tower's call.

use crate::{Result, TowersError};

/// The longest sequence the kernels take (each lane holds 128 / 32 scores).
#[cfg(any(test, feature = "cuda"))]
pub(crate) const MAX_T: usize = 128;

/// Warps per block; the shared memory of a block grows with them ([`AttnDims::shared_bytes`]).
#[cfg(any(test, feature = "cuda"))]
const WARPS: usize = 8;

/// The shared memory a block may take without opting in to more: 48 KiB on every CUDA GPU.
#[cfg(any(test, feature = "cuda"))]
pub(crate) const SHARED_LIMIT: usize = 48 * 1024;

/// The sizes of one attention call, checked against each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AttnDims {
    /// Sequences.
    pub(crate) b: usize,
    /// Tokens per sequence.
    pub(crate) t: usize,
    /// Heads.
    pub(crate) nh: usize,
    /// Width of a head.
    pub(crate) hd: usize,
}

impl AttnDims {
    /// The sizes of qkv `[B, T, 3H]` and bias `[B, 1, T, T]` under `n_heads` heads, or a typed
    /// error: [`TowersError::Config`] when the heads do not divide H, [`TowersError::Batch`]
    /// when the tensors' shapes do not fit each other.
    pub(crate) fn new(qkv: &[usize], bias: &[usize], n_heads: usize) -> Result<Self> {
        let &[b, t, h3] = qkv else {
            return Err(TowersError::Batch(format!(
                "attention: qkv of shape {qkv:?}, not [B, T, 3H]"
            )));
        };
        if !h3.is_multiple_of(3) {
            return Err(TowersError::Batch(format!(
                "attention: qkv's last dimension {h3} is not 3H"
            )));
        }
        let h = h3 / 3;
        if n_heads == 0 || !h.is_multiple_of(n_heads) {
            return Err(TowersError::Config(format!(
                "attention: {n_heads} heads do not divide the width {h}"
            )));
        }
        if bias != [b, 1, t, t] {
            return Err(TowersError::Batch(format!(
                "attention: bias of shape {bias:?} for qkv {qkv:?}, not [{b}, 1, {t}, {t}]"
            )));
        }
        Ok(Self {
            b,
            t,
            nh: n_heads,
            hd: h / n_heads,
        })
    }

    /// The model width H.
    #[cfg(any(test, feature = "cuda"))]
    fn h(&self) -> usize {
        self.nh * self.hd
    }

    /// The row pitch (elements of `elt` bytes) of a matrix the kernels stage transposed: at
    /// least T, an odd number of 32-bit words (`attn_pitch` in `attention.cu`).
    #[cfg(any(test, feature = "cuda"))]
    fn pitch(&self, elt: usize) -> usize {
        let per_word = 4 / elt;
        (self.t.div_ceil(per_word) | 1) * per_word
    }

    /// The shared memory (bytes) of a block of the forward and of the backward kernel, with
    /// their staged matrices in elements of `elt` bytes (4 f32, 2 bf16): per warp an f32 row
    /// of the head width and one over the keys (backward: two of each, and D [T] for the
    /// block); K transposed and V (backward: two matrices transposed) in the element type.
    #[cfg(any(test, feature = "cuda"))]
    pub(crate) fn shared_bytes(&self, elt: usize) -> (usize, usize) {
        let (t, hd, pitch) = (self.t, self.hd, self.pitch(elt));
        let forward = 4 * WARPS * (hd + t) + elt * (hd * pitch + t * hd);
        let backward = 4 * (t + WARPS * (2 * hd + 2 * t)) + elt * 2 * hd * pitch;
        (forward, backward)
    }

    /// Whether the kernels take this call with elements of `elt` bytes: a non-empty call with
    /// T ≤ [`MAX_T`] whose blocks fit [`SHARED_LIMIT`], its grid and sizes within i32.
    #[cfg(any(test, feature = "cuda"))]
    pub(crate) fn fits(&self, elt: usize) -> bool {
        let (forward, backward) = self.shared_bytes(elt);
        let sized = [self.b * self.nh, self.b * self.t * 3 * self.h()]
            .iter()
            .all(|&n| i32::try_from(n).is_ok());
        self.b > 0
            && self.t > 0
            && self.hd > 0
            && self.t <= MAX_T
            && forward.max(backward) <= SHARED_LIMIT
            && sized
    }
}

#[cfg(feature = "cuda")]
pub(crate) use device::attend;

#[cfg(feature = "cuda")]
mod device {
    use std::sync::Mutex;

    use candle_core::cuda_backend::cudarc::driver::{
        CudaSlice, CudaView, LaunchConfig, PushKernelArg,
    };
    use candle_core::cuda_backend::WrapErr;
    use candle_core::{
        CpuStorage, CudaDevice, CudaStorage, CustomOp2, DType, Layout, Shape, Tensor,
    };

    use super::{AttnDims, WARPS};
    use crate::ops::cuda::{
        by_element, kernel_name, ptx, tensor, view, with_cuda, with_cuda_f32, written_whole,
        Element,
    };

    /// The kernels' PTX, from `build.rs`.
    const PTX: &str = ptx!("attention");

    /// The module name the kernels are loaded under, once per device.
    const MODULE: &str = "lmsplit_attention";

    /// The op's name, in its errors.
    const OP: &str = "fused-attention-cuda";

    /// The launch of one block per (sequence, head), [`WARPS`] warps each, with `bytes` of
    /// shared memory.
    fn blocks(d: AttnDims, bytes: usize) -> LaunchConfig {
        LaunchConfig {
            grid_dim: ((d.b * d.nh) as u32, 1, 1),
            block_dim: ((WARPS * 32) as u32, 1, 1),
            shared_mem_bytes: bytes as u32,
        }
    }

    /// The sizes as the kernels take them (B, nh, T, hd, and the scores' scale 1/√hd as the
    /// CPU op forms it); [`AttnDims::fits`] has bounded them.
    fn args(d: AttnDims) -> (i32, i32, i32, i32, f32) {
        let scale = 1.0 / (d.hd as f32).sqrt();
        (d.b as i32, d.nh as i32, d.t as i32, d.hd as i32, scale)
    }

    /// The op: qkv [B, T, 3H] (contiguous f32 or bf16) and bias [B, 1, T, T] (contiguous f32)
    /// to the merged heads [B, T, H] of qkv's dtype, only on CUDA, for calls that
    /// [`AttnDims::fits`]. The bias gets no gradient.
    pub(crate) struct CudaAttention {
        dims: AttnDims,
        /// The forward pass's log-sum-exp [B, nh, T] (f32), for the backward pass.
        lse: Mutex<Option<Tensor>>,
    }

    /// The forward pass on views of element type `T`: O [B, T, H] and the log-sum-exp.
    fn forward<T: Element>(
        dev: &CudaDevice,
        d: AttnDims,
        qkv: &CudaView<T>,
        bias: &CudaView<f32>,
    ) -> candle_core::Result<(CudaSlice<T>, CudaSlice<f32>)> {
        let (bi, nhi, ti, hdi, scale) = args(d);
        // SAFETY: block (b, h) writes O's columns of head h and the log-sum-exp of every row
        // of sequence b, for every b and h.
        let (mut out, mut lse) = unsafe {
            (
                written_whole::<T>(dev, d.b * d.t * d.h())?,
                written_whole::<f32>(dev, d.b * d.nh * d.t)?,
            )
        };
        let f = dev.get_or_load_custom_func(&kernel_name::<T>("attention_forward"), MODULE, PTX)?;
        let mut launch = f.builder();
        launch
            .arg(qkv)
            .arg(bias)
            .arg(&mut out)
            .arg(&mut lse)
            .arg(&bi)
            .arg(&nhi)
            .arg(&ti)
            .arg(&hdi)
            .arg(&scale);
        let cfg = blocks(d, d.shared_bytes(std::mem::size_of::<T>()).0);
        // SAFETY: the arguments match the kernel's signature in attention.cu; block (b, h)
        // reads sequence b's rows of qkv and bias and its shared memory within the bytes
        // given, and writes only its own head's entries.
        unsafe { launch.launch(cfg) }.w()?;
        Ok((out, lse))
    }

    /// The backward pass on the op's tensors (qkv and dO of element type `T`, the bias and the
    /// log-sum-exp f32, contiguous on CUDA): dqkv [B, T, 3H] of type `T`.
    fn backward<T: Element>(
        d: AttnDims,
        qkv: &Tensor,
        bias: &Tensor,
        lse: &Tensor,
        dout: &Tensor,
    ) -> candle_core::Result<Tensor> {
        let (bi, nhi, ti, hdi, scale) = args(d);
        with_cuda::<T, _>(&[qkv, dout], OP, |dev, v| {
            // SAFETY: block (b, h) writes dq, dk and dv of head h at every row of sequence b,
            // for every b and h: all of dqkv.
            let mut dqkv = unsafe { written_whole::<T>(dev, d.b * d.t * 3 * d.h())? };
            let name = kernel_name::<T>("attention_backward");
            let f = dev.get_or_load_custom_func(&name, MODULE, PTX)?;
            with_cuda_f32(&[bias, lse], OP, |_, s| {
                let mut launch = f.builder();
                launch
                    .arg(&v[0])
                    .arg(&s[0])
                    .arg(&s[1])
                    .arg(&v[1])
                    .arg(&mut dqkv)
                    .arg(&bi)
                    .arg(&nhi)
                    .arg(&ti)
                    .arg(&hdi)
                    .arg(&scale);
                let cfg = blocks(d, d.shared_bytes(std::mem::size_of::<T>()).1);
                // SAFETY: as in `forward`.
                unsafe { launch.launch(cfg) }.w()
            })?;
            Ok(tensor(dqkv, dev, qkv.shape().clone()))
        })
    }

    impl CudaAttention {
        /// The op for calls of `dims`.
        fn new(dims: AttnDims) -> Self {
            Self {
                dims,
                lse: Mutex::new(None),
            }
        }

        /// The op's sizes, or candle's error when the tensors are not of them.
        fn check(&self, qkv: &Shape, bias: &Shape) -> candle_core::Result<AttnDims> {
            match AttnDims::new(qkv.dims(), bias.dims(), self.dims.nh) {
                Ok(d) if d == self.dims => Ok(d),
                Ok(d) => candle_core::bail!("{OP}: made for {:?}, called on {d:?}", self.dims),
                Err(e) => candle_core::bail!("{OP}: {e}"),
            }
        }
    }

    impl CustomOp2 for CudaAttention {
        fn name(&self) -> &'static str {
            OP
        }

        fn cpu_fwd(
            &self,
            _: &CpuStorage,
            _: &Layout,
            _: &CpuStorage,
            _: &Layout,
        ) -> candle_core::Result<(CpuStorage, Shape)> {
            candle_core::bail!("{OP} runs on CUDA only (the CPU has FusedAttention)")
        }

        fn cuda_fwd(
            &self,
            s1: &CudaStorage,
            l1: &Layout,
            s2: &CudaStorage,
            l2: &Layout,
        ) -> candle_core::Result<(CudaStorage, Shape)> {
            let d = self.check(l1.shape(), l2.shape())?;
            let dev = &s1.device;
            let dtype = candle_core::backend::BackendStorage::dtype(s1);
            let (out, lse) = by_element!(dtype, T => {
                let (out, lse) = forward::<T>(dev, d, &view::<T>(s1, l1, OP)?, &view(s2, l2, OP)?)?;
                (CudaStorage::wrap_cuda_slice(out, dev.clone()), lse)
            });
            let lse = tensor(lse, dev, Shape::from((d.b, d.nh, d.t)));
            *self.lse.lock().unwrap_or_else(|p| p.into_inner()) = Some(lse);
            Ok((out, Shape::from((d.b, d.t, d.h()))))
        }

        fn bwd(
            &self,
            qkv: &Tensor,
            bias: &Tensor,
            _res: &Tensor,
            grad_res: &Tensor,
        ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
            let d = self.check(qkv.shape(), bias.shape())?;
            // Kept, not taken: a second backward pass over the same graph reads it again.
            let lse = self.lse.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let Some(lse) = lse else {
                candle_core::bail!("{OP}: backward without a forward pass")
            };
            let dout = grad_res.to_dtype(qkv.dtype())?.contiguous()?;
            let dqkv = by_element!(qkv.dtype(), T => backward::<T>(d, qkv, bias, &lse, &dout)?);
            Ok((Some(dqkv), None))
        }
    }

    /// Attention through the op (the caller has checked [`AttnDims::fits`] for qkv's dtype):
    /// qkv made contiguous, the bias contiguous f32.
    pub(crate) fn attend(qkv: &Tensor, bias: &Tensor, dims: AttnDims) -> crate::Result<Tensor> {
        let bias = bias.to_dtype(DType::F32)?.contiguous()?;
        Ok(qkv
            .contiguous()?
            .apply_op2(&bias, CudaAttention::new(dims))?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_shapes_are_typed_errors() {
        let ok = AttnDims::new(&[2, 5, 24], &[2, 1, 5, 5], 2).unwrap();
        assert_eq!((ok.b, ok.t, ok.nh, ok.hd), (2, 5, 2, 4));
        // The heads do not divide H: a configuration error.
        for heads in [0, 3] {
            let e = AttnDims::new(&[2, 5, 24], &[2, 1, 5, 5], heads).unwrap_err();
            assert!(matches!(e, TowersError::Config(_)), "{e}");
        }
        // qkv not [B, T, 3H], or a bias that is not [B, 1, T, T] for it: a batch error.
        for (qkv, bias) in [
            (&[2, 5, 25][..], &[2, 1, 5, 5][..]),
            (&[2, 5][..], &[2, 1, 5, 5][..]),
            (&[2, 5, 24][..], &[2, 5, 5][..]),
            (&[2, 5, 24][..], &[2, 1, 5, 4][..]),
            (&[2, 5, 24][..], &[1, 1, 5, 5][..]),
        ] {
            let e = AttnDims::new(qkv, bias, 2).unwrap_err();
            assert!(matches!(e, TowersError::Batch(_)), "{qkv:?} {bias:?}: {e}");
        }
    }

    /// The shared-memory sizes are the ones the host harness allocates for the kernels
    /// (`src/ops/attention/harness.cpp` prints the same four numbers), and the model's heads
    /// (width 32 at T 128) fit in f32 and bf16; what does not fit goes to the composed graph.
    #[test]
    fn the_blocks_shared_memory_decides_which_calls_the_kernels_take() {
        let base = AttnDims {
            b: 64,
            t: 128,
            nh: 12,
            hd: 32,
        };
        assert_eq!(base.shared_bytes(4), (38016, 43776));
        assert_eq!(base.shared_bytes(2), (21632, 27392));
        assert!(base.fits(4) && base.fits(2));
        let wide = AttnDims { hd: 64, ..base };
        assert!(wide.fits(2) && !wide.fits(4));
        assert!(AttnDims { hd: 36, ..base }.fits(4));
        assert!(!AttnDims { hd: 37, ..base }.fits(4));
        assert!(AttnDims { hd: 69, ..base }.fits(2));
        assert!(!AttnDims { hd: 70, ..base }.fits(2));
        assert!(!AttnDims { t: 129, ..base }.fits(2));
        assert!(AttnDims { t: 1, ..base }.fits(4));
        assert!(!AttnDims { b: 0, ..base }.fits(4));
        // The pitch: at least T, an odd number of words.
        for t in [1, 2, 37, 64, 127, 128] {
            let d = AttnDims { t, ..base };
            let (p4, p2) = (d.pitch(4), d.pitch(2));
            assert!(p4 >= t && p4 % 2 == 1, "{t}: {p4}");
            assert!(p2 >= t && p2 % 2 == 0 && (p2 / 2) % 2 == 1, "{t}: {p2}");
        }
    }

    /// The PTX that `build.rs` compiled from `attention.cu` holds the four kernels the op
    /// loads by name.
    #[cfg(feature = "cuda")]
    #[test]
    fn the_ptx_holds_every_kernel_the_op_loads() {
        let ptx = crate::ops::cuda::ptx!("attention");
        for k in [
            "attention_forward",
            "attention_forward_bf16",
            "attention_backward",
            "attention_backward_bf16",
        ] {
            assert!(ptx.contains(&format!(".entry {k}(")), "{k} missing");
        }
    }
}
