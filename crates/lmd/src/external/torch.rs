//! `torch.save` files (the zip format of PyTorch ≥ 1.6): the zip's central directory is read
//! here (zip64 included, stored members only, every offset checked against the file), the
//! pickle `<archive>/data.pkl` by [`super::pickle`], and each tensor becomes a
//! [`TensorSource`] over its storage member `<archive>/data/<key>`.

use std::collections::HashMap;
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::pickle::{self, PickleError, TensorRef, Value};
use super::source::{Elem, Order, TensorSource};
use super::{io_err, ExternalError, Result};

/// Largest `data.pkl` read (a `torch.save` of a few dozen tensors writes a few KB).
const MAX_PICKLE: u64 = 64 << 20;
/// Largest central directory read.
const MAX_DIRECTORY: u64 = 64 << 20;

/// A member of the zip: where its bytes are.
#[derive(Clone, Copy, Debug)]
struct Member {
    /// Byte offset of its local header.
    header: u64,
    /// Its size (stored: compressed = uncompressed).
    size: u64,
    /// Compression method (0: stored).
    method: u16,
}

struct Zip<'a> {
    path: &'a Path,
    file: File,
    len: u64,
    members: HashMap<String, Member>,
}

fn le(b: &[u8], at: usize, n: usize) -> u64 {
    b[at..at + n]
        .iter()
        .rev()
        .fold(0u64, |acc, &x| (acc << 8) | x as u64)
}

impl<'a> Zip<'a> {
    fn bad<T>(&self, reason: impl Into<String>) -> Result<T> {
        Err(ExternalError::Malformed {
            path: self.path.to_path_buf(),
            reason: reason.into(),
        })
    }

    fn read(&self, at: u64, n: u64) -> Result<Vec<u8>> {
        if at.checked_add(n).is_none_or(|end| end > self.len) {
            return self.bad(format!(
                "{n} bytes at {at} lie past the end ({} bytes)",
                self.len
            ));
        }
        let mut buf = vec![0u8; n as usize];
        self.file
            .read_exact_at(&mut buf, at)
            .map_err(io_err(self.path))?;
        Ok(buf)
    }

    /// Opens a `torch.save` zip and reads its central directory.
    fn open(path: &'a Path) -> Result<Self> {
        let file = File::open(path).map_err(io_err(path))?;
        let len = file.metadata().map_err(io_err(path))?.len();
        let mut zip = Zip {
            path,
            file,
            len,
            members: HashMap::new(),
        };
        zip.check_magic()?;
        let (count, cd_size, cd_at) = zip.directory_extent()?;
        if cd_size > MAX_DIRECTORY {
            return zip.bad(format!("central directory of {cd_size} bytes"));
        }
        let cd = zip.read(cd_at, cd_size)?;
        zip.read_directory(&cd, count)?;
        Ok(zip)
    }

    /// Refuses a legacy (pickle, not zip) `torch.save` file and anything else but a zip.
    fn check_magic(&self) -> Result<()> {
        let mut magic = [0u8; 4];
        if self.len >= 4 {
            self.file
                .read_exact_at(&mut magic, 0)
                .map_err(io_err(self.path))?;
        }
        if magic[..2] == [0x80, 0x02] || magic[0] == 0x80 {
            return self.bad(
                "a legacy (pre-1.6, not zip) torch.save file: save it again with a current torch",
            );
        }
        if magic != *b"PK\x03\x04" {
            return self.bad("not a zip file (a torch.save file is a zip)");
        }
        Ok(())
    }

    /// (entries, size, offset) of the central directory, from the end record (or from the
    /// zip64 end record where the end record's fields overflow).
    fn directory_extent(&self) -> Result<(u64, u64, u64)> {
        // End of central directory: 22 bytes + a comment of up to 65535, at the end.
        let len = self.len;
        let tail_len = len.min(22 + 65535);
        let tail = self.read(len - tail_len, tail_len)?;
        let Some(e) = (0..tail.len().saturating_sub(21))
            .rev()
            .find(|&i| tail[i..i + 4] == *b"PK\x05\x06")
        else {
            return self.bad("no end of central directory (truncated zip)");
        };
        let eocd_at = len - tail_len + e as u64;
        let (count, cd_size, cd_at) = (
            le(&tail, e + 10, 2),
            le(&tail, e + 12, 4),
            le(&tail, e + 16, 4),
        );
        if count == 0xFFFF || cd_size == 0xFFFF_FFFF || cd_at == 0xFFFF_FFFF {
            return self.zip64_directory_extent(eocd_at);
        }
        Ok((count, cd_size, cd_at))
    }

    /// zip64: the locator just before the end record at `eocd_at` points at the zip64 end
    /// record, which holds the directory's (entries, size, offset) in 8 bytes each.
    fn zip64_directory_extent(&self, eocd_at: u64) -> Result<(u64, u64, u64)> {
        if eocd_at < 20 {
            return self.bad("zip64 locator missing");
        }
        let loc = self.read(eocd_at - 20, 20)?;
        if loc[..4] != *b"PK\x06\x07" {
            return self.bad("zip64 locator missing");
        }
        let rec = self.read(le(&loc, 8, 8), 56)?;
        if rec[..4] != *b"PK\x06\x06" {
            return self.bad("zip64 end record missing");
        }
        Ok((le(&rec, 32, 8), le(&rec, 40, 8), le(&rec, 48, 8)))
    }

    /// Reads the entries of the central directory `cd` into `members`, at most `count`.
    fn read_directory(&mut self, cd: &[u8], count: u64) -> Result<()> {
        let mut at = 0usize;
        while at + 46 <= cd.len() && (self.members.len() as u64) < count {
            let (name, member, end) = self.directory_entry(cd, at)?;
            self.members.insert(name, member);
            at = end;
        }
        Ok(())
    }

    /// The central directory entry at `at`: its name, its member and where the next entry
    /// starts.
    fn directory_entry(&self, cd: &[u8], at: usize) -> Result<(String, Member, usize)> {
        if cd[at..at + 4] != *b"PK\x01\x02" {
            return self.bad(format!("central directory entry {}", self.members.len()));
        }
        let method = le(cd, at + 10, 2) as u16;
        let (mut csize, mut usize_, mut header) =
            (le(cd, at + 20, 4), le(cd, at + 24, 4), le(cd, at + 42, 4));
        let (nlen, xlen, clen) = (
            le(cd, at + 28, 2) as usize,
            le(cd, at + 30, 2) as usize,
            le(cd, at + 32, 2) as usize,
        );
        let end = at + 46 + nlen + xlen + clen;
        if end > cd.len() {
            return self.bad("central directory entry past its end");
        }
        let name = String::from_utf8_lossy(&cd[at + 46..at + 46 + nlen]).into_owned();
        let extra = at + 46 + nlen..at + 46 + nlen + xlen;
        zip64_extra(cd, extra, [&mut usize_, &mut csize, &mut header]);
        if method == 0 && csize != usize_ {
            return self.bad(format!("member {name}: stored sizes differ"));
        }
        let member = Member {
            header,
            size: csize,
            method,
        };
        Ok((name, member, end))
    }

    /// Byte offset and size of a stored member's data.
    fn data(&self, name: &str) -> Result<(u64, u64)> {
        let Some(m) = self.members.get(name) else {
            let mut found: Vec<&String> = self.members.keys().collect();
            found.sort();
            found.truncate(8);
            return self.bad(format!("no member {name} (found {found:?})"));
        };
        if m.method != 0 {
            return self.bad(format!(
                "member {name} is compressed (method {}); torch.save stores members uncompressed",
                m.method
            ));
        }
        let local = self.read(m.header, 30)?;
        if local[..4] != *b"PK\x03\x04" {
            return self.bad(format!("member {name}: no local header"));
        }
        let start = m.header + 30 + le(&local, 26, 2) + le(&local, 28, 2);
        if start.checked_add(m.size).is_none_or(|e| e > self.len) {
            return self.bad(format!(
                "member {name}: {} bytes at {start} lie past the end ({} bytes)",
                m.size, self.len
            ));
        }
        Ok((start, m.size))
    }
}

/// Reads the zip64 extra field (tag 1) among the extra fields `cd[extra]`: each of `fields`
/// (uncompressed size, compressed size, header offset) that holds 0xFFFFFFFF is given there
/// in 8 bytes, in that order.
fn zip64_extra(cd: &[u8], extra: Range<usize>, mut fields: [&mut u64; 3]) {
    let mut x = extra.start;
    while x + 4 <= extra.end {
        let (tag, size) = (le(cd, x, 2), le(cd, x + 2, 2) as usize);
        let body = x + 4;
        if body + size > extra.end {
            break;
        }
        if tag == 1 {
            let mut k = body;
            for field in fields.iter_mut() {
                if **field == 0xFFFF_FFFF && k + 8 <= body + size {
                    **field = le(cd, k, 8);
                    k += 8;
                }
            }
        }
        x = body + size;
    }
}

/// The archive's `data.pkl`: the one member named `<archive>/data.pkl`.
fn pickle_member(zip: &Zip) -> Result<String> {
    let mut found: Vec<&String> = zip
        .members
        .keys()
        .filter(|n| n.ends_with("/data.pkl") && n.matches('/').count() == 1)
        .collect();
    found.sort();
    match found.as_slice() {
        [one] => Ok((*one).clone()),
        [] => zip.bad("no <archive>/data.pkl member (not a torch.save zip)"),
        many => zip.bad(format!("several data.pkl members: {many:?}")),
    }
}

/// Every tensor of a `torch.save`d dict (after taking `key` of an outer dict when given),
/// sorted by name; entries that are not tensors are skipped.
pub(crate) fn open(path: &Path, key: Option<&str>) -> Result<Vec<TensorSource>> {
    let zip = Zip::open(path)?;
    let pkl = pickle_member(&zip)?;
    let prefix = &pkl[..pkl.len() - "data.pkl".len()];
    let (at, size) = zip.data(&pkl)?;
    if size > MAX_PICKLE {
        return zip.bad(format!("{pkl} of {size} bytes"));
    }
    let bytes = zip.read(at, size)?;
    let value = pickle::load(&bytes).map_err(|e| match e {
        PickleError::Forbidden(global) => ExternalError::UnsafePickle {
            path: path.to_path_buf(),
            global,
        },
        PickleError::Malformed(reason) => ExternalError::Malformed {
            path: path.to_path_buf(),
            reason,
        },
    })?;
    let entries = |v: &Value, what: &str| -> Result<Vec<(String, Value)>> {
        match v {
            Value::Dict(d, _) => Ok(d
                .iter()
                .filter_map(|(k, v)| match k {
                    Value::Str(s) => Some((s.to_string(), v.clone())),
                    _ => None,
                })
                .collect()),
            other => zip.bad(format!("{what} is not a dict (found {})", kind_of(other))),
        }
    };
    let mut top = entries(&value, "the saved object")?;
    if let Some(k) = key {
        let names: Vec<String> = top.iter().map(|(n, _)| n.clone()).collect();
        let Some((_, inner)) = top.into_iter().find(|(n, _)| n == k) else {
            return Err(ExternalError::MissingTensor {
                path: path.to_path_buf(),
                name: k.to_string(),
                found: names,
            });
        };
        top = entries(&inner, &format!("entry {k:?}"))?;
    }
    let mut out = Vec::new();
    for (name, v) in top {
        let Value::Tensor(t) = v else { continue };
        out.push(source(&zip, path, prefix, &name, &t)?);
    }
    if out.is_empty() {
        return zip.bad(match key {
            Some(k) => format!("entry {k:?} holds no tensors"),
            None => "the saved dict holds no tensors".to_string(),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Tensor(_) => "a tensor",
        Value::List(..) => "a list",
        Value::Tuple(..) => "a tuple",
        Value::Str(_) => "a string",
        _ => "another value",
    }
}

/// The checked source of one tensor: dtype, 2-D, strides and the storage member's bounds.
fn source(zip: &Zip, path: &Path, prefix: &str, name: &str, t: &TensorRef) -> Result<TensorSource> {
    let elem = match t.storage_type.as_str() {
        "Float" => Elem::F32,
        "Double" => Elem::F64,
        "Half" => Elem::F16,
        "BFloat16" => Elem::BF16,
        other => {
            return Err(ExternalError::UnsupportedDtype {
                path: path.to_path_buf(),
                name: name.to_string(),
                dtype: format!("{other}Storage"),
            })
        }
    };
    let bad = |reason: String| ExternalError::Malformed {
        path: path.to_path_buf(),
        reason: format!("tensor {name:?}: {reason}"),
    };
    if t.size.len() != 2 {
        // Shape errors first: a 3-D tensor is NotTwoD whatever its storage.
        TensorSource::new(path, name, &t.size, elem, 0, Order::Rows { stride: 0 }, 0)?;
    }
    let (rows, cols) = (t.size[0], t.size[1]);
    let (s0, s1) = (t.stride[0], t.stride[1]);
    // Strides of a dimension of size 1 do not matter.
    let order = if s1 == 1 || cols == 1 {
        Order::Rows {
            stride: if rows == 1 { cols } else { s0 },
        }
    } else if s0 == 1 || rows == 1 {
        Order::Cols { stride: s1 }
    } else {
        return Err(bad(format!(
            "strides {:?} (neither rows nor columns contiguous)",
            t.stride
        )));
    };
    let (at, size) = zip.data(&format!("{prefix}data/{}", t.key))?;
    let need = t
        .numel
        .checked_mul(elem.size())
        .ok_or_else(|| bad(format!("storage of {} elements overflows", t.numel)))?;
    if need > size {
        return Err(bad(format!(
            "storage {} of {} elements needs {need} bytes, its member holds {size}",
            t.key, t.numel
        )));
    }
    let offset = t
        .offset
        .checked_mul(elem.size())
        .filter(|&o| o <= need)
        .ok_or_else(|| bad(format!("offset {} outside its storage", t.offset)))?;
    TensorSource::new(path, name, &t.size, elem, at + offset, order, need - offset)
}
