//! The data side of a two-tower study, held together: the study's data folder and the corpus loaded
//! from it. Runs and snapshot jobs are started through it ([`Workspace::ensure_run`] in `run.rs`,
//! [`Workspace::ensure_snapshot`] in `snapshots.rs`), so a run folder and a data folder can never
//! be passed in each other's place, and every run records the folder its data came from.

use std::path::{Path, PathBuf};

use towers::Style;

use crate::data::CorpusData;
use crate::error::{ExperimentError, Result};
use crate::scoring::{ScoringSet, ScoringSpec};
use crate::spec::{CorpusSpec, RunSpec};

/// A study's data folder and the corpus (documents, tokenizer, frequencies) loaded from it.
#[derive(Debug, Clone)]
pub struct Workspace {
    dir: PathBuf,
    corpus: CorpusSpec,
    data: CorpusData,
}

impl Workspace {
    /// Loads the corpus of `corpus` with `dir` as its data folder (the synthetic text and the
    /// trained tokenizer are written there the first time; see [`CorpusData::load`]).
    pub fn open(corpus: &CorpusSpec, dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let data = CorpusData::load(corpus, dir)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            corpus: corpus.clone(),
            data,
        })
    }

    /// The corpus (text and tokenizer) it was opened on: every run started through it must
    /// name the same one.
    pub fn corpus(&self) -> &CorpusSpec {
        &self.corpus
    }

    /// The data folder (scoring sets, tokenizer, synthetic text).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A run (or its snapshot's job) trains on the workspace's text and tokenizer: a spec
    /// naming others would record a corpus it never saw ([`ExperimentError::Mismatch`]).
    pub fn check_corpus(&self, spec: &RunSpec) -> Result<()> {
        match spec.corpus == self.corpus {
            true => Ok(()),
            false => Err(ExperimentError::mismatch(
                format!("run {} (corpus {:?})", spec.label(), spec.corpus),
                format!("the workspace opened on {:?}", self.corpus),
                "a run trains on its workspace's text and tokenizer",
            )),
        }
    }

    /// The corpus loaded from it.
    pub fn data(&self) -> &CorpusData {
        &self.data
    }

    /// The corpus, giving up the folder.
    pub fn into_data(self) -> CorpusData {
        self.data
    }

    /// The scoring set of `style` ([`towers::TowerStyle::scoring_set`]): built from `spec` and
    /// saved in the data folder on first use, loaded (and checked against `spec`) after that.
    pub fn scoring_set(&self, style: &Style, spec: &ScoringSpec) -> Result<ScoringSet> {
        ScoringSet::load_or_build(&self.dir, style, &self.data, spec)
    }
}
