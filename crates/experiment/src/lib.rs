//! `experiment`: the two-tower paper's experiments (He & Toyoizumi) as typed library API.
//!
//! The building-block crates (`corpus`, `towers`, `heads`, `prefscore`, `ica`, `report`) know
//! nothing of the experiments; this crate composes them into what a user runs, in stages that
//! only point down:
//!
//! - **a run is a job** ([`run`], [`manifest`]): one folder with `manifest.json` (spec, stage,
//!   fingerprints, weights hash, device, build), the checkpoints, and `scores.safetensors`
//!   (`heads::ScoresFile`: every head's log p(target) on the fixed [`scoring::ScoringSet`]).
//!   [`Workspace::ensure_run`] trains phase 1 (joint head, weight snapshots), retrains one head
//!   per frozen tower (phases 2/3, [`training`]) and scores every head, resuming from
//!   checkpoints and reusing finished runs, one writer per folder ([`disk`]);
//! - **scoring a snapshot is a job** ([`snapshots`]): [`Workspace::ensure_snapshot`] trains and
//!   scores the heads of one phase-1 snapshot of a finished run in its own folder;
//! - **an analysis is a value** ([`units::Analysis`]: a name, a typed output, a pure
//!   `compute` over runs loaded by [`ScoredRun::load`] from any folder, a `write` of its tables
//!   and figures, and the inputs it needs); the built-ins ([`units::builtin`], one module each
//!   in [`units`]) compose the computations of [`analysis`], [`controls`], [`split_scoring`],
//!   [`orientation`], [`pieces`], [`emergence`], [`groups`] and the tables of [`tables`];
//! - **a study** ([`protocol`] says what one is): [`study::run_study`] runs the run stage, then
//!   [`study::analyze`] runs a list of analyses over the scored runs (`study.json`: each one's
//!   output by name); progress goes through the caller's [`Progress`], silent by default.
//!
//! Corpus to tables, in order: `corpus` text and tokenizer → `towers::Trainer` (phase 1) →
//! `heads::retrain` (phases 2/3) → `heads::evaluate` on the scoring set → `prefscore` scores →
//! correlations, reliability, POS and ICA tables (`report`).

#![deny(missing_docs)]

pub mod analysis;
pub mod controls;
pub mod data;
pub mod disk;
pub mod emergence;
pub mod error;
pub mod groups;
pub mod manifest;
pub mod orientation;
pub mod pieces;
pub mod pos;
pub mod pos_by_run;
pub mod protocol;
pub mod run;
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
pub use report::Progress;
pub use run::{run_status, shared_embedding, ScoredRun};
pub use scoring::{ScoringSet, ScoringSetId, ScoringSpec, ScoringText};
pub use spec::{Corpus, CorpusSpec, HeadSettings, Phase1Settings, RunSpec};
pub use study::{analyze, run_study, Protocol, StudySpec};
pub use units::{builtin, Analysis, Input, LeftOut, Outputs, StudyContext, StudyOutcome, Unit};
pub use workspace::Workspace;
