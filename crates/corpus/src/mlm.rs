//! Masked-LM corruption (BERT): 15% of the maskable positions are chosen; of those 80% become
//! `[MASK]`, 10% a random token, 10% stay; labels are set at the chosen positions only.

use rand::seq::index::sample;
use rand::Rng;

use crate::error::{CorpusError, Result};
use crate::labels::IGNORE_LABEL;
use crate::tokenizer::SpecialTokens;

/// Masking rates (defaults: BERT's 15% with 80/10/10).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MaskingConfig {
    /// Fraction of maskable positions that get a label.
    pub mask_prob: f64,
    /// Of those, the fraction replaced by `[MASK]`.
    pub replace_mask: f64,
    /// Of those, the fraction replaced by a random (non-special) token; the rest stay unchanged.
    pub replace_random: f64,
}

impl Default for MaskingConfig {
    fn default() -> Self {
        Self {
            mask_prob: 0.15,
            replace_mask: 0.8,
            replace_random: 0.1,
        }
    }
}

impl MaskingConfig {
    /// Checks the rates are probabilities and the two replacement fractions sum to at most 1.
    pub fn validate(&self) -> Result<()> {
        let ok = |p: f64| (0.0..=1.0).contains(&p);
        if !ok(self.mask_prob)
            || !ok(self.replace_mask)
            || !ok(self.replace_random)
            || self.replace_mask + self.replace_random > 1.0 + 1e-12
        {
            return Err(CorpusError::InvalidArgument(format!(
                "masking rates {self:?} are not probabilities summing to at most 1"
            )));
        }
        Ok(())
    }
}

/// Applies MLM masking to one sequence in place.
///
/// `ids` is the (padded) sequence, `labels` receives the original id at the chosen positions and
/// [`IGNORE_LABEL`] elsewhere. Positions holding any of the five special tokens (PAD included)
/// are never chosen. Exactly `round(mask_prob * n)` of the `n` maskable positions are chosen,
/// at least one when `n > 0` and `mask_prob > 0`. Random replacements are drawn uniformly from
/// the non-special ids of `0..vocab_size`. Returns the number of chosen positions; rates that
/// are not probabilities ([`MaskingConfig::validate`]) are an error.
pub fn mask_sequence<R: Rng + ?Sized>(
    ids: &mut [u32],
    labels: &mut [u32],
    specials: &SpecialTokens,
    vocab_size: usize,
    config: &MaskingConfig,
    rng: &mut R,
) -> Result<usize> {
    config.validate()?;
    if ids.len() != labels.len() {
        return Err(CorpusError::InvalidArgument(format!(
            "{} ids but {} labels",
            ids.len(),
            labels.len()
        )));
    }
    if vocab_size
        <= specials
            .ids()
            .iter()
            .filter(|&&s| (s as usize) < vocab_size)
            .count()
    {
        return Err(CorpusError::InvalidArgument(format!(
            "vocab_size {vocab_size} has no non-special token"
        )));
    }
    labels.fill(IGNORE_LABEL);
    let maskable: Vec<usize> = (0..ids.len())
        .filter(|&i| !specials.contains(ids[i]))
        .collect();
    let n = maskable.len();
    if n == 0 || config.mask_prob <= 0.0 {
        return Ok(0);
    }
    let k = ((config.mask_prob * n as f64).round() as usize).clamp(1, n);
    for j in sample(rng, n, k) {
        let pos = maskable[j];
        labels[pos] = ids[pos];
        let u: f64 = rng.random();
        if u < config.replace_mask {
            ids[pos] = specials.mask;
        } else if u < config.replace_mask + config.replace_random {
            ids[pos] = loop {
                let r = rng.random_range(0..vocab_size as u32);
                if !specials.contains(r) {
                    break r;
                }
            };
        }
    }
    Ok(k)
}
