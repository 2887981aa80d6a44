//! `heads`: phases 2 and 3 of the two-tower experiment.
//!
//! The towers of a trained [`towers::TwoTowerLm`] are frozen (their outputs are detached, so no
//! gradient is ever computed into them) and one fresh head per tower — Linear(D, D) → GELU →
//! LayerNorm → Linear(D, V) with bias, untied — is trained on identical batches and masks (all
//! heads in one pass: their parameters are disjoint). Every head is then evaluated on the same
//! positions, giving per position the target id and each tower's log p(target)
//! ([`PositionLogProbs`], plain data for `prefscore`). Named sets of these scored on the same
//! positions are stored in one safetensors file ([`ScoresFile`], [`scores_file`]).

#![deny(missing_docs)]

pub mod error;
pub mod eval;
pub mod head;
pub mod retrain;
pub mod scores_file;

pub use error::{HeadsError, Result};
pub use eval::{evaluate, PositionLogProbs};
pub use head::{Head, HeadConfig, HeadInput, TowerHeads, HEADS_FILE};
pub use retrain::{retrain, FrozenTowers, RetrainSummary};
pub use scores_file::{ScoresFile, SCORES_VERSION};
