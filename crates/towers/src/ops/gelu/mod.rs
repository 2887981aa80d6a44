//! GELU (exact erf form): on the CPU `kernels::ops::GeluErf`; on CUDA one kernel each way
//! (`gelu.cu`), its host harness beside it.

/// The CUDA side (`gelu.cu`).
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
