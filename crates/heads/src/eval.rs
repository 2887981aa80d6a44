//! Evaluation of every head on the same positions: per position the target and each tower's
//! log p(target) (optionally the full log-distribution).

use corpus::{TokenBatch, IGNORE_LABEL};
use serde::{Deserialize, Serialize};
use towers::nn::log_softmax_last;
use towers::nn::score_log_probs;
use towers::{StopToken, TwoTowerLm};

use crate::head::TowerHeads;
use crate::{HeadsError, Result};

/// Per-position results of all heads on identical positions (plain data for `prefscore`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PositionLogProbs {
    /// Vocabulary size V.
    pub vocab_size: usize,
    /// Target token id per evaluated position.
    pub targets: Vec<u32>,
    /// Index of the batch each position came from.
    pub batch_index: Vec<u32>,
    /// Flat index (row · seq_len + t) of the position inside its batch.
    pub position: Vec<u32>,
    /// `logp\[k\]\[i\]` = log p_k(targets\[i\]) under tower k's head (natural log).
    pub logp: Vec<Vec<f32>>,
    /// On request, `full[k]` = row-major [n_positions, V] log-probabilities of head k.
    pub full: Option<Vec<Vec<f32>>>,
}

impl PositionLogProbs {
    /// Number of evaluated positions.
    pub fn len(&self) -> usize {
        self.targets.len()
    }

    /// Whether no position was evaluated.
    pub fn is_empty(&self) -> bool {
        self.targets.is_empty()
    }

    /// Mean negative log-likelihood per tower.
    pub fn mean_nll(&self) -> Vec<f64> {
        self.logp
            .iter()
            .map(|l| -l.iter().map(|&x| x as f64).sum::<f64>() / l.len().max(1) as f64)
            .collect()
    }
}

/// Evaluates every head of `heads` on the labelled positions of `batches` (the same positions
/// and masks for all towers); `full` also keeps each head's whole log-distribution. A request
/// on `stop` ends the pass between batches ([`HeadsError::Stopped`]).
pub fn evaluate(
    model: &TwoTowerLm,
    heads: &TowerHeads,
    batches: &[TokenBatch],
    full: bool,
    stop: &StopToken,
) -> Result<PositionLogProbs> {
    let mut out = PositionLogProbs {
        vocab_size: heads.config().vocab_size,
        targets: Vec::new(),
        batch_index: Vec::new(),
        position: Vec::new(),
        logp: vec![Vec::new(); heads.config().n_towers],
        full: full.then(|| vec![Vec::new(); heads.config().n_towers]),
    };
    for (bi, b) in batches.iter().enumerate() {
        // A scoring pass takes minutes on a CPU: a stop request ends it between batches
        // (the run job scores again from its checkpoint).
        if stop.requested() {
            return Err(HeadsError::Stopped {
                done: bi,
                total: batches.len(),
            });
        }
        score_batch(model, heads, b, bi, &mut out)?;
    }
    Ok(out)
}

/// Appends the results of batch `bi` (nothing when it has no target).
fn score_batch(
    model: &TwoTowerLm,
    heads: &TowerHeads,
    b: &TokenBatch,
    bi: usize,
    out: &mut PositionLogProbs,
) -> Result<()> {
    if b.n_targets() == 0 {
        return Ok(());
    }
    let f = heads.features(model, b)?;
    for (k, x) in f.per_tower.iter().enumerate() {
        let head = heads
            .head(k)
            .ok_or_else(|| HeadsError::Mismatch(format!("no head {k}")))?;
        let logits = head.forward(x)?.detach();
        let picked = score_log_probs(&logits, &f.labels)?;
        if picked.iter().any(|v| !v.is_finite()) {
            return Err(
                towers::TowersError::NonFinite(format!("log-probability of head {k}")).into(),
            );
        }
        out.logp[k].extend(picked);
        if let Some(fl) = out.full.as_mut() {
            let lp = log_softmax_last(&logits)?;
            fl[k].extend(lp.flatten_all()?.to_vec1::<f32>()?);
        }
    }
    out.targets.extend(&f.labels);
    for (i, &l) in b.labels.iter().enumerate() {
        if l != IGNORE_LABEL {
            out.batch_index.push(bi as u32);
            out.position.push(i as u32);
        }
    }
    Ok(())
}
