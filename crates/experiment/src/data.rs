//! The text of a study: documents, the training / held-out split, the tokenizer (trained once
//! and saved when none is given), token frequencies, and the training batches of each style.

use std::path::{Path, PathBuf};

use corpus::{
    read_documents, Batcher, BatcherConfig, Document, Format, SyntheticConfig, SyntheticCorpus,
    TokenCounts, Tokenizer,
};
use towers::Style;

use crate::disk::{save_atomic, write_bytes_atomic, DATA_LOCK};
use crate::error::io_at;
use crate::error::{ExperimentError, Result};
use crate::spec::{Corpus, CorpusSpec};
use files::FolderLock;

/// File beside a trained `tokenizer.json` saying what it was trained for.
const TRAINED_FROM_FILE: &str = "tokenizer.trained_from.json";

/// What a study's trained vocabulary depends on besides the corpus file: a saved one is reused
/// only by a spec that would train the same.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct TrainedFrom {
    train_vocab: usize,
    synthetic_documents: usize,
    seed: u64,
}

impl TrainedFrom {
    fn of(spec: &CorpusSpec) -> Self {
        // Only the synthetic corpus is generated from a count and a seed.
        let (synthetic_documents, seed) = match spec.source {
            Corpus::Synthetic { documents, seed } => (documents, seed),
            Corpus::Text { .. } => (0, 0),
        };
        TrainedFrom {
            train_vocab: spec.train_vocab,
            synthetic_documents,
            seed,
        }
    }

    /// Refuses a saved vocabulary trained for other settings (a folder without the note,
    /// written before it existed, is taken as it is).
    fn check_against(&self, note: &Path, tokenizer: &Path) -> Result<()> {
        if !note.is_file() {
            return Ok(());
        }
        let saved: TrainedFrom = crate::disk::read_json(note)?;
        if saved == *self {
            return Ok(());
        }
        Err(ExperimentError::mismatch(
            format!(
                "a study asking for a trained vocabulary of {} pieces{}",
                self.train_vocab,
                synthetic_note(self)
            ),
            tokenizer.display().to_string(),
            format!(
                "that vocabulary was trained for {} pieces{}; give the study its own --out",
                saved.train_vocab,
                synthetic_note(&saved)
            ),
        ))
    }
}

fn synthetic_note(t: &TrainedFrom) -> String {
    match t.synthetic_documents {
        0 => String::new(),
        n => format!(" on {n} synthetic documents of seed {}", t.seed),
    }
}

/// The documents and tokenizer of a study, shared by all its runs.
#[derive(Debug, Clone)]
pub struct CorpusData {
    /// What was loaded.
    pub spec: CorpusSpec,
    /// Every document, in corpus order.
    pub docs: Vec<Document>,
    /// Documents `..n_train` train, the rest are held out (validation).
    pub n_train: usize,
    /// The tokenizer shared by every run.
    pub tok: Tokenizer,
    /// The tokenizer file (given, or trained and saved in the data folder).
    pub tokenizer_path: PathBuf,
    /// Token frequencies of the training documents over the padded vocabulary: the "most
    /// frequent tokens" of every table.
    pub freq: Vec<u64>,
}

impl CorpusData {
    /// Reads the documents (writing the synthetic corpus to `data_dir/synthetic.txt` first) and
    /// loads the tokenizer, or trains a WordPiece vocabulary of `spec.train_vocab` pieces on the
    /// training documents and saves it as `data_dir/tokenizer.json`, reused from then on
    /// (checkpoints hold token ids: the study's runs read the vocabulary it saved, even if a
    /// later version of the trainer would number it differently).
    /// The last tenth of the documents (at least one) is held out.
    ///
    /// Safe when N processes of one study load the same `data_dir` together: the files are
    /// created once, under the folder's creation lock (`data/create.lock`, see
    /// [`crate::disk::acquire_waiting`]); the others wait for it and read what the first wrote, each file
    /// complete (written through a temporary file and a rename).
    pub fn load(spec: &CorpusSpec, data_dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(data_dir).map_err(io_at(data_dir))?;
        let docs = match &spec.source {
            Corpus::Synthetic { documents, seed } => {
                let path = data_dir.join("synthetic.txt");
                write_synthetic(*documents, *seed, &path)?;
                read_documents(&path, Format::Plain)?
            }
            Corpus::Text { path, format } => {
                if !path.exists() {
                    return Err(ExperimentError::Missing {
                        path: path.clone(),
                        what: "the corpus text file or folder".into(),
                    });
                }
                read_documents(path, format.clone())?
            }
        };
        if docs.len() < 2 {
            return Err(ExperimentError::too_little(
                format!("{} (documents: train + held-out)", spec.source),
                docs.len(),
                2,
            ));
        }
        let n_train = docs.len() - (docs.len() / 10).max(1);
        let (tok, tokenizer_path) = match &spec.tokenizer {
            Some(p) if p.is_dir() => {
                return Err(ExperimentError::NotA {
                    path: p.clone(),
                    expected: "a tokenizer file (vocab.txt or tokenizer.json; \
                               `corpus::tokenizer_file` finds the one in a folder)"
                        .into(),
                })
            }
            Some(p) if !p.is_file() => {
                return Err(ExperimentError::Missing {
                    path: p.clone(),
                    what: "the tokenizer (vocab.txt or tokenizer.json)".into(),
                })
            }
            Some(p) => (Tokenizer::load(p)?, p.clone()),
            None => {
                let saved = data_dir.join("tokenizer.json");
                let origin = TrainedFrom::of(spec);
                let origin_path = data_dir.join(TRAINED_FROM_FILE);
                if !saved.is_file() {
                    // Trained once per study, under the lock: two processes never write the
                    // file together.
                    let _lock = lock_data(data_dir)?;
                    if !saved.is_file() {
                        let t = Tokenizer::train_wordpiece(
                            docs[..n_train].iter().map(|d| d.text.as_str()),
                            spec.train_vocab,
                            true,
                        )?;
                        crate::disk::write_json_atomic(&origin_path, &origin)?;
                        save_atomic(&saved, |tmp| Ok(t.save(tmp)?))?;
                    }
                }
                origin.check_against(&origin_path, &saved)?;
                (Tokenizer::load(&saved)?, saved)
            }
        };
        let (counts, _) =
            TokenCounts::count_documents(&tok, docs[..n_train].iter().cloned().map(Ok), 64)?;
        let mut freq = counts.counts().to_vec();
        freq.resize(tok.padded_vocab_size(8).max(freq.len()), 0);
        Ok(Self {
            spec: spec.clone(),
            docs,
            n_train,
            tok,
            tokenizer_path,
            freq,
        })
    }

    /// The corpus of the finished runs `runs`, read again for their analysis (into the data
    /// folder `data_dir`) with the vocabulary the first run's folder carries: the runs must name
    /// one corpus ([`ExperimentError::Mismatch`] otherwise).
    pub fn for_runs(runs: &[crate::run::ScoredRun], data_dir: &Path) -> Result<Self> {
        let Some(first) = runs.first() else {
            return Err(ExperimentError::too_little("the runs to analyse", 0, 1));
        };
        let corpus = &first.manifest.spec.corpus;
        if let Some(other) = runs.iter().find(|r| r.manifest.spec.corpus != *corpus) {
            return Err(ExperimentError::mismatch(
                format!("run {}", other.label),
                format!("the corpus of run {}", first.label),
                "the runs of one analysis share a corpus and vocabulary",
            ));
        }
        let spec = CorpusSpec {
            tokenizer: Some(first.dir.join(&first.manifest.tokenizer)),
            ..corpus.clone()
        };
        Self::load(&spec, data_dir)
    }

    /// The training documents.
    pub fn train(&self) -> &[Document] {
        &self.docs[..self.n_train]
    }

    /// The held-out documents.
    pub fn held_out(&self) -> &[Document] {
        &self.docs[self.n_train..]
    }

    /// The vocabulary padded to a multiple of 8 (the models' V).
    pub fn padded_vocab(&self) -> usize {
        self.tok.padded_vocab_size(8)
    }
}

/// Takes the creation lock of the study data folder `data_dir`, waiting while another process
/// creates its files (seconds: the wait is not interruptible, the writer's own work is).
pub(crate) fn lock_data(data_dir: &Path) -> Result<FolderLock> {
    crate::disk::acquire_waiting(
        &data_dir.join(DATA_LOCK),
        "study data",
        std::time::Duration::from_millis(100),
        &towers::StopToken::new(),
    )
}

/// Writes the synthetic corpus text of `spec` to `path` unless the file already holds it: a
/// reader in another process never sees the file change or half written.
fn write_synthetic(documents: usize, seed: u64, path: &Path) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let bytes = synthetic_corpus(documents, seed)?.text().into_bytes();
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    let _lock = lock_data(dir)?;
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(()); // written by another process while this one waited
    }
    write_bytes_atomic(path, &bytes)
}

/// The synthetic corpus of `documents` documents from `seed` ([`Corpus::Synthetic`]; its
/// documents carry gold UPOS tags).
pub fn synthetic_corpus(documents: usize, seed: u64) -> Result<SyntheticCorpus> {
    Ok(SyntheticCorpus::new(SyntheticConfig {
        seed,
        n_documents: documents,
        ..SyntheticConfig::default()
    })?)
}

/// Shuffled training batches of a style's objective, seeded by `seed`.
pub fn batcher(
    style: &Style,
    tok: &Tokenizer,
    docs: &[Document],
    seq_len: usize,
    batch_size: usize,
    seed: u64,
) -> Result<Batcher> {
    let data = style.sequences(tok, docs, seq_len)?;
    let cfg = BatcherConfig {
        batch_size: batch_size.min(data.len()).max(1),
        seed,
        drop_last: true,
    };
    Ok(Batcher::new(
        data,
        style.objective(),
        cfg,
        tok.special_tokens()?,
        tok.vocab_size(),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trained_vocabulary_is_reused_only_by_a_spec_that_would_train_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let spec = CorpusSpec::synthetic(60, 0);
        let first = CorpusData::load(&spec, dir.path()).unwrap();
        let again = CorpusData::load(&spec, dir.path()).unwrap();
        assert_eq!(again.tok.vocab_size(), first.tok.vocab_size());
        // Another size, or another synthetic text, would record a vocabulary it never used.
        let smaller = CorpusSpec {
            train_vocab: 512,
            ..spec.clone()
        };
        let other_text = CorpusSpec::synthetic(60, 1);
        for (bad, want) in [
            (smaller, "trained for 1024 pieces"),
            (other_text, "of seed 0"),
        ] {
            let e = CorpusData::load(&bad, dir.path()).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
    }
}
