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

mod attention;
mod checkpoint;
mod config;
mod control;
#[cfg(feature = "cuda")]
mod cuda;
mod cuda_switch;
mod data;
mod elmo;
mod embedding;
mod error;
mod fused_attention;
mod fused_attention_cuda;
mod fused_layer_norm;
#[cfg(feature = "cuda")]
mod fused_layer_norm_cuda;
mod fused_linear;
#[cfg(feature = "cuda")]
mod fused_linear_cuda;
mod fused_lstm_seq;
#[cfg(feature = "cuda")]
mod fused_lstm_seq_cuda;
mod fused_softmax;
#[cfg(feature = "cuda")]
mod gelu_cuda;
mod joint_head;
mod layers;
mod linear_nll;
mod loss;
mod lstm;
mod lstm_chains;
#[cfg(any(test, feature = "test-support"))]
mod markov;
mod metrics;
mod model;
pub mod nn;
mod norm;
mod optim;
#[cfg(feature = "cuda")]
mod optim_cuda;
mod params;
mod schedule;
mod softmax_nll;
#[cfg(feature = "cuda")]
mod softmax_nll_cuda;
pub mod style;
#[cfg(test)]
mod test_util;
mod train;
mod train_config;
mod transformer;
#[cfg(any(feature = "cuda", test))]
mod update_table;

pub use checkpoint::{latest as latest_checkpoint, load_model, CHECKPOINT_DIR, WEIGHTS_FILE};
pub use control::{Control, Progress, StopToken};
pub use config::{ModelConfig, Preset, MODEL_CONFIG_LAYOUT};
pub use cuda_switch::{
    cuda_kernel_enabled, cuda_kernels, cuda_kernels_enabled, set_cuda_kernels, CudaKernel,
    CudaKernels, CUDA_KERNELS_ENV,
};
pub use data::{unigram_entropy, BatchSource, CorpusSource, VecSource};
pub use error::{Result, TowersError};
pub use loss::NllPass;
#[cfg(any(test, feature = "test-support"))]
pub use markov::{MarkovSource, SYN_MASK, SYN_PAD};
pub use metrics::{newest_update, LoggedUpdate, METRICS_FILE};
pub use model::{DeviceBatch, TwoTowerLm};
pub use optim::{clip_factor, clip_grad_norm, grad_norm, AdamW, AdamWConfig};
pub use params::{Init, Param, ParamStore};
pub use schedule::{LinearSchedule, Schedule};
pub use style::{
    register, registered, Bert, Elmo, ElmoConfig, ElmoMode, EmbeddingLayout, Gpt, Style,
    StyleConfig, Tower, TowerConfig, TowerStyle,
};
pub use transformer::{TransformerConfig, TransformerTower};
pub use train::{evaluate_loss, rank_shard, Trainable, Trainer};
pub use train_config::{Budget, EarlyStop, StepStats, TrainConfig, TrainState, TrainSummary};
