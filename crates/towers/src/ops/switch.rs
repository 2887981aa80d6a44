//! The switches between our CUDA kernels (the LSTM recurrence, LayerNorm, softmax, GELU, AdamW,
//! the output layer's loss, the one-pass clipping and AdamW update, attention, the transformer
//! blocks' Linear) and candle's composed graph on CUDA: all on by default. The caller sets a
//! [`CudaKernels`] value for the process ([`set_cuda_kernels`]; the examples parse
//! `LMSPLIT_CUDA_KERNELS=off` or `off:nll,gelu` into one), so that a session whose `gpu_check`
//! fails one kernel still trains with the others (the LSTM op above all: without it an ELMo step
//! runs candle's per-step graph, slower on a GPU than on two CPU cores) and can tell the kernel
//! from the rest. The setting is process-wide, as `torch.backends` flags are, because the ops
//! that consult it sit deep inside every layer; the library reads no environment variable.

use std::sync::atomic::{AtomicU32, Ordering};

use candle_core::{DType, Tensor};

use crate::{Result, TowersError};

/// The environment variable the examples read into a [`CudaKernels`]: unset, empty or `on`
/// leaves every kernel on, `off` turns every one off, `off:NAME,NAME` the named ones
/// ([`CudaKernel::name`]).
pub const CUDA_KERNELS_ENV: &str = "LMSPLIT_CUDA_KERNELS";

/// One of our CUDA kernels (with its backward pass), each switchable on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CudaKernel {
    /// The LSTM layer's whole-sequence recurrence (`fused_lstm_seq.cu`).
    Lstm,
    /// LayerNorm (`layer_norm.cu`).
    LayerNorm,
    /// Softmax over the last dimension, attention's scores (`softmax.cu`).
    Softmax,
    /// Exact-form GELU (`gelu.cu`).
    Gelu,
    /// The AdamW update (`adamw.cu`).
    AdamW,
    /// The output layer's loss (`softmax_nll.cu`).
    Nll,
    /// ELMo's recurrence in bf16 (f32 gates and cell state), a tower's two directions in one
    /// batched GEMM per step (`fused_lstm_seq.cu`'s `lstm_chains_*`); off, a bf16 ELMo runs
    /// [`CudaKernel::Lstm`] in f32.
    LstmBf16,
    /// Gradient-norm clipping and AdamW over all parameters in three launches, the norm read
    /// after the update (`adamw_multi.cu`).
    Update,
    /// Multi-head self-attention forward and backward, one block per (sequence, head)
    /// (`attention.cu`); off, attention runs candle's composed graph.
    Attention,
    /// Every Linear layer with a bias (matmul, bias and the bias gradient) as one op
    /// with its own backward pass writing the f32 weight gradient (`linear.cu` and cuBLAS);
    /// off, they run candle's composed graph.
    Linear,
}

impl CudaKernel {
    /// Every kernel.
    pub const ALL: [CudaKernel; 10] = [
        Self::Lstm,
        Self::LayerNorm,
        Self::Softmax,
        Self::Gelu,
        Self::AdamW,
        Self::Nll,
        Self::LstmBf16,
        Self::Update,
        Self::Attention,
        Self::Linear,
    ];

    /// The kernel's name in [`CUDA_KERNELS_ENV`] and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Lstm => "lstm",
            Self::LayerNorm => "layer_norm",
            Self::Softmax => "softmax",
            Self::Gelu => "gelu",
            Self::AdamW => "adamw",
            Self::Nll => "nll",
            Self::LstmBf16 => "lstm_bf16",
            Self::Update => "update",
            Self::Attention => "attention",
            Self::Linear => "linear",
        }
    }
}

/// The kernels a value of the variable turns off, or why the value is not one.
fn parse(value: Option<&str>) -> std::result::Result<Vec<CudaKernel>, String> {
    let names = || {
        let all: Vec<&str> = CudaKernel::ALL.iter().map(|k| k.name()).collect();
        all.join(", ")
    };
    match value.map(str::trim) {
        None | Some("") | Some("on") => Ok(Vec::new()),
        Some("off") => Ok(CudaKernel::ALL.to_vec()),
        Some(v) => match v.strip_prefix("off:") {
            Some(list) => list
                .split(',')
                .map(|n| {
                    let n = n.trim();
                    CudaKernel::ALL
                        .into_iter()
                        .find(|k| k.name() == n)
                        .ok_or_else(|| format!("no CUDA kernel {n:?} (the kernels: {})", names()))
                })
                .collect(),
            None => Err(format!(
                "{v:?} is not on, off or off:NAME,... (the kernels: {})",
                names()
            )),
        },
    }
}

/// Which of our CUDA kernels run: every one but those switched off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CudaKernels {
    /// Bit `i` set: [`CudaKernel::ALL`]`[i]` is off.
    off: u32,
}

impl CudaKernels {
    /// Every kernel on (the default).
    pub fn all_on() -> Self {
        Self::default()
    }

    /// Every kernel off: candle's composed graph everywhere.
    pub fn all_off() -> Self {
        CudaKernel::ALL
            .into_iter()
            .fold(Self::default(), Self::without)
    }

    /// The same switches with `kernel` off.
    pub fn without(self, kernel: CudaKernel) -> Self {
        Self {
            off: self.off | kernel.bit(),
        }
    }

    /// Whether `kernel` runs where it applies.
    pub fn enabled(self, kernel: CudaKernel) -> bool {
        self.off & kernel.bit() == 0
    }

    /// The kernels switched off, in [`CudaKernel::ALL`]'s order.
    pub fn off(self) -> Vec<CudaKernel> {
        CudaKernel::ALL
            .into_iter()
            .filter(|&k| !self.enabled(k))
            .collect()
    }

    /// The switches a value of [`CUDA_KERNELS_ENV`] names (`None`: unset, every kernel on);
    /// a value that is not a switch is a [`TowersError::Config`] naming the kernels, never a
    /// silent default.
    pub fn from_env_value(value: Option<&str>) -> Result<Self> {
        let off = parse(value)
            .map_err(|why| TowersError::Config(format!("{CUDA_KERNELS_ENV}: {why}")))?;
        Ok(off.into_iter().fold(Self::default(), Self::without))
    }
}

impl CudaKernel {
    fn bit(self) -> u32 {
        let i = CudaKernel::ALL.iter().position(|&k| k == self).unwrap_or(0);
        1 << i
    }
}

/// The process's switches (bits of the kernels off).
static OFF: AtomicU32 = AtomicU32::new(0);

/// Sets which of our CUDA kernels run in this process from now on (every one by default).
pub fn set_cuda_kernels(kernels: CudaKernels) {
    OFF.store(kernels.off, Ordering::SeqCst);
}

/// The process's switches ([`set_cuda_kernels`]).
pub fn cuda_kernels() -> CudaKernels {
    CudaKernels {
        off: OFF.load(Ordering::Relaxed),
    }
}

/// Whether `kernel` runs where it applies ([`cuda_kernels`]).
pub fn cuda_kernel_enabled(kernel: CudaKernel) -> bool {
    cuda_kernels().enabled(kernel)
}

/// Whether every kernel runs where it applies (no switch off).
pub fn cuda_kernels_enabled() -> bool {
    cuda_kernels() == CudaKernels::all_on()
}

/// Whether `x` is on CUDA in a build with our kernels and `kernel` is switched on.
pub(crate) fn on_cuda_kernel(kernel: CudaKernel, x: &Tensor) -> bool {
    cfg!(feature = "cuda") && x.device().is_cuda() && cuda_kernel_enabled(kernel)
}

/// [`on_cuda_kernel`], and `x` of an element type the row and elementwise kernels read and
/// write themselves (f32, bf16: `bf16.cuh`).
pub(crate) fn on_cuda_kernel_typed(kernel: CudaKernel, x: &Tensor) -> bool {
    on_cuda_kernel(kernel, x) && matches!(x.dtype(), DType::F32 | DType::BF16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_turns_every_kernel_off_and_off_with_names_only_those() {
        for on in [None, Some("on"), Some(""), Some(" on ")] {
            assert_eq!(parse(on), Ok(Vec::new()), "{on:?}");
        }
        assert_eq!(parse(Some("off")), Ok(CudaKernel::ALL.to_vec()));
        assert_eq!(
            parse(Some("off:nll, lstm")),
            Ok(vec![CudaKernel::Nll, CudaKernel::Lstm])
        );
        for k in CudaKernel::ALL {
            assert_eq!(parse(Some(&format!("off:{}", k.name()))), Ok(vec![k]));
        }
        // A mistyped name or value is an error naming the kernels, never a silent default.
        let e = parse(Some("off:nl")).unwrap_err();
        assert!(e.contains("\"nl\"") && e.contains("layer_norm"), "{e}");
        assert!(parse(Some("of")).unwrap_err().contains("off:NAME"));
        assert!(parse(Some("off:")).is_err());
        // The typed value of a variable's value, and its errors.
        let k = CudaKernels::from_env_value(Some("off:nll,lstm")).unwrap();
        assert_eq!(k.off(), [CudaKernel::Lstm, CudaKernel::Nll]);
        assert!(!k.enabled(CudaKernel::Nll) && k.enabled(CudaKernel::Gelu));
        assert_eq!(
            CudaKernels::from_env_value(Some("off")).unwrap(),
            CudaKernels::all_off()
        );
        assert_eq!(
            CudaKernels::from_env_value(None).unwrap(),
            CudaKernels::all_on()
        );
        let e = CudaKernels::from_env_value(Some("off:nl"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(CUDA_KERNELS_ENV) && e.contains("layer_norm"),
            "{e}"
        );
        // A CPU tensor never takes the CUDA kernels.
        let x = Tensor::zeros(3, DType::F32, &candle_core::Device::Cpu).unwrap();
        assert!(CudaKernel::ALL
            .into_iter()
            .all(|k| !on_cuda_kernel(k, &x) && !on_cuda_kernel_typed(k, &x)));
    }
}
