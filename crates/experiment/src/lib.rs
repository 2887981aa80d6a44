//! `experiment`: the papers' experiments as typed library API.
//!
//! The building-block crates (`corpus`, `towers`, `heads`, `prefscore`, `ica`, `lmd`, `report`)
//! know nothing of the experiments; this crate composes them into what a user runs:
//!
//! - the two-tower experiment (He & Toyoizumi), in stages that only point down:
//!   - **run stage**: a [`spec::RunSpec`] (saved as `run.json`, [`record`]) names the corpus, the
//!     model and the three phases; [`Workspace::ensure_run`] (the study's data folder and
//!     corpus, [`workspace`]) trains phase 1 (joint head, weight
//!     snapshots), retrains one head per frozen tower (phases 2/3, [`training`]), scores every
//!     head on one fixed [`scoring::ScoringSet`] and trains the snapshots' heads
//!     ([`snapshots`]), resuming from checkpoints and reusing finished runs, one writer per
//!     folder ([`lock`]);
//!   - **analysis stage**: pure functions of scored runs ([`analysis`], [`controls`],
//!     [`split_scoring`], [`orientation`], [`pieces`], [`emergence`], [`groups`]);
//!   - **report stage**: each result's tables and figures ([`tables`], `report`);
//!   - **study**: [`protocol`] says what a study is; [`study::run_study`] runs the run stage,
//!     then each analysis unit of [`units`] in turn; progress goes through the caller's
//!     [`Progress`]; [`compare::compare_run_folders`] puts finished runs of any folders
//!     through the same pair analysis and tables (e.g. one run trained on two machines);
//!     [`study::study_status`] reads where each run stands from its folder ([`status`]),
//!     training nothing; [`curve_so_far::curve_so_far`] draws the agreement curve over the
//!     snapshots written so far, beside the processes training the runs;
//! - the LMD study (Zhang): extraction, moments, analysis and tables ([`lmd_study`]).
//!
//! Corpus to tables, in order: `corpus` text and tokenizer → `towers::Trainer` (phase 1) →
//! `heads::retrain` (phases 2/3) → `heads::evaluate` on the scoring set → `prefscore` scores →
//! correlations, reliability, POS and ICA tables (`report`).

#![deny(missing_docs)]

pub mod analysis;
pub mod brought_snapshots;
pub mod compare;
pub mod controls;
pub mod curve_so_far;
pub mod data;
pub mod emergence;
pub mod error;
pub mod groups;
pub mod lmd_planted;
pub mod lmd_study;
pub mod lock;
pub mod machine;
pub mod orientation;
pub mod pieces;
pub mod pos;
pub mod pos_by_run;
pub mod progress;
pub mod protocol;
pub mod record;
pub mod resumable_scoring;
pub mod run;
pub mod scoring;
pub mod snapshots;
pub mod spec;
pub mod split_scoring;
pub mod status;
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
pub use groups::{word_groups, WordGroupOutputs, WordGroupSettings};
pub use progress::Progress;
pub use run::{
    open_run, shared_embedding, trained_model, HeadQuality, RunOptions, RunRecord, RunResult,
    ScoredRun,
};
pub use scoring::{ScoringSet, ScoringSetId, ScoringSpec, ScoringText};
pub use spec::{CorpusSpec, HeadSettings, Phase1Settings, RunSpec};
pub use study::{run_study, study_status, Protocol, StudyOutcome, StudySpec};
pub use workspace::Workspace;
