//! The crate's one error type.

use std::path::{Path, PathBuf};

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, LmdError>;

/// Everything that can go wrong in LMD: bad shapes and inputs, singular systems, model loading,
/// a study's settings and inputs.
#[derive(Debug, thiserror::Error)]
pub enum LmdError {
    /// An I/O error on a named file.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// An error from candle.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    /// A similarity measure that cannot be computed on its input (too few sequences, a model
    /// with zero variance, a k larger than the sample, moments without the measure's
    /// accumulators): one sentence naming the measure.
    #[error("{measure}: {reason}")]
    Measure {
        /// The measure (e.g. "debiased linear CKA", "mutual k-NN").
        measure: String,
        /// Why it cannot be computed.
        reason: String,
    },
    /// An argument outside its valid range (the message says which and why).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A batch or block whose width does not match the declared model widths.
    #[error("width mismatch in {what}: expected {expected}, got {got}")]
    WidthMismatch {
        /// What was being checked (a model name, "stacked row", "merge" ...).
        what: String,
        /// The width the moments were declared with.
        expected: usize,
        /// The width that was given.
        got: usize,
    },
    /// Fewer samples than dimensions: a covariance of this rank cannot support the fit.
    #[error("too few samples for {what}: n = {n} but {dim} dimensions are needed")]
    TooFewSamples {
        /// What needed the samples (e.g. "fit basis roberta-base").
        what: String,
        /// Samples seen.
        n: u64,
        /// Dimensions required.
        dim: usize,
    },
    /// A NaN or infinite value in an input batch.
    #[error("non-finite value {value} in model {model}, row {row}, column {col}")]
    NonFinite {
        /// The model whose block holds the value.
        model: String,
        /// Row within the batch.
        row: usize,
        /// Column within the model's block.
        col: usize,
        /// The offending value.
        value: f32,
    },
    /// A model name that the moments do not know.
    #[error("unknown model {name:?} (known: {known:?})")]
    UnknownModel {
        /// The name asked for.
        name: String,
        /// The names the moments hold.
        known: Vec<String>,
    },
    /// A linear system that cannot be solved as asked (rank reported).
    #[error("singular system in {what}: rank {rank} of {dim}")]
    Singular {
        /// Which system (e.g. "basis covariance of \[bert\]").
        what: String,
        /// Numerical rank found.
        rank: usize,
        /// Dimension of the system.
        dim: usize,
    },
    /// Writing a table or a plot failed.
    #[error(transparent)]
    Report(#[from] report::ReportError),
    /// Embeddings computed elsewhere could not be read (an `external::ExternalError`, which
    /// names the file and the reason; boxed, as it can hold an `LmdError`).
    #[error(transparent)]
    External(Box<dyn std::error::Error + Send + Sync>),
    /// A saved file that is malformed (bad header, shapes or metadata).
    #[error("malformed file {path}: {reason}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A model folder's `config.json` (or llama2.c header) is malformed or inconsistent.
    #[error("{path}: bad model config: {message}")]
    ModelConfig {
        /// The config file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// `model_type` names an architecture this crate does not implement.
    #[error("{path}: unknown model_type {model_type:?} (known: {known})")]
    UnknownModelType {
        /// The config file.
        path: PathBuf,
        /// The value found.
        model_type: String,
        /// The supported values, comma separated.
        known: String,
    },
    /// Weights are missing, truncated, or do not fit the config.
    #[error("{path}: bad weights: {message}")]
    Weights {
        /// The weights file (or the folder when none was found).
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The tokenizer is missing, unreadable, or does not match the model.
    #[error("{path}: tokenizer: {message}")]
    Tokenizer {
        /// The tokenizer file (or the folder when none was found).
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The tokenizer's vocabulary is larger than the model's embedding table.
    #[error("{path}: tokenizer has {tokenizer} ids but the model's vocabulary has {model}")]
    VocabMismatch {
        /// The tokenizer file.
        path: PathBuf,
        /// Ids the tokenizer can emit.
        tokenizer: usize,
        /// Rows of the model's token embedding.
        model: usize,
    },
    /// A sequence length T beyond the model's position table.
    #[error("{path}: T = {t} tokens exceeds the model's {max} positions")]
    SequenceTooLong {
        /// The model folder.
        path: PathBuf,
        /// The requested T.
        t: usize,
        /// The most tokens the model accepts.
        max: usize,
    },
    /// A model could not be found locally or fetched from the Hugging Face hub.
    #[error("model {spec:?}: {message}")]
    ModelSource {
        /// The folder or hub id given.
        spec: String,
        /// What went wrong.
        message: String,
    },
    /// A shard's moments file is missing, unfinished or computed from something else.
    #[error("{path}: {reason}")]
    Shard {
        /// The shard's file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A model produced NaN or infinite embeddings.
    #[error("{model}: non-finite embeddings ({context})")]
    NonFiniteEmbedding {
        /// The model's name.
        model: String,
        /// Where it happened.
        context: String,
    },
    /// A required input of a study is missing (a model folder, the corpus, the tokenizer).
    #[error("{path} is missing ({what})")]
    Missing {
        /// The path that was looked for.
        path: PathBuf,
        /// What it should have been.
        what: String,
    },
    /// A path is not what the study expected (e.g. a file where a model folder belongs).
    #[error("{path} is not {expected}")]
    NotA {
        /// The path.
        path: PathBuf,
        /// What it should have been ("a model folder", ...).
        expected: String,
    },
    /// A name that is not one of the choices (a sampler, a dtype, ...).
    #[error("unknown {what} {given:?} ({})", choices.join(", "))]
    UnknownChoice {
        /// What was named ("sampler", "dtype", ...).
        what: &'static str,
        /// What was given.
        given: String,
        /// The names that are accepted.
        choices: Vec<&'static str>,
    },
    /// A setting of a study (a spec field or a command-line flag) has a value that cannot be
    /// used.
    #[error("{field} = {value}: {why}")]
    BadSetting {
        /// The setting, as the user writes it (`ridge`, `shards`, `test_corpus`).
        field: String,
        /// The value given.
        value: String,
        /// What a usable value is.
        why: String,
    },
    /// Too little data for the step: `what` has `have` where `need` are needed.
    #[error("too little data: {what} has {have}, at least {need} needed")]
    TooLittleData {
        /// What was counted ("the LMD study's models", ...).
        what: String,
        /// How many there are.
        have: usize,
        /// How many the step needs.
        need: usize,
    },
    /// Two models of an LMD study share a name (a model's name is its folder's name).
    #[error("models {} and {} share the name {name:?} (a model's name is its folder's name)", first.display(), second.display())]
    DuplicateModel {
        /// The shared name.
        name: String,
        /// The first model's folder.
        first: PathBuf,
        /// The second model's folder.
        second: PathBuf,
    },
    /// Reading the corpus or its tokenizer failed (from `corpus`).
    #[error(transparent)]
    Corpus(#[from] corpus::CorpusError),
}

impl From<files::FilesError> for LmdError {
    /// A failed atomic write or lock ([`files`]) as an [`LmdError::Io`] naming the file.
    fn from(e: files::FilesError) -> Self {
        let (path, source) = e.into_io();
        Self::Io { path, source }
    }
}

impl LmdError {
    /// [`LmdError::BadSetting`]: `field` = `value` is unusable, `why` says what is.
    pub fn bad_setting(
        field: impl Into<String>,
        value: impl std::fmt::Display,
        why: impl Into<String>,
    ) -> Self {
        LmdError::BadSetting {
            field: field.into(),
            value: value.to_string(),
            why: why.into(),
        }
    }

    /// [`LmdError::Measure`]: `measure` cannot be computed because `reason`.
    pub fn measure(measure: impl Into<String>, reason: impl Into<String>) -> Self {
        LmdError::Measure {
            measure: measure.into(),
            reason: reason.into(),
        }
    }

    /// [`LmdError::TooLittleData`]: `what` has `have`, `need` are needed.
    pub fn too_little(what: impl Into<String>, have: usize, need: usize) -> Self {
        LmdError::TooLittleData {
            what: what.into(),
            have,
            need,
        }
    }
}

/// A closure mapping an I/O error at `path` into [`LmdError::Io`].
pub(crate) fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> LmdError + '_ {
    move |source| LmdError::Io {
        path: path.to_path_buf(),
        source,
    }
}
