//! The differentiable building blocks that other crates (the retrained heads) build on: a `Linear`
//! with a fused CPU path, GELU, LayerNorm and log-softmax with backward passes, an LSTM layer's
//! recurrence (fused on the CPU and CUDA; a layer's chains at once), multi-head attention from a
//! fused QKV projection (fused on the CPU and CUDA) with the models' additive mask, and the losses
//! and per-position scores over labelled positions.

pub use crate::layers::attention::{attend, attention_bias};
pub use crate::layers::layers::{gelu, Linear};
pub use crate::layers::loss::{labelled_positions, linear_cross_entropy, score_log_probs};
pub use crate::layers::lstm::chain_recurrence as lstm_chain_recurrence;
pub use crate::layers::lstm::recurrence as lstm_recurrence;
pub use crate::layers::norm::{layer_norm, log_softmax_last, LayerNorm};
