//! Where batches come from: the [`BatchSource`] trait (resumable through a JSON cursor), a
//! cycling in-memory source, and a seeded Markov-chain source for tests and smoke runs.

use corpus::{TokenBatch, IGNORE_LABEL};
use rand::Rng;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};

use crate::config::Style;
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

/// PAD id of the synthetic source.
pub const SYN_PAD: u32 = 0;
/// MASK id of the synthetic source.
pub const SYN_MASK: u32 = 1;

/// Sequences from a random sparse Markov chain over ids 2..V: each state has `branching`
/// successors with random weights, so the next token is far more predictable (≈ log branching
/// nats) than the unigram distribution (≈ log (V−2)). Labels follow the style's objective
/// (causal next token, ELMo the token itself, BERT masking (15% by default) with 80/10/10); about a quarter
/// of the rows are right-padded with PAD = 0.
#[derive(Debug, Clone)]
pub struct MarkovSource {
    style: Style,
    vocab: usize,
    batch_size: usize,
    seq_len: usize,
    succ: Vec<Vec<(u32, f64)>>,
    seed: u64,
    rng: ChaCha8Rng,
    produced: u64,
    mask_rate: f64,
}

impl MarkovSource {
    /// A chain drawn from `chain_seed`, batches sampled from `seed`.
    pub fn new(
        style: Style,
        vocab: usize,
        branching: usize,
        batch_size: usize,
        seq_len: usize,
        chain_seed: u64,
        seed: u64,
    ) -> Result<Self> {
        if vocab < 4 || branching == 0 || batch_size == 0 || seq_len < 2 {
            return Err(TowersError::Config(
                "MarkovSource needs vocab >= 4, branching >= 1, batch_size >= 1, seq_len >= 2"
                    .into(),
            ));
        }
        let mut crng = ChaCha8Rng::seed_from_u64(chain_seed);
        let succ = (0..vocab)
            .map(|_| {
                let w: Vec<(u32, f64)> = (0..branching)
                    .map(|_| {
                        (
                            crng.random_range(2..vocab as u32),
                            crng.random_range(0.2..1.0),
                        )
                    })
                    .collect();
                let s: f64 = w.iter().map(|x| x.1).sum();
                w.into_iter().map(|(t, p)| (t, p / s)).collect()
            })
            .collect();
        Ok(Self {
            style,
            vocab,
            batch_size,
            seq_len,
            succ,
            seed,
            rng: ChaCha8Rng::seed_from_u64(seed),
            produced: 0,
            mask_rate: 0.15,
        })
    }

    /// Sets the BERT masking rate (default 0.15); errors outside (0, 1].
    pub fn with_mask_rate(mut self, rate: f64) -> Result<Self> {
        if !(rate > 0.0 && rate <= 1.0) {
            return Err(TowersError::Config(format!(
                "mask rate {rate} not in (0, 1]"
            )));
        }
        self.mask_rate = rate;
        Ok(self)
    }

    fn step(&mut self, state: u32) -> u32 {
        let r: f64 = self.rng.random();
        let mut acc = 0.0;
        let succ = &self.succ[state as usize];
        for &(t, p) in succ {
            acc += p;
            if r < acc {
                return t;
            }
        }
        succ[succ.len() - 1].0
    }
}

impl BatchSource for MarkovSource {
    fn next_batch(&mut self) -> Result<TokenBatch> {
        let (b, t) = (self.batch_size, self.seq_len);
        let mut ids = vec![SYN_PAD; b * t];
        let mut mask = vec![0u8; b * t];
        let mut labels = vec![IGNORE_LABEL; b * t];
        for row in 0..b {
            let len = if self.rng.random_bool(0.25) {
                self.rng.random_range(t / 2..t).max(2)
            } else {
                t
            };
            let mut s = self.rng.random_range(2..self.vocab as u32);
            for p in 0..len {
                ids[row * t + p] = s;
                mask[row * t + p] = 1;
                s = self.step(s);
            }
            for p in 0..len {
                let i = row * t + p;
                match self.style {
                    Style::Gpt if p + 1 < len => labels[i] = ids[i + 1],
                    Style::Gpt => {}
                    Style::Elmo => labels[i] = ids[i],
                    Style::Bert => {
                        if self.rng.random_bool(self.mask_rate) {
                            labels[i] = ids[i];
                            let r: f64 = self.rng.random();
                            if r < 0.8 {
                                ids[i] = SYN_MASK;
                            } else if r < 0.9 {
                                ids[i] = self.rng.random_range(2..self.vocab as u32);
                            }
                        }
                    }
                }
            }
        }
        self.produced += 1;
        Ok(TokenBatch {
            batch_size: b,
            seq_len: t,
            input_ids: ids,
            attention_mask: mask,
            labels,
        })
    }

    fn cursor(&self) -> Value {
        json!({
            "seed": self.seed,
            "word_pos": self.rng.get_word_pos().to_string(),
            "produced": self.produced,
        })
    }

    fn seek(&mut self, cursor: &Value) -> Result<()> {
        let bad = || TowersError::Data(format!("bad MarkovSource cursor {cursor}"));
        let seed = cursor["seed"].as_u64().ok_or_else(bad)?;
        let pos: u128 = cursor["word_pos"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .ok_or_else(bad)?;
        self.seed = seed;
        self.rng = ChaCha8Rng::seed_from_u64(seed);
        self.rng.set_word_pos(pos);
        self.produced = cursor["produced"].as_u64().ok_or_else(bad)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markov_cursor_resumes_the_stream() {
        let mut a = MarkovSource::new(Style::Bert, 32, 2, 4, 8, 1, 2).unwrap();
        a.next_batch().unwrap();
        let c = a.cursor();
        let x = a.next_batch().unwrap();
        let mut b = MarkovSource::new(Style::Bert, 32, 2, 4, 8, 1, 99).unwrap();
        b.seek(&c).unwrap();
        assert_eq!(b.next_batch().unwrap(), x);
    }
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
        json!({ "epoch": self.cursor.epoch, "position": self.cursor.position })
    }
    fn seek(&mut self, cursor: &Value) -> Result<()> {
        let c: corpus::BatchCursor = serde_json::from_value(cursor.clone())
            .map_err(|e| TowersError::Data(format!("bad corpus cursor {cursor}: {e}")))?;
        self.cursor = c;
        Ok(())
    }
}
