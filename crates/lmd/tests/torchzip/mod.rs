//! Writers of `torch.save`-format files for the tests (no torch needed): a protocol-2 pickle of
//! a dict name → tensor, and a zip of stored members, as PyTorch writes them. Each piece can be
//! replaced, so that every malformed case is one small file made here.
#![allow(dead_code)]

/// One tensor of a pickle: name, storage type (`Float`, `Long`, ...), storage key, storage
/// elements, offset, size, stride.
pub struct T<'a> {
    pub name: &'a str,
    pub storage: &'a str,
    pub key: &'a str,
    pub numel: u64,
    pub offset: u64,
    pub size: Vec<u64>,
    pub stride: Vec<u64>,
}

fn unicode(out: &mut Vec<u8>, s: &str) {
    out.push(b'X');
    out.extend((s.len() as u32).to_le_bytes());
    out.extend(s.as_bytes());
}

fn int(out: &mut Vec<u8>, v: u64) {
    if v <= i32::MAX as u64 {
        out.push(b'J');
        out.extend((v as u32).to_le_bytes());
    } else {
        // LONG1 of 8 bytes (two's complement, little-endian).
        out.extend([0x8a, 8]);
        out.extend(v.to_le_bytes());
    }
}

fn global(out: &mut Vec<u8>, module: &str, name: &str) {
    out.push(b'c');
    out.extend(format!("{module}\n{name}\n").as_bytes());
}

/// The pickle `torch.save({name: tensor, ...})` writes (protocol 2).
pub fn pickle(tensors: &[T]) -> Vec<u8> {
    let mut p = vec![0x80, 2, b'}', b'('];
    for t in tensors {
        unicode(&mut p, t.name);
        global(&mut p, "torch._utils", "_rebuild_tensor_v2");
        p.extend([b'(', b'(']);
        unicode(&mut p, "storage");
        global(&mut p, "torch", &format!("{}Storage", t.storage));
        unicode(&mut p, t.key);
        unicode(&mut p, "cpu");
        int(&mut p, t.numel);
        p.extend([b't', b'Q']);
        int(&mut p, t.offset);
        p.push(b'(');
        for &s in &t.size {
            int(&mut p, s);
        }
        p.extend([b't', b'(']);
        for &s in &t.stride {
            int(&mut p, s);
        }
        p.extend([b't', 0x89]);
        global(&mut p, "collections", "OrderedDict");
        p.extend([b')', b'R', b't', b'R']);
    }
    p.extend([b'u', b'.']);
    p
}

/// CRC-32 (IEEE) of `data`, as zip members carry it.
pub fn crc32(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= b as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xEDB8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// A zip of stored (uncompressed) members, with `method` written into every header.
pub fn zip_with_method(members: &[(&str, &[u8])], method: u16) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, data) in members {
        let at = out.len() as u32;
        let crc = crc32(data);
        let head = |sig: &[u8], central: bool| {
            let mut h = sig.to_vec();
            if central {
                h.extend(20u16.to_le_bytes()); // made by
            }
            h.extend(20u16.to_le_bytes()); // needed
            h.extend(0u16.to_le_bytes()); // flags
            h.extend(method.to_le_bytes());
            h.extend([0u8; 4]); // time, date
            h.extend(crc.to_le_bytes());
            h.extend((data.len() as u32).to_le_bytes());
            h.extend((data.len() as u32).to_le_bytes());
            h.extend((name.len() as u16).to_le_bytes());
            h.extend(0u16.to_le_bytes()); // extra
            h
        };
        out.extend(head(b"PK\x03\x04", false));
        out.extend(name.as_bytes());
        out.extend(*data);
        let mut c = head(b"PK\x01\x02", true);
        c.extend([0u8; 2]); // comment
        c.extend([0u8; 2]); // disk
        c.extend([0u8; 2]); // internal attributes
        c.extend([0u8; 4]); // external attributes
        c.extend(at.to_le_bytes());
        c.extend(name.as_bytes());
        central.extend(c);
    }
    let cd_at = out.len() as u32;
    out.extend(&central);
    out.extend(b"PK\x05\x06");
    out.extend([0u8; 4]);
    out.extend((members.len() as u16).to_le_bytes());
    out.extend((members.len() as u16).to_le_bytes());
    out.extend((central.len() as u32).to_le_bytes());
    out.extend(cd_at.to_le_bytes());
    out.extend(0u16.to_le_bytes());
    out
}

/// A zip of stored members.
pub fn zip(members: &[(&str, &[u8])]) -> Vec<u8> {
    zip_with_method(members, 0)
}

/// A whole `torch.save` file of row-major f32 tensors `(name, rows, cols, values)`.
pub fn torch_f32(tensors: &[(&str, usize, usize, Vec<f32>)]) -> Vec<u8> {
    let keys: Vec<String> = (0..tensors.len()).map(|k| k.to_string()).collect();
    let ts: Vec<T> = tensors
        .iter()
        .zip(&keys)
        .map(|((name, r, c, _), key)| T {
            name,
            storage: "Float",
            key,
            numel: (r * c) as u64,
            offset: 0,
            size: vec![*r as u64, *c as u64],
            stride: vec![*c as u64, 1],
        })
        .collect();
    let pkl = pickle(&ts);
    let data: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(_, _, _, v)| v.iter().flat_map(|x| x.to_le_bytes()).collect())
        .collect();
    let names: Vec<String> = keys.iter().map(|k| format!("archive/data/{k}")).collect();
    let mut members: Vec<(&str, &[u8])> = vec![("archive/data.pkl", &pkl)];
    for (n, d) in names.iter().zip(&data) {
        members.push((n, d));
    }
    zip(&members)
}
