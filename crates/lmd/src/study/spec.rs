//! What one LMD study runs ([`LmdStudySpec`]: models, corpus, lengths, sizes, pooling, ridge,
//! sharding), saved as JSON with its typed fields written as the command lines take them.

use std::path::{Path, PathBuf};

use candle_core::DType;
use corpus::Format;
use serde::{Deserialize, Serialize};

use crate::encoder::Pooling;
use crate::fit::Ridge;
use crate::similarity::SimilarityParams;
use crate::{LmdError, Result};

/// What one LMD study runs: the models, the corpus the sequences come from, the sequence
/// lengths and sizes, the pooling and the ridge. Serialisable, so a study can be saved as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LmdStudySpec {
    /// Local model folders (Hugging Face layout, or llama2.c: `*.bin` beside `tok*.bin`). A
    /// model's name is its folder's name; two models may not share one.
    pub models: Vec<PathBuf>,
    /// Corpus text file (or folder, for [`Format::Folder`]).
    pub corpus: PathBuf,
    /// Corpus format; saved as [`Format::parse`] reads it: `wikitext`, `lines`, `plain`,
    /// `folder`, `jsonl[:field]`.
    #[serde(with = "text::format")]
    pub format: Format,
    /// Tokenizer that counts the T word pieces of each sampled sequence (BERT uncased
    /// `vocab.txt` or a `tokenizer.json`).
    pub tokenizer: PathBuf,
    /// Sequence lengths T (word pieces per sequence; every model truncates to T tokens).
    pub ts: Vec<usize>,
    /// Training sequences per T (the fits need more than the widest basis' width).
    pub n_train: usize,
    /// Test sequences per T (the held-out R² is scored on them).
    pub n_test: usize,
    /// Pooling of the last hidden layer.
    pub pooling: Pooling,
    /// Ridge of the fits; saved as [`parse_ridge`] reads it: `pinv`, `ridge:<λ>` or
    /// `min-eig:<value>`.
    #[serde(with = "text::ridge")]
    pub ridge: Ridge,
    /// Seed of the document split and the sampling.
    pub seed: u64,
    /// Most padded tokens per forward pass.
    pub token_budget: usize,
    /// Compute dtype of the encoders: `f32` (fidelity, the default) or `bf16` (speed on a GPU).
    #[serde(default)]
    pub dtype: ComputeDType,
    /// Sample-range shards each split's moments are cut into (1: one file per split).
    #[serde(default = "one")]
    pub shards: usize,
    /// Sequences per moments update (part of a shard's key: it fixes the order of the sums).
    #[serde(default = "default_chunk")]
    pub chunk: usize,
    /// How sequences are made from the corpus.
    #[serde(default)]
    pub sampler: LmdSampler,
    /// [`LmdSampler::Reference`] only: the file whose rows make the test sequences (the
    /// reference takes train and test from the dataset's own splits).
    #[serde(default)]
    pub test_corpus: Option<PathBuf>,
    /// Analyse only: every shard must already be extracted (by [`extract_lmd_shard`](super::extract_lmd_shard), perhaps
    /// on other machines); nothing is embedded, models are read on the CPU for their keys.
    #[serde(default)]
    pub merge_only: bool,
    /// The similarity measures beside R² ([`crate::similarity`]: debiased CKA, CCA, SVCCA,
    /// Procrustes, mutual k-NN, each with its null), accumulated in the same pass; `None`:
    /// the moments alone (half the moments' memory).
    #[serde(default = "default_similarity")]
    pub similarity: Option<SimilarityParams>,
}

fn default_similarity() -> Option<SimilarityParams> {
    Some(SimilarityParams::default())
}

/// How the sequences of an LMD study are made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LmdSampler {
    /// [`corpus::SequenceSampler`]: sequences of exactly T word pieces from disjoint train and
    /// test documents, seeded.
    #[default]
    Sampled,
    /// The reference's pipeline ([`corpus::reference_chunks()`]): rows tokenized with specials,
    /// concatenated per 1000 rows, cut into T-token chunks, decoded; the first `n_train` chunks
    /// of `corpus` and the first `n_test` of `test_corpus`.
    Reference,
}

impl std::str::FromStr for LmdSampler {
    type Err = LmdError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "sampled" => Ok(Self::Sampled),
            "reference" => Ok(Self::Reference),
            _ => Err(LmdError::UnknownChoice {
                what: "sampler",
                given: s.into(),
                choices: vec!["sampled", "reference"],
            }),
        }
    }
}

/// The compute dtype of an LMD study's encoders.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ComputeDType {
    /// f32: fidelity (the parity tests' precision).
    #[default]
    F32,
    /// bf16: speed on a GPU (masks stay finite).
    Bf16,
}

impl ComputeDType {
    /// The candle dtype.
    pub fn dtype(self) -> DType {
        match self {
            ComputeDType::F32 => DType::F32,
            ComputeDType::Bf16 => DType::BF16,
        }
    }
}

impl std::str::FromStr for ComputeDType {
    type Err = LmdError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "f32" => Ok(ComputeDType::F32),
            "bf16" => Ok(ComputeDType::Bf16),
            d => Err(LmdError::UnknownChoice {
                what: "dtype",
                given: d.into(),
                choices: vec!["f32", "bf16"],
            }),
        }
    }
}

/// The spec's typed fields saved as the text the command lines take, so a saved spec reads
/// the same as one written by hand.
mod text {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    /// A corpus format as `wikitext`, `jsonl:text`, ...
    pub mod format {
        use super::*;
        use corpus::Format;
        pub fn serialize<S: Serializer>(f: &Format, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_str(&f.name())
        }
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Format, D::Error> {
            Format::parse(&String::deserialize(d)?).map_err(D::Error::custom)
        }
    }

    /// A ridge as `pinv`, `ridge:1e-6`, `min-eig:1e-6`.
    pub mod ridge {
        use super::*;
        use crate::fit::Ridge;
        pub fn serialize<S: Serializer>(r: &Ridge, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_str(&crate::study::ridge_text(r))
        }
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Ridge, D::Error> {
            crate::study::parse_ridge(&String::deserialize(d)?).map_err(D::Error::custom)
        }
    }
}

/// The text [`parse_ridge`] reads back: `pinv`, `ridge:<λ>`, `min-eig:<value>`.
pub fn ridge_text(r: &Ridge) -> String {
    match r {
        Ridge::None => "pinv".into(),
        Ridge::Fixed(l) => format!("ridge:{l:e}"),
        Ridge::MinEigen(m) => format!("min-eig:{m:e}"),
    }
}
fn one() -> usize {
    1
}
fn default_chunk() -> usize {
    512
}

impl LmdStudySpec {
    /// A study of `models` on `corpus` with the `lmd_table` defaults: WikiText format,
    /// T = 32 and 128, 2000 train and 500 test sequences per T, masked-mean pooling, the
    /// reference ridge `ridge:1e-6`, seed 0, 4096 padded tokens per forward pass.
    pub fn new(models: Vec<PathBuf>, corpus: PathBuf, tokenizer: PathBuf) -> Self {
        Self {
            models,
            corpus,
            format: Format::WikiText,
            tokenizer,
            ts: vec![32, 128],
            n_train: 2000,
            n_test: 500,
            pooling: Pooling::MaskedMean,
            ridge: Ridge::REFERENCE,
            seed: 0,
            token_budget: 4096,
            dtype: ComputeDType::F32,
            shards: 1,
            chunk: default_chunk(),
            sampler: LmdSampler::Sampled,
            test_corpus: None,
            merge_only: false,
            similarity: default_similarity(),
        }
    }

    /// Checks the spec before anything is loaded: every model folder, the corpus and the
    /// tokenizer exist ([`LmdError::Missing`] naming the first that does not), at least
    /// two models, sizes and T positive, a finite ridge.
    pub fn validate(&self) -> Result<()> {
        for dir in &self.models {
            require(dir, "a model folder")?;
            if !dir.is_dir() {
                return Err(LmdError::NotA {
                    path: dir.clone(),
                    expected: "a model folder".into(),
                });
            }
        }
        require(&self.corpus, "the LMD corpus")?;
        if self.sampler == LmdSampler::Reference {
            let test = self.test_corpus.as_ref().ok_or_else(|| {
                let why = "the reference sampler needs a test corpus (the dataset's test split)";
                LmdError::bad_setting("test_corpus", "none", why)
            })?;
            require(test, "the LMD test corpus")?;
        }
        require(&self.tokenizer, "the tokenizer that counts word pieces")?;
        if self.models.len() < 2 {
            let what = "the LMD study's models";
            return Err(LmdError::too_little(what, self.models.len(), 2));
        }
        if self.ts.is_empty() || self.ts.contains(&0) {
            let why = "sequence lengths T must be positive (at least one)";
            return Err(LmdError::bad_setting("ts", format!("{:?}", self.ts), why));
        }
        for (field, value) in [
            ("n_train", self.n_train),
            ("n_test", self.n_test),
            ("token_budget", self.token_budget),
            ("chunk", self.chunk),
        ] {
            if value == 0 {
                return Err(LmdError::bad_setting(field, 0, "must be positive"));
            }
        }
        if self.shards == 0 || self.shards > self.n_test.min(self.n_train) {
            let why = format!(
                "every shard needs a sequence ({} train and {} test sequences)",
                self.n_train, self.n_test
            );
            return Err(LmdError::bad_setting("shards", self.shards, why));
        }
        check_ridge(self.ridge, &ridge_text(&self.ridge))?;
        if let Some(p) = &self.similarity {
            p.check()?;
        }
        Ok(())
    }
}

/// [`LmdError::Missing`] unless `path` exists.
fn require(path: &Path, what: &str) -> Result<()> {
    if path.exists() {
        Ok(())
    } else {
        Err(LmdError::Missing {
            path: path.to_path_buf(),
            what: what.into(),
        })
    }
}

/// [`LmdError::BadSetting`] for the ridge written `s`.
fn ridge_error(s: &str, why: &str) -> LmdError {
    let why = format!("{why} (pinv, ridge:<λ ≥ 0>, min-eig:<value > 0>)");
    LmdError::bad_setting("ridge", format!("{s:?}"), why)
}

/// Parses a ridge setting: `pinv` (or `none`), `ridge:<λ>` (λ ≥ 0; the reference code uses
/// `ridge:1e-6`) or `min-eig:<value>` (value > 0).
pub fn parse_ridge(s: &str) -> Result<Ridge> {
    let bad = |why: &str| ridge_error(s, why);
    let num = |v: &str| v.trim().parse::<f64>().map_err(|_| bad("not a number"));
    let ridge = match s.trim().split_once(':') {
        None if s.trim() == "pinv" || s.trim() == "none" => Ridge::None,
        Some(("ridge", v)) => Ridge::Fixed(num(v)?),
        Some(("min-eig", v)) => Ridge::MinEigen(num(v)?),
        _ => return Err(bad("unknown setting")),
    };
    check_ridge(ridge, s)
}

/// A ridge whose value is usable: λ finite and ≥ 0, a min-eigen target finite and > 0 (`s`:
/// how the caller wrote it, for the error).
fn check_ridge(ridge: Ridge, s: &str) -> Result<Ridge> {
    let bad = |why: &str| ridge_error(s, why);
    match ridge {
        Ridge::Fixed(l) if !(l.is_finite() && l >= 0.0) => Err(bad("λ must be finite and ≥ 0")),
        Ridge::MinEigen(m) if !(m.is_finite() && m > 0.0) => Err(bad("value must be > 0")),
        r => Ok(r),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_ridge_reads_the_cli_forms() {
        assert_eq!(parse_ridge("pinv").unwrap(), Ridge::None);
        assert_eq!(parse_ridge("ridge:1e-6").unwrap(), Ridge::REFERENCE);
        assert_eq!(parse_ridge("min-eig:0.5").unwrap(), Ridge::MinEigen(0.5));
        for bad in ["ridge", "ridge:x", "ridge:-1", "min-eig:0", "lasso:1"] {
            let e = parse_ridge(bad).unwrap_err();
            assert!(
                matches!(&e, LmdError::BadSetting { field, .. } if field == "ridge"),
                "{bad}: {e:?}"
            );
            assert!(e.to_string().contains(bad), "{e}");
        }
    }

    #[test]
    fn spec_round_trips_through_json() {
        let spec = LmdStudySpec::new(vec!["a".into(), "b".into()], "c".into(), "v".into());
        let text = serde_json::to_string(&spec).unwrap();
        assert_eq!(serde_json::from_str::<LmdStudySpec>(&text).unwrap(), spec);
        // The typed fields are saved as the command lines write them, and read back typed.
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            (&v["format"], &v["ridge"], &v["dtype"]),
            (&"wikitext".into(), &"ridge:1e-6".into(), &"f32".into())
        );
        v["format"] = "jsonl:body".into();
        v["ridge"] = "min-eig:1e-4".into();
        v["dtype"] = "bf16".into();
        let typed: LmdStudySpec = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(
            (typed.format, typed.ridge, typed.dtype),
            (
                Format::Jsonl {
                    field: "body".into()
                },
                Ridge::MinEigen(1e-4),
                ComputeDType::Bf16
            )
        );
        v["ridge"] = "ridge:-1".into();
        assert!(serde_json::from_value::<LmdStudySpec>(v).is_err());
    }
}
