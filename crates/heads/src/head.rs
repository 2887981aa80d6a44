//! The per-tower output head and the set of K heads.

use std::path::Path;

use candle_core::{Device, Tensor, D};
use corpus::TokenBatch;
use serde::{Deserialize, Serialize};
use towers::nn::labelled_positions;
use towers::nn::{gelu, Linear};
use towers::nn::{layer_norm, LayerNorm};
use towers::{Init, ParamStore, TwoTowerLm};

use crate::{HeadsError, Result};

/// File name of the heads' weights in the folder of [`TowerHeads::save`] (its presence marks
/// a finished head training).
pub const HEADS_FILE: &str = "heads.safetensors";

/// What each head reads from its frozen tower.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HeadInput {
    /// The tower's own output h_k as it is (BERT and ELMo towers end without a LayerNorm, so
    /// the head's effective step size then depends on its tower's scale).
    TowerOutput,
    /// The tower's own output normalised per position (zero mean, unit variance over its D
    /// features, no learned gain): each head sees its own tower only, at a scale that does not
    /// depend on the tower. The default of the experiment layer.
    TowerLayerNorm,
    /// Slice k of the joint head's LayerNorm over concat(h_1..h_K), as the released code does
    /// (the normalisation statistics then mix all towers).
    JointLayerNormSlice,
}

/// Configuration of the K heads (saved with head checkpoints).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeadConfig {
    /// Number of towers/heads.
    pub n_towers: usize,
    /// Width D of a tower output.
    pub tower_width: usize,
    /// Vocabulary size V.
    pub vocab_size: usize,
    /// LayerNorm epsilon.
    pub layer_norm_eps: f64,
    /// Normal init standard deviation.
    pub init_std: f64,
    /// Head input.
    pub input: HeadInput,
}

impl HeadConfig {
    /// Heads fitting `model`.
    pub fn for_model(model: &TwoTowerLm, input: HeadInput) -> Self {
        let c = model.config();
        Self {
            n_towers: c.n_towers,
            tower_width: c.tower_width(),
            vocab_size: c.vocab_size,
            layer_norm_eps: c.layer_norm_eps,
            init_std: c.init_std,
            input,
        }
    }
}

/// One head: Linear(D, D) → GELU → LayerNorm → Linear(D, V) with bias.
#[derive(Debug, Clone)]
pub struct Head {
    dense: Linear,
    ln: LayerNorm,
    out: Linear,
}

impl Head {
    /// `dense`, `ln`, `out` under `init`.
    pub fn new(cfg: &HeadConfig, init: Init<'_>) -> Result<Self> {
        let (d, v) = (cfg.tower_width, cfg.vocab_size);
        Ok(Self {
            dense: Linear::new(d, d, true, cfg.init_std, init.pp("dense"))?,
            ln: LayerNorm::new(d, cfg.layer_norm_eps, init.pp("ln"))?,
            out: Linear::new(d, v, true, cfg.init_std, init.pp("out"))?,
        })
    }

    /// Logits [N, V] (f32) from features [N, D].
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(self
            .out
            .forward(&self.hidden(x)?)?
            .to_dtype(candle_core::DType::F32)?)
    }

    /// The input of the output layer, [N, D]: LayerNorm(GELU(dense(x))).
    pub fn hidden(&self, x: &Tensor) -> Result<Tensor> {
        Ok(self.ln.forward(&gelu(&self.dense.forward(x)?)?)?)
    }

    /// The output layer's weight \[V, D\] and bias \[V\] (the training loss fuses the product).
    pub fn output_layer(&self) -> Result<(&Tensor, &Tensor)> {
        let b = self
            .out
            .bias()
            .ok_or_else(|| HeadsError::Mismatch("head output layer without bias".into()))?;
        Ok((self.out.weight(), b))
    }
}

/// The K heads, with their own variables (`head{k}.*`).
#[derive(Debug)]
pub struct TowerHeads {
    cfg: HeadConfig,
    params: ParamStore,
    heads: Vec<Head>,
}

/// Frozen features of the labelled positions of a batch.
#[derive(Debug, Clone)]
pub struct Features {
    /// Per tower, [N, D], detached from the towers' graph.
    pub per_tower: Vec<Tensor>,
    /// The N labels, in row-major position order.
    pub labels: Vec<u32>,
}

impl TowerHeads {
    /// Fresh heads drawn from `seed`.
    pub fn new(cfg: &HeadConfig, device: &Device, seed: u64) -> Result<Self> {
        if cfg.n_towers == 0 || cfg.tower_width == 0 || cfg.vocab_size < 2 {
            return Err(HeadsError::Mismatch("empty head configuration".into()));
        }
        let params = ParamStore::new(device, seed);
        let heads = (0..cfg.n_towers)
            .map(|k| Head::new(cfg, params.root().pp(format!("head{k}"))))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            cfg: cfg.clone(),
            params,
            heads,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &HeadConfig {
        &self.cfg
    }

    /// The heads' variables (the only ones phases 2/3 train).
    pub fn params(&self) -> &ParamStore {
        &self.params
    }

    /// Head `k`.
    pub fn head(&self, k: usize) -> Option<&Head> {
        self.heads.get(k)
    }

    fn check(&self, model: &TwoTowerLm) -> Result<()> {
        let c = model.config();
        if c.n_towers != self.cfg.n_towers
            || c.tower_width() != self.cfg.tower_width
            || c.vocab_size != self.cfg.vocab_size
        {
            return Err(HeadsError::Mismatch(format!(
                "heads for K={}, D={}, V={} but model has K={}, D={}, V={}",
                self.cfg.n_towers,
                self.cfg.tower_width,
                self.cfg.vocab_size,
                c.n_towers,
                c.tower_width(),
                c.vocab_size
            )));
        }
        Ok(())
    }

    /// Frozen per-tower features at the batch's labelled positions (no gradient path into the
    /// towers: every tensor is detached).
    pub fn features(&self, model: &TwoTowerLm, batch: &TokenBatch) -> Result<Features> {
        self.check(model)?;
        let db = model.device_batch(batch)?;
        let (idx, labels) = labelled_positions(batch);
        if idx.is_empty() {
            return Err(towers::TowersError::NoTargets.into());
        }
        let outs: Vec<Tensor> = model
            .tower_outputs(&db)?
            .into_iter()
            .map(|t| t.detach())
            .collect();
        let d = self.cfg.tower_width;
        let sources: Vec<Tensor> = match self.cfg.input {
            HeadInput::TowerOutput => outs,
            HeadInput::TowerLayerNorm => outs
                .iter()
                .map(|h| {
                    let ones = Tensor::ones(d, candle_core::DType::F32, h.device())?;
                    let zeros = Tensor::zeros(d, candle_core::DType::F32, h.device())?;
                    Ok(layer_norm(h, &ones, &zeros, self.cfg.layer_norm_eps)?)
                })
                .collect::<Result<Vec<_>>>()?,
            HeadInput::JointLayerNormSlice => {
                let n = model.normed_concat(&outs)?.detach();
                (0..self.cfg.n_towers)
                    .map(|k| Ok(n.narrow(D::Minus1, k * d, d)?))
                    .collect::<Result<Vec<_>>>()?
            }
        };
        let n_all = batch.batch_size * batch.seq_len;
        let idx_t = Tensor::from_vec(idx, labels.len(), model.device())?;
        let per_tower = sources
            .iter()
            .map(|s| Ok(s.reshape((n_all, d))?.index_select(&idx_t, 0)?.detach()))
            .collect::<Result<Vec<_>>>()?;
        Ok(Features { per_tower, labels })
    }

    /// Saves the heads' config and weights to `dir` (`heads_config.json`, `heads.safetensors`).
    pub fn save(&self, dir: &Path) -> Result<()> {
        let io = |p: &Path| {
            let path = p.display().to_string();
            move |source| HeadsError::Io { path, source }
        };
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let cfgp = dir.join("heads_config.json");
        std::fs::write(&cfgp, serde_json::to_vec_pretty(&self.cfg)?).map_err(io(&cfgp))?;
        self.params.save(&dir.join(HEADS_FILE))?;
        Ok(())
    }

    /// Loads heads saved by [`TowerHeads::save`].
    pub fn load(dir: &Path, device: &Device) -> Result<Self> {
        let cfgp = dir.join("heads_config.json");
        let bytes = std::fs::read(&cfgp).map_err(|source| HeadsError::Io {
            path: cfgp.display().to_string(),
            source,
        })?;
        let cfg: HeadConfig = serde_json::from_slice(&bytes)?;
        let heads = Self::new(&cfg, device, 0)?;
        heads.params.load(&dir.join(HEADS_FILE))?;
        Ok(heads)
    }
}
