//! `towers`: K-tower language models (He & Toyoizumi's two-tower LM) on candle.
//!
//! K identical encoders of one [`Style`] (ELMo LSTMs, causal GPT, masked-LM BERT) read one
//! shared embedding; a joint head over concat(h_1..h_K), tied to the embedding, trains them
//! together (phase 1). The training loop ([`Trainer`]) has its own AdamW with saved state,
//! clipping, warmup + linear decay, gradient accumulation, token / step / wall-clock budgets,
//! validation, JSON-lines metrics and atomic checkpoints that resume bit-exactly on CPU.
//!
//! LayerNorm and softmax are written from basic ops ([`norm`]) because candle's fused versions
//! have no backward pass.

#![deny(missing_docs)]

pub mod attention;
pub mod checkpoint;
pub mod config;
pub mod data;
pub mod elmo;
pub mod embedding;
pub mod error;
mod fused_attention;
mod fused_layer_norm;
mod fused_linear;
mod fused_lstm_seq;
pub mod joint_head;
pub mod layers;
mod linear_nll;
pub mod loss;
pub mod lstm;
#[cfg(any(test, feature = "test-support"))]
mod markov;
pub mod metrics;
pub mod model;
pub mod norm;
pub mod optim;
pub mod params;
pub mod schedule;
#[cfg(test)]
mod test_util;
pub mod train;
pub mod transformer;

pub use config::{ElmoMode, ModelConfig, Style};
pub use data::{BatchSource, CorpusSource, VecSource};
pub use error::{Result, TowersError};
pub use loss::NllPass;
#[cfg(any(test, feature = "test-support"))]
pub use markov::MarkovSource;
pub use model::{DeviceBatch, TwoTowerLm};
pub use optim::{AdamW, AdamWConfig};
pub use params::{Init, Param, ParamStore};
pub use schedule::{LinearSchedule, Schedule};
pub use train::{Budget, EarlyStop, TrainConfig, TrainSummary, Trainable, Trainer};
