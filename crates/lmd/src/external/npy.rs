//! `.npy` files: the header is parsed here (format versions 1–3), rows are read by
//! [`TensorSource`]. Only the header is held in memory, and its length is checked against the
//! file before it is read.

use std::fs::File;
use std::io::Read;
use std::ops::Range;
use std::path::Path;

use super::source::{Elem, Order, TensorSource};
use super::{io_err, malformed, ExternalError, Result};

/// Longest header read (numpy writes a few hundred bytes; its own limit is 10 KB by default).
const MAX_HEADER: u64 = 1 << 20;

/// Parses the header of a `.npy` file into a checked source.
pub(crate) fn open(path: &Path) -> Result<TensorSource> {
    let bad = malformed(path);
    let (header, data) = read_header(path)?;
    let (descr, fortran, shape) = header_fields(path, &header)?;
    let elem = match descr.as_str() {
        "<f4" | "=f4" | "f4" => Elem::F32,
        "<f8" | "=f8" | "f8" => Elem::F64,
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
    let (data_start, data_len) = (data.start, data.end - data.start);
    let cols = shape.get(1).copied().unwrap_or(0);
    let src = TensorSource::new(
        path,
        "",
        &shape,
        elem,
        data_start,
        Order::Rows { stride: cols },
        data_len,
    )?;
    let want = src.rows as u64 * src.cols as u64 * elem.size();
    if data_len != want {
        return Err(bad(format!(
            "{data_len} data bytes for shape {shape:?} of {descr} ({want} expected)"
        )));
    }
    Ok(src)
}

/// The header text (format versions 1–3; its announced length checked against the file
/// before it is read) and the byte range of the data that follows it.
fn read_header(path: &Path) -> Result<(String, Range<u64>)> {
    let bad = malformed(path);
    let mut file = File::open(path).map_err(io_err(path))?;
    let file_len = file.metadata().map_err(io_err(path))?.len();
    let mut pre = [0u8; 12];
    let got = read_up_to(&mut file, &mut pre).map_err(io_err(path))?;
    if got < 10 || &pre[..6] != b"\x93NUMPY" {
        return Err(bad("not a .npy file (magic string)".into()));
    }
    let (header_len, start) = match pre[6] {
        1 => (u16::from_le_bytes([pre[8], pre[9]]) as u64, 10u64),
        2 | 3 if got >= 12 => (
            u32::from_le_bytes([pre[8], pre[9], pre[10], pre[11]]) as u64,
            12,
        ),
        2 | 3 => return Err(bad("truncated header".into())),
        v => return Err(bad(format!("unsupported .npy version {v}"))),
    };
    if header_len > file_len.saturating_sub(start) {
        return Err(bad(format!(
            "truncated header ({header_len} bytes announced, {} in the file)",
            file_len.saturating_sub(start)
        )));
    }
    if header_len > MAX_HEADER {
        return Err(bad(format!("header of {header_len} bytes")));
    }
    let mut header = vec![0u8; header_len as usize];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut header, start).map_err(io_err(path))?;
    let header =
        String::from_utf8(header).map_err(|e| bad(format!("header: {}", e.utf8_error())))?;
    Ok((header, start + header_len..file_len))
}

/// The header's `descr` (unquoted), `fortran_order` (raw text) and `shape`.
fn header_fields<'h>(path: &Path, header: &'h str) -> Result<(String, &'h str, Vec<u64>)> {
    let bad = malformed(path);
    let descr = npy_value(header, "descr")
        .map(|v| v.trim_matches(|c| c == '\'' || c == '"').to_string())
        .ok_or_else(|| bad(format!("no 'descr' in header {header:?}")))?;
    let fortran = npy_value(header, "fortran_order")
        .ok_or_else(|| bad(format!("no 'fortran_order' in header {header:?}")))?;
    let shape = npy_value(header, "shape")
        .ok_or_else(|| bad(format!("no 'shape' in header {header:?}")))?;
    let shape: Vec<u64> = shape
        .trim_matches(|c| c == '(' || c == ')')
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<u64>()
                .map_err(|e| bad(format!("shape {s:?}: {e}")))
        })
        .collect::<Result<_>>()?;
    Ok((descr, fortran, shape))
}

/// Reads as many bytes as the file has, up to `buf.len()`.
fn read_up_to(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read(&mut buf[got..])? {
            0 => break,
            k => got += k,
        }
    }
    Ok(got)
}

/// The raw text of `'key': value` in a .npy header dict (value up to the next top-level comma).
fn npy_value<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let at = header
        .find(&format!("'{key}'"))
        .or_else(|| header.find(&format!("\"{key}\"")))?;
    let rest = header.get(at + key.len() + 2..)?.trim_start();
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
