//! The plain-data batch handed to the models (the contract between `corpus` and `towers`), and
//! the [`Batcher`] that makes them in a deterministic shuffled order with a resumable cursor.

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::error::{CorpusError, Result};
use crate::mlm::{mask_sequence, MaskingConfig};
use crate::tokenizer::SpecialTokens;
use crate::windows::{pad_sequence, TrainingData};

pub use crate::labels::IGNORE_LABEL;

/// A batch of equal-length token sequences, every field row-major `[batch_size, seq_len]`.
///
/// `labels[i]` is the token that position `i` must predict, or [`IGNORE_LABEL`]:
/// - masked LM: the original token at masked positions only;
/// - causal LM (GPT): the next token, `labels[t] = ids[t + 1]`;
/// - bidirectional LM (ELMo): the token itself, `labels[t] = ids[t]` (the model never lets
///   position `t` see `x_t`).
///
/// PAD positions always carry [`IGNORE_LABEL`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TokenBatch {
    /// Number of sequences.
    pub batch_size: usize,
    /// Length of every sequence.
    pub seq_len: usize,
    /// Model inputs (after MLM corruption where it applies).
    pub input_ids: Vec<u32>,
    /// 1 for a real token, 0 for PAD.
    pub attention_mask: Vec<u8>,
    /// Prediction targets, [`IGNORE_LABEL`] where no loss is taken.
    pub labels: Vec<u32>,
}

impl TokenBatch {
    /// Number of positions that carry a label.
    pub fn n_targets(&self) -> usize {
        self.labels.iter().filter(|&&l| l != IGNORE_LABEL).count()
    }
}

/// The training objective a batch is built for (it decides inputs and labels).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Objective {
    /// BERT masked LM: inputs corrupted, labels at masked positions only.
    MaskedLm(MaskingConfig),
    /// GPT causal LM: `labels[t] = ids[t + 1]`.
    CausalLm,
    /// ELMo bidirectional LM: `labels[t] = ids[t]`.
    BidirectionalLm,
}

impl Objective {
    /// The expected share of a batch's positions that are targets: the masking rate for a
    /// masked LM, 1 for the others. A budget counted in targets divided by it gives the
    /// positions that hold as many targets. For a causal LM 1 is an approximation: the last
    /// real position of a sequence has no next token, so (T − 1)/T of a full block of T are
    /// targets (0.8% fewer at T = 128); an ELMo sequence predicts every position.
    pub fn target_share(&self) -> f64 {
        match self {
            Objective::MaskedLm(m) => m.mask_prob,
            Objective::CausalLm | Objective::BidirectionalLm => 1.0,
        }
    }
}

/// Where a run stands in the batch stream: batch `position` of epoch `epoch`.
///
/// Serialize it with a checkpoint; [`Batcher::iter_from`] resumes at exactly that batch, with
/// the same order and the same MLM masks.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct BatchCursor {
    /// Epoch (0-based).
    pub epoch: u64,
    /// Index of the next batch within the epoch.
    pub position: u64,
}

/// Batching settings.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BatcherConfig {
    /// Sequences per batch.
    pub batch_size: usize,
    /// Seed of the shuffling and of the MLM masks.
    pub seed: u64,
    /// Drop an epoch's last, smaller batch (otherwise it is yielded with fewer rows).
    pub drop_last: bool,
}

/// Deterministic shuffled batches over a [`TrainingData`] for one [`Objective`].
///
/// Epoch `e` visits the sequences in a permutation drawn from ChaCha8 seeded by `(seed, e)`;
/// batch `b` of epoch `e` draws its MLM masks from ChaCha8 seeded by `(seed, e, b)`, so any
/// batch can be rebuilt on its own from its [`BatchCursor`].
#[derive(Debug, Clone)]
pub struct Batcher {
    data: TrainingData,
    objective: Objective,
    config: BatcherConfig,
    specials: SpecialTokens,
    vocab_size: usize,
}

/// Stream tags that keep the shuffling and masking RNGs apart.
const TAG_ORDER: u64 = 0x006f_7264_6572;
const TAG_MASK: u64 = 0x6d61_736b;

/// A ChaCha8 generator keyed by a few numbers (each fills 8 bytes of the 32-byte key).
fn keyed_rng(parts: [u64; 4]) -> ChaCha8Rng {
    let mut key = [0u8; 32];
    for (chunk, p) in key.chunks_mut(8).zip(parts) {
        chunk.copy_from_slice(&p.to_le_bytes());
    }
    ChaCha8Rng::from_seed(key)
}

impl Batcher {
    /// A batcher; `vocab_size` bounds the random MLM replacements (use the tokenizer's real
    /// vocabulary size, not the padded one).
    pub fn new(
        data: TrainingData,
        objective: Objective,
        config: BatcherConfig,
        specials: SpecialTokens,
        vocab_size: usize,
    ) -> Result<Self> {
        if data.is_empty() {
            return Err(CorpusError::NotEnoughData(
                "no training sequence to batch".into(),
            ));
        }
        if config.batch_size == 0 {
            return Err(CorpusError::InvalidArgument(
                "batch_size must be > 0".into(),
            ));
        }
        if config.drop_last && data.len() < config.batch_size {
            return Err(CorpusError::NotEnoughData(format!(
                "{} sequences cannot fill one batch of {} with drop_last",
                data.len(),
                config.batch_size
            )));
        }
        if let Objective::MaskedLm(m) = &objective {
            m.validate()?;
        }
        Ok(Self {
            data,
            objective,
            config,
            specials,
            vocab_size,
        })
    }

    /// The batching settings (batch size, seed, drop_last).
    pub fn config(&self) -> &BatcherConfig {
        &self.config
    }

    /// The sequences.
    pub fn data(&self) -> &TrainingData {
        &self.data
    }

    /// Batches in one epoch.
    pub fn batches_per_epoch(&self) -> u64 {
        let (n, b) = (self.data.len(), self.config.batch_size);
        (if self.config.drop_last {
            n / b
        } else {
            n.div_ceil(b)
        }) as u64
    }

    /// The order in which epoch `epoch` visits the sequences.
    pub fn epoch_order(&self, epoch: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.data.len()).collect();
        order.shuffle(&mut keyed_rng([self.config.seed, epoch, 0, TAG_ORDER]));
        order
    }

    /// The cursor after `cursor` (rolling over to the next epoch).
    pub fn next_cursor(&self, cursor: BatchCursor) -> BatchCursor {
        if cursor.position + 1 >= self.batches_per_epoch() {
            BatchCursor {
                epoch: cursor.epoch + 1,
                position: 0,
            }
        } else {
            BatchCursor {
                epoch: cursor.epoch,
                position: cursor.position + 1,
            }
        }
    }

    fn check(&self, cursor: BatchCursor) -> Result<()> {
        if cursor.position >= self.batches_per_epoch() {
            return Err(CorpusError::InvalidArgument(format!(
                "cursor position {} beyond the {} batches of an epoch",
                cursor.position,
                self.batches_per_epoch()
            )));
        }
        Ok(())
    }

    /// Sequence indices of the batch at `cursor`, given its epoch's order.
    fn rows<'a>(&self, order: &'a [usize], cursor: BatchCursor) -> &'a [usize] {
        let b = self.config.batch_size;
        let start = cursor.position as usize * b;
        &order[start..(start + b).min(order.len())]
    }

    /// The batch at `cursor` (computes the epoch's order; to stream, use [`Batcher::iter_from`]
    /// or [`Batcher::batch_with`], which shuffle once per epoch).
    pub fn batch(&self, cursor: BatchCursor) -> Result<TokenBatch> {
        self.batch_with(cursor, &mut OrderCache::default())
    }

    /// The batch at `cursor`, taking the epoch's order from `cache` (shuffled again only when
    /// the epoch changes). Identical to [`Batcher::batch`].
    pub fn batch_with(&self, cursor: BatchCursor, cache: &mut OrderCache) -> Result<TokenBatch> {
        self.check(cursor)?;
        let order = cache.get(self, cursor.epoch);
        self.build(self.rows(order, cursor), cursor)
    }

    /// Segment ids (`[batch_size, seq_len]`, 0 for PAD) of the batch at `cursor`, for models
    /// with token-type embeddings.
    pub fn segment_ids(&self, cursor: BatchCursor) -> Result<Vec<u8>> {
        self.check(cursor)?;
        let order = self.epoch_order(cursor.epoch);
        let t = self.data.seq_len();
        let mut out = Vec::new();
        for &i in self.rows(&order, cursor) {
            let s = self.data.segments(i);
            out.extend_from_slice(s);
            out.resize(out.len() + t - s.len(), 0);
        }
        Ok(out)
    }

    fn build(&self, rows: &[usize], cursor: BatchCursor) -> Result<TokenBatch> {
        let t = self.data.seq_len();
        let pad = self.specials.pad;
        let mut batch = TokenBatch {
            batch_size: rows.len(),
            seq_len: t,
            input_ids: Vec::with_capacity(rows.len() * t),
            attention_mask: Vec::with_capacity(rows.len() * t),
            labels: vec![IGNORE_LABEL; rows.len() * t],
        };
        let mut rng = keyed_rng([self.config.seed, cursor.epoch, cursor.position, TAG_MASK]);
        for (r, &i) in rows.iter().enumerate() {
            let (mut ids, mask) = pad_sequence(self.data.ids(i), t, pad);
            let n = self.data.ids(i).len();
            let labels = &mut batch.labels[r * t..(r + 1) * t];
            match &self.objective {
                Objective::MaskedLm(cfg) => {
                    mask_sequence(
                        &mut ids,
                        labels,
                        &self.specials,
                        self.vocab_size,
                        cfg,
                        &mut rng,
                    )?;
                }
                Objective::CausalLm => {
                    labels[..n.saturating_sub(1)].copy_from_slice(&ids[1..n]);
                }
                Objective::BidirectionalLm => labels[..n].copy_from_slice(&ids[..n]),
            }
            batch.input_ids.extend_from_slice(&ids);
            batch.attention_mask.extend_from_slice(&mask);
        }
        Ok(batch)
    }

    /// An endless stream of `(cursor, batch)` starting at `cursor`, across epochs.
    pub fn iter_from(&self, cursor: BatchCursor) -> Result<BatchIter<'_>> {
        self.check(cursor)?;
        Ok(BatchIter {
            batcher: self,
            cursor,
            order: OrderCache::default(),
        })
    }
}

/// The visiting order of one epoch of a [`Batcher`], kept so that streaming batches shuffles
/// once per epoch rather than once per batch. Belongs to one batcher.
#[derive(Debug, Clone, Default)]
pub struct OrderCache {
    order: Option<(u64, Vec<usize>)>,
}

impl OrderCache {
    /// The order of `epoch` under `batcher`, computed when the epoch differs from the cached one.
    fn get(&mut self, batcher: &Batcher, epoch: u64) -> &[usize] {
        if self.order.as_ref().is_none_or(|(e, _)| *e != epoch) {
            self.order = Some((epoch, batcher.epoch_order(epoch)));
        }
        &self.order.as_ref().expect("set above").1
    }
}

/// Iterator returned by [`Batcher::iter_from`]; never ends (epochs roll over).
pub struct BatchIter<'a> {
    batcher: &'a Batcher,
    cursor: BatchCursor,
    order: OrderCache,
}

impl BatchIter<'_> {
    /// The cursor of the next batch (save it to resume there).
    pub fn cursor(&self) -> BatchCursor {
        self.cursor
    }
}

impl Iterator for BatchIter<'_> {
    type Item = Result<(BatchCursor, TokenBatch)>;

    fn next(&mut self) -> Option<Self::Item> {
        let cursor = self.cursor;
        let batch = self.batcher.batch_with(cursor, &mut self.order);
        self.cursor = self.batcher.next_cursor(cursor);
        Some(batch.map(|b| (cursor, b)))
    }
}
