//! `towers`: K-tower language models (He & Toyoizumi's two-tower LM) on candle.
//!
//! K identical encoders of one [`Style`] (ELMo LSTMs, causal GPT, masked-LM BERT) read one
//! shared embedding; a joint head over concat(h_1..h_K), tied to the embedding, trains them
//! together (phase 1). The training loop ([`Trainer`]) has its own AdamW with saved state,
//! clipping, warmup + linear decay, gradient accumulation, token / step / wall-clock budgets,
//! validation, JSON-lines metrics and atomic checkpoints that resume bit-exactly on CPU.
//!
//! LayerNorm and softmax are written from basic ops (with fused CPU custom ops carrying their own
//! backward passes) because candle's fused versions have no backward pass; [`nn`] exposes these
//! differentiable building blocks to the crates that build heads on frozen towers.

#![deny(missing_docs)]

mod config;
mod control;
mod encoders;
mod error;
mod layers;
mod models;
pub mod nn;
mod ops;
pub mod style;
#[cfg(test)]
mod test_util;
mod training;

pub use config::{ModelConfig, MODEL_CONFIG_LAYOUT};
pub use control::{Control, Progress, StopToken};
pub use encoders::elmo::{ElmoConfig, ElmoMode};
pub use encoders::transformer::{TransformerConfig, TransformerTower};
pub use error::{Result, TowersError};
pub use layers::loss::NllPass;
pub use layers::params::{Init, Param, ParamStore};
pub use models::model::{DeviceBatch, TwoTowerLm};
pub use ops::switch::{
    cuda_kernel_enabled, cuda_kernels, cuda_kernels_enabled, set_cuda_kernels, CudaKernel,
    CudaKernels, CUDA_KERNELS_ENV,
};
pub use style::{
    register, registered, Bert, Elmo, EmbeddingLayout, Gpt, Preset, SharedConfig, Style,
    StyleConfig, Tower, TowerConfig, TowerStyle,
};
pub use training::checkpoint::{
    latest as latest_checkpoint, load_model, CHECKPOINT_DIR, WEIGHTS_FILE,
};
pub use training::data::{unigram_entropy, BatchSource, CorpusSource, VecSource};
#[cfg(any(test, feature = "test-support"))]
pub use training::markov::{MarkovSource, SYN_MASK, SYN_PAD};
pub use training::metrics::{newest_update, LoggedUpdate, METRICS_FILE};
pub use training::optim::{clip_factor, clip_grad_norm, grad_norm, AdamW, AdamWConfig};
pub use training::schedule::{LinearSchedule, Schedule};
pub use training::train::{evaluate_loss, rank_shard, Trainable, Trainer};
pub use training::train_config::{
    Budget, EarlyStop, StepStats, TrainConfig, TrainState, TrainSummary,
};
