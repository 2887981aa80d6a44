//! `experiment`: the two-tower paper's experiments (He & Toyoizumi) as typed library API.
//!
//! The building-block crates (`corpus`, `towers`, `heads`, `prefscore`, `ica`, `report`) know
//! nothing of the experiments; this crate composes them into what a user runs, in stages that
//! only point down:
//!
//! - **a run is a job** ([`run`], [`manifest`]): one folder with `manifest.json` (spec, stage,
//!   fingerprints, weights hash, device, build), the checkpoints, and `scores.safetensors`
//!   ([`scores_file`]: every head's log p(target) on the fixed [`scoring::ScoringSet`]).
//!   [`Workspace::ensure_run`] trains phase 1 (joint head, weight snapshots), retrains one head
//!   per frozen tower (phases 2/3, [`training`]) and scores every head, resuming from
//!   checkpoints and reusing finished runs, one writer per folder ([`lock`]);
//! - **scoring a snapshot is a job** ([`snapshots`]): [`Workspace::ensure_snapshot`] trains and
//!   scores the heads of one phase-1 snapshot of a finished run in its own folder;
//! - **analyses are pure functions of scored runs** loaded by [`ScoredRun::load`] from any
//!   folder ([`analysis`], [`controls`], [`split_scoring`], [`orientation`], [`pieces`],
//!   [`emergence`], [`groups`]), and their tables and figures ([`tables`], `report`);
//! - **a study** ([`protocol`] says what one is): [`study::run_study`] runs the run stage, then
//!   [`study::analyze`] each analysis unit of [`units`] over the scored runs; progress goes
//!   through the caller's [`Progress`].
//!
//! Corpus to tables, in order: `corpus` text and tokenizer → `towers::Trainer` (phase 1) →
//! `heads::retrain` (phases 2/3) → `heads::evaluate` on the scoring set → `prefscore` scores →
//! correlations, reliability, POS and ICA tables (`report`).

#![deny(missing_docs)]

pub mod analysis;
pub mod controls;
pub mod data;
pub mod emergence;
pub mod error;
pub mod groups;
pub mod lock;
pub mod manifest;
pub mod orientation;
pub mod pieces;
pub mod pos;
pub mod pos_by_run;
pub mod progress;
pub mod protocol;
pub mod run;
pub mod scores_file;
pub mod scoring;
pub mod snapshots;
pub mod spec;
pub mod split_scoring;
pub mod study;
pub mod tables;
#[cfg(test)]
mod test_rng;
#[cfg(test)]
mod test_runs;
pub mod training;
pub mod units;
pub mod workspace;

pub use data::CorpusData;
pub use error::{ExperimentError, Result};
pub use groups::{word_groups, write_word_groups, WordGroupOutputs, WordGroupSettings};
pub use manifest::{read_manifest, HeadQuality, Manifest, RunId, RunOptions, RunResult, Stage};
pub use progress::Progress;
pub use run::{run_status, shared_embedding, ScoredRun};
pub use scoring::{ScoringSet, ScoringSetId, ScoringSpec, ScoringText};
pub use spec::{Corpus, CorpusSpec, HeadSettings, Phase1Settings, RunSpec};
pub use study::{analyze, run_study, Protocol, StudyOutcome, StudySpec};
pub use workspace::Workspace;
