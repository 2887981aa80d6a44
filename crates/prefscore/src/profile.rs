//! Score profiles of several runs in one run's order (Fig. 3 of the two-tower paper).

use crate::{PrefscoreError, Result};

/// The tokens among `tokens` scored in `by` and in every one of `runs`, sorted by `by`'s score
/// ascending (ties by token id), and each run's scores in that order: the curves of Fig. 3
/// (several runs plotted against the ranking of one).
pub fn sorted_profile(
    by: &[Option<f64>],
    runs: &[&[Option<f64>]],
    tokens: &[u32],
) -> Result<(Vec<u32>, Vec<Vec<f64>>)> {
    if runs.iter().any(|r| r.len() != by.len()) {
        return Err(PrefscoreError::invalid(
            "all score vectors must cover the same vocabulary",
        ));
    }
    let score = |s: &[Option<f64>], a: u32| {
        s.get(a as usize)
            .copied()
            .flatten()
            .filter(|v| v.is_finite())
    };
    let mut keep: Vec<(f64, u32)> = tokens
        .iter()
        .filter(|&&a| runs.iter().all(|r| score(r, a).is_some()))
        .filter_map(|&a| score(by, a).map(|s| (s, a)))
        .collect();
    keep.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
    let order: Vec<u32> = keep.iter().map(|&(_, a)| a).collect();
    let curves = runs
        .iter()
        .map(|r| order.iter().map(|&a| score(r, a).unwrap_or(0.0)).collect())
        .collect();
    Ok((order, curves))
}
