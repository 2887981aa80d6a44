//! `probe`: structural and part-of-speech probes of per-word hidden states, layer by layer.
//!
//! - Structural probes (Hewitt & Manning 2019) on candle: the distance probe
//!   (‖B(h_i − h_j)‖² against the tree distance, L1 normalised per sentence by the squared
//!   length; or the two-tower paper's released variant, Euclidean distance with MSE) and the
//!   depth probe (‖B h_i‖² against the tree depth). [`ProbeParams`] → [`ProbeParams::fit`] →
//!   [`FittedProbe::predict`] / [`FittedProbe::evaluate`]; [`select`] chooses settings on dev.
//! - A linear UPOS probe (softmax regression on a word's vector).
//! - Metrics with bootstrap intervals over sentences ([`metrics`]): UUAS, DSpr., root
//!   accuracy, NSpr., UPOS accuracy, and the right-branching baseline's UUAS.
//! - States: [`LayerStates`] (per sentence, per layer, per word), filled by a
//!   [`StateSource`]: a safetensors file of exported states ([`StatesFile`]) or a BERT-family
//!   encoder of the LMD zoo ([`EncoderLayers`]), words pooled from their pieces ([`align`]).
//! - [`layer_curve`]: every probe at every layer, as a table and a figure.
//!
//! The library never prints: long loops report to a [`report::Progress`].

#![deny(missing_docs)]

pub mod align;
pub mod curve;
pub mod encoder;
pub mod error;
pub mod fit;
pub mod loss;
pub mod metrics;
pub mod mst;
pub mod params;
pub mod source;
pub mod spearman;
pub mod states;
pub mod tree;

pub use align::{align_words, pool_words, PiecePooling, WordAlignment};
pub use curve::{layer_curve, CurveSettings, LayerCurve, LayerRow, Split};
pub use encoder::EncoderLayers;
pub use error::{ProbeError, Result};
pub use fit::{select, EpochLoss, FittedProbe, Prediction, ProbeSet, Scores, Selection};
pub use metrics::{
    right_branching_uuas, score_depths, score_distances, score_tags, Bootstrap, DepthScores,
    DistanceScores, Estimate, UposScores, SPEARMAN_LENGTHS,
};
pub use mst::minimum_spanning_tree;
pub use params::{DistanceLoss, ProbeParams, ProbeTask};
pub use source::{layer_name, write_states, StateSource, StatesFile};
pub use spearman::{pearson, ranks, spearman};
pub use states::LayerStates;
pub use tree::{gold_trees, GoldTree};
