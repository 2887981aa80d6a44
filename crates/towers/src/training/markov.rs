//! A seeded synthetic source for tests, benchmarks and smoke runs (feature `test-support`):
//! sequences from a random sparse Markov chain, labelled for each style's objective.

use corpus::{mask_sequence, MaskingConfig, Objective, SpecialTokens, TokenBatch, IGNORE_LABEL};
use rand::Rng;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};

use crate::style::Style;
use crate::training::data::BatchSource;
use crate::{Result, TowersError};

/// PAD id of the synthetic source.
pub const SYN_PAD: u32 = 0;
/// MASK id of the synthetic source.
pub const SYN_MASK: u32 = 1;

/// The source's special tokens: PAD and MASK (the other three roles point at PAD, which never
/// appears inside a sequence).
const SPECIALS: SpecialTokens = SpecialTokens {
    pad: SYN_PAD,
    unk: SYN_PAD,
    cls: SYN_PAD,
    sep: SYN_PAD,
    mask: SYN_MASK,
};

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
        let objective = self.style.objective();
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
                match objective {
                    Objective::CausalLm if p + 1 < len => labels[i] = ids[i + 1],
                    Objective::CausalLm | Objective::MaskedLm(_) => {}
                    Objective::BidirectionalLm => labels[i] = ids[i],
                }
            }
            if matches!(objective, Objective::MaskedLm(_)) {
                // The corpus crate's 80/10/10 rule, with the source's PAD and MASK as specials.
                let r = row * t..(row + 1) * t;
                let cfg = MaskingConfig {
                    mask_prob: self.mask_rate,
                    ..MaskingConfig::default()
                };
                mask_sequence(
                    &mut ids[r.clone()],
                    &mut labels[r],
                    &SPECIALS,
                    self.vocab,
                    &cfg,
                    &mut self.rng,
                )
                .map_err(|e| TowersError::Data(e.to_string()))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markov_cursor_resumes_the_stream() {
        let mut a = MarkovSource::new(Style::bert(), 32, 2, 4, 8, 1, 2).unwrap();
        a.next_batch().unwrap();
        let c = a.cursor();
        let x = a.next_batch().unwrap();
        let mut b = MarkovSource::new(Style::bert(), 32, 2, 4, 8, 1, 99).unwrap();
        b.seek(&c).unwrap();
        assert_eq!(b.next_batch().unwrap(), x);
    }
}
