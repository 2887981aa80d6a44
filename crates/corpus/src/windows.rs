//! Training sequences: BERT windows `[CLS] s1 [SEP] s2 [SEP]` cut at sentence boundaries, and
//! contiguous causal blocks for GPT/ELMo. Sequences are stored unpadded; padding to the
//! sequence length happens when a batch is built ([`pad_sequence`]).

use crate::error::{CorpusError, Result};
use crate::read::Document;
use crate::sentence::SentenceSplitter;
use crate::tokenizer::{ChunkMemo, SpecialTokens, Tokenizer};

/// Default BERT window length (the two-tower paper's 128).
pub const DEFAULT_MAX_LEN: usize = 128;

/// Documents tokenized together (one `encode_batch` call) when building windows or blocks.
const DOCS_PER_CHUNK: usize = 64;

/// A set of variable-length (at most `seq_len`) token sequences with segment ids, stored flat.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct TrainingData {
    seq_len: usize,
    ids: Vec<u32>,
    segments: Vec<u8>,
    /// `starts[i]..starts[i + 1]` is sequence `i`.
    starts: Vec<usize>,
}

impl TrainingData {
    /// An empty set of sequences of at most `seq_len` tokens.
    pub fn new(seq_len: usize) -> Self {
        Self {
            seq_len,
            ids: Vec::new(),
            segments: Vec::new(),
            starts: vec![0],
        }
    }

    /// Appends one sequence (unpadded) with its segment ids (0 = first, 1 = second segment).
    pub fn push(&mut self, ids: &[u32], segments: &[u8]) -> Result<()> {
        if ids.is_empty() || ids.len() > self.seq_len || ids.len() != segments.len() {
            return Err(CorpusError::InvalidArgument(format!(
                "sequence of {} ids / {} segment ids for seq_len {}",
                ids.len(),
                segments.len(),
                self.seq_len
            )));
        }
        self.ids.extend_from_slice(ids);
        self.segments.extend_from_slice(segments);
        self.starts.push(self.ids.len());
        Ok(())
    }

    /// Maximum (padded) sequence length.
    pub fn seq_len(&self) -> usize {
        self.seq_len
    }

    /// Number of sequences.
    pub fn len(&self) -> usize {
        self.starts.len().saturating_sub(1)
    }

    /// No sequence?
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Total number of (non-PAD) tokens.
    pub fn n_tokens(&self) -> usize {
        self.ids.len()
    }

    /// Ids of sequence `i` (unpadded). Panics when `i >= len()`.
    pub fn ids(&self, i: usize) -> &[u32] {
        &self.ids[self.starts[i]..self.starts[i + 1]]
    }

    /// Segment ids of sequence `i` (unpadded). Panics when `i >= len()`.
    pub fn segments(&self, i: usize) -> &[u8] {
        &self.segments[self.starts[i]..self.starts[i + 1]]
    }

    /// Every sequence's ids, in order.
    pub fn iter(&self) -> impl Iterator<Item = &[u32]> + '_ {
        (0..self.len()).map(|i| self.ids(i))
    }
}

/// Pads `ids` with `pad` to `seq_len`; returns the padded ids and the attention mask (1 = real).
pub fn pad_sequence(ids: &[u32], seq_len: usize, pad: u32) -> (Vec<u32>, Vec<u8>) {
    let n = ids.len().min(seq_len);
    let mut out = ids[..n].to_vec();
    out.resize(seq_len, pad);
    let mut mask = vec![1u8; n];
    mask.resize(seq_len, 0);
    (out, mask)
}

/// Packs one document's sentences (token ids, no specials) greedily into BERT windows of at most
/// `max_len` tokens, appended to `out`.
///
/// Consecutive sentences are added while `[CLS] A [SEP] B [SEP]` fits; a window holding several
/// sentences is split into segments A and B at the sentence boundary that balances them best
/// (ties: the earlier one); a single sentence gives `[CLS] A [SEP]`. A sentence longer than
/// `max_len - 3` is truncated to that length. Empty sentences are skipped.
pub fn pack_bert_windows(
    sentences: &[Vec<u32>],
    specials: &SpecialTokens,
    max_len: usize,
    out: &mut TrainingData,
) -> Result<()> {
    if max_len < 4 || max_len > out.seq_len() {
        return Err(CorpusError::InvalidArgument(format!(
            "BERT window length {max_len} must be in 4..={}",
            out.seq_len()
        )));
    }
    let budget = max_len - 3;
    let mut window: Vec<&[u32]> = Vec::new();
    let mut used = 0;
    for s in sentences.iter().filter(|s| !s.is_empty()) {
        let s = &s[..s.len().min(budget)];
        if used + s.len() > budget && !window.is_empty() {
            emit_window(&window, specials, out)?;
            window.clear();
            used = 0;
        }
        window.push(s);
        used += s.len();
    }
    if !window.is_empty() {
        emit_window(&window, specials, out)?;
    }
    Ok(())
}

fn emit_window(window: &[&[u32]], sp: &SpecialTokens, out: &mut TrainingData) -> Result<()> {
    let total: usize = window.iter().map(|s| s.len()).sum();
    // Number of sentences in segment A: the most balanced split (all of them if only one).
    let n_a = if window.len() == 1 {
        1
    } else {
        let mut best = (usize::MAX, 1);
        let mut a = 0;
        for (j, s) in window[..window.len() - 1].iter().enumerate() {
            a += s.len();
            let diff = a.abs_diff(total - a);
            if diff < best.0 {
                best = (diff, j + 1);
            }
        }
        best.1
    };
    let mut ids = Vec::with_capacity(total + 3);
    let mut seg = Vec::with_capacity(total + 3);
    ids.push(sp.cls);
    for s in &window[..n_a] {
        ids.extend_from_slice(s);
    }
    ids.push(sp.sep);
    seg.resize(ids.len(), 0);
    if n_a < window.len() {
        for s in &window[n_a..] {
            ids.extend_from_slice(s);
        }
        ids.push(sp.sep);
        seg.resize(ids.len(), 1);
    }
    out.push(&ids, &seg)
}

/// Cuts a stream of documents (token ids, no specials) into contiguous blocks of `block_len`
/// tokens, appended to `out` (whose `seq_len` must be at least `block_len`). Blocks run across
/// document boundaries; `separator` (e.g. `[SEP]` or `<|endoftext|>`) is put between documents.
/// The tail (shorter than `block_len`) is kept and padded at batch time.
pub fn pack_causal_blocks<I, D>(
    documents: I,
    block_len: usize,
    separator: Option<u32>,
    out: &mut TrainingData,
) -> Result<()>
where
    I: IntoIterator<Item = D>,
    D: AsRef<[u32]>,
{
    if block_len < 2 || block_len > out.seq_len() {
        return Err(CorpusError::InvalidArgument(format!(
            "causal block length {block_len} must be in 2..={}",
            out.seq_len()
        )));
    }
    let zeros = vec![0u8; block_len];
    let mut block: Vec<u32> = Vec::with_capacity(block_len);
    let mut first = true;
    for doc in documents {
        let doc = doc.as_ref();
        if doc.is_empty() {
            continue;
        }
        let sep = if first { None } else { separator };
        first = false;
        for &id in sep.iter().chain(doc) {
            block.push(id);
            if block.len() == block_len {
                out.push(&block, &zeros)?;
                block.clear();
            }
        }
    }
    if !block.is_empty() {
        out.push(&block, &zeros[..block.len()])?;
    }
    Ok(())
}

/// Tokenizes documents in parallel chunks and hands each document's line token ids to `f`.
fn for_each_tokenized<I, F>(
    tokenizer: &Tokenizer,
    documents: I,
    split: impl Fn(&str) -> Vec<&str>,
    mut f: F,
) -> Result<()>
where
    I: IntoIterator<Item = Result<Document>>,
    F: FnMut(Vec<Vec<u32>>) -> Result<()>,
{
    let mut docs: Vec<Document> = Vec::with_capacity(DOCS_PER_CHUNK);
    let mut memo = ChunkMemo::default();
    let mut flush = |docs: &mut Vec<Document>| -> Result<()> {
        let mut pieces: Vec<&str> = Vec::new();
        let mut counts = Vec::with_capacity(docs.len());
        for d in docs.iter() {
            let parts = split(&d.text);
            counts.push(parts.len());
            pieces.extend(parts);
        }
        let mut encoded = tokenizer.encode_ids_memo(&pieces, &mut memo)?.into_iter();
        for n in counts {
            f(encoded.by_ref().take(n).collect())?;
        }
        docs.clear();
        Ok(())
    };
    for doc in documents {
        docs.push(doc?);
        if docs.len() == DOCS_PER_CHUNK {
            flush(&mut docs)?;
        }
    }
    flush(&mut docs)
}

/// BERT windows of `max_len` tokens from documents: sentences split by `splitter`, tokenized
/// without specials, packed by [`pack_bert_windows`] one document at a time (windows never span
/// two documents).
pub fn bert_windows<I>(
    tokenizer: &Tokenizer,
    documents: I,
    splitter: &SentenceSplitter,
    max_len: usize,
) -> Result<TrainingData>
where
    I: IntoIterator<Item = Result<Document>>,
{
    let specials = tokenizer.special_tokens()?;
    let mut out = TrainingData::new(max_len);
    for_each_tokenized(
        tokenizer,
        documents,
        |t| splitter.split(t),
        |sentences| pack_bert_windows(&sentences, &specials, max_len, &mut out),
    )?;
    Ok(out)
}

/// Contiguous causal blocks of `block_len` tokens over the documents (see
/// [`pack_causal_blocks`]), each document tokenized line by line without specials.
pub fn causal_blocks<I>(
    tokenizer: &Tokenizer,
    documents: I,
    block_len: usize,
    separator: Option<u32>,
) -> Result<TrainingData>
where
    I: IntoIterator<Item = Result<Document>>,
{
    if block_len < 2 {
        return Err(CorpusError::InvalidArgument(format!(
            "causal block length {block_len} must be at least 2"
        )));
    }
    let mut out = TrainingData::new(block_len);
    let zeros = vec![0u8; block_len];
    // Streaming: full blocks are stored as soon as they exist, the partial one carries over.
    let mut pending: Vec<u32> = Vec::new();
    let mut first = true;
    for_each_tokenized(
        tokenizer,
        documents,
        |t| t.lines().collect(),
        |lines| {
            if lines.iter().all(|l| l.is_empty()) {
                return Ok(());
            }
            if !first {
                pending.extend(separator);
            }
            first = false;
            for l in &lines {
                pending.extend_from_slice(l);
            }
            let full = pending.len() / block_len * block_len;
            for block in pending[..full].chunks(block_len) {
                out.push(block, &zeros)?;
            }
            pending.drain(..full);
            Ok(())
        },
    )?;
    pack_causal_blocks([pending], block_len, None, &mut out)?;
    Ok(out)
}
