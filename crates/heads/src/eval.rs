//! Evaluation of every head on the same positions: per position the target and each tower's
//! log p(target) (optionally the full log-distribution).

use std::path::Path;

use corpus::{TokenBatch, IGNORE_LABEL};
use serde::{Deserialize, Serialize};
use towers::nn::log_softmax_last;
use towers::nn::score_log_probs;
use towers::TwoTowerLm;

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

    /// Writes the results as JSON.
    pub fn save_json(&self, path: &Path) -> Result<()> {
        let bytes = serde_json::to_vec(self)?;
        std::fs::write(path, bytes).map_err(|source| HeadsError::Io {
            path: path.display().to_string(),
            source,
        })
    }
}

/// A scoring pass part of the way through: the results of its first `batches_done` batches.
/// [`evaluate_resuming`] goes on from one, so a long pass that a caller saves now and then
/// (e.g. as JSON) resumes after a stop with the same numbers as one uninterrupted pass.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartialEvaluation {
    /// Batches evaluated so far (those without a target included).
    pub batches_done: usize,
    /// Their results.
    pub scores: PositionLogProbs,
}

impl PartialEvaluation {
    /// Nothing evaluated yet, for the K heads of `heads` (`full`: keep whole distributions).
    pub fn new(heads: &TowerHeads, full: bool) -> Self {
        let k_n = heads.config().n_towers;
        Self {
            batches_done: 0,
            scores: PositionLogProbs {
                vocab_size: heads.config().vocab_size,
                targets: Vec::new(),
                batch_index: Vec::new(),
                position: Vec::new(),
                logp: vec![Vec::new(); k_n],
                full: full.then(|| vec![Vec::new(); k_n]),
            },
        }
    }

    /// Whether this state can go on with `heads` over `n_batches` batches: the same K, V and
    /// kind of pass, no more batches done than there are, and one result per target.
    fn check(&self, heads: &TowerHeads, n_batches: usize) -> Result<()> {
        let (s, c) = (&self.scores, heads.config());
        let n = s.targets.len();
        let fits = s.vocab_size == c.vocab_size
            && s.logp.len() == c.n_towers
            && s.logp.iter().all(|l| l.len() == n)
            && s.batch_index.len() == n
            && s.position.len() == n
            && s.full.as_ref().is_none_or(|f| f.len() == c.n_towers)
            && self.batches_done <= n_batches;
        match fits {
            true => Ok(()),
            false => Err(HeadsError::Mismatch(format!(
                "a partial scoring of {} batches ({} positions, {} heads, V {}) does not fit {} \
                 heads (V {}) over {n_batches} batches",
                self.batches_done,
                n,
                s.logp.len(),
                s.vocab_size,
                c.n_towers,
                c.vocab_size
            ))),
        }
    }
}

/// Evaluates every head of `heads` on the labelled positions of `batches` (the same positions
/// and masks for all towers); `full` also keeps each head's whole log-distribution.
pub fn evaluate(
    model: &TwoTowerLm,
    heads: &TowerHeads,
    batches: &[TokenBatch],
    full: bool,
) -> Result<PositionLogProbs> {
    let mut state = PartialEvaluation::new(heads, full);
    evaluate_resuming(model, heads, batches, &mut state, &mut |_, _| Ok(()))?;
    Ok(state.scores)
}

/// [`evaluate`] from `state` on: evaluates `batches[state.batches_done..]`, appending to
/// `state`. After each batch it calls `save(state, false)`, where a caller keeps its progress
/// as often as it likes; on a stop request ([`towers::request_stop`]) it calls
/// `save(state, true)` and returns [`HeadsError::Stopped`]. Each batch is scored on its own,
/// so the result does not depend on where a pass stopped and resumed.
pub fn evaluate_resuming(
    model: &TwoTowerLm,
    heads: &TowerHeads,
    batches: &[TokenBatch],
    state: &mut PartialEvaluation,
    save: &mut dyn FnMut(&PartialEvaluation, bool) -> Result<()>,
) -> Result<()> {
    state.check(heads, batches.len())?;
    while state.batches_done < batches.len() {
        let bi = state.batches_done;
        // A scoring pass takes minutes on a CPU: a stop request ends it between batches.
        if towers::stop_requested() {
            save(state, true)?;
            return Err(HeadsError::Stopped {
                done: bi,
                total: batches.len(),
            });
        }
        score_batch(model, heads, &batches[bi], bi, &mut state.scores)?;
        state.batches_done += 1;
        save(state, false)?;
    }
    Ok(())
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
