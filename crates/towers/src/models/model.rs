//! The K-tower language model: shared embedding, K towers of one style, and the joint head.

use candle_core::{DType, Device, Tensor, D};
use corpus::{TokenBatch, IGNORE_LABEL};

use crate::config::ModelConfig;
use crate::layers::loss::{labelled_positions, linear_cross_entropy, NllPass};
use crate::layers::params::ParamStore;
use crate::models::embedding::SharedEmbedding;
use crate::models::joint_head::JointHead;
use crate::style::{Style, TowerStack};
use crate::{Result, TowersError};

/// A batch moved to the device: ids [B, T] (u32) and the real-token mask.
#[derive(Debug, Clone)]
pub struct DeviceBatch {
    /// Token ids [B, T].
    pub ids: Tensor,
    /// Additive attention bias [B, 1, T, T] (transformers) or the state mask [B, T, 1] (ELMo).
    pub mask: Tensor,
}

/// K towers of one style on a shared embedding, with the joint head of phase 1.
#[derive(Debug)]
pub struct TwoTowerLm {
    cfg: ModelConfig,
    params: ParamStore,
    style: Style,
    embed: SharedEmbedding,
    towers: Box<dyn TowerStack>,
    head: JointHead,
    dtype: DType,
}

impl TwoTowerLm {
    /// Builds the model with weights drawn from `seed` (f32 master weights on `device`).
    /// Parameter names: `embed.*`, `tower{k}.*`, `head.*`.
    pub fn new(cfg: &ModelConfig, device: &Device, seed: u64) -> Result<Self> {
        cfg.validate()?;
        let params = ParamStore::new(device, seed);
        let root = params.root();
        let embed = SharedEmbedding::new(cfg, root.pp("embed"))?;
        let towers = cfg.tower.build(&cfg.shared(), params.root())?;
        let head = JointHead::new(cfg, root.pp("head"))?;
        Ok(Self {
            cfg: cfg.clone(),
            style: cfg.style(),
            params,
            embed,
            towers,
            head,
            dtype: DType::F32,
        })
    }

    /// Sets the compute dtype (e.g. bf16 on CUDA); master weights stay f32.
    pub fn with_compute_dtype(mut self, dtype: DType) -> Self {
        self.dtype = dtype;
        self
    }

    /// The compute dtype.
    pub fn compute_dtype(&self) -> DType {
        self.dtype
    }

    /// The configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// All trainable variables.
    pub fn params(&self) -> &ParamStore {
        &self.params
    }

    /// The device of the weights.
    pub fn device(&self) -> &Device {
        self.params.device()
    }

    /// Checks a batch against the model and moves it to the device.
    pub fn device_batch(&self, batch: &TokenBatch) -> Result<DeviceBatch> {
        let (b, t) = (batch.batch_size, batch.seq_len);
        let n = b * t;
        if n == 0 {
            return Err(TowersError::Batch("empty batch".into()));
        }
        if batch.input_ids.len() != n || batch.attention_mask.len() != n || batch.labels.len() != n
        {
            return Err(TowersError::Batch(format!(
                "fields must have batch_size * seq_len = {n} entries (ids {}, mask {}, labels {})",
                batch.input_ids.len(),
                batch.attention_mask.len(),
                batch.labels.len()
            )));
        }
        let v = self.cfg.vocab_size as u32;
        if let Some(&bad) = batch.input_ids.iter().find(|&&i| i >= v) {
            return Err(TowersError::Batch(format!(
                "token id {bad} >= vocab_size {v}"
            )));
        }
        if let Some(&bad) = batch.labels.iter().find(|&&l| l >= v && l != IGNORE_LABEL) {
            return Err(TowersError::Batch(format!("label {bad} >= vocab_size {v}")));
        }
        let style = &self.style;
        if style.embedding().positions && t > self.cfg.max_positions {
            return Err(TowersError::Batch(format!(
                "seq_len {t} > max_positions {}",
                self.cfg.max_positions
            )));
        }
        let dev = self.device();
        let ids = Tensor::from_vec(batch.input_ids.clone(), (b, t), dev)?;
        let mask = style.device_mask(batch, self.dtype, dev)?;
        Ok(DeviceBatch { ids, mask })
    }

    /// Every tower's output h_k [B, T, D] (D = `tower_width`), in the compute dtype.
    /// The towers run as their style runs them ([`TowerStyle::forward_all`]: together for ELMo on
    /// CUDA in bf16, else one by one).
    ///
    /// [`TowerStyle::forward_all`]: crate::style::TowerStyle::forward_all
    pub fn tower_outputs(&self, db: &DeviceBatch) -> Result<Vec<Tensor>> {
        let xs = self.tower_inputs(db)?;
        self.towers.outputs(&xs, &db.mask)
    }

    /// Every tower's input [B, T, H] (its projection of the shared embedding).
    fn tower_inputs(&self, db: &DeviceBatch) -> Result<Vec<Tensor>> {
        let shared = self.embed.forward(&db.ids, self.dtype)?;
        (0..self.cfg.n_towers)
            .map(|k| self.embed.tower_input(k, &shared))
            .collect()
    }

    /// Tower `k`'s (forward, backward) outputs [B, T, H] where its style has directions
    /// ([`Tower::directions`]: ELMo), for leakage checks.
    ///
    /// [`Tower::directions`]: crate::style::Tower::directions
    pub fn directions(&self, db: &DeviceBatch, k: usize) -> Result<(Tensor, Tensor)> {
        let shared = self.embed.forward(&db.ids, self.dtype)?;
        let x = self.embed.tower_input(k, &shared)?;
        match self.towers.directions(k, &x, &db.mask) {
            Some(dirs) => dirs,
            None => Err(TowersError::Config(format!(
                "tower {k} of {} has no directions",
                self.style
            ))),
        }
    }

    /// The towers' style.
    pub fn style(&self) -> &Style {
        &self.style
    }

    /// The joint head's LayerNorm over concat(h_1..h_K), [B, T, K·D] (what the released code
    /// feeds, sliced per tower, to the phase 2/3 heads).
    pub fn normed_concat(&self, outputs: &[Tensor]) -> Result<Tensor> {
        self.head.normed_concat(&Tensor::cat(outputs, D::Minus1)?)
    }

    /// Joint-head logits [B, T, V] (f32) at every position.
    pub fn logits(&self, batch: &TokenBatch) -> Result<Tensor> {
        let db = self.device_batch(batch)?;
        let cat = Tensor::cat(&self.tower_outputs(&db)?, D::Minus1)?;
        let (b, t, kd) = cat.dims3()?;
        let logits = self
            .head
            .forward(&cat.reshape((b * t, kd))?, self.embed.tokens())?;
        Ok(logits.reshape((b, t, ()))?)
    }

    /// Mean cross-entropy of the joint head over the batch's labelled positions (the head is
    /// applied to those rows only), for training.
    pub fn loss(&self, batch: &TokenBatch) -> Result<Tensor> {
        self.loss_for(batch, NllPass::Train)
    }

    /// [`TwoTowerLm::loss`] with the pass made explicit ([`NllPass::Eval`] skips the output
    /// layer's gradient work when no backward pass follows).
    pub fn loss_for(&self, batch: &TokenBatch, pass: NllPass) -> Result<Tensor> {
        let db = self.device_batch(batch)?;
        let (idx, labels) = labelled_positions(batch);
        if idx.is_empty() {
            return Err(TowersError::NoTargets);
        }
        let cat = Tensor::cat(&self.tower_outputs(&db)?, D::Minus1)?;
        let (b, t, kd) = cat.dims3()?;
        let idx = Tensor::from_vec(idx, labels.len(), self.device())?;
        let rows = cat.reshape((b * t, kd))?.index_select(&idx, 0)?;
        let x = self.head.features(&rows)?;
        linear_cross_entropy(&x, self.embed.tokens(), self.head.out_bias(), &labels, pass)
    }
}
