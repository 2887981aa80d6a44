//! A run's scores file, `scores.safetensors`: every head's log p(target) on the run's fixed
//! scoring set, in one safetensors file that any machine reads without the run's checkpoints
//! or corpus. The codec and its layout are [`heads::ScoresFile`] (`heads::scores_file`); its
//! `scoring` metadata is the run's [`crate::ScoringSetId::fingerprint`].
//!
//! A run's file holds two head sets: `main` ([`MAIN`], the heads of the head seed) and `retest`
//! ([`RETEST`], head seed + 1). A phase-1 snapshot's job writes its own scores file with the
//! same two sets in `emergence/step-<N>/`.

pub use heads::{ScoresFile, SCORES_VERSION};

/// File name of a run's scores.
pub const SCORES_FILE: &str = "scores.safetensors";

/// The name of the main heads' set.
pub const MAIN: &str = "main";
/// The name of the retest heads' set.
pub const RETEST: &str = "retest";
