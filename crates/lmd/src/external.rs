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
//! # Precision
//!
//! f32, f16 and bf16 values are exact in f32 and are accumulated through
//! [`Moments::update`] (f64 accumulation); when any model of a split is f64 the split is
//! accumulated through [`Moments::update_tensor`] in f64, so nothing is rounded to f32.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use safetensors::{Dtype, SafeTensors};

use crate::error::LmdError;
use crate::moments::Moments;

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, ExternalError>;

/// Rows per f64 chunk handed to [`Moments::update_tensor`].
const F64_CHUNK_ROWS: usize = 2048;
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
        let f32_blocks: Option<Vec<&[f32]>> = self
            .models
            .iter()
            .map(|e| match &e.matrix.values {
                Values::F32(v) => Some(v.as_slice()),
                Values::F64(_) => None,
            })
            .collect();
        if let Some(blocks) = f32_blocks {
            m.update(&blocks)?;
            return Ok(m);
        }
        let (n, d) = (self.rows(), m.dim());
        let mut start = 0;
        while start < n {
            let len = F64_CHUNK_ROWS.min(n - start);
            let mut stacked = Vec::with_capacity(len * d);
            for r in start..start + len {
                for e in &self.models {
                    let w = e.matrix.cols;
                    match &e.matrix.values {
                        Values::F32(v) => {
                            stacked.extend(v[r * w..(r + 1) * w].iter().map(|&x| x as f64))
                        }
                        Values::F64(v) => stacked.extend_from_slice(&v[r * w..(r + 1) * w]),
                    }
                }
            }
            let t = Tensor::from_vec(stacked, (len, d), &Device::Cpu).map_err(LmdError::from)?;
            m.update_tensor(&t)?;
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

/// Reads both splits of `dir` into their moments; the splits must hold the same models with
/// the same widths ([`ExternalError::SplitMismatch`]). Each split is read, accumulated and
/// dropped in turn, so memory holds one split's embeddings at a time.
pub fn read_train_test(dir: impl AsRef<Path>, opts: &ReadOptions) -> Result<TrainTest> {
    let dir = dir.as_ref();
    let train = read_split(dir, "train", opts)?;
    let (names, widths) = (train.names(), train.widths());
    let train = train.to_moments()?;
    let test = read_split(dir, "test", opts)?;
    if test.names() != names || test.widths() != widths {
        return Err(ExternalError::SplitMismatch(format!(
            "train has {names:?} of widths {widths:?}, test has {:?} of widths {:?}",
            test.names(),
            test.widths()
        )));
    }
    let test = test.to_moments()?;
    Ok(TrainTest {
        names,
        widths,
        train,
        test,
    })
}

/// Reads one split of `dir` (see the module documentation for the layouts), checking shapes,
/// dtypes, finiteness and that every model has the same rows.
pub fn read_split(
    dir: impl AsRef<Path>,
    split: &str,
    opts: &ReadOptions,
) -> Result<SplitEmbeddings> {
    let dir = dir.as_ref();
    if !dir.is_dir() {
        return Err(ExternalError::Io {
            path: dir.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such folder"),
        });
    }
    let st = dir.join(format!("{split}.safetensors"));
    let pt = dir.join(format!("{split}.pt"));
    let nested = dir.join("embeddings.pt");
    let (layout, found) = if st.is_file() {
        (Layout::SplitFile(st.clone()), read_safetensors_all(&st)?)
    } else if pt.is_file() {
        (Layout::SplitFile(pt.clone()), read_torch(&pt, None)?)
    } else if nested.is_file() {
        (
            Layout::Nested(nested.clone()),
            read_torch(&nested, Some(split))?,
        )
    } else {
        return read_per_model(dir, split, opts);
    };
    let path = match &layout {
        Layout::SplitFile(p) | Layout::Nested(p) | Layout::PerModel(p) => p.clone(),
    };
    let mut by_name: HashMap<String, Matrix> = found.into_iter().collect();
    let names = match &opts.models {
        Some(m) => m.clone(),
        None => {
            let mut n: Vec<String> = by_name.keys().cloned().collect();
            n.sort();
            n
        }
    };
    non_empty(&names, dir, split)?;
    let mut models = Vec::with_capacity(names.len());
    for name in names {
        let matrix = by_name
            .remove(&name)
            .ok_or_else(|| ExternalError::MissingTensor {
                path: path.clone(),
                name: name.clone(),
                found: sorted_keys(&by_name),
            })?;
        models.push(ModelEmbedding {
            name,
            source: path.clone(),
            matrix,
        });
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

fn read_per_model(dir: &Path, split: &str, opts: &ReadOptions) -> Result<SplitEmbeddings> {
    let names = match &opts.models {
        Some(m) => m.clone(),
        None => {
            let entries = std::fs::read_dir(dir).map_err(|source| ExternalError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
            let mut names = Vec::new();
            for e in entries {
                let e = e.map_err(|source| ExternalError::Io {
                    path: dir.to_path_buf(),
                    source,
                })?;
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
            .find(|p| p.is_file())
            .ok_or_else(|| ExternalError::MissingFile { path: stem.clone() })?;
        let matrix = match file.extension().and_then(|e| e.to_str()) {
            Some("npy") => read_npy(&file)?,
            Some("safetensors") => pick_one(&file, read_safetensors_all(&file)?, opts)?,
            _ => pick_one(&file, read_torch(&file, None)?, opts)?,
        };
        models.push(ModelEmbedding {
            name,
            source: file,
            matrix,
        });
    }
    finish_split(split, Layout::PerModel(dir.to_path_buf()), models)
}

/// The tensor of a per-model file: the only one, the named one, or `embedding(s)`.
fn pick_one(path: &Path, found: Vec<(String, Matrix)>, opts: &ReadOptions) -> Result<Matrix> {
    let names: Vec<String> = found.iter().map(|(n, _)| n.clone()).collect();
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
            (Some((_, m)), None) => Ok(m),
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
        .find(|(n, _)| *n == want)
        .map(|(_, m)| m)
        .ok_or(ExternalError::MissingTensor {
            path: path.to_path_buf(),
            name: want,
            found: names,
        })
}

fn finish_split(
    split: &str,
    layout: Layout,
    models: Vec<ModelEmbedding>,
) -> Result<SplitEmbeddings> {
    if let Some(first) = models.first() {
        for m in &models[1..] {
            if m.matrix.rows != first.matrix.rows {
                return Err(ExternalError::RowMismatch {
                    split: split.to_string(),
                    model: m.name.clone(),
                    rows: m.matrix.rows,
                    first_model: first.name.clone(),
                    first_rows: first.matrix.rows,
                });
            }
        }
    }
    Ok(SplitEmbeddings {
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

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ExternalError + '_ {
    move |source| ExternalError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Checks a 2-D, non-empty shape.
fn check_shape(path: &Path, name: &str, shape: &[usize]) -> Result<(usize, usize)> {
    match *shape {
        [rows, cols] if rows > 0 && cols > 0 => Ok((rows, cols)),
        [_, _] => Err(ExternalError::EmptyTensor {
            path: path.to_path_buf(),
            name: name.to_string(),
            shape: shape.to_vec(),
        }),
        _ => Err(ExternalError::NotTwoD {
            path: path.to_path_buf(),
            name: name.to_string(),
            shape: shape.to_vec(),
        }),
    }
}

/// Checks that every value is finite, naming the first that is not.
fn check_finite(path: &Path, name: &str, m: &Matrix) -> Result<()> {
    let bad = match &m.values {
        Values::F32(v) => v
            .iter()
            .position(|x| !x.is_finite())
            .map(|k| (k, v[k] as f64)),
        Values::F64(v) => v.iter().position(|x| !x.is_finite()).map(|k| (k, v[k])),
    };
    match bad {
        None => Ok(()),
        Some((k, value)) => Err(ExternalError::NonFinite {
            path: path.to_path_buf(),
            name: name.to_string(),
            row: k / m.cols,
            col: k % m.cols,
            value,
        }),
    }
}

/// Reads a `.npy` file: one 2-D array, little-endian f32 (`<f4`) or f64 (`<f8`), C order
/// (format versions 1, 2 and 3).
pub fn read_npy(path: impl AsRef<Path>) -> Result<Matrix> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(io_err(path))?;
    let bad = |reason: String| ExternalError::Malformed {
        path: path.to_path_buf(),
        reason,
    };
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(bad("not a .npy file (magic string)".into()));
    }
    let (header_len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(bad(format!("unsupported .npy version {v}"))),
    };
    let header = bytes
        .get(start..start + header_len)
        .ok_or_else(|| bad("truncated header".into()))?;
    let header = std::str::from_utf8(header).map_err(|e| bad(format!("header: {e}")))?;
    let descr = npy_value(header, "descr")
        .map(|v| v.trim_matches(|c| c == '\'' || c == '"').to_string())
        .ok_or_else(|| bad(format!("no 'descr' in header {header:?}")))?;
    let fortran = npy_value(header, "fortran_order")
        .ok_or_else(|| bad(format!("no 'fortran_order' in header {header:?}")))?;
    let shape = npy_value(header, "shape")
        .ok_or_else(|| bad(format!("no 'shape' in header {header:?}")))?;
    let shape: Vec<usize> = shape
        .trim_matches(|c| c == '(' || c == ')')
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<usize>()
                .map_err(|e| bad(format!("shape {s:?}: {e}")))
        })
        .collect::<Result<_>>()?;
    let size = match descr.as_str() {
        "<f4" | "=f4" | "f4" => 4,
        "<f8" | "=f8" | "f8" => 8,
        other => {
            return Err(ExternalError::UnsupportedDtype {
                path: path.to_path_buf(),
                name: String::new(),
                dtype: other.to_string(),
            })
        }
    };
    match fortran {
        "False" => {}
        "True" => {
            return Err(bad(
                "Fortran (column-major) order; save a C-order array".into()
            ))
        }
        other => return Err(bad(format!("fortran_order {other:?}"))),
    }
    let (rows, cols) = check_shape(path, "", &shape)?;
    let data = &bytes[start + header_len..];
    if data.len() != rows * cols * size {
        return Err(bad(format!(
            "{} data bytes for shape {shape:?} of {descr} ({} expected)",
            data.len(),
            rows * cols * size
        )));
    }
    let values = if size == 4 {
        Values::F32(
            data.chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
        )
    } else {
        Values::F64(
            data.chunks_exact(8)
                .map(|b| f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
                .collect(),
        )
    };
    let m = Matrix {
        rows,
        cols,
        dtype: if size == 4 { "f32" } else { "f64" }.into(),
        values,
    };
    check_finite(path, "", &m)?;
    Ok(m)
}

/// The raw text of `'key': value` in a .npy header dict (value up to the next top-level comma).
fn npy_value<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let at = header
        .find(&format!("'{key}'"))
        .or_else(|| header.find(&format!("\"{key}\"")))?;
    let rest = header[at + key.len() + 2..].trim_start();
    let rest = rest.strip_prefix(':')?.trim_start();
    let mut depth = 0i32;
    for (i, c) in rest.char_indices() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            ',' | '}' if depth == 0 => return Some(rest[..i].trim()),
            _ => {}
        }
    }
    Some(rest.trim())
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

/// Reads every tensor of a safetensors file (each must be 2-D, f32/f64/f16/bf16, finite).
pub fn read_safetensors_all(path: impl AsRef<Path>) -> Result<Vec<(String, Matrix)>> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(io_err(path))?;
    let st = SafeTensors::deserialize(&bytes).map_err(|e| ExternalError::Malformed {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let mut names: Vec<String> = st.names().into_iter().map(|s| s.to_string()).collect();
    names.sort();
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let view = st.tensor(&name).map_err(|e| ExternalError::Malformed {
            path: path.to_path_buf(),
            reason: format!("{name}: {e}"),
        })?;
        let unsupported = || ExternalError::UnsupportedDtype {
            path: path.to_path_buf(),
            name: name.clone(),
            dtype: format!("{:?}", view.dtype()),
        };
        let dtype = match view.dtype() {
            Dtype::F32 => DType::F32,
            Dtype::F64 => DType::F64,
            Dtype::F16 => DType::F16,
            Dtype::BF16 => DType::BF16,
            _ => return Err(unsupported()),
        };
        let (rows, cols) = check_shape(path, &name, view.shape())?;
        let t = Tensor::from_raw_buffer(view.data(), dtype, &[rows, cols], &Device::Cpu)
            .map_err(LmdError::from)?;
        let m = tensor_matrix(&t, path, &name)?;
        out.push((name, m));
    }
    Ok(out)
}

/// Reads the tensors of a `torch.save`d dict name → tensor (`key`: first take the value of that
/// key of an outer dict, e.g. a split of the reference's `embeddings.pt`). Entries that are not
/// tensors are skipped.
pub fn read_torch(path: impl AsRef<Path>, key: Option<&str>) -> Result<Vec<(String, Matrix)>> {
    let path = path.as_ref();
    if !path.is_file() {
        return Err(ExternalError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
        });
    }
    let pth = candle_core::pickle::PthTensors::new(path, key).map_err(|e| {
        let reason = e.to_string();
        match key {
            Some(k) if reason.contains("not found") => ExternalError::MissingTensor {
                path: path.to_path_buf(),
                name: k.to_string(),
                found: Vec::new(),
            },
            _ => ExternalError::Malformed {
                path: path.to_path_buf(),
                reason,
            },
        }
    })?;
    let mut names: Vec<String> = pth.tensor_infos().keys().cloned().collect();
    names.sort();
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let info = &pth.tensor_infos()[&name];
        if !matches!(
            info.dtype,
            DType::F32 | DType::F64 | DType::F16 | DType::BF16
        ) {
            return Err(ExternalError::UnsupportedDtype {
                path: path.to_path_buf(),
                name,
                dtype: format!("{:?}", info.dtype),
            });
        }
        check_shape(path, &name, info.layout.dims())?;
        let t = pth
            .get(&name)
            .map_err(|e| ExternalError::Malformed {
                path: path.to_path_buf(),
                reason: format!("{name}: {e}"),
            })?
            .ok_or_else(|| ExternalError::MissingTensor {
                path: path.to_path_buf(),
                name: name.clone(),
                found: Vec::new(),
            })?;
        let m = tensor_matrix(&t, path, &name)?;
        out.push((name, m));
    }
    Ok(out)
}

/// A 2-D float tensor as a checked [`Matrix`] (f16/bf16 widened to f32).
fn tensor_matrix(t: &Tensor, path: &Path, name: &str) -> Result<Matrix> {
    let (rows, cols) = check_shape(path, name, t.dims())?;
    let t = t.contiguous().map_err(LmdError::from)?;
    let dtype = t.dtype();
    let values = match dtype {
        DType::F64 => Values::F64(flat::<f64>(&t)?),
        DType::F32 => Values::F32(flat::<f32>(&t)?),
        DType::F16 | DType::BF16 => Values::F32(flat::<f32>(
            &t.to_dtype(DType::F32).map_err(LmdError::from)?,
        )?),
        other => {
            return Err(ExternalError::UnsupportedDtype {
                path: path.to_path_buf(),
                name: name.to_string(),
                dtype: format!("{other:?}"),
            })
        }
    };
    let m = Matrix {
        rows,
        cols,
        dtype: dtype.as_str().to_string(),
        values,
    };
    check_finite(path, name, &m)?;
    Ok(m)
}

fn flat<T: candle_core::WithDType>(t: &Tensor) -> Result<Vec<T>> {
    Ok(t.flatten_all()
        .and_then(|f| f.to_vec1::<T>())
        .map_err(LmdError::from)?)
}
