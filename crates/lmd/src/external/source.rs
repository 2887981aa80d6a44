//! A 2-D array lying in a file: where its elements are, their type and strides. Every reader
//! (`.npy`, safetensors, `torch.save`) only parses its header into a [`TensorSource`]; rows are
//! then read on demand, a chunk at a time, with positional reads into a buffer of the chunk's
//! size. Nothing holds the whole array, and nothing is mapped: mapped file pages count in a
//! process's resident set, positional reads into one reused buffer do not.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::{ExternalError, Result};

/// Element types the readers take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Elem {
    F32,
    F64,
    F16,
    BF16,
}

impl Elem {
    /// Bytes per element.
    pub(crate) fn size(self) -> u64 {
        match self {
            Elem::F32 => 4,
            Elem::F64 => 8,
            Elem::F16 | Elem::BF16 => 2,
        }
    }

    /// The name a [`super::Matrix`] records.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Elem::F32 => "f32",
            Elem::F64 => "f64",
            Elem::F16 => "f16",
            Elem::BF16 => "bf16",
        }
    }

    /// One little-endian element as f64 (exact for every type).
    fn decode(self, b: &[u8]) -> f64 {
        match self {
            Elem::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
            Elem::F64 => f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
            Elem::F16 => half::f16::from_le_bytes([b[0], b[1]]).to_f64(),
            Elem::BF16 => half::bf16::from_le_bytes([b[0], b[1]]).to_f64(),
        }
    }
}

/// How the elements of a `[rows, cols]` array are laid out in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Order {
    /// Element (r, c) at `base + (r · stride + c) · size`: rows contiguous (`stride ≥ cols`).
    Rows { stride: u64 },
    /// Element (r, c) at `base + (c · stride + r) · size`: columns contiguous
    /// (a transposed `torch` tensor).
    Cols { stride: u64 },
}

/// An open file of a [`TensorSource`] and the buffer its raw bytes are read into.
pub(crate) struct Reader {
    file: File,
    buf: Vec<u8>,
}

/// A checked 2-D array inside a file: every element it names lies inside the file.
#[derive(Clone, Debug)]
pub(crate) struct TensorSource {
    /// The file.
    pub path: PathBuf,
    /// The tensor's name in the file (empty for `.npy`).
    pub name: String,
    pub rows: usize,
    pub cols: usize,
    pub elem: Elem,
    /// Byte offset of element (0, 0).
    pub base: u64,
    pub order: Order,
}

impl TensorSource {
    /// A source after checking that a non-empty 2-D shape fits in `len` bytes from `base` (in
    /// checked arithmetic: a shape whose product overflows is refused, not wrapped).
    pub(crate) fn new(
        path: &Path,
        name: &str,
        shape: &[u64],
        elem: Elem,
        base: u64,
        order: Order,
        len: u64,
    ) -> Result<Self> {
        let (rows, cols) = match *shape {
            [r, c] if r > 0 && c > 0 => (r, c),
            [_, _] => {
                return Err(ExternalError::EmptyTensor {
                    path: path.to_path_buf(),
                    name: name.to_string(),
                    shape: shape.iter().map(|&x| x as usize).collect(),
                })
            }
            _ => {
                return Err(ExternalError::NotTwoD {
                    path: path.to_path_buf(),
                    name: name.to_string(),
                    shape: shape.iter().map(|&x| x as usize).collect(),
                })
            }
        };
        let bad = |reason: String| ExternalError::Malformed {
            path: path.to_path_buf(),
            reason: format!("tensor {name:?}: {reason}"),
        };
        // Index of the last element, then its byte end.
        let (outer, inner, stride) = match order {
            Order::Rows { stride } => (rows, cols, stride),
            Order::Cols { stride } => (cols, rows, stride),
        };
        if stride < inner {
            return Err(bad(format!(
                "stride {stride} is smaller than {inner} (overlapping rows)"
            )));
        }
        let end = (outer - 1)
            .checked_mul(stride)
            .and_then(|x| x.checked_add(inner))
            .and_then(|x| x.checked_mul(elem.size()))
            .ok_or_else(|| bad(format!("shape {shape:?} overflows")))?;
        if end > len {
            return Err(bad(format!(
                "shape {shape:?} of {} needs {end} bytes, the data holds {len}",
                elem.name()
            )));
        }
        let (rows, cols) = (
            usize::try_from(rows).map_err(|_| bad("too many rows".into()))?,
            usize::try_from(cols).map_err(|_| bad("too many columns".into()))?,
        );
        Ok(Self {
            path: path.to_path_buf(),
            name: name.to_string(),
            rows,
            cols,
            elem,
            base,
            order,
        })
    }

    fn io(&self, source: std::io::Error) -> ExternalError {
        ExternalError::Io {
            path: self.path.clone(),
            source,
        }
    }

    /// Opens the file for one pass over its rows (with its reusable read buffer).
    pub(crate) fn open(&self) -> Result<Reader> {
        Ok(Reader {
            file: File::open(&self.path).map_err(|e| self.io(e))?,
            buf: Vec::new(),
        })
    }

    /// Reads rows `start .. start + len` into `dst` (row-major with `dst_stride` values per
    /// row; this source's columns start at `dst_col`), checking every value is finite. The
    /// reader's buffer is reused between calls (at most `len · cols` elements).
    pub(crate) fn read_rows(
        &self,
        reader: &mut Reader,
        start: usize,
        len: usize,
        dst: &mut [f64],
        dst_stride: usize,
        dst_col: usize,
    ) -> Result<()> {
        let Reader { file, buf } = reader;
        let size = self.elem.size() as usize;
        let cols = self.cols;
        let read = |buf: &mut Vec<u8>, at: u64, bytes: usize| -> Result<()> {
            buf.resize(bytes, 0);
            file.read_exact_at(buf, at).map_err(|e| self.io(e))
        };
        match self.order {
            Order::Rows { stride } if stride as usize == cols => {
                let at = self.base + (start * cols * size) as u64;
                read(buf, at, len * cols * size)?;
                for r in 0..len {
                    let out = &mut dst[r * dst_stride + dst_col..][..cols];
                    let src = &buf[r * cols * size..(r + 1) * cols * size];
                    for (o, b) in out.iter_mut().zip(src.chunks_exact(size)) {
                        *o = self.elem.decode(b);
                    }
                }
            }
            Order::Rows { stride } => {
                for r in 0..len {
                    let at = self.base + (start + r) as u64 * stride * size as u64;
                    read(buf, at, cols * size)?;
                    let out = &mut dst[r * dst_stride + dst_col..][..cols];
                    for (o, b) in out.iter_mut().zip(buf.chunks_exact(size)) {
                        *o = self.elem.decode(b);
                    }
                }
            }
            Order::Cols { stride } => {
                for c in 0..cols {
                    let at = self.base + (c as u64 * stride + start as u64) * size as u64;
                    read(buf, at, len * size)?;
                    for (r, b) in buf.chunks_exact(size).enumerate() {
                        dst[r * dst_stride + dst_col + c] = self.elem.decode(b);
                    }
                }
            }
        }
        for r in 0..len {
            let row = &dst[r * dst_stride + dst_col..][..cols];
            if let Some(c) = row.iter().position(|x| !x.is_finite()) {
                return Err(ExternalError::NonFinite {
                    path: self.path.clone(),
                    name: self.name.clone(),
                    row: start + r,
                    col: c,
                    value: row[c],
                });
            }
        }
        Ok(())
    }

    /// The whole array as a [`super::Matrix`] (f64 stays f64; f32, f16, bf16 as f32, exactly).
    /// Allocates `rows · cols` values, which [`TensorSource::new`] checked the file holds.
    pub(crate) fn load(&self) -> Result<super::Matrix> {
        let mut reader = self.open()?;
        let (rows, cols) = (self.rows, self.cols);
        let chunk = (super::CHUNK_BYTES / (8 * cols)).clamp(1, rows);
        let mut stage = vec![0.0f64; chunk * cols];
        let mut f64s = Vec::new();
        let mut f32s = Vec::new();
        let mut start = 0;
        while start < rows {
            let len = chunk.min(rows - start);
            self.read_rows(&mut reader, start, len, &mut stage, cols, 0)?;
            let part = &stage[..len * cols];
            if self.elem == Elem::F64 {
                f64s.extend_from_slice(part);
            } else {
                f32s.extend(part.iter().map(|&x| x as f32));
            }
            start += len;
        }
        Ok(super::Matrix {
            rows,
            cols,
            dtype: self.elem.name().to_string(),
            values: if self.elem == Elem::F64 {
                super::Values::F64(f64s)
            } else {
                super::Values::F32(f32s)
            },
        })
    }
}
