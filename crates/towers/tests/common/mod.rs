//! Shared helpers of the integration tests.
#![allow(dead_code)]

use candle_core::Device;
use towers::BatchSource;
use towers::{ElmoMode, MarkovSource, ModelConfig, Preset, Style, TwoTowerLm};

/// Tiny preset of `style`, K towers, vocabulary 64.
pub fn tiny(style: Style, k: usize) -> ModelConfig {
    let mut c = ModelConfig::preset(&style, Preset::Tiny).unwrap();
    c.n_towers = k;
    c
}

/// Tiny ELMo in the given mode.
pub fn tiny_elmo(mode: ElmoMode) -> ModelConfig {
    let c = tiny(Style::elmo(), 2);
    let tower = c
        .tower
        .patched(&serde_json::json!({ "mode": mode }))
        .unwrap();
    ModelConfig { tower, ..c }
}

/// A model on CPU.
pub fn model(cfg: &ModelConfig, seed: u64) -> TwoTowerLm {
    TwoTowerLm::new(cfg, &Device::Cpu, seed).unwrap()
}

/// A Markov source of the config's style over ids < 24 (a small chain that tiny models learn
/// in a few hundred updates).
pub fn source(cfg: &ModelConfig, batch: usize, t: usize, seed: u64) -> MarkovSource {
    MarkovSource::new(cfg.style(), 24.min(cfg.vocab_size), 2, batch, t, 7, seed).unwrap()
}

/// `n` batches from a source.
pub fn batches(src: &mut MarkovSource, n: usize) -> Vec<corpus::TokenBatch> {
    (0..n).map(|_| src.next_batch().unwrap()).collect()
}
