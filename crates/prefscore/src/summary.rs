//! Score summaries per POS tag (Fig. 4) and per word group (Table 3).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::corr::ranks;
use crate::sample::{mean, quantile_sorted, sample_sd, Bootstrap, Interval};
use crate::{PrefscoreError, Result};

/// The scores of one tag's tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TagSummary {
    /// The tag (e.g. a UPOS tag).
    pub tag: String,
    /// Number of scored tokens with this tag.
    pub n: usize,
    /// Mean score.
    pub mean: f64,
    /// Bootstrap interval of the mean (`None` when disabled).
    pub interval: Option<Interval>,
    /// Sample standard deviation.
    pub sd: f64,
    /// 10%, 25%, 50%, 75%, 90% quantiles.
    pub quantiles: [f64; 5],
    /// Share of the tag's tokens with a positive score (preferred by the primary tower).
    pub share_primary: f64,
    /// The scores themselves (for histograms), in token order.
    pub scores: Vec<f64>,
    /// The token ids, aligned with `scores`.
    pub tokens: Vec<u32>,
}

/// Summaries per tag over the token ids `tokens` (e.g. the most frequent scored ones):
/// `tags[a]` is token a's tag (`None`: untagged, left out), `scores[a]` its score (`None`:
/// unseen, left out). Any printable tag works: `&str`, `String`, or the corpus crate's `Upos`
/// (`PosLexicon::to_dense` output can be passed as is). Sorted by number of tokens, largest
/// first (ties by tag). The bootstrap of the i-th tag (alphabetically) uses seed `boot.seed + i`.
/// A token listed twice is refused: it would count twice in its tag's mean and interval.
pub fn by_tag<T: std::fmt::Display>(
    scores: &[Option<f64>],
    tags: &[Option<T>],
    tokens: &[u32],
    boot: &Bootstrap,
) -> Result<Vec<TagSummary>> {
    boot.check()?;
    if scores.len() != tags.len() {
        return Err(PrefscoreError::invalid(format!(
            "{} scores but {} tags: both are indexed by token id",
            scores.len(),
            tags.len()
        )));
    }
    check_distinct(tokens, "the tokens to summarise")?;
    let mut groups: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for &a in tokens {
        let i = a as usize;
        if i >= scores.len() {
            return Err(PrefscoreError::invalid(format!(
                "token {a} outside the vocabulary"
            )));
        }
        if let (Some(s), Some(t)) = (scores[i], &tags[i]) {
            if s.is_finite() {
                groups.entry(t.to_string()).or_default().push(a);
            }
        }
    }
    let mut out = Vec::with_capacity(groups.len());
    for (stream, (tag, ids)) in groups.into_iter().enumerate() {
        let values: Vec<f64> = ids
            .iter()
            .map(|&a| scores[a as usize].unwrap_or(0.0))
            .collect();
        let mut sorted = values.clone();
        sorted.sort_by(f64::total_cmp);
        let q = |p: f64| quantile_sorted(&sorted, p).unwrap_or(f64::NAN);
        let b = Bootstrap {
            seed: boot.seed.wrapping_add(stream as u64),
            ..*boot
        };
        out.push(TagSummary {
            tag,
            n: values.len(),
            mean: mean(&values).unwrap_or(f64::NAN),
            interval: b.mean_interval(&values)?,
            sd: sample_sd(&values),
            quantiles: [q(0.1), q(0.25), q(0.5), q(0.75), q(0.9)],
            share_primary: share_positive(&values),
            scores: values,
            tokens: ids,
        });
    }
    out.sort_by(|a, b| b.n.cmp(&a.n).then_with(|| a.tag.cmp(&b.tag)));
    Ok(out)
}

/// Refuse a token id that `ids` lists more than once.
fn check_distinct(ids: &[u32], what: &str) -> Result<()> {
    let mut seen = std::collections::BTreeSet::new();
    match ids.iter().find(|&&a| !seen.insert(a)) {
        Some(a) => Err(PrefscoreError::invalid(format!(
            "token {a} is listed twice in {what}"
        ))),
        None => Ok(()),
    }
}

fn share_positive(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.iter().filter(|&&s| s > 0.0).count() as f64 / v.len() as f64
}

/// The scores of one word group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupSummary {
    /// Group name.
    pub name: String,
    /// Tokens listed in the group.
    pub size: usize,
    /// Tokens of the group that are in the reference set and scored (the ones summarised).
    pub n: usize,
    /// Mean score (`None` when n = 0).
    pub mean: Option<f64>,
    /// Bootstrap interval of the mean.
    pub interval: Option<Interval>,
    /// Mean rank of the group's tokens among the reference tokens, ranked by score descending
    /// (1 = most preferred by the primary tower, ties share their average rank); `None` when
    /// n = 0.
    pub mean_rank: Option<f64>,
    /// `mean_rank` scaled to [0, 1]: (rank − 1) / (N − 1) with N reference tokens (0.5 = no
    /// preference either way); `None` when n = 0 or N = 1.
    pub mean_rank_fraction: Option<f64>,
    /// Share of the group's tokens with a positive score; `None` when n = 0.
    pub share_primary: Option<f64>,
}

/// Summaries of word groups (Table 3): `groups` are (name, token ids), e.g. ICA clusters;
/// `reference` is the token set ranks are taken in (e.g. the 5000 most frequent scored tokens).
/// Group tokens that are unscored or outside `reference` are counted in `size` but not `n`.
/// A token listed twice in `reference` or in one group is refused (it would shift the ranks or
/// count twice in the group's mean).
pub fn group_summary(
    scores: &[Option<f64>],
    groups: &[(String, Vec<u32>)],
    reference: &[u32],
    boot: &Bootstrap,
) -> Result<Vec<GroupSummary>> {
    boot.check()?;
    check_distinct(reference, "the reference set")?;
    for (name, ids) in groups {
        check_distinct(ids, &format!("group {name}"))?;
    }
    let scored: Vec<u32> = reference
        .iter()
        .copied()
        .filter(|&a| {
            scores
                .get(a as usize)
                .copied()
                .flatten()
                .is_some_and(f64::is_finite)
        })
        .collect();
    if scored.is_empty() {
        return Err(PrefscoreError::NotEnoughData(
            "no scored token in the reference set".into(),
        ));
    }
    // Descending ranks: rank the negated scores ascending.
    let neg: Vec<f64> = scored
        .iter()
        .map(|&a| -scores[a as usize].unwrap_or(0.0))
        .collect();
    let r = ranks(&neg);
    let mut rank_of = vec![f64::NAN; scores.len()];
    for (&a, &rk) in scored.iter().zip(&r) {
        rank_of[a as usize] = rk;
    }
    let big_n = scored.len() as f64;
    groups
        .iter()
        .enumerate()
        .map(|(g, (name, ids))| {
            let members: Vec<u32> = ids
                .iter()
                .copied()
                .filter(|&a| rank_of.get(a as usize).is_some_and(|r| r.is_finite()))
                .collect();
            let values: Vec<f64> = members
                .iter()
                .map(|&a| scores[a as usize].unwrap_or(0.0))
                .collect();
            let member_ranks: Vec<f64> = members.iter().map(|&a| rank_of[a as usize]).collect();
            let mean_rank = mean(&member_ranks);
            let b = Bootstrap {
                seed: boot.seed.wrapping_add(g as u64),
                ..*boot
            };
            Ok(GroupSummary {
                name: name.clone(),
                size: ids.len(),
                n: members.len(),
                mean: mean(&values),
                interval: b.mean_interval(&values)?,
                mean_rank,
                mean_rank_fraction: mean_rank
                    .filter(|_| big_n > 1.0)
                    .map(|r| (r - 1.0) / (big_n - 1.0)),
                share_primary: (!values.is_empty()).then(|| share_positive(&values)),
            })
        })
        .collect()
}
