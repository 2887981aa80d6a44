//! A scores file: named sets of per-position log-probabilities ([`PositionLogProbs`]) that share
//! one set of positions, in one safetensors file that any machine reads without the heads'
//! checkpoints or the corpus.
//!
//! Layout, format version 1 (`n` scored positions, `K` towers):
//!
//! | tensor | dtype | shape | what |
//! |---|---|---|---|
//! | `targets` | U32 | `[n]` | target token id of each scored position |
//! | `batch` | U32 | `[n]` | its scoring batch |
//! | `position` | U32 | `[n]` | its flat index (row · seq_len + t) in that batch |
//! | `heads/<set>` | F32 | `[K, n]` | natural-log p(target) of each tower's head |
//!
//! `<set>` is a name the caller gives each set of heads. Every set of a file is scored on the
//! same positions, so they are stored once. The metadata holds `format` (`lmsplit-scores`),
//! `version` (`1`), `vocab_size` and `scoring` (the fingerprint of the positions' set, given by
//! the caller). The file is rewritten whole (atomically) each time a set is added.
//! Size: 12 bytes per position, plus 4·K bytes per position for each set.

use std::collections::BTreeMap;
use std::path::Path;

use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;

use crate::{HeadsError, PositionLogProbs, Result};

/// The `format` metadata of a scores file.
const FORMAT: &str = "lmsplit-scores";
/// The layout version this crate writes and reads.
pub const SCORES_VERSION: u32 = 1;

/// The contents of a scores file: the scored positions and every head set's log-probabilities.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScoresFile {
    /// Vocabulary size V of the heads.
    pub vocab_size: usize,
    /// The fingerprint of the positions' set, as the caller gave it to [`ScoresFile::new`].
    pub scoring: String,
    /// Target token id of each scored position.
    pub targets: Vec<u32>,
    /// Its scoring batch.
    pub batch: Vec<u32>,
    /// Its flat index in that batch.
    pub position: Vec<u32>,
    /// Each head set's `[K][n]` log-probabilities, by set name.
    pub sets: BTreeMap<String, Vec<Vec<f32>>>,
}

impl ScoresFile {
    /// An empty file for positions of the set of fingerprint `scoring`.
    pub fn new(scoring: &str) -> Self {
        Self {
            scoring: scoring.into(),
            ..Self::default()
        }
    }

    /// The file at `path` when there is one (a resumed job's), else an empty one for the set
    /// of fingerprint `scoring`.
    pub fn open_or_new(path: &Path, scoring: &str) -> Result<Self> {
        match path.is_file() {
            true => Self::load(path),
            false => Ok(Self::new(scoring)),
        }
    }

    /// Adds (or replaces) the head set `name`; its positions must be the file's (the first
    /// set added defines them), or it is [`HeadsError::Mismatch`].
    pub fn insert(&mut self, name: &str, lp: &PositionLogProbs) -> Result<()> {
        if self.sets.is_empty() {
            self.vocab_size = lp.vocab_size;
            self.targets = lp.targets.clone();
            self.batch = lp.batch_index.clone();
            self.position = lp.position.clone();
        } else if lp.targets != self.targets
            || lp.batch_index != self.batch
            || lp.position != self.position
        {
            return Err(HeadsError::Mismatch(format!(
                "the head set {name} does not fit the scores file: every head set of a scores \
                 file is scored on the same positions"
            )));
        }
        self.sets.insert(name.into(), lp.logp.clone());
        Ok(())
    }

    /// Adds the head set `name` computed by `score` and saves the file at `path`, unless the
    /// file holds it already (a resumed run does not score a set twice). `score`'s error is
    /// returned as it is; this file's own are converted by `From`.
    pub fn ensure<E: From<HeadsError>>(
        &mut self,
        name: &str,
        path: &Path,
        score: impl FnOnce() -> std::result::Result<PositionLogProbs, E>,
    ) -> std::result::Result<(), E> {
        if !self.sets.contains_key(name) {
            self.insert(name, &score()?)?;
            self.save(path)?;
        }
        Ok(())
    }

    /// The head set `name` as log-probabilities, `None` when the file has no such set.
    pub fn get(&self, name: &str) -> Option<PositionLogProbs> {
        self.sets.get(name).map(|logp| PositionLogProbs {
            vocab_size: self.vocab_size,
            targets: self.targets.clone(),
            batch_index: self.batch.clone(),
            position: self.position.clone(),
            logp: logp.clone(),
            full: None,
        })
    }

    /// The head set `name`, or [`HeadsError::Missing`] naming it and the file `path`.
    pub fn require(&self, name: &str, path: &Path) -> Result<PositionLogProbs> {
        self.get(name).ok_or_else(|| HeadsError::Missing {
            path: path.to_path_buf(),
            what: format!("the head set {name} in the scores file"),
        })
    }

    /// Writes the file at `path` whole or not at all ([`files::write_atomic`]).
    pub fn save(&self, path: &Path) -> Result<()> {
        let bytes = |v: &[u32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let mut owned: Vec<(String, Vec<usize>, Dtype, Vec<u8>)> = vec![
            (
                "targets".into(),
                vec![self.n()],
                Dtype::U32,
                bytes(&self.targets),
            ),
            (
                "batch".into(),
                vec![self.n()],
                Dtype::U32,
                bytes(&self.batch),
            ),
            (
                "position".into(),
                vec![self.n()],
                Dtype::U32,
                bytes(&self.position),
            ),
        ];
        for (name, logp) in &self.sets {
            let data: Vec<u8> = logp
                .iter()
                .flatten()
                .flat_map(|x| x.to_le_bytes())
                .collect();
            let shape = vec![logp.len(), self.n()];
            owned.push((format!("heads/{name}"), shape, Dtype::F32, data));
        }
        let views = owned
            .iter()
            .map(|(name, shape, dtype, data)| {
                let view = TensorView::new(*dtype, shape.clone(), data).map_err(bad(path))?;
                Ok((name.clone(), view))
            })
            .collect::<Result<Vec<_>>>()?;
        let meta = std::collections::HashMap::from([
            ("format".to_string(), FORMAT.to_string()),
            ("version".to_string(), SCORES_VERSION.to_string()),
            ("vocab_size".to_string(), self.vocab_size.to_string()),
            ("scoring".to_string(), self.scoring.clone()),
        ]);
        let buf = safetensors::serialize(views, Some(meta)).map_err(bad(path))?;
        let buf = canonical_header(buf).map_err(bad(path))?;
        files::write_atomic(path, &buf)?;
        Ok(())
    }

    /// Reads the file at `path`: no file is [`HeadsError::Missing`], a file of another format
    /// or version (or a damaged one) [`HeadsError::NotA`], each naming `path`.
    pub fn load(path: &Path) -> Result<Self> {
        if !path.is_file() {
            return Err(HeadsError::Missing {
                path: path.to_path_buf(),
                what: "the scores file (its heads have not been scored yet)".into(),
            });
        }
        let buf = std::fs::read(path).map_err(|source| HeadsError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let (_, header) = SafeTensors::read_metadata(&buf).map_err(bad(path))?;
        let meta = header.metadata().clone().unwrap_or_default();
        let field = |k: &str| meta.get(k).cloned().unwrap_or_default();
        if field("format") != FORMAT || field("version") != SCORES_VERSION.to_string() {
            return Err(HeadsError::NotA {
                path: path.to_path_buf(),
                expected: format!(
                    "a scores file of version {SCORES_VERSION} (format {:?}, version {:?})",
                    field("format"),
                    field("version")
                ),
            });
        }
        let st = SafeTensors::deserialize(&buf).map_err(bad(path))?;
        let u32s = |name: &str| -> Result<Vec<u32>> {
            let t = st.tensor(name).map_err(bad(path))?;
            check_dtype(path, name, t.dtype(), Dtype::U32)?;
            Ok(words(t.data()).map(u32::from_le_bytes).collect())
        };
        let mut file = ScoresFile {
            vocab_size: field("vocab_size").parse().unwrap_or(0),
            scoring: field("scoring"),
            targets: u32s("targets")?,
            batch: u32s("batch")?,
            position: u32s("position")?,
            sets: BTreeMap::new(),
        };
        let n = file.n();
        if file.batch.len() != n || file.position.len() != n {
            return Err(bad(path)("targets, batch and position differ in length"));
        }
        for name in st.names() {
            let Some(set) = name.strip_prefix("heads/") else {
                continue;
            };
            let t = st.tensor(name).map_err(bad(path))?;
            check_dtype(path, name, t.dtype(), Dtype::F32)?;
            if t.shape().len() != 2 || t.shape()[1] != n {
                return Err(bad(path)(format!(
                    "{name} has shape {:?}, not [K, {n}]",
                    t.shape()
                )));
            }
            let flat: Vec<f32> = words(t.data()).map(f32::from_le_bytes).collect();
            let rows = flat.chunks(n.max(1)).map(<[f32]>::to_vec).collect();
            file.sets.insert(set.to_string(), rows);
        }
        Ok(file)
    }

    /// Number of scored positions.
    pub fn n(&self) -> usize {
        self.targets.len()
    }
}

/// The little-endian 4-byte words of `data`.
fn words(data: &[u8]) -> impl Iterator<Item = [u8; 4]> + '_ {
    data.chunks_exact(4).map(|w| [w[0], w[1], w[2], w[3]])
}

/// [`HeadsError::NotA`] unless the tensor `name` of the file at `path` is of dtype `want`.
fn check_dtype(path: &Path, name: &str, got: Dtype, want: Dtype) -> Result<()> {
    match got == want {
        true => Ok(()),
        false => Err(bad(path)(format!("{name} is {got:?}, not {want:?}"))),
    }
}

/// A damaged or foreign scores file at `path`, the reason given.
fn bad<D: std::fmt::Display>(path: &Path) -> impl Fn(D) -> HeadsError + '_ {
    move |why: D| HeadsError::NotA {
        path: path.to_path_buf(),
        expected: format!("a readable scores file ({why})"),
    }
}

/// `buf` (a serialized safetensors file) with its header's metadata in sorted key order:
/// safetensors writes the metadata map in hash order, so two identical saves would differ in
/// their bytes. The tensors' entries and data are kept as they are (their offsets count from
/// the end of the header, so a header of another length moves nothing).
fn canonical_header(buf: Vec<u8>) -> std::result::Result<Vec<u8>, safetensors::SafeTensorError> {
    use safetensors::SafeTensorError as E;
    let len_bytes: [u8; 8] = buf
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or(E::HeaderTooSmall)?;
    let n = usize::try_from(u64::from_le_bytes(len_bytes)).map_err(|_| E::HeaderTooLarge)?;
    let header = buf.get(8..8 + n).ok_or(E::InvalidHeaderLength)?;
    let mut entries: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(header).map_err(E::InvalidHeaderDeserialization)?;
    let mut json = String::from("{");
    if let Some(meta) = entries.remove("__metadata__") {
        let sorted: BTreeMap<String, String> =
            serde_json::from_value(meta).map_err(E::InvalidHeaderDeserialization)?;
        let meta = serde_json::to_string(&sorted).map_err(E::InvalidHeaderDeserialization)?;
        json.push_str(&format!("\"__metadata__\":{meta}"));
    }
    for (k, v) in &entries {
        if json.len() > 1 {
            json.push(',');
        }
        let k = serde_json::to_string(k).map_err(E::InvalidHeaderDeserialization)?;
        json.push_str(&format!("{k}:{v}"));
    }
    json.push('}');
    // The header padded with spaces to a multiple of 8 bytes, as safetensors writes it.
    while json.len() % 8 != 0 {
        json.push(' ');
    }
    let mut out = Vec::with_capacity(8 + json.len() + buf.len() - 8 - n);
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(json.as_bytes());
    out.extend_from_slice(&buf[8 + n..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lp(shift: f32) -> PositionLogProbs {
        PositionLogProbs {
            vocab_size: 9,
            targets: vec![1, 4, 4, 7],
            batch_index: vec![0, 0, 1, 1],
            position: vec![2, 3, 0, 5],
            logp: vec![
                vec![-0.5 + shift, -1.0, -2.5, f32::MIN_POSITIVE.ln()],
                vec![-3.0; 4],
            ],
            full: None,
        }
    }

    #[test]
    fn every_head_set_round_trips_bit_for_bit_and_names_the_file_when_missing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scores.safetensors");
        let mut f = ScoresFile::new("abc");
        f.insert("main", &lp(0.0)).unwrap();
        f.insert("step-0000012/retest", &lp(0.25)).unwrap();
        f.save(&path).unwrap();
        let back = ScoresFile::load(&path).unwrap();
        assert_eq!(back, f);
        assert_eq!(back.get("main").unwrap(), lp(0.0));
        assert_eq!(back.get("step-0000012/retest").unwrap(), lp(0.25));
        let e = back.require("retest", &path).unwrap_err();
        assert!(matches!(e, HeadsError::Missing { .. }), "{e:?}");
        let e = e.to_string();
        assert!(
            e.contains("retest") && e.contains("scores.safetensors"),
            "{e}"
        );
    }

    #[test]
    fn two_identical_saves_write_the_same_bytes() {
        // The metadata map is a HashMap inside safetensors: each save would draw another key
        // order (each HashMap its own random state) without the sorted header.
        let dir = tempfile::tempdir().unwrap();
        let mut f = ScoresFile::new("abc");
        f.insert("main", &lp(0.0)).unwrap();
        f.insert("retest", &lp(0.5)).unwrap();
        let first = dir.path().join("first.safetensors");
        f.save(&first).unwrap();
        let want = std::fs::read(&first).unwrap();
        for i in 0..8 {
            let p = dir.path().join(format!("again-{i}.safetensors"));
            f.save(&p).unwrap();
            assert_eq!(std::fs::read(&p).unwrap(), want, "save {i} differs");
        }
        assert_eq!(ScoresFile::load(&first).unwrap(), f);
        // The header is JSON whose metadata keys come sorted.
        let n = u64::from_le_bytes(want[..8].try_into().unwrap()) as usize;
        let header = std::str::from_utf8(&want[8..8 + n]).unwrap();
        let at = |k: &str| header.find(&format!("\"{k}\"")).unwrap();
        assert!(
            at("format") < at("scoring") && at("scoring") < at("version"),
            "{header}"
        );
        assert!(
            at("version") < at("vocab_size") && n.is_multiple_of(8),
            "{header}"
        );
    }

    #[test]
    fn a_set_already_held_is_not_scored_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scores.safetensors");
        let mut f = ScoresFile::new("abc");
        f.ensure("main", &path, || Ok::<_, HeadsError>(lp(0.0)))
            .unwrap();
        assert_eq!(ScoresFile::load(&path).unwrap(), f);
        f.ensure("main", &path, || -> Result<PositionLogProbs> {
            panic!("scored twice")
        })
        .unwrap();
    }

    #[test]
    fn other_positions_foreign_files_and_missing_files_are_typed_errors() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = ScoresFile::new("abc");
        f.insert("main", &lp(0.0)).unwrap();
        let mut other = lp(0.0);
        other.targets[0] = 2;
        assert!(matches!(
            f.insert("retest", &other),
            Err(HeadsError::Mismatch(_))
        ));
        let foreign = dir.path().join("weights.safetensors");
        let empty: Vec<(String, TensorView)> = Vec::new();
        std::fs::write(&foreign, safetensors::serialize(empty, None).unwrap()).unwrap();
        let e = ScoresFile::load(&foreign).unwrap_err();
        assert!(matches!(e, HeadsError::NotA { .. }), "{e:?}");
        let e = e.to_string();
        assert!(
            e.contains("version 1") && e.contains("weights.safetensors"),
            "{e}"
        );
        let gone = dir.path().join("none.safetensors");
        assert!(matches!(
            ScoresFile::load(&gone),
            Err(HeadsError::Missing { .. })
        ));
    }
}
