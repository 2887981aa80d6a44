//! Training a probe on one layer's states (Adam on candle, the best dev epoch kept), choosing
//! among settings on the dev split, and predicting and scoring with the fitted probe.

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{AdamW, Optimizer, ParamsAdamW};
use corpus::Upos;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use report::Progress;
use serde::{Deserialize, Serialize};

use crate::error::{ProbeError, Result};
use crate::loss::{depth_loss, distance_loss, upos_loss, RELEASED_SQRT_EPS};
use crate::metrics::{
    score_depths, score_distances, score_tags, Bootstrap, DepthScores, DistanceScores, UposScores,
};
use crate::params::{DistanceLoss, ProbeParams, ProbeTask};
use crate::states::LayerStates;
use crate::tree::GoldTree;

/// One layer of states with the gold trees of the same sentences: what a probe trains on or is
/// scored on.
#[derive(Debug, Clone, Copy)]
pub struct ProbeSet<'a> {
    gold: &'a [GoldTree],
    states: &'a LayerStates,
    layer: usize,
}

impl<'a> ProbeSet<'a> {
    /// Layer `layer` of `states` with `gold`, checked to have the same sentences and words.
    pub fn new(gold: &'a [GoldTree], states: &'a LayerStates, layer: usize) -> Result<Self> {
        if layer >= states.n_layers() {
            return Err(ProbeError::Mismatch(format!(
                "layer {layer} of states with {} layers",
                states.n_layers()
            )));
        }
        if gold.len() != states.n_sentences() {
            return Err(ProbeError::Mismatch(format!(
                "{} gold sentences, {} sentences of states",
                gold.len(),
                states.n_sentences()
            )));
        }
        if gold.is_empty() {
            return Err(ProbeError::Empty("no sentence".into()));
        }
        if let Some(k) = (0..gold.len()).find(|&k| gold[k].len() != states.sentence_len(k)) {
            return Err(ProbeError::Mismatch(format!(
                "sentence {k}: {} gold words, {} vectors",
                gold[k].len(),
                states.sentence_len(k)
            )));
        }
        Ok(Self {
            gold,
            states,
            layer,
        })
    }

    /// The gold trees.
    pub fn gold(&self) -> &'a [GoldTree] {
        self.gold
    }

    /// The layer's index.
    pub fn layer(&self) -> usize {
        self.layer
    }

    /// Width H of the states.
    pub fn width(&self) -> usize {
        self.states.width()
    }

    /// States of sentence `s` at this layer, [n × H] row-major.
    pub fn sentence(&self, s: usize) -> &'a [f32] {
        self.states.sentence(s, self.layer)
    }
}

/// One padded batch as tensors.
struct Batch {
    /// [b, n, H] (structural) or [N, H] real words (UPOS).
    x: Tensor,
    /// [b, n, n] distances, [b, n] depths, or [N] tag indices.
    target: Tensor,
    /// [b, n, n] or [b, n] (structural).
    mask: Option<Tensor>,
    /// [b] words per sentence.
    lens: Option<Tensor>,
    sentences: usize,
}

fn make_batch(set: &ProbeSet, idx: &[usize], task: ProbeTask, device: &Device) -> Result<Batch> {
    let h = set.width();
    let b = idx.len();
    if task == ProbeTask::Upos {
        let mut x = Vec::new();
        let mut labels = Vec::new();
        for &s in idx {
            x.extend_from_slice(set.sentence(s));
            labels.extend(set.gold[s].tags().iter().map(|&t| t as u32));
        }
        let n = labels.len();
        return Ok(Batch {
            x: Tensor::from_vec(x, (n, h), device)?,
            target: Tensor::from_vec(labels, n, device)?,
            mask: None,
            lens: None,
            sentences: b,
        });
    }
    let n = idx.iter().map(|&s| set.gold[s].len()).max().unwrap_or(0);
    let mut x = vec![0f32; b * n * h];
    let pairs = matches!(task, ProbeTask::Distance(_));
    let per = if pairs { n * n } else { n };
    let mut target = vec![0f32; b * per];
    let mut mask = vec![0f32; b * per];
    let mut lens = vec![0f32; b];
    for (r, &s) in idx.iter().enumerate() {
        let g = &set.gold[s];
        let m = g.len();
        lens[r] = m as f32;
        x[r * n * h..(r * n + m) * h].copy_from_slice(set.sentence(s));
        for i in 0..m {
            if pairs {
                for j in 0..m {
                    target[r * per + i * n + j] = g.distance(i, j) as f32;
                    mask[r * per + i * n + j] = 1.0;
                }
            } else {
                target[r * per + i] = g.depth(i) as f32;
                mask[r * per + i] = 1.0;
            }
        }
    }
    let shape: Vec<usize> = if pairs { vec![b, n, n] } else { vec![b, n] };
    Ok(Batch {
        x: Tensor::from_vec(x, (b, n, h), device)?,
        target: Tensor::from_vec(target, shape.clone(), device)?,
        mask: Some(Tensor::from_vec(mask, shape, device)?),
        lens: Some(Tensor::from_vec(lens, b, device)?),
        sentences: b,
    })
}

/// Batches of sentences of similar length (sorted by length, ties by index).
fn batches(set: &ProbeSet, p: &ProbeParams, device: &Device) -> Result<Vec<Batch>> {
    let mut order: Vec<usize> = (0..set.gold.len()).collect();
    order.sort_by_key(|&s| (set.gold[s].len(), s));
    order
        .chunks(p.batch_sentences)
        .map(|c| make_batch(set, c, p.task, device))
        .collect()
}

/// The trainable variables of a probe: B [k, H], or W [17, H] and b [17].
struct Vars {
    weight: Var,
    bias: Option<Var>,
}

impl Vars {
    fn loss(&self, task: ProbeTask, batch: &Batch, detach: bool) -> candle_core::Result<Tensor> {
        let w = if detach {
            self.weight.as_tensor().detach()
        } else {
            self.weight.as_tensor().clone()
        };
        let (mask, lens) = (batch.mask.as_ref(), batch.lens.as_ref());
        match task {
            ProbeTask::Distance(kind) => distance_loss(
                &w,
                &batch.x,
                &batch.target,
                mask.expect("structural batch"),
                lens.expect("structural batch"),
                kind,
            ),
            ProbeTask::Depth => depth_loss(
                &w,
                &batch.x,
                &batch.target,
                mask.expect("structural batch"),
                lens.expect("structural batch"),
            ),
            ProbeTask::Upos => {
                let b = self
                    .bias
                    .as_ref()
                    .expect("UPOS probe has a bias")
                    .as_tensor();
                let b = if detach { b.detach() } else { b.clone() };
                upos_loss(&w, &b, &batch.x, &batch.target)
            }
        }
    }

    fn all(&self) -> Vec<Var> {
        std::iter::once(self.weight.clone())
            .chain(self.bias.clone())
            .collect()
    }
}

/// The losses of one epoch.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EpochLoss {
    /// Mean training loss over the epoch's batches (penalty included).
    pub train: f64,
    /// Dev loss (no penalty): the batches' losses weighted by their sentences.
    pub dev: f64,
}

/// A trained probe: its weights (those of the epoch with the lowest dev loss) and history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FittedProbe {
    /// The settings it was trained with.
    pub params: ProbeParams,
    /// Width H of the states it reads.
    pub width: usize,
    /// B [k × H] (structural) or W [17 × H] (UPOS), row-major.
    pub weight: Vec<f32>,
    /// The UPOS probe's bias [17] (empty for structural probes).
    pub bias: Vec<f32>,
    /// Losses per epoch run.
    pub history: Vec<EpochLoss>,
    /// 0-based epoch whose weights were kept.
    pub best_epoch: usize,
    /// Its dev loss.
    pub dev_loss: f64,
}

/// What a probe predicts for each sentence.
#[derive(Debug, Clone, PartialEq)]
pub enum Prediction {
    /// Predicted distances, row-major n × n per sentence (squared for Hewitt & Manning's loss,
    /// Euclidean for the released code's).
    Distances(Vec<Vec<f64>>),
    /// Predicted depths ‖B h_i‖² per sentence.
    Depths(Vec<Vec<f64>>),
    /// Predicted tags per sentence.
    Tags(Vec<Vec<Upos>>),
}

/// A probe's scores on a split.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Scores {
    /// UUAS and DSpr.
    Distance(DistanceScores),
    /// Root accuracy and NSpr.
    Depth(DepthScores),
    /// Accuracy.
    Upos(UposScores),
}

impl ProbeParams {
    /// Trains on `train`, keeping the epoch with the lowest loss on `dev` (CPU, silent).
    pub fn fit(&self, train: &ProbeSet, dev: &ProbeSet) -> Result<FittedProbe> {
        self.fit_with(train, dev, &Device::Cpu, &Progress::silent())
    }

    /// [`ProbeParams::fit`] on `device`, reporting each epoch's losses to `progress`.
    pub fn fit_with(
        &self,
        train: &ProbeSet,
        dev: &ProbeSet,
        device: &Device,
        progress: &Progress,
    ) -> Result<FittedProbe> {
        let h = train.width();
        self.check(h)?;
        if dev.width() != h {
            return Err(ProbeError::Mismatch(format!(
                "train states of width {h}, dev states of width {}",
                dev.width()
            )));
        }
        let train_b = batches(train, self, device)?;
        let dev_b = batches(dev, self, device)?;
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let rows = if self.task == ProbeTask::Upos {
            Upos::COUNT
        } else {
            self.rank
        };
        // Uniform in ±0.05, as Hewitt & Manning initialise B; drawn on the host from the seed.
        let init: Vec<f32> = (0..rows * h)
            .map(|_| rng.random_range(-0.05f32..0.05))
            .collect();
        let vars = Vars {
            weight: Var::from_tensor(&Tensor::from_vec(init, (rows, h), device)?)?,
            bias: if self.task == ProbeTask::Upos {
                Some(Var::zeros(Upos::COUNT, DType::F32, device)?)
            } else {
                None
            },
        };
        let mut opt = AdamW::new(
            vars.all(),
            ParamsAdamW {
                lr: self.learning_rate,
                weight_decay: 0.0,
                ..Default::default()
            },
        )?;
        let dev_sentences: usize = dev_b.iter().map(|b| b.sentences).sum();
        let mut best: Option<(f64, usize, Vec<f32>, Vec<f32>)> = None;
        let mut history = Vec::new();
        let mut order: Vec<usize> = (0..train_b.len()).collect();
        let mut since = 0;
        for epoch in 0..self.epochs {
            order.shuffle(&mut rng);
            let mut total = 0.0;
            for &k in &order {
                let mut loss = vars.loss(self.task, &train_b[k], false)?;
                if self.l2 > 0.0 {
                    loss = (loss + (vars.weight.as_tensor().sqr()?.sum_all()? * self.l2)?)?;
                }
                let v = loss.to_dtype(DType::F64)?.to_scalar::<f64>()?;
                if !v.is_finite() {
                    return Err(ProbeError::NonFinite { epoch });
                }
                total += v;
                opt.backward_step(&loss)?;
            }
            let mut dev_loss = 0.0;
            for b in &dev_b {
                let l = vars.loss(self.task, b, true)?;
                dev_loss += l.to_dtype(DType::F64)?.to_scalar::<f64>()? * b.sentences as f64;
            }
            dev_loss /= dev_sentences as f64;
            let e = EpochLoss {
                train: total / train_b.len() as f64,
                dev: dev_loss,
            };
            history.push(e);
            progress.say(|| {
                format!(
                    "  {} layer {} epoch {}: train {:.4} dev {:.4}",
                    self.task.as_str(),
                    train.layer(),
                    epoch + 1,
                    e.train,
                    e.dev
                )
            });
            if best.as_ref().is_none_or(|b| dev_loss < b.0) {
                let w = vars.weight.as_tensor().flatten_all()?.to_vec1::<f32>()?;
                let bias = match &vars.bias {
                    Some(b) => b.as_tensor().to_vec1::<f32>()?,
                    None => Vec::new(),
                };
                best = Some((dev_loss, epoch, w, bias));
                since = 0;
            } else {
                since += 1;
                if since >= self.patience {
                    break;
                }
            }
        }
        let (dev_loss, best_epoch, weight, bias) =
            best.ok_or_else(|| ProbeError::Empty("no epoch ran".into()))?;
        Ok(FittedProbe {
            params: *self,
            width: h,
            weight,
            bias,
            history,
            best_epoch,
            dev_loss,
        })
    }
}

/// The probe chosen among candidate settings by the lowest dev loss, and every candidate's
/// dev loss (model selection on the dev split only; the test split is never seen).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Selection {
    /// The chosen probe.
    pub probe: FittedProbe,
    /// Each candidate's settings and its best dev loss.
    pub candidates: Vec<(ProbeParams, f64)>,
}

/// Fits every candidate (all of one task) on `train` and keeps the lowest dev loss.
pub fn select(
    candidates: &[ProbeParams],
    train: &ProbeSet,
    dev: &ProbeSet,
    device: &Device,
    progress: &Progress,
) -> Result<Selection> {
    let first = candidates
        .first()
        .ok_or_else(|| ProbeError::InvalidParams("no candidate settings".into()))?;
    if let Some(p) = candidates.iter().find(|p| p.task != first.task) {
        return Err(ProbeError::InvalidParams(format!(
            "candidates of different tasks ({} and {}): their dev losses do not compare",
            first.task.as_str(),
            p.task.as_str()
        )));
    }
    let mut best: Option<FittedProbe> = None;
    let mut losses = Vec::new();
    for p in candidates {
        let f = p.fit_with(train, dev, device, progress)?;
        losses.push((*p, f.dev_loss));
        if best.as_ref().is_none_or(|b| f.dev_loss < b.dev_loss) {
            best = Some(f);
        }
    }
    Ok(Selection {
        probe: best.ok_or_else(|| ProbeError::Empty("no candidate".into()))?,
        candidates: losses,
    })
}

impl FittedProbe {
    /// A probe from given weights (e.g. the identity for vectors that already are a tree's
    /// embedding): `weight` is B [k × width] or W [17 × width], `bias` [17] for UPOS only.
    pub fn from_weights(
        params: ProbeParams,
        width: usize,
        weight: Vec<f32>,
        bias: Vec<f32>,
    ) -> Result<Self> {
        let rows = if params.task == ProbeTask::Upos {
            Upos::COUNT
        } else {
            params.rank
        };
        let want_bias = if params.task == ProbeTask::Upos {
            Upos::COUNT
        } else {
            0
        };
        if weight.len() != rows * width || bias.len() != want_bias {
            return Err(ProbeError::Mismatch(format!(
                "{} weights and {} biases for a {} probe of {rows} rows of width {width}",
                weight.len(),
                bias.len(),
                params.task.as_str()
            )));
        }
        Ok(Self {
            params,
            width,
            weight,
            bias,
            history: Vec::new(),
            best_epoch: 0,
            dev_loss: f64::NAN,
        })
    }

    fn rows(&self) -> usize {
        self.weight.len() / self.width
    }

    /// Projects the n words of a sentence: [n × rows] in f64.
    fn project(&self, x: &[f32]) -> Vec<f64> {
        let (h, r) = (self.width, self.rows());
        let n = x.len() / h;
        let mut p = vec![0.0f64; n * r];
        for i in 0..n {
            let xi = &x[i * h..(i + 1) * h];
            for k in 0..r {
                let wk = &self.weight[k * h..(k + 1) * h];
                p[i * r + k] = xi.iter().zip(wk).map(|(a, b)| *a as f64 * *b as f64).sum();
            }
        }
        p
    }

    /// Predictions for every sentence of `set`.
    pub fn predict(&self, set: &ProbeSet) -> Result<Prediction> {
        if set.width() != self.width {
            return Err(ProbeError::Mismatch(format!(
                "probe of width {}, states of width {}",
                self.width,
                set.width()
            )));
        }
        let r = self.rows();
        let n_sent = set.gold.len();
        Ok(match self.params.task {
            ProbeTask::Distance(kind) => Prediction::Distances(
                (0..n_sent)
                    .map(|s| {
                        let p = self.project(set.sentence(s));
                        let n = p.len() / r;
                        let mut d = vec![0.0; n * n];
                        for i in 0..n {
                            for j in 0..n {
                                let sq: f64 =
                                    (0..r).map(|k| (p[i * r + k] - p[j * r + k]).powi(2)).sum();
                                d[i * n + j] = match kind {
                                    DistanceLoss::HewittManning => sq,
                                    DistanceLoss::ReleasedMse => (sq + RELEASED_SQRT_EPS).sqrt(),
                                };
                            }
                        }
                        d
                    })
                    .collect(),
            ),
            ProbeTask::Depth => Prediction::Depths(
                (0..n_sent)
                    .map(|s| {
                        let p = self.project(set.sentence(s));
                        p.chunks(r)
                            .map(|row| row.iter().map(|x| x * x).sum())
                            .collect()
                    })
                    .collect(),
            ),
            ProbeTask::Upos => Prediction::Tags(
                (0..n_sent)
                    .map(|s| {
                        let p = self.project(set.sentence(s));
                        p.chunks(r)
                            .map(|logits| {
                                let mut best = 0;
                                for t in 1..r {
                                    if logits[t] + self.bias[t] as f64
                                        > logits[best] + self.bias[best] as f64
                                    {
                                        best = t;
                                    }
                                }
                                Upos::ALL[best]
                            })
                            .collect()
                    })
                    .collect(),
            ),
        })
    }

    /// The probe's metrics on `set` with bootstrap intervals over its sentences.
    pub fn evaluate(&self, set: &ProbeSet, bootstrap: &Bootstrap) -> Result<Scores> {
        Ok(match self.predict(set)? {
            Prediction::Distances(d) => Scores::Distance(score_distances(&d, set.gold, bootstrap)?),
            Prediction::Depths(d) => Scores::Depth(score_depths(&d, set.gold, bootstrap)?),
            Prediction::Tags(t) => Scores::Upos(score_tags(&t, set.gold, bootstrap)?),
        })
    }
}
