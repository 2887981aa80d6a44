//! Training: the loop shared by phase 1 and the heads (`train.rs`, its settings and state in
//! `train_config.rs`), AdamW with saved state and clipping (`optim.rs`), schedules, atomic
//! checkpoints that resume bit-exactly, JSON-lines metrics, and the batch sources (`data.rs`;
//! the synthetic Markov chain of the tests in `markov.rs`).

pub(crate) mod checkpoint;
pub(crate) mod data;
#[cfg(any(test, feature = "test-support"))]
pub(crate) mod markov;
pub(crate) mod metrics;
pub(crate) mod optim;
pub(crate) mod schedule;
pub(crate) mod train;
pub(crate) mod train_config;
