//! Deterministic train/valid/test splits by document.
//!
//! A document's split depends only on the seed and on its key (its index or a hash of its
//! text), never on the other documents, and needs no pass over the corpus. Keyed by index, the
//! documents follow a seeded golden-ratio (Weyl) sequence, so every prefix of the corpus is split
//! close to the fractions even for a handful of documents; keyed by content hash, a document
//! keeps its split when the corpus is reordered or extended (the counts are then binomial).

use crate::error::{CorpusError, Result};
use crate::read::Document;

/// One of the three splits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Split {
    /// Training.
    Train,
    /// Validation.
    Valid,
    /// Test.
    Test,
}

impl Split {
    /// The three splits in order.
    pub const ALL: [Split; 3] = [Split::Train, Split::Valid, Split::Test];
}

/// Fractions of documents per split (non-negative, summing to 1).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SplitFractions {
    /// Training fraction.
    pub train: f64,
    /// Validation fraction.
    pub valid: f64,
    /// Test fraction.
    pub test: f64,
}

impl Default for SplitFractions {
    /// 80 / 10 / 10.
    fn default() -> Self {
        Self {
            train: 0.8,
            valid: 0.1,
            test: 0.1,
        }
    }
}

impl SplitFractions {
    /// Fractions proportional to three weights (e.g. the number of sequences wanted per split).
    pub fn proportional(train: f64, valid: f64, test: f64) -> Result<Self> {
        let sum = train + valid + test;
        if sum.is_nan() || sum <= 0.0 || !sum.is_finite() || train.min(valid).min(test) < 0.0 {
            return Err(CorpusError::InvalidArgument(format!(
                "split weights {train}, {valid}, {test} must be non-negative with a positive sum"
            )));
        }
        let f = Self {
            train: train / sum,
            valid: valid / sum,
            test: test / sum,
        };
        f.validate()?;
        Ok(f)
    }

    /// Checks the fractions are in `[0, 1]` and sum to 1.
    pub fn validate(&self) -> Result<()> {
        let all = [self.train, self.valid, self.test];
        if all.iter().any(|f| !(0.0..=1.0).contains(f))
            || (all.iter().sum::<f64>() - 1.0).abs() > 1e-9
        {
            return Err(CorpusError::InvalidArgument(format!(
                "split fractions {self:?} must be in [0, 1] and sum to 1"
            )));
        }
        Ok(())
    }
}

/// What identifies a document for its split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SplitKey {
    /// Its index in the corpus (stable for a fixed file; balanced splits).
    Index,
    /// A hash of its text (stable when the corpus is reordered or extended).
    ContentHash,
}

/// Assigns documents to splits from a seed.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DocumentSplitter {
    /// Seed.
    pub seed: u64,
    /// Fractions per split.
    pub fractions: SplitFractions,
    /// What is hashed.
    pub key: SplitKey,
}

/// FNV-1a, 64 bits: a hash fixed by its definition (std's hasher may change between releases),
/// for keys and seeds that must not move between builds.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// 2^64 divided by the golden ratio.
const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64 finalizer: spreads the bits of a key.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(GOLDEN);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl DocumentSplitter {
    /// A splitter keyed by document index.
    pub fn new(seed: u64, fractions: SplitFractions) -> Result<Self> {
        fractions.validate()?;
        Ok(Self {
            seed,
            fractions,
            key: SplitKey::Index,
        })
    }

    /// The same splitter keyed by content hash.
    pub fn by_content(mut self) -> Self {
        self.key = SplitKey::ContentHash;
        self
    }

    /// The split of a document with this index and text.
    pub fn assign_key(&self, index: usize, text: &str) -> Split {
        let x = match self.key {
            // Weyl sequence: seeded start, step 2^64 / golden ratio (equidistributed).
            SplitKey::Index => mix(self.seed).wrapping_add((index as u64).wrapping_mul(GOLDEN)),
            SplitKey::ContentHash => mix(mix(self.seed) ^ fnv1a(text.as_bytes())),
        };
        // A number in [0, 1) from the top 53 bits.
        let u = (x >> 11) as f64 / (1u64 << 53) as f64;
        if u < self.fractions.train {
            Split::Train
        } else if u < self.fractions.train + self.fractions.valid {
            Split::Valid
        } else {
            Split::Test
        }
    }

    /// The split of a document.
    pub fn assign(&self, doc: &Document) -> Split {
        self.assign_key(doc.index, &doc.text)
    }

    /// Keeps the documents of one split from a document stream (errors pass through).
    pub fn filter<I>(&self, split: Split, documents: I) -> impl Iterator<Item = Result<Document>>
    where
        I: IntoIterator<Item = Result<Document>>,
    {
        let this = *self;
        documents
            .into_iter()
            .filter(move |d| d.as_ref().map_or(true, |d| this.assign(d) == split))
    }

    /// Partitions documents into `(train, valid, test)`.
    pub fn partition<I>(&self, documents: I) -> Result<[Vec<Document>; 3]>
    where
        I: IntoIterator<Item = Result<Document>>,
    {
        let mut out: [Vec<Document>; 3] = Default::default();
        for d in documents {
            let d = d?;
            let i = Split::ALL
                .iter()
                .position(|&s| s == self.assign(&d))
                .expect("one of three");
            out[i].push(d);
        }
        Ok(out)
    }
}
