//! AdamW's update on CUDA: one kernel per parameter (`adamw.cu`) and the one-pass clipping and
//! update over all parameters (`adamw_multi.cu`, with the table it reads its parameters from);
//! the CPU update is `training::optim`. Host harnesses beside the kernels.

/// The CUDA side (`adamw.cu`, `adamw_multi.cu`).
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
#[cfg(any(feature = "cuda", test))]
pub(crate) mod update_table;
