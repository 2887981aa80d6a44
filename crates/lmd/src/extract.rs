//! Embedding extraction at speed: sequences are tokenized once, sorted by length into batches
//! of at most `token_budget` padded tokens (little padding, steady memory), embedded, and put
//! back in input order. Results stream into [`Moments`] (here, or by shard with checkpoints in
//! [`crate::shard`]) or into one safetensors file per model and split
//! ([`crate::store::EmbeddingStore`]).

use std::time::Instant;

use candle_core::{Device, Tensor};

use crate::encoder::{Encoder, Pooling};
use crate::error::{LmdError, Result};
use crate::moments::Moments;

/// How to extract embeddings.
#[derive(Debug, Clone)]
pub struct ExtractOptions {
    /// T: tokens per sequence (special tokens included), each model truncating to it.
    pub t: usize,
    /// Pooling of the last hidden layer.
    pub pooling: Pooling,
    /// Most padded tokens (batch size × longest sequence) per forward pass.
    pub token_budget: usize,
    /// Most sequences per forward pass.
    pub max_batch: usize,
    /// Show a progress bar with sequences/s on stderr.
    pub progress: bool,
}

impl ExtractOptions {
    /// Masked-mean pooling at T with CPU-friendly batches (4096 tokens, ≤ 256 sequences), progress bar on.
    pub fn new(t: usize) -> Self {
        Self {
            t,
            pooling: Pooling::MaskedMean,
            token_budget: 4096,
            max_batch: 256,
            progress: true,
        }
    }
}

/// Groups sequence indices into batches by length: longest first, each batch holding at most
/// `max_batch` sequences and at most `token_budget` padded tokens (a single sequence longer than
/// the budget gets a batch of its own).
pub fn plan_batches(lengths: &[usize], token_budget: usize, max_batch: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(lengths[i]));
    let mut batches = Vec::new();
    let mut cur: Vec<usize> = Vec::new();
    let mut longest = 0;
    for i in order {
        let l = lengths[i].max(1);
        let width = longest.max(l);
        if !cur.is_empty()
            && ((cur.len() + 1) * width > token_budget || cur.len() >= max_batch.max(1))
        {
            batches.push(std::mem::take(&mut cur));
            longest = 0;
        }
        longest = longest.max(l);
        cur.push(i);
    }
    if !cur.is_empty() {
        batches.push(cur);
    }
    batches
}

/// A bar of `len` sequences labelled `label`, drawn (through `report::Progress`, the only
/// place a library draws) only when `show`.
pub(crate) fn progress_bar(len: usize, label: &str, show: bool) -> report::Bar {
    report::Progress::silent()
        .with_bars(show)
        .bar(len as u64, label)
}

/// Embeddings of `texts` by one model: a row-major [n, d] f32 host buffer in input order,
/// with the measured throughput.
pub fn embed_texts(enc: &dyn Encoder, texts: &[String], opts: &ExtractOptions) -> Result<Embedded> {
    if texts.is_empty() {
        return Err(LmdError::InvalidArgument("no texts to embed".into()));
    }
    let start = Instant::now();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let ids = enc.tokenize(&refs, opts.t)?;
    let lengths: Vec<usize> = ids.iter().map(Vec::len).collect();
    let d = enc.width();
    let mut out = vec![0f32; texts.len() * d];
    let pb = progress_bar(texts.len(), enc.name(), opts.progress);
    for batch in plan_batches(&lengths, opts.token_budget, opts.max_batch) {
        let seqs: Vec<Vec<u32>> = batch.iter().map(|&i| ids[i].clone()).collect();
        let e = enc
            .embed_ids(&seqs, opts.t, opts.pooling)?
            .to_device(&Device::Cpu)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        for (r, &i) in batch.iter().enumerate() {
            out[i * d..(i + 1) * d].copy_from_slice(&e[r * d..(r + 1) * d]);
        }
        pb.inc(batch.len() as u64);
    }
    pb.finish();
    let seconds = start.elapsed().as_secs_f64();
    Ok(Embedded {
        rows: texts.len(),
        width: d,
        data: out,
        seconds,
        tokens: lengths.iter().sum(),
    })
}

/// One model's embeddings of one list of texts.
#[derive(Debug, Clone)]
pub struct Embedded {
    /// Number of sequences n.
    pub rows: usize,
    /// Embedding width d.
    pub width: usize,
    /// Row-major [n, d] f32.
    pub data: Vec<f32>,
    /// Wall-clock seconds spent (0 when loaded from a store).
    pub seconds: f64,
    /// Real (unpadded) tokens processed.
    pub tokens: usize,
}

impl Embedded {
    /// Sequences per second of the extraction (NaN when loaded from a store).
    pub fn sequences_per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            self.rows as f64 / self.seconds
        } else {
            f64::NAN
        }
    }

    /// As a [n, d] tensor on the CPU.
    pub fn to_tensor(&self) -> Result<Tensor> {
        Ok(Tensor::from_slice(
            &self.data,
            (self.rows, self.width),
            &Device::Cpu,
        )?)
    }
}

/// Streams the embeddings of every model into one joint [`Moments`] (models in the order of
/// `moments.names()`, each encoder's [`Encoder::name`] the one there: a list in another order
/// is refused), `chunk` sequences at a time, so no model's full embedding matrix is kept.
pub fn embed_into_moments(
    encoders: &[&dyn Encoder],
    texts: &[String],
    opts: &ExtractOptions,
    chunk: usize,
    moments: &mut Moments,
) -> Result<()> {
    if encoders.len() != moments.names().len() {
        return Err(LmdError::InvalidArgument(format!(
            "{} encoders for moments over {} models",
            encoders.len(),
            moments.names().len()
        )));
    }
    // Widths alone cannot tell two 768-wide models apart: a reordered list would mix them.
    if let Some((e, n)) = encoders
        .iter()
        .zip(moments.names())
        .find(|(e, n)| e.name() != n.as_str())
    {
        return Err(LmdError::InvalidArgument(format!(
            "encoder {} where the moments expect {n} (encoders in the order of the moments' \
             models: {})",
            e.name(),
            moments.names().join(", ")
        )));
    }
    let inner = ExtractOptions {
        progress: false,
        ..opts.clone()
    };
    let pb = progress_bar(texts.len(), "joint moments", opts.progress);
    for part in texts.chunks(chunk.max(1)) {
        let blocks = encoders
            .iter()
            .map(|e| embed_texts(*e, part, &inner))
            .collect::<Result<Vec<_>>>()?;
        let views: Vec<&[f32]> = blocks.iter().map(|b| b.data.as_slice()).collect();
        moments.update(&views)?;
        pb.inc(part.len() as u64);
    }
    pb.finish();
    Ok(())
}

/// A 64-bit FNV-1a fingerprint of a list of texts (order and boundaries included): a stored
/// embedding file is reused only for exactly the texts it was computed from.
pub fn fingerprint(texts: &[String]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for t in texts {
        for &b in t.as_bytes().iter().chain(&[0xff]) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}
