//! Extraction at paper scale: a split's sequences cut into shards by sample range, each shard's
//! joint moments streamed chunk by chunk (memory O(D² + chunk·D), never the n × D embeddings),
//! checkpointed atomically so an interrupted shard resumes exactly, and the shards merged
//! exactly ([`Moments::merge`]) after their keys are checked.
//!
//! A shard is a plain process (`lmd_table --shard i/N`): any scheduler runs them (a Slurm job
//! array, one process per GPU); the analysis then runs once on the merged moments.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::encoder::Encoder;
use crate::error::{LmdError, Result};
use crate::extract::{embed_into_moments, fingerprint, progress_bar, ExtractOptions};
use crate::moments::Moments;

/// Shard `index` of `count` (0-based): the sample range `index·n/count .. (index+1)·n/count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// Which shard, 0-based.
    pub index: usize,
    /// How many shards the split is cut into.
    pub count: usize,
}

impl Shard {
    /// The whole split as one shard.
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    /// Shard `index` of `count`; `count` > 0 and `index` < `count`.
    pub fn new(index: usize, count: usize) -> Result<Self> {
        if count == 0 || index >= count {
            return Err(LmdError::InvalidArgument(format!(
                "shard {index}/{count}: need 0 <= index < count"
            )));
        }
        Ok(Self { index, count })
    }

    /// Every shard of a split cut into `count`.
    pub fn all(count: usize) -> Result<Vec<Shard>> {
        (0..count.max(1)).map(|i| Shard::new(i, count)).collect()
    }

    /// The rows of `n` this shard covers (the shards of one count tile `0..n`).
    pub fn range(&self, n: usize) -> std::ops::Range<usize> {
        self.index * n / self.count..(self.index + 1) * n / self.count
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Shard {
    type Err = LmdError;
    /// Reads `i/N`.
    fn from_str(s: &str) -> Result<Self> {
        let bad = || LmdError::InvalidArgument(format!("shard {s:?}: expected i/N, e.g. 0/4"));
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let num = |v: &str| v.trim().parse::<usize>().map_err(|_| bad());
        Shard::new(num(i)?, num(n)?)
    }
}

/// One model as a stored result records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelKey {
    /// Display name.
    pub name: String,
    /// [`Encoder::fingerprint`]: its files, byte for byte.
    pub fingerprint: String,
    /// Device it ran on (`Cpu`, `Cuda { gpu_id: 0 }`).
    pub device: String,
    /// Dtype it computed in.
    pub dtype: String,
}

impl ModelKey {
    /// The key of a loaded model (hashes its folder once).
    pub fn of(enc: &dyn Encoder) -> Result<Self> {
        Ok(Self {
            name: enc.name().to_string(),
            fingerprint: enc.fingerprint()?,
            device: format!("{:?}", enc.device().location()),
            dtype: format!("{:?}", enc.dtype()),
        })
    }
}

/// Everything a stored embedding or moments file was computed from. A stored result is used
/// only when its key equals the one asked for; otherwise it is computed again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtractKey {
    /// The models, in column-block order.
    pub models: Vec<ModelKey>,
    /// Pooling's short name.
    pub pooling: String,
    /// Tokens per sequence.
    pub t: usize,
    /// FNV-1a fingerprint (hex) of exactly the texts covered, in order.
    pub texts: String,
    /// How many texts that is.
    pub rows: usize,
    /// Which part of its split.
    pub shard: Shard,
    /// Sequences per moments update (fixes the order of accumulation, so a resumed shard equals
    /// an uninterrupted one bit for bit when it is resumed with the same batching settings,
    /// `token_budget` and `max_batch`, which the key does not hold: other ones pad the pieces
    /// to other lengths and move the sums by rounding, about 1e-7); 0 for an embedding file.
    pub chunk: usize,
    /// The seed of the similarity accumulators' null ([`Moments::track_similarity`]) when the
    /// moments track them; absent in files written before they existed.
    #[serde(default)]
    pub similarity: Option<u64>,
}

/// The header metadata key a key is stored under.
pub(crate) const KEY_META: &str = "lmd.extract_key";

impl ExtractKey {
    /// The key of `texts` (the shard's own rows) embedded by `models` with `opts`.
    pub fn new(
        models: &[ModelKey],
        texts: &[String],
        opts: &ExtractOptions,
        shard: Shard,
        chunk: usize,
    ) -> Self {
        Self {
            models: models.to_vec(),
            pooling: opts.pooling.as_str().to_string(),
            t: opts.t,
            texts: format!("{:016x}", fingerprint(texts)),
            rows: texts.len(),
            shard,
            chunk,
            similarity: None,
        }
    }

    /// The same key for moments that track the similarity accumulators with `seed` (`None`:
    /// they do not).
    pub fn with_similarity(mut self, seed: Option<u64>) -> Self {
        self.similarity = seed;
        self
    }

    /// The fields in which `other` differs from this key (empty when equal).
    pub fn differences(&self, other: &ExtractKey) -> Vec<&'static str> {
        let mut d = Vec::new();
        let names = |k: &ExtractKey| k.models.iter().map(|m| m.name.clone()).collect::<Vec<_>>();
        let field = |k: &ExtractKey, f: fn(&ModelKey) -> &String| {
            k.models.iter().map(f).cloned().collect::<Vec<_>>()
        };
        if names(self) != names(other) {
            d.push("models");
        } else {
            for (what, f) in [
                (
                    "model fingerprints",
                    (|m: &ModelKey| &m.fingerprint) as fn(&ModelKey) -> &String,
                ),
                ("device", |m| &m.device),
                ("dtype", |m| &m.dtype),
            ] {
                if field(self, f) != field(other, f) {
                    d.push(what);
                }
            }
        }
        if self.pooling != other.pooling {
            d.push("pooling");
        }
        if self.t != other.t {
            d.push("T");
        }
        if (self.texts.as_str(), self.rows) != (other.texts.as_str(), other.rows) {
            d.push("texts");
        }
        if self.shard != other.shard {
            d.push("shard");
        }
        if self.chunk != other.chunk {
            d.push("chunk");
        }
        if self.similarity != other.similarity {
            d.push("similarity accumulators");
        }
        d
    }

    /// As header metadata.
    pub(crate) fn to_meta(&self) -> HashMap<String, String> {
        let json = serde_json::to_string(self).unwrap_or_default();
        HashMap::from([(KEY_META.to_string(), json)])
    }

    /// From header metadata; `None` when absent or unreadable (an older file: computed again).
    pub(crate) fn from_meta(meta: &HashMap<String, String>) -> Option<Self> {
        serde_json::from_str(meta.get(KEY_META)?).ok()
    }
}

/// How a shard is streamed.
#[derive(Debug, Clone)]
pub struct StreamSettings {
    /// Sequences per moments update (every model embeds them, then one joint update).
    pub chunk: usize,
    /// Least time between two checkpoints (each writes the D × D moments).
    pub checkpoint_every: Duration,
    /// Most rows this call processes (rounded down to whole chunks, at least one) before it
    /// checkpoints and returns [`ShardStatus::Partial`] (time-sliced or pre-emptible jobs);
    /// `None`: to the end.
    pub max_rows: Option<usize>,
    /// Show a progress bar on stderr.
    pub progress: bool,
    /// Track the similarity accumulators with this seed ([`Moments::track_similarity`], the
    /// shard's first row its first global row); `None`: the moments alone.
    pub similarity_seed: Option<u64>,
}

impl Default for StreamSettings {
    /// 512 sequences per update, a checkpoint at most every two minutes, no row limit.
    fn default() -> Self {
        Self {
            chunk: 512,
            checkpoint_every: Duration::from_secs(120),
            max_rows: None,
            progress: true,
            similarity_seed: None,
        }
    }
}

/// What [`shard_moments`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum ShardStatus {
    /// A finished file with the same key was read.
    Reused,
    /// Computed from scratch (no file, or a file with another key: `replaced` names the fields
    /// that differed).
    Computed {
        /// Fields of the stale file's key that differed (empty when there was no file).
        replaced: Vec<&'static str>,
    },
    /// Continued from a checkpoint of `from` rows to the end.
    Resumed {
        /// Rows the checkpoint held.
        from: u64,
    },
    /// Stopped at `rows` of the shard's rows after [`StreamSettings::max_rows`] (checkpointed).
    Partial {
        /// Rows done so far.
        rows: u64,
    },
}

/// The joint moments of `shard` of one split: `split_texts` are the split's texts (the shard
/// takes its range), embedded by every model in `encoders` and streamed into [`Moments`] at
/// `path` (safetensors with the [`ExtractKey`] in its header). A finished file with the same key
/// is reused; a checkpoint with the same key is resumed exactly; a file with another key is
/// replaced. Checkpoints are atomic (temporary file synced, then renamed: a kill leaves the
/// previous checkpoint). One process at a time: the writer holds an advisory lock
/// ([`files::FolderLock`]) on `<path>.lock`, which names it (PID, host, since when); while it
/// lives, another call for the same file is refused ([`LmdError::Shard`]); a lock file left by
/// a dead process is taken. A file that
/// cannot be read (cut short) is refused naming the shard, not overwritten.
pub fn shard_moments(
    encoders: &[&dyn Encoder],
    split_texts: &[String],
    opts: &ExtractOptions,
    shard: Shard,
    path: &Path,
    settings: &StreamSettings,
) -> Result<(Moments, ShardStatus)> {
    let texts = &split_texts[shard.range(split_texts.len())];
    if texts.is_empty() {
        return Err(LmdError::InvalidArgument(format!(
            "shard {shard} of {} texts is empty",
            split_texts.len()
        )));
    }
    let chunk = settings.chunk.max(1);
    let models = encoders
        .iter()
        .map(|e| ModelKey::of(*e))
        .collect::<Result<Vec<_>>>()?;
    let key = ExtractKey::new(&models, texts, opts, shard, chunk)
        .with_similarity(settings.similarity_seed);
    let names: Vec<String> = encoders.iter().map(|e| e.name().to_string()).collect();
    let widths: Vec<usize> = encoders.iter().map(|e| e.width()).collect();
    let mut fresh = Moments::new(names, widths)?;
    if let Some(seed) = settings.similarity_seed {
        let first = shard.range(split_texts.len()).start as u64;
        fresh.track_similarity(seed, first)?;
    }
    create_parent(path)?;
    // One writer per shard file: held until this function returns.
    let _lock = lock_shard(path, shard)?;
    let (mut m, replaced) = stored_or_fresh(fresh, path, shard, &key)?;
    let from = m.n();
    if from as usize > texts.len() {
        return Err(LmdError::Malformed {
            path: path.to_path_buf(),
            reason: format!("holds {from} rows of a {}-row shard", texts.len()),
        });
    }
    if from as usize == texts.len() {
        return Ok((m, ShardStatus::Reused));
    }
    let end = stop_row(from as usize, settings.max_rows, chunk, texts.len());
    let inner = ExtractOptions {
        progress: false,
        ..opts.clone()
    };
    let label = format!("moments {shard}");
    let pb = progress_bar(texts.len(), &label, settings.progress && opts.progress);
    pb.set_position(from);
    let mut saved = Instant::now();
    let mut start = from as usize;
    // Chunks start at multiples of `chunk` from the shard's first row, whatever the resume point.
    while start < end {
        let stop = ((start / chunk + 1) * chunk).min(end);
        embed_into_moments(encoders, &texts[start..stop], &inner, chunk, &mut m)?;
        pb.set_position(stop as u64);
        start = stop;
        if start < end && saved.elapsed() >= settings.checkpoint_every {
            m.save_with(path, &key.to_meta())?;
            saved = Instant::now();
        }
    }
    m.save_with(path, &key.to_meta())?;
    pb.finish();
    let status = if end < texts.len() {
        ShardStatus::Partial { rows: end as u64 }
    } else if from > 0 {
        ShardStatus::Resumed { from }
    } else {
        ShardStatus::Computed { replaced }
    };
    Ok((m, status))
}

/// Creates the folder `path` is to be written in.
fn create_parent(path: &Path) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| LmdError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    Ok(())
}

/// The moments to go on from: the shard file at `path` when it carries `key` (finished or a
/// checkpoint), else `fresh`, with the fields of a stale file's key that differed.
fn stored_or_fresh(
    fresh: Moments,
    path: &Path,
    shard: Shard,
    key: &ExtractKey,
) -> Result<(Moments, Vec<&'static str>)> {
    if !path.is_file() {
        return Ok((fresh, Vec::new()));
    }
    let (stored, meta) = Moments::load_with(path).map_err(|e| LmdError::Shard {
        path: path.to_path_buf(),
        reason: format!(
            "shard {shard}: its file cannot be read ({e}); remove it to start the shard again"
        ),
    })?;
    Ok(match ExtractKey::from_meta(&meta) {
        Some(k) if k == *key => (stored, Vec::new()),
        Some(k) => (fresh, k.differences(key)),
        None => (fresh, vec!["key (none recorded)"]),
    })
}

/// The row (of `len`) at which a call that starts at `from` stops. A row limit ends on the
/// chunk grid (at least one chunk), so a resumed shard repeats the uninterrupted run's updates
/// exactly.
fn stop_row(from: usize, max_rows: Option<usize>, chunk: usize, len: usize) -> usize {
    match max_rows {
        Some(r) if from + r < len => {
            let next = (from / chunk + 1) * chunk;
            ((from + r) / chunk * chunk).max(next).min(len)
        }
        _ => len,
    }
}

/// Merges finished shard files into the moments of the whole split. Every file must carry the
/// key in `expected` (same position) and be complete. Device and dtype are compared among the
/// shards, not with `expected`: shards computed on GPUs may be merged on a machine without one,
/// but never shards computed at two precisions.
pub fn merge_shards(files: &[(PathBuf, ExtractKey)]) -> Result<Moments> {
    let mut total: Option<Moments> = None;
    let mut first: Option<ExtractKey> = None;
    for (path, want) in files {
        let bad = |reason: String| LmdError::Shard {
            path: path.clone(),
            reason,
        };
        if !path.is_file() {
            return Err(bad(format!("shard {} has not been extracted", want.shard)));
        }
        let (m, meta) = Moments::load_with(path).map_err(|e| {
            bad(format!(
                "shard {}: its file cannot be read ({e}); run the shard again",
                want.shard
            ))
        })?;
        let got = ExtractKey::from_meta(&meta)
            .ok_or_else(|| bad(format!("shard {}: no extraction key", want.shard)))?;
        let mut want = want.clone();
        let reference = first.get_or_insert_with(|| got.clone());
        for ((w, g), r) in want
            .models
            .iter_mut()
            .zip(&got.models)
            .zip(&reference.models)
        {
            if (&g.device, &g.dtype) != (&r.device, &r.dtype) {
                return Err(bad(format!(
                    "{} ran on {} at {}, the first shard on {} at {}",
                    g.name, g.device, g.dtype, r.device, r.dtype
                )));
            }
            (w.device, w.dtype) = (g.device.clone(), g.dtype.clone());
        }
        let diff = got.differences(&want);
        if !diff.is_empty() {
            return Err(bad(format!(
                "shard {}: computed from other {}",
                want.shard,
                diff.join(", ")
            )));
        }
        if m.n() as usize != want.rows {
            return Err(bad(format!(
                "unfinished: {} of {} rows (run the shard again to resume it)",
                m.n(),
                want.rows
            )));
        }
        match total.as_mut() {
            None => total = Some(m),
            Some(t) => t.merge(&m)?,
        }
    }
    total.ok_or_else(|| LmdError::InvalidArgument("no shards to merge".into()))
}

/// Takes the lock of one shard's moments file: `<path>.lock`, held ([`files::FolderLock`]) for
/// as long as the value lives and naming its holder (PID, host, since when) for the refusal's
/// sentence. The kernel releases the lock of a process that dies, so a lock file left behind is
/// simply taken, and of N processes racing for it exactly one wins.
fn lock_shard(target: &Path, shard: Shard) -> Result<files::FolderLock> {
    let mut name = target.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    let path = target.with_file_name(name);
    match files::FolderLock::acquire(&path, &format!("shard {shard}")) {
        Err(files::FilesError::Locked { holder, .. }) => Err(LmdError::Shard {
            path: target.to_path_buf(),
            reason: format!(
                "shard {shard} is being written by {holder} (lock file {}); wait for it",
                path.display()
            ),
        }),
        taken => Ok(taken?),
    }
}
