//! The models: the K-tower language model (`model.rs`: shared embedding, the towers of a style,
//! the joint head) and the layers it and the styles' towers are built from (attention,
//! transformer blocks, LSTM layers, ELMo towers, Linear, LayerNorm, losses, named parameters).

pub(crate) mod attention;
pub(crate) mod elmo;
pub(crate) mod embedding;
pub(crate) mod joint_head;
pub(crate) mod layers;
pub(crate) mod loss;
pub(crate) mod lstm;
pub(crate) mod model;
pub(crate) mod norm;
pub(crate) mod params;
pub(crate) mod transformer;
