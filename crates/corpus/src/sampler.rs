//! The LMD sequence sampler: N texts of exactly T word pieces (as counted by the BERT uncased
//! tokenizer, no special tokens) per split, from disjoint documents, deterministic from a seed.
//!
//! Every document goes to one split ([`DocumentSplitter`]); inside a document, candidate spans
//! of T pieces start at a word start and must end at a word end, so the text cut from them
//! re-tokenizes to the same T pieces (BERT's pre-tokenizer splits at whitespace and punctuation
//! and WordPiece never looks across a word). Candidates of one document do not overlap. Each
//! split keeps a uniform sample of its candidates (reservoir sampling with ChaCha8 seeded by
//! the seed and the split), reading the corpus once with one chunk of documents in memory.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::{CorpusError, Result};
use crate::read::Document;
use crate::split::{DocumentSplitter, Split, SplitFractions, SplitKey};
use crate::tokenizer::{Encoded, Tokenizer};

/// Documents tokenized together (one parallel `encode_batch` call).
const DOCS_PER_CHUNK: usize = 32;

/// What text a sample returns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SampleText {
    /// The original text of the T pieces (cut via the tokenizer's offsets), case and accents
    /// kept: every model reads the same raw text.
    #[default]
    OriginalSpan,
    /// The paper's text: the T pieces decoded back through the uncased tokenizer (lower-cased,
    /// accents stripped; pieces joined with spaces, `##` continuations glued on).
    UncasedRoundTrip,
}

/// Sampler settings.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SamplerConfig {
    /// T, the number of word pieces per sequence.
    pub seq_len: usize,
    /// Sequences wanted per split: train, valid, test.
    pub n: [usize; 3],
    /// Seed of the document split and of the sampling.
    pub seed: u64,
    /// Text mode.
    pub text: SampleText,
    /// Document fractions per split; `None` = proportional to `n`.
    pub fractions: Option<SplitFractions>,
    /// How documents are keyed for the split.
    pub key: SplitKey,
}

impl SamplerConfig {
    /// `n_train`/`n_valid`/`n_test` sequences of `seq_len` pieces, original spans, documents
    /// split in proportion to the numbers wanted, keyed by index (balanced even on small
    /// corpora).
    pub fn new(seq_len: usize, n_train: usize, n_valid: usize, n_test: usize, seed: u64) -> Self {
        Self {
            seq_len,
            n: [n_train, n_valid, n_test],
            seed,
            text: SampleText::OriginalSpan,
            fractions: None,
            key: SplitKey::Index,
        }
    }
}

/// One sampled sequence.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Sample {
    /// The text (see [`SampleText`]).
    pub text: String,
    /// Index of the document it came from.
    pub document: usize,
    /// Index of its first piece within the document's tokenization.
    pub piece_start: usize,
}

/// The samples of the three splits.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SampledSplits {
    /// Training samples.
    pub train: Vec<Sample>,
    /// Validation samples.
    pub valid: Vec<Sample>,
    /// Test samples.
    pub test: Vec<Sample>,
}

impl SampledSplits {
    /// The samples of one split.
    pub fn get(&self, split: Split) -> &[Sample] {
        match split {
            Split::Train => &self.train,
            Split::Valid => &self.valid,
            Split::Test => &self.test,
        }
    }

    /// The texts of one split.
    pub fn texts(&self, split: Split) -> Vec<String> {
        self.get(split).iter().map(|s| s.text.clone()).collect()
    }
}

/// Samples LMD sequences (see the module documentation).
#[derive(Debug, Clone)]
pub struct SequenceSampler {
    tokenizer: Tokenizer,
    config: SamplerConfig,
    splitter: DocumentSplitter,
}

/// A uniform sample of fixed size over a stream (Algorithm R).
struct Reservoir {
    cap: usize,
    seen: u64,
    items: Vec<Sample>,
    rng: ChaCha8Rng,
}

impl Reservoir {
    /// The slot a new candidate goes to, if any (and counts it).
    fn slot(&mut self) -> Option<usize> {
        self.seen += 1;
        if self.items.len() < self.cap {
            Some(self.items.len())
        } else {
            let j = self.rng.random_range(0..self.seen);
            (j < self.cap as u64).then_some(j as usize)
        }
    }

    fn put(&mut self, slot: usize, s: Sample) {
        if slot == self.items.len() {
            self.items.push(s);
        } else {
            self.items[slot] = s;
        }
    }
}

/// Starts of the non-overlapping candidate spans of `t` pieces: each starts at a word start and
/// ends at a word end; after a candidate the next search starts where it ended.
fn candidate_starts(word_ids: &[Option<u32>], t: usize) -> Vec<usize> {
    let n = word_ids.len();
    let boundary = |i: usize| {
        // Is there a word boundary between piece i - 1 and piece i?
        i == 0 || i == n || word_ids[i].is_none() || word_ids[i] != word_ids[i - 1]
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i + t <= n {
        if boundary(i) && boundary(i + t) {
            out.push(i);
            i += t;
        } else {
            i += 1;
        }
    }
    out
}

impl SequenceSampler {
    /// A sampler over `tokenizer` (the BERT uncased tokenizer for the paper's counts).
    pub fn new(tokenizer: Tokenizer, config: SamplerConfig) -> Result<Self> {
        if config.seq_len == 0 {
            return Err(CorpusError::InvalidArgument("seq_len must be > 0".into()));
        }
        let fractions = match config.fractions {
            Some(f) => f,
            None => {
                let [a, b, c] = config.n.map(|n| n as f64);
                SplitFractions::proportional(a, b, c)?
            }
        };
        let mut splitter = DocumentSplitter::new(config.seed, fractions)?;
        splitter.key = config.key;
        Ok(Self {
            tokenizer,
            config,
            splitter,
        })
    }

    /// The document splitter in use (which split each document belongs to).
    pub fn splitter(&self) -> &DocumentSplitter {
        &self.splitter
    }

    /// Reads the documents once and returns the samples of every split, or
    /// [`CorpusError::NotEnoughData`] when a split has fewer candidates than wanted.
    pub fn sample<I>(&self, documents: I) -> Result<SampledSplits>
    where
        I: IntoIterator<Item = Result<Document>>,
    {
        let mut reservoirs: Vec<Reservoir> = Split::ALL
            .iter()
            .enumerate()
            .map(|(k, _)| {
                let mut key = [0u8; 32];
                key[..8].copy_from_slice(&self.config.seed.to_le_bytes());
                key[8] = k as u8;
                key[9..16].copy_from_slice(b"sampler");
                Reservoir {
                    cap: self.config.n[k],
                    seen: 0,
                    items: Vec::new(),
                    rng: ChaCha8Rng::from_seed(key),
                }
            })
            .collect();
        let mut docs_per_split = [0usize; 3];
        let mut chunk: Vec<Document> = Vec::with_capacity(DOCS_PER_CHUNK);
        let mut flush = |chunk: &mut Vec<Document>| -> Result<()> {
            let texts: Vec<&str> = chunk.iter().map(|d| d.text.as_str()).collect();
            let encoded = self.tokenizer.encode_batch(&texts, false)?;
            for (doc, enc) in chunk.iter().zip(&encoded) {
                let k = Split::ALL
                    .iter()
                    .position(|&s| s == self.splitter.assign(doc))
                    .expect("one of three");
                docs_per_split[k] += 1;
                for start in candidate_starts(&enc.word_ids, self.config.seq_len) {
                    if let Some(slot) = reservoirs[k].slot() {
                        let text = self.text_of(doc, enc, start)?;
                        reservoirs[k].put(
                            slot,
                            Sample {
                                text,
                                document: doc.index,
                                piece_start: start,
                            },
                        );
                    }
                }
            }
            chunk.clear();
            Ok(())
        };
        for doc in documents {
            chunk.push(doc?);
            if chunk.len() == DOCS_PER_CHUNK {
                flush(&mut chunk)?;
            }
        }
        flush(&mut chunk)?;
        let mut out: [Vec<Sample>; 3] = Default::default();
        for (k, r) in reservoirs.into_iter().enumerate() {
            if r.items.len() < r.cap {
                return Err(CorpusError::NotEnoughData(format!(
                    "{:?} split: {} sequences of {} pieces wanted, only {} found in {} documents",
                    Split::ALL[k],
                    r.cap,
                    self.config.seq_len,
                    r.items.len(),
                    docs_per_split[k]
                )));
            }
            let mut items = r.items;
            items.sort_by_key(|s| (s.document, s.piece_start));
            out[k] = items;
        }
        let [train, valid, test] = out;
        Ok(SampledSplits { train, valid, test })
    }

    /// The text of the T pieces starting at `start`.
    fn text_of(&self, doc: &Document, enc: &Encoded, start: usize) -> Result<String> {
        let end = start + self.config.seq_len;
        match self.config.text {
            SampleText::OriginalSpan => {
                let (a, b) = (enc.offsets[start].0, enc.offsets[end - 1].1);
                doc.text
                    .get(a..b)
                    .map(str::to_string)
                    .ok_or_else(|| CorpusError::Tokenizer(format!("bad offsets {a}..{b}")))
            }
            SampleText::UncasedRoundTrip => {
                let mut s = String::new();
                for &id in &enc.ids[start..end] {
                    let piece = self
                        .tokenizer
                        .id_to_token(id)
                        .ok_or_else(|| CorpusError::Tokenizer(format!("id {id} has no token")))?;
                    match piece.strip_prefix("##") {
                        Some(cont) if !s.is_empty() => s.push_str(cont),
                        _ => {
                            if !s.is_empty() {
                                s.push(' ');
                            }
                            s.push_str(&piece);
                        }
                    }
                }
                Ok(s)
            }
        }
    }
}
