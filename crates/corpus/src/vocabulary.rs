//! [`Vocabulary`]: which tokenizer a study uses, a file or a WordPiece vocabulary trained on its
//! text, as a command line names it.

use std::path::{Path, PathBuf};

use crate::error::{CorpusError, Result};

/// The vocabulary of a study: a tokenizer file, or a WordPiece vocabulary trained on the
/// training documents. The paper's is `bert-base-uncased` ("word piece tokenization, the same
/// as Bert"; its code loads that tokenizer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Vocabulary {
    /// A tokenizer file (`vocab.txt` or `tokenizer.json`).
    File(PathBuf),
    /// A WordPiece vocabulary of this many pieces, trained once and saved in the data folder.
    Trained(usize),
}

impl Vocabulary {
    /// The paper's vocabulary in a shared data folder (`<shared>/bert-base-uncased/`).
    pub fn bert_base_uncased(shared: &Path) -> Self {
        Vocabulary::File(shared.join("bert-base-uncased/bert_base_uncased.json"))
    }

    /// Parses a command-line choice: `bert-base-uncased` (the paper's, from `shared`),
    /// `trained-8k` (the 8,192-piece WordPiece trained on the corpus, the CPU protocol's
    /// vocabulary before the paper's), `trained:<N>`, a tokenizer file path, or a folder holding
    /// one (a model folder: its `tokenizer.json`, else its `vocab.txt`; the file is recorded).
    ///
    /// Errors: [`CorpusError::InvalidArgument`] for a trained size below 2,
    /// [`CorpusError::Missing`] for a folder without a tokenizer file.
    pub fn parse(s: &str, shared: &Path) -> Result<Self> {
        let trained = |n: &str| {
            n.parse::<usize>()
                .ok()
                .filter(|&n| n >= 2)
                .map(Vocabulary::Trained)
                .ok_or_else(|| {
                    CorpusError::InvalidArgument(format!(
                        "vocabulary {s}: a trained vocabulary needs a size of at least 2 pieces"
                    ))
                })
        };
        match s {
            "bert-base-uncased" => Ok(Self::bert_base_uncased(shared)),
            "trained-8k" => Ok(Vocabulary::Trained(8192)),
            _ => match s.strip_prefix("trained:") {
                Some(n) => trained(n),
                None => Ok(Vocabulary::File(tokenizer_file(Path::new(s))?)),
            },
        }
    }
}

/// Tokenizer files looked for in a folder, in this order.
pub const TOKENIZER_FILES: [&str; 2] = ["tokenizer.json", "vocab.txt"];

/// `path` itself, or where it is a folder the first of [`TOKENIZER_FILES`] in it (a
/// [`CorpusError::Missing`] naming both when it holds neither). A path that is not there is
/// returned as it is, for the corpus loader to name as missing.
pub fn tokenizer_file(path: &Path) -> Result<PathBuf> {
    if !path.is_dir() {
        return Ok(path.to_path_buf());
    }
    TOKENIZER_FILES
        .iter()
        .map(|f| path.join(f))
        .find(|f| f.is_file())
        .ok_or_else(|| CorpusError::Missing {
            path: path.to_path_buf(),
            what: format!(
                "a tokenizer file (the folder holds neither {})",
                TOKENIZER_FILES.join(" nor ")
            ),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocabulary_choices_parse() {
        let shared = Path::new("/data");
        assert_eq!(
            Vocabulary::parse("bert-base-uncased", shared).unwrap(),
            Vocabulary::File(shared.join("bert-base-uncased/bert_base_uncased.json"))
        );
        assert_eq!(
            Vocabulary::parse("trained-8k", shared).unwrap(),
            Vocabulary::Trained(8192)
        );
        assert_eq!(
            Vocabulary::parse("trained:512", shared).unwrap(),
            Vocabulary::Trained(512)
        );
        assert!(Vocabulary::parse("trained:x", shared).is_err());
        // A folder gives its tokenizer.json, else its vocab.txt; with neither it is refused.
        let dir = tempfile::tempdir().unwrap();
        let s = dir.path().to_str().unwrap();
        let err = Vocabulary::parse(s, shared).unwrap_err().to_string();
        assert!(
            err.contains("neither tokenizer.json nor vocab.txt"),
            "{err}"
        );
        std::fs::write(dir.path().join("vocab.txt"), "[PAD]\n").unwrap();
        let file = |f: &str| Vocabulary::File(dir.path().join(f));
        assert_eq!(Vocabulary::parse(s, shared).unwrap(), file("vocab.txt"));
        std::fs::write(dir.path().join("tokenizer.json"), "{}").unwrap();
        assert_eq!(
            Vocabulary::parse(s, shared).unwrap(),
            file("tokenizer.json")
        );
        // A file, or a path that is not there, is taken as given.
        let other = dir.path().join("missing.json");
        let o = other.to_str().unwrap();
        assert_eq!(
            Vocabulary::parse(o, shared).unwrap(),
            Vocabulary::File(other.clone())
        );
    }
}
