//! safetensors files: the JSON header is parsed and checked here (its length against the file,
//! every tensor's offsets against the data, its shape's byte size in checked arithmetic); rows
//! are read by [`TensorSource`].

use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::Path;

use serde_json::{Map, Value};

use super::source::{Elem, Order, TensorSource};
use super::{io_err, malformed, ExternalError, Result};

/// Longest header read (the safetensors format's own limit).
const MAX_HEADER: u64 = 100_000_000;

/// Every tensor of a safetensors file, sorted by name, each checked against the file.
pub(crate) fn open(path: &Path) -> Result<Vec<TensorSource>> {
    let (header, data) = read_header(path)?;
    let mut out = Vec::new();
    for (name, info) in &header {
        if name == "__metadata__" {
            continue;
        }
        out.push(entry(path, name, info, &data)?);
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The JSON header (its announced length checked against the file before it is read) and the
/// byte range of the data that follows it.
fn read_header(path: &Path) -> Result<(Map<String, Value>, Range<u64>)> {
    let bad = malformed(path);
    let file = File::open(path).map_err(io_err(path))?;
    let file_len = file.metadata().map_err(io_err(path))?.len();
    if file_len < 8 {
        return Err(bad("truncated header (under 8 bytes)".into()));
    }
    let mut pre = [0u8; 8];
    file.read_exact_at(&mut pre, 0).map_err(io_err(path))?;
    let n = u64::from_le_bytes(pre);
    if n > file_len - 8 || n > MAX_HEADER {
        return Err(bad(format!(
            "header of {n} bytes announced, the file holds {}",
            file_len - 8
        )));
    }
    let mut header = vec![0u8; n as usize];
    file.read_exact_at(&mut header, 8).map_err(io_err(path))?;
    let header: Map<String, Value> =
        serde_json::from_slice(&header).map_err(|e| bad(format!("header: {e}")))?;
    Ok((header, 8 + n..file_len))
}

/// The source of tensor `name` that the header describes by `info`: dtype, shape and offsets
/// checked, the offsets against the `data` bytes and the shape against the bytes it spans.
fn entry(path: &Path, name: &str, info: &Value, data: &Range<u64>) -> Result<TensorSource> {
    let (data_start, data_len) = (data.start, data.end - data.start);
    let bad_entry = |what: &str| malformed(path)(format!("tensor {name:?}: {what}"));
    let dtype = info["dtype"]
        .as_str()
        .ok_or_else(|| bad_entry("no dtype"))?;
    let shape: Vec<u64> = info["shape"]
        .as_array()
        .ok_or_else(|| bad_entry("no shape"))?
        .iter()
        .map(|v| v.as_u64().ok_or_else(|| bad_entry("shape is not integers")))
        .collect::<Result<_>>()?;
    let offsets: Vec<u64> = info["data_offsets"]
        .as_array()
        .filter(|a| a.len() == 2)
        .ok_or_else(|| bad_entry("no data_offsets [start, end]"))?
        .iter()
        .map(|v| {
            v.as_u64()
                .ok_or_else(|| bad_entry("offsets are not integers"))
        })
        .collect::<Result<_>>()?;
    let (start, end) = (offsets[0], offsets[1]);
    if start > end || end > data_len {
        return Err(bad_entry(&format!(
            "data_offsets [{start}, {end}] outside the {data_len} data bytes"
        )));
    }
    let elem = match dtype {
        "F32" => Elem::F32,
        "F64" => Elem::F64,
        "F16" => Elem::F16,
        "BF16" => Elem::BF16,
        other => {
            return Err(ExternalError::UnsupportedDtype {
                path: path.to_path_buf(),
                name: name.to_string(),
                dtype: other.to_string(),
            })
        }
    };
    let cols = shape.get(1).copied().unwrap_or(0);
    let src = TensorSource::new(
        path,
        name,
        &shape,
        elem,
        data_start + start,
        Order::Rows { stride: cols },
        end - start,
    )?;
    if (src.rows as u64 * src.cols as u64 * elem.size()) != end - start {
        return Err(bad_entry(&format!(
            "shape {shape:?} of {dtype} does not fill its {} bytes",
            end - start
        )));
    }
    Ok(src)
}
