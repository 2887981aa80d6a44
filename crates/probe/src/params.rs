//! The probes' settings, checked before training (linfa style: `ProbeParams` → `fit` →
//! `predict` / `evaluate`).

use serde::{Deserialize, Serialize};

use crate::error::{ProbeError, Result};

/// The loss of the structural distance probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum DistanceLoss {
    /// Hewitt & Manning (2019), eq. 2 of their paper: the predicted squared distance
    /// d_B(h_i, h_j)² = (B(h_i − h_j))ᵀ(B(h_i − h_j)) against the tree distance d_T, L1,
    /// normalised per sentence by its squared length: Σ_ℓ 1/|s_ℓ|² Σ_{i,j} |d_T − d_B²|
    /// (averaged over a batch's sentences).
    #[default]
    HewittManning,
    /// The two-tower paper's released code (`probe_distmat`): the Euclidean distance
    /// √(‖B(h_i − h_j)‖² + 10⁻⁴) against d_T, squared error averaged over all word pairs of
    /// the batch.
    ReleasedMse,
}

/// What a probe predicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProbeTask {
    /// The structural distance probe: a rank-k map B with d_B(h_i, h_j) tracking the tree
    /// distance between words i and j.
    Distance(DistanceLoss),
    /// The structural depth probe: ‖B h_i‖² against the depth ‖w_i‖ of word i, L1,
    /// normalised per sentence by its length: Σ_ℓ 1/|s_ℓ| Σ_i |‖w_i‖ − ‖B h_i‖²|.
    Depth,
    /// A linear UPOS probe: softmax regression p(tag | h) = softmax(W h + b), cross-entropy.
    Upos,
}

impl ProbeTask {
    /// Short name for tables and files.
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeTask::Distance(DistanceLoss::HewittManning) => "distance",
            ProbeTask::Distance(DistanceLoss::ReleasedMse) => "distance-mse",
            ProbeTask::Depth => "depth",
            ProbeTask::Upos => "upos",
        }
    }
}

/// The settings of one probe. Defaults: rank 64 (the released code's `parse_dim`), 30 epochs,
/// Adam at 10⁻³, no L2 penalty, 20 sentences a batch, stop after 4 epochs without a better dev
/// loss, seed 0.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ProbeParams {
    /// What is predicted and with which loss.
    pub task: ProbeTask,
    /// Rows k of B (structural probes; ignored by the UPOS probe). At most the states' width.
    pub rank: usize,
    /// Most passes over the training sentences.
    pub epochs: usize,
    /// Adam's learning rate.
    pub learning_rate: f64,
    /// L2 penalty λ‖B‖²_F (‖W‖²_F for UPOS) added to the training loss.
    pub l2: f64,
    /// Sentences per batch.
    pub batch_sentences: usize,
    /// Epochs without a lower dev loss before stopping (the weights of the best epoch are kept).
    pub patience: usize,
    /// Seed of the initial weights and the batch order.
    pub seed: u64,
}

impl ProbeParams {
    /// The default settings for `task`.
    pub fn new(task: ProbeTask) -> Self {
        Self {
            task,
            rank: 64,
            epochs: 30,
            learning_rate: 1e-3,
            l2: 0.0,
            batch_sentences: 20,
            patience: 4,
            seed: 0,
        }
    }

    /// Hewitt & Manning's distance probe.
    pub fn distance() -> Self {
        Self::new(ProbeTask::Distance(DistanceLoss::HewittManning))
    }

    /// The depth probe.
    pub fn depth() -> Self {
        Self::new(ProbeTask::Depth)
    }

    /// The UPOS probe.
    pub fn upos() -> Self {
        Self::new(ProbeTask::Upos)
    }

    /// With rank `k`.
    pub fn rank(self, rank: usize) -> Self {
        Self { rank, ..self }
    }

    /// With at most `epochs` epochs.
    pub fn epochs(self, epochs: usize) -> Self {
        Self { epochs, ..self }
    }

    /// With learning rate `lr`.
    pub fn learning_rate(self, learning_rate: f64) -> Self {
        Self {
            learning_rate,
            ..self
        }
    }

    /// With L2 penalty `l2`.
    pub fn l2(self, l2: f64) -> Self {
        Self { l2, ..self }
    }

    /// With `n` sentences per batch.
    pub fn batch_sentences(self, batch_sentences: usize) -> Self {
        Self {
            batch_sentences,
            ..self
        }
    }

    /// With patience `p`.
    pub fn patience(self, patience: usize) -> Self {
        Self { patience, ..self }
    }

    /// With seed `seed`.
    pub fn seed(self, seed: u64) -> Self {
        Self { seed, ..self }
    }

    /// Checks every setting; `width` is the states' width H (the rank may not exceed it).
    pub fn check(&self, width: usize) -> Result<()> {
        let bad = |m: String| Err(ProbeError::InvalidParams(m));
        if self.task != ProbeTask::Upos && !(1..=width).contains(&self.rank) {
            return bad(format!("rank {} (1 ..= width {width})", self.rank));
        }
        if self.epochs == 0 {
            return bad("epochs 0 (at least 1)".into());
        }
        if !(self.learning_rate.is_finite() && self.learning_rate > 0.0) {
            return bad(format!(
                "learning rate {} (finite, > 0)",
                self.learning_rate
            ));
        }
        if !(self.l2.is_finite() && self.l2 >= 0.0) {
            return bad(format!("l2 {} (finite, >= 0)", self.l2));
        }
        if self.batch_sentences == 0 {
            return bad("batch_sentences 0 (at least 1)".into());
        }
        if self.patience == 0 {
            return bad("patience 0 (at least 1)".into());
        }
        Ok(())
    }
}
