//! Where batches come from: the [`BatchSource`] trait (resumable through a JSON cursor), a
//! cycling in-memory source and the corpus batcher's source; with the `test-support` feature,
//! the synthetic Markov-chain source of the tests (`crate::training::markov`).

use corpus::{TokenBatch, IGNORE_LABEL};
use serde_json::{json, Value};

use crate::{Result, TowersError};

/// A resumable stream of batches. `cursor` must capture everything needed so that after
/// `seek(&cursor)` the same batches follow (checkpoints store it).
pub trait BatchSource {
    /// The next batch.
    fn next_batch(&mut self) -> Result<TokenBatch>;
    /// The position in the stream, as JSON.
    fn cursor(&self) -> Value;
    /// Returns to a position produced by [`BatchSource::cursor`].
    fn seek(&mut self, cursor: &Value) -> Result<()>;
}

/// Cycles through a fixed list of batches (cursor = index of the next one).
#[derive(Debug, Clone)]
pub struct VecSource {
    batches: Vec<TokenBatch>,
    next: usize,
}

impl VecSource {
    /// A source over `batches`; errors when the list is empty.
    pub fn new(batches: Vec<TokenBatch>) -> Result<Self> {
        if batches.is_empty() {
            return Err(TowersError::Data("no batches".into()));
        }
        Ok(Self { batches, next: 0 })
    }
}

impl BatchSource for VecSource {
    fn next_batch(&mut self) -> Result<TokenBatch> {
        let b = self.batches[self.next % self.batches.len()].clone();
        self.next += 1;
        Ok(b)
    }
    fn cursor(&self) -> Value {
        json!({ "next": self.next })
    }
    fn seek(&mut self, cursor: &Value) -> Result<()> {
        self.next = cursor["next"]
            .as_u64()
            .ok_or_else(|| TowersError::Data(format!("bad VecSource cursor {cursor}")))?
            as usize;
        Ok(())
    }
}

/// Entropy (nats) of the empirical distribution of the labels in `batches` — the loss of the
/// best context-free (unigram) predictor on them.
pub fn unigram_entropy(batches: &[TokenBatch]) -> f64 {
    let mut counts = std::collections::HashMap::<u32, f64>::new();
    let mut n = 0.0;
    for b in batches {
        for &l in b.labels.iter().filter(|&&l| l != IGNORE_LABEL) {
            *counts.entry(l).or_default() += 1.0;
            n += 1.0;
        }
    }
    counts.values().map(|&c| -(c / n) * (c / n).ln()).sum()
}

/// A [`BatchSource`] over the corpus crate's [`corpus::Batcher`] (deterministic shuffled
/// epochs; the cursor is the batcher's [`corpus::BatchCursor`]).
#[derive(Debug, Clone)]
pub struct CorpusSource {
    batcher: corpus::Batcher,
    cursor: corpus::BatchCursor,
    order: corpus::OrderCache,
}

impl CorpusSource {
    /// Streams `batcher` from its first batch.
    pub fn new(batcher: corpus::Batcher) -> Self {
        Self {
            batcher,
            cursor: corpus::BatchCursor::default(),
            order: corpus::OrderCache::default(),
        }
    }

    /// The underlying batcher.
    pub fn batcher(&self) -> &corpus::Batcher {
        &self.batcher
    }
}

impl BatchSource for CorpusSource {
    fn next_batch(&mut self) -> Result<TokenBatch> {
        let b = self.batcher.batch_with(self.cursor, &mut self.order)?;
        self.cursor = self.batcher.next_cursor(self.cursor);
        Ok(b)
    }
    fn cursor(&self) -> Value {
        let cfg = self.batcher.config();
        json!({
            "epoch": self.cursor.epoch,
            "position": self.cursor.position,
            "seed": cfg.seed,
            "batch_size": cfg.batch_size,
        })
    }
    fn seek(&mut self, cursor: &Value) -> Result<()> {
        let c: corpus::BatchCursor = serde_json::from_value(cursor.clone())
            .map_err(|e| TowersError::Data(format!("bad corpus cursor {cursor}: {e}")))?;
        // The position means the same batches only under the same seed and batch size
        // (checkpoints written before these were recorded carry neither).
        let cfg = self.batcher.config();
        for (key, now) in [("seed", cfg.seed), ("batch_size", cfg.batch_size as u64)] {
            if let Some(saved) = cursor.get(key).and_then(Value::as_u64) {
                if saved != now {
                    return Err(TowersError::Data(format!(
                        "the checkpoint's data cursor was written with {key} {saved}, this \
                         source has {key} {now}: resuming would train on other batches"
                    )));
                }
            }
        }
        self.cursor = c;
        Ok(())
    }
}
