//! The fused ops under the models, one folder each with its CPU path (`mod.rs`), its CUDA path
//! (`cuda.rs`), its kernel source (`*.cu`) and its host harness (`harness*.cpp`, compiled with
//! `host_shim.h` by `tests/host_cuda.rs` and run on every machine); the PTX loading they share
//! (`cuda.rs`, under the `cuda` feature) and the switches between our kernels and candle's
//! composed graph (`switch.rs`).

pub(crate) mod adamw;
pub(crate) mod attention;
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
pub(crate) mod gelu;
pub(crate) mod layer_norm;
pub(crate) mod linear;
pub(crate) mod lstm_seq;
pub(crate) mod nll;
pub(crate) mod softmax;
pub(crate) mod switch;
