//! The switch between our CUDA kernels (the LSTM recurrence, LayerNorm, softmax, GELU, AdamW,
//! the output layer's loss) and candle's composed graph on CUDA: on by default;
//! `LMSPLIT_CUDA_KERNELS=off` turns them off for the process, so that a session whose
//! `gpu_check` fails one of them still trains (on the composed graph, as before 27 Nov) and can
//! tell the kernel from the rest.

use std::sync::OnceLock;

use candle_core::{DType, Tensor};

/// The environment variable of the switch (`off` turns the kernels off; anything else, or
/// unset, leaves them on).
pub const CUDA_KERNELS_ENV: &str = "LMSPLIT_CUDA_KERNELS";

/// The switch's value from the variable's.
fn parse(value: Option<&str>) -> bool {
    value != Some("off")
}

/// Whether our CUDA kernels run where they apply (read once per process).
pub fn cuda_kernels_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| parse(std::env::var(CUDA_KERNELS_ENV).ok().as_deref()))
}

/// Whether `x` is on CUDA in a build with our kernels and they are switched on.
pub(crate) fn on_cuda_kernels(x: &Tensor) -> bool {
    cfg!(feature = "cuda") && x.device().is_cuda() && cuda_kernels_enabled()
}

/// [`on_cuda_kernels`], and `x` of an element type the row and elementwise kernels read and
/// write themselves (f32, bf16: `bf16.cuh`).
pub(crate) fn on_cuda_kernels_typed(x: &Tensor) -> bool {
    on_cuda_kernels(x) && matches!(x.dtype(), DType::F32 | DType::BF16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_off_turns_the_kernels_off() {
        assert!(parse(None));
        assert!(parse(Some("on")));
        assert!(parse(Some("")));
        assert!(!parse(Some("off")));
        // A CPU tensor never takes the CUDA kernels.
        let x = Tensor::zeros(3, candle_core::DType::F32, &candle_core::Device::Cpu).unwrap();
        assert!(!on_cuda_kernels(&x));
    }
}
