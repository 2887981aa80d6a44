//! External embeddings: sequence embeddings computed elsewhere (PyTorch, NumPy, another
//! framework) read from a folder and mapped straight into one [`Moments`] per split, so that
//! [`crate::analysis::analyze`] and [`crate::tables::write_analysis`] run on them unchanged.
//!
//! # Layouts
//!
//! For a split `s` (`train`, `test`, ...) a folder `dir` is read as the first of these that
//! exists:
//!
//! 1. **One file per split**: `dir/s.safetensors` (one tensor per model, the tensor's name is
//!    the model's name) or `dir/s.pt` (a `torch.save` of a dict model name → tensor).
//! 2. **The reference's file**: `dir/embeddings.pt`, a `torch.save` of a dict split → (dict model
//!    name → tensor), as `haozhg/lmd` saves it (its `collections.defaultdict` is read too).
//! 3. **One folder per model**: `dir/<model>/s.safetensors`, `dir/<model>/s.npy` or
//!    `dir/<model>/s.pt` (the first that exists). A safetensors or `.pt` file may hold one
//!    tensor, or several of which the one named [`ReadOptions::tensor`] (else `embedding` or
//!    `embeddings`) is taken. Every subfolder is a model, unless [`ReadOptions::models`] names
//!    them.
//!
//! Every tensor is 2-D, `[n, d]` (rows = sequences, the same rows in the same order for every
//! model of a split). Dtypes: f32, f64, f16 and bf16 (safetensors, `.pt`); f32 and f64 (`.npy`,
//! little-endian, C order). Models are ordered by name unless [`ReadOptions::models`] gives the
//! order.
//!
//! # Streaming and precision
//!
//! [`open_split`] parses only the files' headers ([`SplitFiles`]); [`SplitFiles::to_moments`]
//! then reads [`CHUNK_BYTES`] of rows at a time from every model's file (positional reads into
//! one reused buffer) into one f64 staging block and hands it to
//! [`Moments::update_stacked_f64_in_place`]: memory is O(D² + chunk · D) whatever the number of rows.
//! Every value (f32, f64, f16, bf16) is widened exactly to f64, so nothing is rounded before
//! the f64 accumulation. [`read_split`] loads whole matrices instead (small data, inspection).
//!
//! # Hardening
//!
//! Every header is checked against the file before anything is allocated from it: announced
//! lengths, shapes (in checked arithmetic), offsets and strides. A `torch.save` pickle is read
//! by a small interpreter that knows only the tensor rebuild functions, the storage types and
//! the dict/list types; any other global is refused ([`ExternalError::UnsafePickle`]) and never
//! looked up. Every error names its file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::error::LmdError;
use crate::moments::{Accumulation, Moments, F32_PRODUCT_ROWS};

mod npy;
mod pickle;
mod source;
mod st;
mod torch;

use source::TensorSource;

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, ExternalError>;

/// Bytes of the f64 staging block of one streamed chunk (rows = this / (8 · D), at least one).
pub const CHUNK_BYTES: usize = 32 << 20;
/// Extensions tried, in order, for a per-model file.
const MODEL_EXTENSIONS: [&str; 3] = ["safetensors", "npy", "pt"];
/// Tensor names taken from a multi-tensor per-model file when none is given.
const DEFAULT_TENSOR_NAMES: [&str; 2] = ["embedding", "embeddings"];

/// Everything that can go wrong reading external embeddings.
#[derive(Debug, thiserror::Error)]
pub enum ExternalError {
    /// An I/O error on a named file or folder.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A model's file for a split is missing.
    #[error("missing embeddings file {path}.{{{}}}", MODEL_EXTENSIONS.join(","))]
    MissingFile {
        /// The file's path without its extension (`dir/<model>/<split>`).
        path: PathBuf,
    },
    /// A model asked for (or a split key) is not in a file.
    #[error("{path}: no tensor {name:?} (found: {found:?})")]
    MissingTensor {
        /// The file.
        path: PathBuf,
        /// The name asked for.
        name: String,
        /// The names the file holds.
        found: Vec<String>,
    },
    /// A file holds several tensors and none was chosen.
    #[error("{path}: several tensors ({found:?}); name one with ReadOptions::tensor")]
    AmbiguousTensor {
        /// The file.
        path: PathBuf,
        /// The names the file holds.
        found: Vec<String>,
    },
    /// The folder holds no embeddings at all for the split.
    #[error("{path}: no embeddings for split {split:?} (no {split}.safetensors, {split}.pt, embeddings.pt or model folders)")]
    EmptyFolder {
        /// The folder.
        path: PathBuf,
        /// The split looked for.
        split: String,
    },
    /// Two models of one split have different numbers of rows.
    #[error("split {split}: model {model} has {rows} rows but {first_model} has {first_rows}")]
    RowMismatch {
        /// The split.
        split: String,
        /// The model whose count differs.
        model: String,
        /// Its rows.
        rows: usize,
        /// The first model of the split.
        first_model: String,
        /// Its rows.
        first_rows: usize,
    },
    /// A tensor that is not 2-D.
    #[error("{path}: tensor {name:?} has shape {shape:?}, expected [rows, width]")]
    NotTwoD {
        /// The file.
        path: PathBuf,
        /// The tensor's name (empty for `.npy`).
        name: String,
        /// Its shape.
        shape: Vec<usize>,
    },
    /// A tensor with no rows or no columns.
    #[error("{path}: tensor {name:?} is empty (shape {shape:?})")]
    EmptyTensor {
        /// The file.
        path: PathBuf,
        /// The tensor's name.
        name: String,
        /// Its shape.
        shape: Vec<usize>,
    },
    /// A NaN or infinite value.
    #[error("{path}: tensor {name:?} has the non-finite value {value} at row {row}, column {col}")]
    NonFinite {
        /// The file.
        path: PathBuf,
        /// The tensor's name.
        name: String,
        /// Row.
        row: usize,
        /// Column.
        col: usize,
        /// The value.
        value: f64,
    },
    /// A dtype this reader does not take (integers, bool, big-endian, ...).
    #[error("{path}: tensor {name:?} has unsupported dtype {dtype} (f32, f64, f16, bf16 are read; .npy: <f4, <f8)")]
    UnsupportedDtype {
        /// The file.
        path: PathBuf,
        /// The tensor's name.
        name: String,
        /// The dtype found.
        dtype: String,
    },
    /// The train and test splits do not hold the same models with the same widths.
    #[error("splits differ: {0}")]
    SplitMismatch(String),
    /// A file that cannot be parsed (bad header, truncated data, not a zip/pickle ...).
    #[error("malformed file {path}: {reason}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A `torch.save` pickle names a global other than the tensor rebuild functions, the
    /// storage types and the dict/list types: refused when read, never looked up or called.
    #[error("{path}: refused to read a pickle that names the global {global} (only tensor rebuild functions, storages, dicts and lists are read)")]
    UnsafePickle {
        /// The file.
        path: PathBuf,
        /// The global, `module.name`.
        global: String,
    },
    /// An error of the moments (shapes, non-finite values, too few rows).
    #[error(transparent)]
    Lmd(#[from] LmdError),
}

/// What to read from a folder.
#[derive(Clone, Debug, Default)]
pub struct ReadOptions {
    /// Name of the tensor to take from a per-model file that holds several.
    pub tensor: Option<String>,
    /// Models to read, in this order (default: every model found, ordered by name).
    pub models: Option<Vec<String>>,
    /// How [`read_train_test`] forms the chunks' products (default f64; see
    /// [`Accumulation::F32Products`] for the faster one and its error bound).
    pub accumulation: Accumulation,
}

/// Values of one matrix, in the precision they were stored in (f16 and bf16 widened to f32).
#[derive(Clone, Debug, PartialEq)]
pub enum Values {
    /// f32 (also f16 and bf16, widened exactly).
    F32(Vec<f32>),
    /// f64.
    F64(Vec<f64>),
}

/// One row-major `[rows, cols]` matrix read from a file.
#[derive(Clone, Debug, PartialEq)]
pub struct Matrix {
    /// Rows (sequences).
    pub rows: usize,
    /// Columns (embedding width).
    pub cols: usize,
    /// The dtype in the file (`f32`, `f64`, `f16`, `bf16`).
    pub dtype: String,
    /// The values, row-major.
    pub values: Values,
}

/// One model's embeddings of one split.
#[derive(Clone, Debug)]
pub struct ModelEmbedding {
    /// The model's name.
    pub name: String,
    /// The file it came from.
    pub source: PathBuf,
    /// The `[n, d]` embeddings.
    pub matrix: Matrix,
}

/// Where a split's embeddings were found.
#[derive(Clone, Debug, PartialEq)]
pub enum Layout {
    /// `dir/<split>.safetensors` or `dir/<split>.pt`: one file, one tensor per model.
    SplitFile(PathBuf),
    /// `dir/embeddings.pt`: the reference's dict split → (dict model → tensor).
    Nested(PathBuf),
    /// `dir/<model>/<split>.{safetensors,npy,pt}`: one file per model.
    PerModel(PathBuf),
}

/// Every model's embeddings of one split, with the same rows.
#[derive(Clone, Debug)]
pub struct SplitEmbeddings {
    /// The split's name.
    pub split: String,
    /// Where they were found.
    pub layout: Layout,
    /// The models, in the order the moments will stack them.
    pub models: Vec<ModelEmbedding>,
}

impl SplitEmbeddings {
    /// Rows (sequences) of the split.
    pub fn rows(&self) -> usize {
        self.models.first().map_or(0, |m| m.matrix.rows)
    }

    /// Model names, in stacking order.
    pub fn names(&self) -> Vec<String> {
        self.models.iter().map(|m| m.name.clone()).collect()
    }

    /// Embedding widths, in stacking order.
    pub fn widths(&self) -> Vec<usize> {
        self.models.iter().map(|m| m.matrix.cols).collect()
    }

    /// The split's joint moments (f64 accumulation; f64 inputs stay f64).
    pub fn to_moments(&self) -> Result<Moments> {
        let mut m = Moments::new(self.names(), self.widths())?;
        let (n, d) = (self.rows(), m.dim());
        let chunk = (CHUNK_BYTES / (8 * d)).clamp(1, n.max(1));
        let mut stage = vec![0.0f64; chunk * d];
        let mut start = 0;
        while start < n {
            let len = chunk.min(n - start);
            let mut col = 0;
            for e in &self.models {
                let w = e.matrix.cols;
                for r in 0..len {
                    let out = &mut stage[r * d + col..r * d + col + w];
                    let at = (start + r) * w;
                    match &e.matrix.values {
                        Values::F32(v) => {
                            for (o, &x) in out.iter_mut().zip(&v[at..at + w]) {
                                *o = x as f64;
                            }
                        }
                        Values::F64(v) => out.copy_from_slice(&v[at..at + w]),
                    }
                }
                col += w;
            }
            m.update_stacked_f64(&stage[..len * d])?;
            start += len;
        }
        Ok(m)
    }
}

/// The moments of both splits of an external-embeddings folder, with the models they hold.
#[derive(Debug, Clone)]
pub struct TrainTest {
    /// The models, in the order of the moments' blocks.
    pub names: Vec<String>,
    /// Each model's embedding width D_i.
    pub widths: Vec<usize>,
    /// The train split's moments.
    pub train: Moments,
    /// The test split's moments.
    pub test: Moments,
}

/// One split's files, headers parsed and checked, rows not read yet: what
/// [`SplitFiles::to_moments`] streams from.
#[derive(Clone, Debug)]
pub struct SplitFiles {
    /// The split's name.
    pub split: String,
    /// Where they were found.
    pub layout: Layout,
    models: Vec<(String, TensorSource)>,
}

impl SplitFiles {
    /// Rows (sequences) of the split.
    pub fn rows(&self) -> usize {
        self.models.first().map_or(0, |(_, s)| s.rows)
    }

    /// Model names, in stacking order.
    pub fn names(&self) -> Vec<String> {
        self.models.iter().map(|(n, _)| n.clone()).collect()
    }

    /// Embedding widths, in stacking order.
    pub fn widths(&self) -> Vec<usize> {
        self.models.iter().map(|(_, s)| s.cols).collect()
    }

    /// Each model's file, in stacking order.
    pub fn files(&self) -> Vec<PathBuf> {
        self.models.iter().map(|(_, s)| s.path.clone()).collect()
    }

    /// Each model's dtype in its file (`f32`, `f64`, `f16`, `bf16`).
    pub fn dtypes(&self) -> Vec<&'static str> {
        self.models.iter().map(|(_, s)| s.elem.name()).collect()
    }

    /// The split's joint moments, streamed in chunks of [`CHUNK_BYTES`] (f64 products).
    pub fn to_moments(&self) -> Result<Moments> {
        self.to_moments_with(Accumulation::F64)
    }

    /// The split's joint moments, streamed, with the products formed as `accumulation` says:
    /// f64 in chunks of [`CHUNK_BYTES`], f32 products in chunks of [`F32_PRODUCT_ROWS`] rows
    /// (the largest its error bound allows, so that the f64 additions are few).
    pub fn to_moments_with(&self, accumulation: Accumulation) -> Result<Moments> {
        let d: usize = self.widths().iter().sum();
        let chunk = match accumulation {
            Accumulation::F64 => (CHUNK_BYTES / (8 * d.max(1))).max(1),
            Accumulation::F32Products => F32_PRODUCT_ROWS,
        };
        let mut m = self.accumulate(chunk, accumulation, None)?;
        m.set_accumulation(Accumulation::F64);
        Ok(m)
    }

    /// The split's joint moments, streamed `chunk` rows at a time (every value widened to f64;
    /// the first chunk's mean is the accumulation's shift). Memory: the D × D moments plus
    /// `chunk · D` f64 values and one chunk of one model's raw bytes.
    pub fn to_moments_chunked(&self, chunk: usize) -> Result<Moments> {
        self.accumulate(chunk, Accumulation::F64, None)
    }

    /// [`SplitFiles::to_moments_with`] with the similarity accumulators tracked in the same
    /// pass ([`Moments::track_similarity`] with `seed`; each chunk's null a derangement of its
    /// rows).
    pub fn to_moments_with_similarity(
        &self,
        accumulation: Accumulation,
        seed: u64,
    ) -> Result<Moments> {
        let d: usize = self.widths().iter().sum();
        let chunk = match accumulation {
            Accumulation::F64 => (CHUNK_BYTES / (8 * d.max(1))).max(1),
            Accumulation::F32Products => F32_PRODUCT_ROWS,
        };
        let mut m = self.accumulate(chunk, accumulation, Some(seed))?;
        m.set_accumulation(Accumulation::F64);
        Ok(m)
    }

    /// The rows `indices` (ascending, each < [`SplitFiles::rows`]) of every model: the mutual
    /// k-NN sample ([`crate::similarity::sample_indices`]). Reads `indices.len()` rows per model.
    pub fn sample(&self, indices: &[usize]) -> Result<crate::similarity::KnnSample> {
        let widths = self.widths();
        let mut blocks: Vec<Vec<f64>> = widths
            .iter()
            .map(|w| vec![0.0; indices.len() * w])
            .collect();
        for (((_, s), block), &w) in self.models.iter().zip(&mut blocks).zip(&widths) {
            let mut reader = s.open()?;
            for (k, &row) in indices.iter().enumerate() {
                s.read_rows(&mut reader, row, 1, &mut block[k * w..(k + 1) * w], w, 0)?;
            }
        }
        Ok(crate::similarity::KnnSample::new(
            self.names(),
            widths,
            blocks,
        )?)
    }

    fn accumulate(
        &self,
        chunk: usize,
        accumulation: Accumulation,
        similarity_seed: Option<u64>,
    ) -> Result<Moments> {
        let mut m = Moments::new(self.names(), self.widths())?;
        if let Some(seed) = similarity_seed {
            m.track_similarity(seed, 0)?;
        }
        m.set_accumulation(accumulation);
        let (n, d) = (self.rows(), m.dim());
        let chunk = chunk.clamp(1, n.max(1));
        let mut readers = self
            .models
            .iter()
            .map(|(_, s)| s.open())
            .collect::<Result<Vec<_>>>()?;
        let offsets: Vec<usize> = (0..self.models.len()).map(|i| m.range(i).start).collect();
        let mut stage = vec![0.0f64; chunk * d];
        let mut start = 0;
        while start < n {
            let len = chunk.min(n - start);
            for (((_, s), r), &o) in self.models.iter().zip(&mut readers).zip(&offsets) {
                s.read_rows(r, start, len, &mut stage, d, o)?;
            }
            m.update_stacked_f64_in_place(&mut stage[..len * d])?;
            start += len;
        }
        Ok(m)
    }

    /// Every model's whole matrix (allocates n · D values).
    pub fn load(&self) -> Result<SplitEmbeddings> {
        let models = self
            .models
            .iter()
            .map(|(name, s)| {
                Ok(ModelEmbedding {
                    name: name.clone(),
                    source: s.path.clone(),
                    matrix: s.load()?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(SplitEmbeddings {
            split: self.split.clone(),
            layout: self.layout.clone(),
            models,
        })
    }
}

/// Reads both splits of `dir` into their moments, streamed (see [`SplitFiles::to_moments`]);
/// the splits must hold the same models with the same widths ([`ExternalError::SplitMismatch`],
/// checked from the headers before any row is read).
pub fn read_train_test(dir: impl AsRef<Path>, opts: &ReadOptions) -> Result<TrainTest> {
    let dir = dir.as_ref();
    let train = open_split(dir, "train", opts)?;
    let test = open_split(dir, "test", opts)?;
    let (names, widths) = (train.names(), train.widths());
    if test.names() != names || test.widths() != widths {
        return Err(ExternalError::SplitMismatch(format!(
            "train has {names:?} of widths {widths:?}, test has {:?} of widths {:?}",
            test.names(),
            test.widths()
        )));
    }
    Ok(TrainTest {
        names,
        widths,
        train: train.to_moments_with(opts.accumulation)?,
        test: test.to_moments_with(opts.accumulation)?,
    })
}

/// Reads one split of `dir` whole (see the module documentation for the layouts), checking
/// shapes, dtypes, finiteness and that every model has the same rows. For data of any size,
/// stream instead: [`open_split`] then [`SplitFiles::to_moments`].
pub fn read_split(
    dir: impl AsRef<Path>,
    split: &str,
    opts: &ReadOptions,
) -> Result<SplitEmbeddings> {
    open_split(dir, split, opts)?.load()
}

/// Finds one split's files in `dir` and checks their headers (layouts: see the module
/// documentation); no row is read. A file that is there but cannot be read is reported as that
/// file's error.
pub fn open_split(dir: impl AsRef<Path>, split: &str, opts: &ReadOptions) -> Result<SplitFiles> {
    let dir = dir.as_ref();
    if !dir.is_dir() {
        return Err(ExternalError::Io {
            path: dir.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such folder"),
        });
    }
    let st_file = dir.join(format!("{split}.safetensors"));
    let pt = dir.join(format!("{split}.pt"));
    let nested = dir.join("embeddings.pt");
    let (layout, found) = if st_file.exists() {
        (Layout::SplitFile(st_file.clone()), st::open(&st_file)?)
    } else if pt.exists() {
        (Layout::SplitFile(pt.clone()), torch::open(&pt, None)?)
    } else if nested.exists() {
        (
            Layout::Nested(nested.clone()),
            torch::open(&nested, Some(split))?,
        )
    } else {
        return open_per_model(dir, split, opts);
    };
    let path = match &layout {
        Layout::SplitFile(p) | Layout::Nested(p) | Layout::PerModel(p) => p.clone(),
    };
    let mut by_name: HashMap<String, TensorSource> =
        found.into_iter().map(|s| (s.name.clone(), s)).collect();
    let names = match &opts.models {
        Some(m) => m.clone(),
        None => sorted_keys(&by_name),
    };
    non_empty(&names, dir, split)?;
    let mut models = Vec::with_capacity(names.len());
    for name in names {
        let src = by_name
            .remove(&name)
            .ok_or_else(|| ExternalError::MissingTensor {
                path: path.clone(),
                name: name.clone(),
                found: sorted_keys(&by_name),
            })?;
        models.push((name, src));
    }
    finish_split(split, layout, models)
}

/// [`ExternalError::EmptyFolder`] when no model was found for `split` in `dir`.
fn non_empty(names: &[String], dir: &Path, split: &str) -> Result<()> {
    if names.is_empty() {
        return Err(ExternalError::EmptyFolder {
            path: dir.to_path_buf(),
            split: split.to_string(),
        });
    }
    Ok(())
}

fn open_per_model(dir: &Path, split: &str, opts: &ReadOptions) -> Result<SplitFiles> {
    let names = match &opts.models {
        Some(m) => m.clone(),
        None => {
            let entries = std::fs::read_dir(dir).map_err(io_err(dir))?;
            let mut names = Vec::new();
            for e in entries {
                let e = e.map_err(io_err(dir))?;
                let name = e.file_name().to_string_lossy().into_owned();
                if e.path().is_dir() && !name.starts_with('.') {
                    names.push(name);
                }
            }
            names.sort();
            names
        }
    };
    non_empty(&names, dir, split)?;
    let mut models = Vec::with_capacity(names.len());
    for name in names {
        let stem = dir.join(&name).join(split);
        let file = MODEL_EXTENSIONS
            .iter()
            .map(|ext| stem.with_extension(ext))
            .find(|p| p.exists())
            .ok_or_else(|| ExternalError::MissingFile { path: stem.clone() })?;
        let src = match file.extension().and_then(|e| e.to_str()) {
            Some("npy") => npy::open(&file)?,
            Some("safetensors") => pick_one(&file, st::open(&file)?, opts)?,
            _ => pick_one(&file, torch::open(&file, None)?, opts)?,
        };
        models.push((name, src));
    }
    finish_split(split, Layout::PerModel(dir.to_path_buf()), models)
}

/// The tensor of a per-model file: the only one, the named one, or `embedding(s)`.
fn pick_one(path: &Path, found: Vec<TensorSource>, opts: &ReadOptions) -> Result<TensorSource> {
    let names: Vec<String> = found.iter().map(|s| s.name.clone()).collect();
    let want = match &opts.tensor {
        Some(t) => Some(t.clone()),
        None if found.len() == 1 => None,
        None => DEFAULT_TENSOR_NAMES
            .into_iter()
            .find(|d| names.iter().any(|n| n == d))
            .map(str::to_string),
    };
    let Some(want) = want else {
        let mut it = found.into_iter();
        return match (it.next(), it.next()) {
            (Some(s), None) => Ok(s),
            (None, _) => Err(ExternalError::Malformed {
                path: path.to_path_buf(),
                reason: "no tensors".into(),
            }),
            _ => Err(ExternalError::AmbiguousTensor {
                path: path.to_path_buf(),
                found: names,
            }),
        };
    };
    found
        .into_iter()
        .find(|s| s.name == want)
        .ok_or(ExternalError::MissingTensor {
            path: path.to_path_buf(),
            name: want,
            found: names,
        })
}

fn finish_split(
    split: &str,
    layout: Layout,
    models: Vec<(String, TensorSource)>,
) -> Result<SplitFiles> {
    if let Some((first_model, first)) = models.first() {
        for (name, m) in &models[1..] {
            if m.rows != first.rows {
                return Err(ExternalError::RowMismatch {
                    split: split.to_string(),
                    model: name.clone(),
                    rows: m.rows,
                    first_model: first_model.clone(),
                    first_rows: first.rows,
                });
            }
        }
    }
    Ok(SplitFiles {
        split: split.to_string(),
        layout,
        models,
    })
}

fn sorted_keys<V>(m: &HashMap<String, V>) -> Vec<String> {
    let mut k: Vec<String> = m.keys().cloned().collect();
    k.sort();
    k
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ExternalError + '_ {
    move |source| ExternalError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// [`ExternalError::Malformed`] of `path`, for the reason given.
pub(crate) fn malformed(path: &Path) -> impl Fn(String) -> ExternalError + '_ {
    move |reason| ExternalError::Malformed {
        path: path.to_path_buf(),
        reason,
    }
}

/// Reads a `.npy` file whole: one 2-D array, little-endian f32 (`<f4`) or f64 (`<f8`), C
/// order (format versions 1, 2 and 3).
pub fn read_npy(path: impl AsRef<Path>) -> Result<Matrix> {
    npy::open(path.as_ref())?.load()
}

/// Writes a row-major `[rows, cols]` f32 matrix as a version 1.0 `.npy` file (what
/// `numpy.save` writes for a C-order float32 array).
pub fn write_npy(path: impl AsRef<Path>, rows: usize, cols: usize, data: &[f32]) -> Result<()> {
    let path = path.as_ref();
    if data.len() != rows * cols {
        return Err(ExternalError::Malformed {
            path: path.to_path_buf(),
            reason: format!("{} values for shape [{rows}, {cols}]", data.len()),
        });
    }
    let mut header =
        format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, {cols}), }}");
    // Magic (6) + version (2) + length (2) + header + '\n' is a multiple of 64.
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = Vec::with_capacity(10 + header.len() + 4 * data.len());
    bytes.extend_from_slice(b"\x93NUMPY\x01\x00");
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend(data.iter().flat_map(|x| x.to_le_bytes()));
    std::fs::write(path, bytes).map_err(io_err(path))
}

/// Reads every tensor of a safetensors file whole (each must be 2-D, f32/f64/f16/bf16,
/// finite), sorted by name.
pub fn read_safetensors_all(path: impl AsRef<Path>) -> Result<Vec<(String, Matrix)>> {
    st::open(path.as_ref())?
        .into_iter()
        .map(|s| Ok((s.name.clone(), s.load()?)))
        .collect()
}

/// Reads the tensors of a `torch.save`d dict name → tensor whole (`key`: first take the value
/// of that key of an outer dict, e.g. a split of the reference's `embeddings.pt`), sorted by
/// name. Entries that are not tensors are skipped; a dict with no tensor is an error.
pub fn read_torch(path: impl AsRef<Path>, key: Option<&str>) -> Result<Vec<(String, Matrix)>> {
    torch::open(path.as_ref(), key)?
        .into_iter()
        .map(|s| Ok((s.name.clone(), s.load()?)))
        .collect()
}

impl From<ExternalError> for LmdError {
    fn from(e: ExternalError) -> Self {
        LmdError::External(Box::new(e))
    }
}
