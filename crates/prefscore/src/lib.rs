//! lmsplit-prefscore: which tokens each tower of a two-tower (or K-tower) language model
//! predicts better, and how stable that preference is (He & Toyoizumi, "Spontaneous Emerging
//! Preference in Two-tower Language Model").
//!
//! Plain data in, plain data out (no tensors):
//! 1. [`TokenStats`]: per token and tower, count, Σp and Σlog p of the target probability over
//!    the positions whose target is that token (all towers on identical positions); mergeable.
//! 2. [`TokenStats::scores`]: eq. 4's preference score s_a = log p̄1_a − log p̄2_a
//!    ([`ScoreKind::ArithmeticMean`]) or the released code's mean-log-p variant
//!    ([`ScoreKind::GeometricMean`]), tower 1 being the primary tower of eq. 3;
//!    [`TokenStats::scores_vs_rest`] for K > 2 towers. Unseen tokens score `None`.
//! 3. [`correlate`] / [`pairwise`]: Pearson (Table 2) or Spearman (Table 4) correlations over the
//!    most frequent tokens, with a seeded bootstrap interval and a permutation p-value;
//!    [`correlate_with_frequency`] against frequency rank.
//! 4. Controls: [`random_partition`] (single-tower pseudo-towers), [`split_positions`] and
//!    [`split_null`] (the sampling-noise null of a correlation), [`own_positions`] with
//!    [`TokenStats::scores_missing_as_zero`] (each tower scored on its own part of the text).
//! 5. Summaries: [`by_tag`] (POS, Fig. 4), [`group_summary`] (word groups, Table 3) and
//!    [`sorted_profile`] (several runs in one run's score order, Fig. 3).
//! 6. Reliability and the noise ceiling: [`split_half`] and [`split_half_reliability`]
//!    (Spearman–Brown corrected, [`spearman_brown`]), [`retest_reliability`], [`disattenuate`]
//!    and [`disattenuated_correlation`] (correction for attenuation with a joint bootstrap),
//!    [`partial_correlation`] and [`partial_on_log_frequency`] (controlling for log frequency),
//!    [`tokens_with_min_count`] (tokens seen at least [`DEFAULT_MIN_COUNT`] times in every run).

#![deny(missing_docs)]

mod control;
mod corr;
mod error;
mod profile;
mod reliability;
mod sample;
mod score;
mod stats;
mod summary;

pub use control::{
    own_positions, random_partition, split_null, split_positions, NullDistribution, SplitNull,
};
pub use corr::{
    correlate, correlate_with_frequency, correlation, pairwise, pearson, ranks, spearman,
    top_tokens, CorrOptions, Correlation, CorrelationMatrix, Method, MAX_STREAM,
};
pub use error::{PrefscoreError, Result};
pub use profile::sorted_profile;
pub use reliability::{
    disattenuate, disattenuated_correlation, partial_correlation, partial_on_log_frequency,
    retest_reliability, spearman_brown, split_half, split_half_reliability, tokens_with_min_count,
    Disattenuated, PartialCorrelation, Reliability, DEFAULT_MIN_COUNT,
};
pub use sample::{common_level, level_percent, quantile_sorted, Bootstrap, Interval};
pub use score::{ScoreKind, Scores};
pub use stats::TokenStats;
pub use summary::{by_tag, group_summary, GroupSummary, TagSummary};
