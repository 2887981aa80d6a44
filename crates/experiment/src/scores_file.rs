//! A run's scores file, `scores.safetensors`: every head's log p(target) on the run's fixed
//! scoring set, in one safetensors file that any machine reads without the run's checkpoints
//! or corpus. The codec and its layout are [`heads::ScoresFile`] (`heads::scores_file`); its
//! `scoring` metadata is the run's [`crate::ScoringSetId::fingerprint`].
//!
//! A run's file holds two head sets: `main` ([`MAIN`], the heads of the head seed) and `retest`
//! ([`RETEST`], head seed + 1). A phase-1 snapshot's job writes its own scores file with the
//! same two sets in `emergence/step-<N>/`.
//!
//! Size: 12 bytes per scored position plus 4·K per position for each head set, so 28 bytes per
//! position for a run's two sets of K = 2 towers. The `cpu` protocol's scoring sets hold
//! 500,979 positions (GPT), 504,545 (BERT, masked) and 518,680 (ELMo): 14.0, 14.1 and 14.5 MB a
//! run, and as much again for each of its three snapshot jobs.

pub use heads::{ScoresFile, SCORES_VERSION};

/// File name of a run's scores.
pub const SCORES_FILE: &str = "scores.safetensors";

/// The name of the main heads' set.
pub const MAIN: &str = "main";
/// The name of the retest heads' set.
pub const RETEST: &str = "retest";
