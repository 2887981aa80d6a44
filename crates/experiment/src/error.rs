//! The one error type of the experiment layer: every failure names what went wrong in a
//! sentence (`Display`), so command lines can print it as it is.

use std::path::{Path, PathBuf};

/// Errors of the experiment layer.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    /// A file or folder could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A JSON file could not be parsed or written.
    #[error("{path}: {source}")]
    Json {
        /// The file involved.
        path: PathBuf,
        /// The parse error.
        source: serde_json::Error,
    },
    /// A required input is missing (a corpus, tokenizer, model folder or data file).
    #[error("{path} is missing ({what})")]
    Missing {
        /// The path that was looked for.
        path: PathBuf,
        /// What it should have been.
        what: String,
    },
    /// A folder is not what the call expected (e.g. not a run folder).
    #[error("{path} is not {expected}")]
    NotA {
        /// The folder.
        path: PathBuf,
        /// What it should have been ("a run folder (it has no manifest.json)", ...).
        expected: String,
    },
    /// A run folder holds a different run than the one asked for.
    #[error(
        "{path} holds a different run: {} differ{}; choose another folder or remove it",
        fields.join(", "),
        if fields.len() == 1 { "s" } else { "" }
    )]
    SpecMismatch {
        /// The run folder.
        path: PathBuf,
        /// The differing fields of the run specification (dotted paths, e.g. `phase1.lr`).
        fields: Vec<String>,
    },
    /// A finished run asked for a larger phase-1 budget under a schedule that depends on it.
    #[error(
        "{path} holds this run trained to {from} tokens; phase1.budget_tokens = {to} would \
         continue it, but under the linear-decay schedule every learning rate depends on the \
         total: set phase1.schedule to constant (before the first run) or choose another folder"
    )]
    NotContinuable {
        /// The run folder.
        path: PathBuf,
        /// The saved budget.
        from: u64,
        /// The budget asked for.
        to: u64,
    },
    /// Two runs were scored on different scoring sets and cannot be compared.
    #[error("runs {a} and {b} were scored on different scoring sets ({fa} vs {fb})")]
    ScoringSetMismatch {
        /// First run.
        a: String,
        /// Second run.
        b: String,
        /// Fingerprint of the first run's set.
        fa: String,
        /// Fingerprint of the second run's set.
        fb: String,
    },
    /// Another process holds a folder's lock (see [`crate::disk::acquire_waiting`]): one writer per run folder.
    #[error(
        "{} is locked by {holder}: another process is writing this {what}; wait for it to end \
         or stop it",
        path.display()
    )]
    Locked {
        /// The lock file.
        path: PathBuf,
        /// What the folder is ("run", "study data").
        what: String,
        /// The holder, as a sentence (process id, host, since when).
        holder: String,
    },
    /// A write through a temporary file failed: the file at `path` is left as it was (the
    /// previous version, or none).
    #[error("could not write {}: {source}; its previous version (if any) is left as it was", path.display())]
    WriteFailed {
        /// The file that was to be written.
        path: PathBuf,
        /// The OS error (of the temporary file's write, its sync or the rename).
        source: std::io::Error,
    },
    /// A stop was requested ([`towers::StopToken`], e.g. on SIGTERM) while the experiment was
    /// doing something other than training (training stops with [`towers::TowersError::Stopped`]).
    #[error("stopped on request while {0}; run the same command again to continue")]
    Interrupted(String),
    /// A name that is not one of the choices (a protocol, sampler, dtype, ...).
    #[error("unknown {what} {given:?} ({})", choices.join(", "))]
    UnknownChoice {
        /// What was named ("protocol", "dtype", ...).
        what: &'static str,
        /// What was given.
        given: String,
        /// The names that are accepted.
        choices: Vec<&'static str>,
    },
    /// A run label that is not a run of the study (e.g. in `--only`).
    #[error("{label} is not a run of this study ({})", runs.join(", "))]
    UnknownRun {
        /// The label given.
        label: String,
        /// The study's runs.
        runs: Vec<String>,
    },
    /// Two runs of one study would share a folder and a label.
    #[error("two runs of the study are labelled {0} (give one a model name)")]
    DuplicateRun(String),
    /// A setting (a spec field or a command-line flag) has a value that cannot be used.
    #[error("{field} = {value}: {why}")]
    BadSetting {
        /// The setting, as the user writes it (`phase1.lr`, `ridge`, `--device`).
        field: String,
        /// The value given.
        value: String,
        /// What a usable value is.
        why: String,
    },
    /// A run and the data it was given do not belong together (a scoring set cut for another
    /// style, retest heads scored on other positions).
    #[error("{run} does not fit {data}: {why}")]
    Mismatch {
        /// The run (its label or style).
        run: String,
        /// The data it was given.
        data: String,
        /// What differs.
        why: String,
    },
    /// Too little data for the step: `what` has `have` where `need` are needed.
    #[error("too little data: {what} has {have}, at least {need} needed")]
    TooLittleData {
        /// What was counted ("the corpus x (documents)", "the top-5000 selection (tokens)").
        what: String,
        /// How many there are.
        have: usize,
        /// How many the step needs.
        need: usize,
    },
    /// Runs whose results are needed have not finished.
    #[error("{} of {total} runs have not finished: {}; run them to the end first", runs.len(), runs.join(", "))]
    Unfinished {
        /// The unfinished runs (labels, each with why where known).
        runs: Vec<String>,
        /// How many runs were asked for.
        total: usize,
    },
    /// A trained model lacks a parameter an analysis reads (a checkpoint of another model).
    #[error("the model has no {0} parameter")]
    MissingParameter(String),
    /// From `corpus`.
    #[error(transparent)]
    Corpus(#[from] corpus::CorpusError),
    /// From `towers`.
    #[error(transparent)]
    Towers(#[from] towers::TowersError),
    /// From `heads`.
    #[error(transparent)]
    Heads(#[from] heads::HeadsError),
    /// From `prefscore`.
    #[error(transparent)]
    Prefscore(#[from] prefscore::PrefscoreError),
    /// From `ica`.
    #[error(transparent)]
    Ica(#[from] ica::IcaError),
    /// From `report`.
    #[error(transparent)]
    Report(#[from] report::ReportError),
    /// From candle.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

impl ExperimentError {
    /// [`ExperimentError::BadSetting`]: `field` = `value` is unusable, `why` says what is.
    pub fn bad_setting(
        field: impl Into<String>,
        value: impl std::fmt::Display,
        why: impl Into<String>,
    ) -> Self {
        ExperimentError::BadSetting {
            field: field.into(),
            value: value.to_string(),
            why: why.into(),
        }
    }

    /// [`ExperimentError::Mismatch`]: `run` does not fit `data`, `why` says how.
    pub fn mismatch(
        run: impl Into<String>,
        data: impl Into<String>,
        why: impl Into<String>,
    ) -> Self {
        ExperimentError::Mismatch {
            run: run.into(),
            data: data.into(),
            why: why.into(),
        }
    }

    /// [`ExperimentError::TooLittleData`]: `what` has `have`, `need` are needed.
    pub fn too_little(what: impl Into<String>, have: usize, need: usize) -> Self {
        ExperimentError::TooLittleData {
            what: what.into(),
            have,
            need,
        }
    }

    /// Whether this error is a requested stop (training stopped at a step boundary after its
    /// checkpoint, a scoring pass stopped between batches, or a wait interrupted): starting
    /// again continues. Command lines exit with
    /// their own code for it.
    pub fn is_stopped(&self) -> bool {
        use towers::TowersError::Stopped;
        matches!(
            self,
            ExperimentError::Interrupted(_)
                | ExperimentError::Towers(Stopped { .. })
                | ExperimentError::Heads(heads::HeadsError::Towers(Stopped { .. }))
                | ExperimentError::Heads(heads::HeadsError::Stopped { .. })
        )
    }
}

/// Result of the experiment layer.
pub type Result<T> = std::result::Result<T, ExperimentError>;

/// A closure mapping an I/O error at `path` into [`ExperimentError::Io`].
pub(crate) fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> ExperimentError + '_ {
    move |source| ExperimentError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl From<files::FilesError> for ExperimentError {
    fn from(e: files::FilesError) -> Self {
        match e {
            files::FilesError::Locked { path, what, holder } => {
                ExperimentError::Locked { path, what, holder }
            }
            e => {
                let (path, source) = e.into_io();
                ExperimentError::WriteFailed { path, source }
            }
        }
    }
}
