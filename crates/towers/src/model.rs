//! The K-tower language model: shared embedding, K towers of one style, and the joint head.

use candle_core::{DType, Device, Tensor, D};
use corpus::{TokenBatch, IGNORE_LABEL};

use crate::config::ModelConfig;
use crate::embedding::SharedEmbedding;
use crate::joint_head::JointHead;
use crate::loss::{labelled_positions, linear_cross_entropy, NllPass};
use crate::params::ParamStore;
use crate::style::Tower;
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
    embed: SharedEmbedding,
    towers: Vec<Box<dyn Tower>>,
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
        let style = cfg.style.tower_style();
        let towers = (0..cfg.n_towers)
            .map(|k| style.tower(cfg, root.pp(format!("tower{k}"))))
            .collect::<Result<Vec<_>>>()?;
        let head = JointHead::new(cfg, root.pp("head"))?;
        Ok(Self {
            cfg: cfg.clone(),
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
        let style = self.cfg.style.tower_style();
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
    /// Towers run together where the style offers it ([`TowerStyle::forward_all`]: ELMo on CUDA in
    /// bf16), else one by one.
    ///
    /// [`TowerStyle::forward_all`]: crate::style::TowerStyle::forward_all
    pub fn tower_outputs(&self, db: &DeviceBatch) -> Result<Vec<Tensor>> {
        let xs = self.tower_inputs(db)?;
        let style = self.cfg.style.tower_style();
        if let Some(all) = style.forward_all(&self.towers, &xs, &db.mask) {
            return all;
        }
        self.towers
            .iter()
            .zip(&xs)
            .map(|(tower, x)| tower.forward(x, &db.mask))
            .collect()
    }

    /// Every tower's input [B, T, H] (its projection of the shared embedding).
    fn tower_inputs(&self, db: &DeviceBatch) -> Result<Vec<Tensor>> {
        let shared = self.embed.forward(&db.ids, self.dtype)?;
        (0..self.towers.len())
            .map(|k| self.embed.tower_input(k, &shared))
            .collect()
    }

    /// ELMo only: tower `k`'s (forward, backward) outputs [B, T, H] (for leakage checks).
    pub fn elmo_directions(&self, db: &DeviceBatch, k: usize) -> Result<(Tensor, Tensor)> {
        let shared = self.embed.forward(&db.ids, self.dtype)?;
        let tower = self.towers.get(k);
        let x = self.embed.tower_input(k, &shared)?;
        match tower.and_then(|t| t.directions(&x, &db.mask)) {
            Some(dirs) => dirs,
            None => Err(TowersError::Config(format!(
                "tower {k} is not an ELMo tower"
            ))),
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ElmoMode, Preset, Style};
    use crate::elmo::forward_towers_chained;
    use crate::test_util::assert_same_op;
    use candle_core::Var;

    /// All ELMo towers' layers as one chained op (the route CUDA in bf16 takes, forced here on the
    /// CPU's f32 op) give the K towers' outputs and every tower and embedding variable's gradient
    /// of each tower's own chained op bit for bit (the CPU op runs LstmSeq per chain), and those
    /// of the model's CPU path (each direction alone) within 2e-5, in both modes.
    #[test]
    fn all_towers_chained_match_the_towers_run_one_by_one() {
        for mode in [ElmoMode::BiLstm, ElmoMode::AsReleased] {
            let mut cfg = ModelConfig::preset(Style::Elmo, Preset::Tiny).unwrap();
            (cfg.elmo_mode, cfg.n_towers) = (mode, 3);
            let m = TwoTowerLm::new(&cfg, &Device::Cpu, 7).unwrap();
            let (b, t) = (3, 8);
            let v = cfg.vocab_size as u32;
            let mut attention_mask = vec![1u8; b * t];
            (
                attention_mask[0],
                attention_mask[t + 3],
                attention_mask[3 * t - 1],
            ) = (0, 0, 0);
            let batch = TokenBatch {
                batch_size: b,
                seq_len: t,
                input_ids: (0..b * t).map(|i| (i as u32 * 7 + 3) % v).collect(),
                attention_mask,
                labels: vec![IGNORE_LABEL; b * t],
            };
            let db = m.device_batch(&batch).unwrap();
            let xs = m.tower_inputs(&db).unwrap();
            let cat = |ys: Vec<Tensor>| Tensor::cat(&ys, D::Minus1).unwrap();
            let all = cat(forward_towers_chained(&m.towers, &xs, &db.mask, true).unwrap());
            let each = cat(m
                .towers
                .iter()
                .zip(&xs)
                .map(|(tw, x)| {
                    let (f, r) = tw
                        .as_any()
                        .downcast_ref::<crate::elmo::ElmoTower>()
                        .unwrap()
                        .directions_chained(x, &db.mask, true)?;
                    Ok(Tensor::cat(&[&f, &r], D::Minus1)?)
                })
                .collect::<Result<Vec<_>>>()
                .unwrap());
            let alone = cat(m.tower_outputs(&db).unwrap());
            let n = all.elem_count();
            let w: Vec<f32> = (0..n).map(|i| (i as f32 * 0.31).sin()).collect();
            let w = Tensor::from_vec(w, all.dims(), &Device::Cpu).unwrap();
            let params = m.params().params();
            // The head takes no part here; the tower and embedding variables all do.
            let vars: Vec<&Var> = params
                .iter()
                .filter(|p| !p.name.starts_with("head."))
                .map(|p| &p.var)
                .collect();
            assert!(vars.len() > 10 * cfg.n_towers, "{}", vars.len());
            assert_same_op(&all, &each, &w, &vars, 0.0);
            assert_same_op(&all, &alone, &w, &vars, 2e-5);
        }
    }
}
