//! The probes' losses on padded batches, as differentiable candle graphs (basic ops only, so
//! every variable gets its gradient).

use candle_core::{Result, Tensor, D};

use crate::params::DistanceLoss;

/// Offset inside the released code's square root (keeps its gradient finite at distance 0).
pub const RELEASED_SQRT_EPS: f64 = 1e-4;

/// Squared distances ‖B(h_i − h_j)‖² [b, n, n] of states `x` [b, n, H] under `proj` B [k, H],
/// by ‖p_i‖² + ‖p_j‖² − 2 p_i·p_j with p = B h (clamped at 0 against rounding).
pub fn squared_distances(proj: &Tensor, x: &Tensor) -> Result<Tensor> {
    let (b, n, h) = x.dims3()?;
    let k = proj.dim(0)?;
    let p = x
        .reshape((b * n, h))?
        .matmul(&proj.t()?)?
        .reshape((b, n, k))?;
    let norms = p.sqr()?.sum_keepdim(D::Minus1)?; // [b, n, 1]
    let gram = p.matmul(&p.t()?.contiguous()?)?; // [b, n, n]
    norms
        .broadcast_add(&norms.t()?)?
        .sub(&(gram * 2.0)?)?
        .relu()
}

/// Squared norms ‖B h_i‖² [b, n] of states `x` [b, n, H] under `proj` B [k, H].
pub fn squared_norms(proj: &Tensor, x: &Tensor) -> Result<Tensor> {
    let (b, n, h) = x.dims3()?;
    let k = proj.dim(0)?;
    x.reshape((b * n, h))?
        .matmul(&proj.t()?)?
        .reshape((b, n, k))?
        .sqr()?
        .sum(D::Minus1)
}

/// The distance probe's loss ([`DistanceLoss`]) on a batch: states `x` [b, n, H], tree
/// distances `target` [b, n, n], `mask` [b, n, n] (1 on pairs of real words), `lens` [b]
/// (words per sentence, as floats).
pub fn distance_loss(
    proj: &Tensor,
    x: &Tensor,
    target: &Tensor,
    mask: &Tensor,
    lens: &Tensor,
    kind: DistanceLoss,
) -> Result<Tensor> {
    let sq = squared_distances(proj, x)?;
    match kind {
        DistanceLoss::HewittManning => {
            let per = (sq - target)?
                .abs()?
                .mul(mask)?
                .sum(D::Minus1)?
                .sum(D::Minus1)?;
            per.div(&lens.sqr()?)?.mean_all()
        }
        DistanceLoss::ReleasedMse => {
            let pred = (sq + RELEASED_SQRT_EPS)?.sqrt()?;
            let se = (pred - target)?.sqr()?.mul(mask)?.sum_all()?;
            se.div(&mask.sum_all()?)
        }
    }
}

/// The depth probe's loss on a batch: states `x` [b, n, H], depths `target` [b, n], `mask`
/// [b, n] (1 on real words), `lens` [b]: the mean over sentences of (1/|s|) Σ_i |‖w_i‖ − ‖B h_i‖²|.
pub fn depth_loss(
    proj: &Tensor,
    x: &Tensor,
    target: &Tensor,
    mask: &Tensor,
    lens: &Tensor,
) -> Result<Tensor> {
    let per = (squared_norms(proj, x)? - target)?
        .abs()?
        .mul(mask)?
        .sum(D::Minus1)?;
    per.div(lens)?.mean_all()
}

/// Logits W h + b [N, tags] of word vectors `x` [N, H].
pub fn upos_logits(w: &Tensor, bias: &Tensor, x: &Tensor) -> Result<Tensor> {
    x.matmul(&w.t()?)?.broadcast_add(bias)
}

/// The UPOS probe's loss: mean cross-entropy of softmax(W h + b) against `labels` [N] (u32).
pub fn upos_loss(w: &Tensor, bias: &Tensor, x: &Tensor, labels: &Tensor) -> Result<Tensor> {
    candle_nn::loss::cross_entropy(&upos_logits(w, bias, x)?, labels)
}
