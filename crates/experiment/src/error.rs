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
        /// What it should have been ("a run folder (no run.json)", ...).
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
    /// An argument or a combination of settings is invalid.
    #[error("{0}")]
    Invalid(String),
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
    Prefscore(#[from] prefscore::Error),
    /// From `ica`.
    #[error(transparent)]
    Ica(#[from] ica::IcaError),
    /// From `lmd`.
    #[error(transparent)]
    Lmd(#[from] lmd::LmdError),
    /// Embeddings computed elsewhere could not be read.
    #[error(transparent)]
    External(#[from] lmd::external::ExternalError),
    /// From `report`.
    #[error(transparent)]
    Report(#[from] report::Error),
    /// From candle.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
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

/// Reads and parses a JSON file.
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let bytes = std::fs::read(path).map_err(io_at(path))?;
    serde_json::from_slice(&bytes).map_err(|source| ExperimentError::Json {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes `value` as pretty JSON through a temporary file and a rename, so that a killed
/// process never leaves half a file.
pub(crate) fn write_json_atomic<T: serde::Serialize>(path: &Path, value: &T) -> Result<()> {
    let text = serde_json::to_vec_pretty(value).map_err(|source| ExperimentError::Json {
        path: path.to_path_buf(),
        source,
    })?;
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, text).map_err(io_at(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io_at(path))
}
