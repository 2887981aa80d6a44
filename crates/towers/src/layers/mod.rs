//! The differentiable building blocks of towers and heads: Linear and GELU (`layers.rs`),
//! LayerNorm and softmax (`norm.rs`), multi-head attention (`attention.rs`), the LSTM layer
//! (`lstm.rs`), the losses and scores over labelled positions (`loss.rs`), and named parameters
//! with seeded initialisation (`params.rs`). `towers::nn` exposes them to other crates.

pub(crate) mod attention;
#[allow(clippy::module_inception)]
pub(crate) mod layers;
pub(crate) mod loss;
pub(crate) mod lstm;
pub(crate) mod norm;
pub(crate) mod params;
