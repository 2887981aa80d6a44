//! The scoring set: one fixed, seed-independent set of positions on which every run of a style
//! is scored, so that two runs' preference scores rest on the same evidence.
//!
//! - Sequences are the held-out documents' (or a separate scoring corpus') windows in document
//!   order, batched in order: no run seed enters.
//! - GPT and ELMo score every labelled position.
//! - BERT scores only positions whose input is `[MASK]`, by a deterministic schedule of
//!   `k = ⌈1 / mask_rate⌉` passes over every window: each pass masks a disjoint ~1/k of the
//!   window's maskable positions (all of them `[MASK]`, never the 10% kept or random-replaced
//!   positions of training, whose copy targets would dominate p̄), the rest of the window
//!   unmasked, so every maskable position is scored exactly once.
//!
//! The set is saved once (`scoring_set.json`: its settings and SHA-256 fingerprints) and
//! rebuilt identically whenever it is needed; a rebuild with another fingerprint is an error.
//! Every run records the fingerprint it was scored on.

use std::path::{Path, PathBuf};

use corpus::{
    pad_sequence, Document, Objective, SpecialTokens, TokenBatch, Tokenizer, IGNORE_LABEL,
};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use towers::Style;

use crate::data::CorpusData;
use crate::disk::{read_json, write_json_atomic};
use crate::error::{ExperimentError, Result};

/// File name of a saved scoring set.
pub const SCORING_FILE: &str = "scoring_set.json";

/// Seed of the BERT mask schedule: a constant, so the schedule never depends on a run.
const SCHEDULE_SEED: u64 = 0x5c0f_1a9e;

/// How a scoring set is cut.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoringSpec {
    /// Sequence length (the runs' phase-1 length).
    pub seq_len: usize,
    /// Sequences per scoring batch.
    pub batch_size: usize,
    /// BERT: the fraction of maskable positions masked per pass (0.15: 7 passes).
    pub mask_rate: f64,
    /// Use at most this many sequences (the first ones), `None`: all.
    pub max_sequences: Option<usize>,
    /// A separate scoring corpus, never trained on; `None`: the held-out documents of the
    /// training corpus.
    #[serde(default)]
    pub text: Option<ScoringText>,
}

/// A scoring corpus: files (or folders) of one format, read in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScoringText {
    /// Files or folders.
    pub paths: Vec<PathBuf>,
    /// Their format.
    pub format: corpus::Format,
}

impl ScoringSpec {
    /// Every held-out sequence of `seq_len` tokens, batches of 32, BERT masking 15% per pass.
    pub fn new(seq_len: usize) -> Self {
        Self {
            seq_len,
            batch_size: 32,
            mask_rate: 0.15,
            max_sequences: None,
            text: None,
        }
    }

    /// The scoring documents: the separate scoring corpus, or the held-out documents.
    pub fn documents(&self, data: &CorpusData) -> Result<Vec<Document>> {
        let Some(t) = &self.text else {
            return Ok(data.held_out().to_vec());
        };
        let mut docs = Vec::new();
        for path in &t.paths {
            if !path.exists() {
                return Err(ExperimentError::Missing {
                    path: path.clone(),
                    what: "a scoring corpus file".into(),
                });
            }
            docs.extend(corpus::read_documents(path, t.format.clone())?);
        }
        Ok(docs)
    }

    /// BERT passes: ⌈1 / mask_rate⌉.
    pub fn passes(&self) -> usize {
        (1.0 / self.mask_rate).ceil().max(1.0) as usize
    }
}

/// What identifies a scoring set (recorded by every run scored on it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScoringSetId {
    /// The style whose objective cut the positions.
    pub style: Style,
    /// SHA-256 (hex) of every batch's inputs, masks and labels.
    pub fingerprint: String,
    /// SHA-256 (hex) of the documents' text and the tokenizer's vocabulary: equal for the sets
    /// of different styles cut from the same text.
    pub text_fingerprint: String,
    /// Scored positions.
    pub positions: u64,
}

impl ScoringSetId {
    /// Whether runs scored on `self` and `other` may be compared: the same positions for one
    /// style, the same text and tokenizer across styles. `a` and `b` name the runs in the error.
    pub fn check_comparable(&self, other: &ScoringSetId, a: &str, b: &str) -> Result<()> {
        let (fa, fb) = if self.style == other.style {
            (&self.fingerprint, &other.fingerprint)
        } else {
            (&self.text_fingerprint, &other.text_fingerprint)
        };
        if fa != fb {
            return Err(ExperimentError::ScoringSetMismatch {
                a: a.into(),
                b: b.into(),
                fa: short(fa),
                fb: short(fb),
            });
        }
        Ok(())
    }

    /// The first 12 hex digits of the fingerprint.
    pub fn short(&self) -> String {
        short(&self.fingerprint)
    }
}

fn short(f: &str) -> String {
    f.chars().take(12).collect()
}

/// What `scoring_set.json` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct SavedScoringSet {
    id: ScoringSetId,
    spec: ScoringSpec,
    batches: usize,
}

/// A scoring set: fixed batches and their identity.
#[derive(Debug, Clone)]
pub struct ScoringSet {
    /// Identity (fingerprints, style, positions).
    pub id: ScoringSetId,
    /// How it was cut.
    pub spec: ScoringSpec,
    /// The batches, in order; labels only at scored positions.
    pub batches: Vec<TokenBatch>,
}

/// One scored row: inputs, real-token mask and labels (only at scored positions).
type Row = (Vec<u32>, Vec<u8>, Vec<u32>);

/// A usable cut: batches of at least one row, a masking rate in (0, 1].
fn check_cut(spec: &ScoringSpec) -> Result<()> {
    if spec.batch_size == 0 {
        let why = "a scoring set needs batch_size >= 1";
        return Err(ExperimentError::bad_setting("scoring.batch_size", 0, why));
    }
    if !(spec.mask_rate > 0.0 && spec.mask_rate <= 1.0) {
        let why = "a scoring set needs 0 < mask_rate <= 1";
        let rate = spec.mask_rate;
        return Err(ExperimentError::bad_setting("scoring.mask_rate", rate, why));
    }
    Ok(())
}

/// The scoring schedule of sequence `i` (`ids`) under `objective`: one row for the causal and
/// bidirectional objectives (every target scored), and for MLM one row per pass, each
/// maskable position masked in exactly one pass of a seeded, per-sequence order.
fn scored_rows(
    i: usize,
    ids: &[u32],
    objective: &Objective,
    spec: &ScoringSpec,
    specials: &SpecialTokens,
) -> Vec<Row> {
    let t = spec.seq_len;
    let (padded, mask) = pad_sequence(ids, t, specials.pad);
    let len = ids.len();
    match objective {
        Objective::CausalLm => {
            let mut labels = vec![IGNORE_LABEL; t];
            labels[..len.saturating_sub(1)].copy_from_slice(&ids[1..len.max(1)]);
            vec![(padded, mask, labels)]
        }
        Objective::BidirectionalLm => {
            let mut labels = vec![IGNORE_LABEL; t];
            labels[..len].copy_from_slice(ids);
            vec![(padded, mask, labels)]
        }
        Objective::MaskedLm(_) => {
            let mut maskable: Vec<usize> =
                (0..len).filter(|&j| !specials.contains(ids[j])).collect();
            maskable.shuffle(&mut ChaCha8Rng::seed_from_u64(
                SCHEDULE_SEED ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            ));
            let k = spec.passes();
            let mut rows = Vec::new();
            for p in 0..k {
                let mut input = padded.clone();
                let mut labels = vec![IGNORE_LABEL; t];
                for &j in maskable.iter().skip(p).step_by(k) {
                    labels[j] = ids[j];
                    input[j] = specials.mask;
                }
                if labels.iter().any(|&l| l != IGNORE_LABEL) {
                    rows.push((input, mask.clone(), labels));
                }
            }
            rows
        }
    }
}

/// Rows in batches of `batch_size` (of length `t`), batches without a target dropped.
fn batches_of(rows: &[Row], batch_size: usize, t: usize) -> Vec<TokenBatch> {
    rows.chunks(batch_size)
        .map(|chunk| TokenBatch {
            batch_size: chunk.len(),
            seq_len: t,
            input_ids: chunk.iter().flat_map(|r| r.0.iter().copied()).collect(),
            attention_mask: chunk.iter().flat_map(|r| r.1.iter().copied()).collect(),
            labels: chunk.iter().flat_map(|r| r.2.iter().copied()).collect(),
        })
        .filter(|b| b.n_targets() > 0)
        .collect()
}

impl ScoringSet {
    /// Cuts the scoring set of `style` from `docs` (see the module docs).
    pub fn build(
        style: &Style,
        tok: &Tokenizer,
        docs: &[Document],
        spec: &ScoringSpec,
    ) -> Result<Self> {
        check_cut(spec)?;
        // Named after the style whose set it is ([`towers::TowerStyle::scoring_set`]).
        let key = style.scoring_style()?;
        let data = style.sequences(tok, docs, spec.seq_len)?;
        let n = spec.max_sequences.unwrap_or(usize::MAX).min(data.len());
        if n == 0 {
            let what = "the scoring documents (sequences)";
            return Err(ExperimentError::too_little(what, 0, 1));
        }
        let specials = tok.special_tokens()?;
        let objective = style.objective();
        let rows: Vec<Row> = (0..n)
            .flat_map(|i| scored_rows(i, data.ids(i), &objective, spec, &specials))
            .collect();
        let batches = batches_of(&rows, spec.batch_size, spec.seq_len);
        let positions = batches.iter().map(|b| b.n_targets() as u64).sum();
        let id = ScoringSetId {
            fingerprint: batches_fingerprint(&key, &batches),
            style: key,
            text_fingerprint: text_fingerprint(tok, docs),
            positions,
        };
        Ok(Self {
            id,
            spec: spec.clone(),
            batches,
        })
    }

    /// Builds the set and saves its identity as `dir/scoring_set.json`, or, when that file
    /// exists, rebuilds it and checks that the fingerprint is the saved one (a changed
    /// tokenizer, text or setting is an error, not a silently different set).
    pub fn load_or_build(
        dir: &Path,
        style: &Style,
        data: &CorpusData,
        spec: &ScoringSpec,
    ) -> Result<Self> {
        let set = Self::build(style, &data.tok, &spec.documents(data)?, spec)?;
        let path = Self::path(dir, &set.id.style);
        // Created once when N processes of a study start together: the first writes it under
        // the data folder's creation lock, the others then check against it.
        let _lock = match path.is_file() {
            true => None,
            false => {
                std::fs::create_dir_all(dir).map_err(crate::error::io_at(dir))?;
                Some(crate::data::lock_data(dir)?)
            }
        };
        if path.is_file() {
            let saved: SavedScoringSet = read_json(&path)?;
            if saved.id != set.id || saved.spec != set.spec {
                return Err(ExperimentError::ScoringSetMismatch {
                    a: path.display().to_string(),
                    b: "the set rebuilt now".into(),
                    fa: short(&saved.id.fingerprint),
                    fb: set.id.short(),
                });
            }
        } else {
            write_json_atomic(
                &path,
                &SavedScoringSet {
                    id: set.id.clone(),
                    spec: set.spec.clone(),
                    batches: set.batches.len(),
                },
            )?;
        }
        Ok(set)
    }
}

impl ScoringSet {
    /// Where the set of `style` is saved in the data folder `dir`.
    pub fn path(dir: &Path, style: &Style) -> PathBuf {
        dir.join(format!("{}-{SCORING_FILE}", style.as_str()))
    }
}

/// Lower-case hex of a digest.
pub(crate) fn hex(d: impl AsRef<[u8]>) -> String {
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

fn batches_fingerprint(style: &Style, batches: &[TokenBatch]) -> String {
    let mut h = Sha256::new();
    h.update(style.as_str().as_bytes());
    for b in batches {
        h.update((b.batch_size as u64).to_le_bytes());
        h.update((b.seq_len as u64).to_le_bytes());
        for v in b.input_ids.iter().chain(&b.labels) {
            h.update(v.to_le_bytes());
        }
        h.update(&b.attention_mask);
    }
    hex(h.finalize())
}

fn text_fingerprint(tok: &Tokenizer, docs: &[Document]) -> String {
    let mut h = Sha256::new();
    for id in 0..tok.vocab_size() as u32 {
        h.update(tok.id_to_token(id).unwrap_or_default().as_bytes());
        h.update([0u8]);
    }
    for d in docs {
        h.update(d.text.as_bytes());
        h.update([0u8]);
    }
    hex(h.finalize())
}
