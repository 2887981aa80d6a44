//! What every tower is, whatever its style: a forward pass over its input under its style's mask
//! ([`Tower`]), built under the model's shared settings ([`SharedConfig`]).

use candle_core::Tensor;

use crate::Result;

/// One encoder of a K-tower model, built by its style (`TowerStyle::tower`).
pub trait Tower: std::fmt::Debug + Send + Sync + 'static {
    /// The tower output h_k [B, T, D] of its input `x` [B, T, H] under the style's `mask`
    /// (see `TowerStyle::device_mask`).
    fn forward(&self, x: &Tensor, mask: &Tensor) -> Result<Tensor>;

    /// The (forward, backward) halves of a bidirectional tower, for leakage checks; `None` for
    /// towers without directions.
    fn directions(&self, _x: &Tensor, _mask: &Tensor) -> Option<Result<(Tensor, Tensor)>> {
        None
    }
}

/// `Tower` for boxed towers, so a style may keep its towers as trait objects.
impl Tower for Box<dyn Tower> {
    fn forward(&self, x: &Tensor, mask: &Tensor) -> Result<Tensor> {
        (**self).forward(x, mask)
    }

    fn directions(&self, x: &Tensor, mask: &Tensor) -> Option<Result<(Tensor, Tensor)>> {
        (**self).directions(x, mask)
    }
}

/// The settings of a K-tower model that every style's towers are built under (the shared part
/// of `ModelConfig`, [`crate::ModelConfig::shared`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SharedConfig {
    /// Number of towers K.
    pub n_towers: usize,
    /// Vocabulary size V.
    pub vocab_size: usize,
    /// Longest sequence.
    pub max_positions: usize,
    /// LayerNorm epsilon.
    pub layer_norm_eps: f64,
    /// Standard deviation of the normal weight initialisation.
    pub init_std: f64,
}
