//! Property tests of the `lmd::external` readers on arbitrary and mutated bytes: every input
//! ends in `Ok` or a typed error (a panic fails the property), and no single allocation made
//! while reading is larger than a small multiple of the file (a counting global allocator
//! watches the reading thread). Bounded: a few hundred cases per reader, seconds in all.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::Path;

use lmd::external::{read_npy, read_safetensors_all, read_torch, write_npy, Matrix, Values};
use proptest::prelude::*;

mod torchzip;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

/// Records the largest allocation of the thread that armed it.
struct Counting;

fn note(size: usize) {
    let _ = ARMED.try_with(|a| {
        if a.get() {
            let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
        }
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Largest single allocation a reader may make for a file of `len` bytes: the widened values
/// (f16 → f32 is 2×, a growing vector up to 2× more, the f64 staging 4×) plus fixed buffers.
fn allowed(len: usize) -> usize {
    8 * len + (1 << 20)
}

fn consistent(m: &Matrix) -> bool {
    let n = match &m.values {
        Values::F32(v) => v.len(),
        Values::F64(v) => v.len(),
    };
    n == m.rows * m.cols && m.rows > 0 && m.cols > 0
}

/// Runs `read` on `bytes` written to a file, with the allocation watch armed.
fn run<T>(bytes: &[u8], ext: &str, read: impl Fn(&Path) -> T) -> (T, usize) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(format!("f.{ext}"));
    std::fs::write(&p, bytes).unwrap();
    LARGEST.with(|l| l.set(0));
    ARMED.with(|a| a.set(true));
    let out = read(&p);
    ARMED.with(|a| a.set(false));
    (out, LARGEST.with(|l| l.get()))
}

fn valid_npy() -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("v.npy");
    let data: Vec<f32> = (0..12).map(|k| k as f32 * 0.5).collect();
    write_npy(&p, 4, 3, &data).unwrap();
    std::fs::read(p).unwrap()
}

fn valid_safetensors() -> Vec<u8> {
    let h = r#"{"__metadata__":{"k":"v"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"b":{"dtype":"F16","shape":[3,2],"data_offsets":[24,36]}}"#;
    let mut b = (h.len() as u64).to_le_bytes().to_vec();
    b.extend(h.as_bytes());
    b.extend((0..36u8).map(|k| k % 60));
    b
}

fn valid_torch() -> Vec<u8> {
    torchzip::torch_f32(&[
        ("x", 2, 2, vec![1.0, 2.0, 3.0, 4.0]),
        ("y", 3, 1, vec![5.0, 6.0, 7.0]),
    ])
}

/// The pickle of [`valid_torch`], to be mutated inside an intact zip.
fn valid_pickle() -> Vec<u8> {
    torchzip::pickle(&[torchzip::T {
        name: "x",
        storage: "Float",
        key: "0",
        numel: 4,
        offset: 0,
        size: vec![2, 2],
        stride: vec![2, 1],
    }])
}

/// A mutation of `base`: byte replacements, then a cut, then an insertion.
fn mutated(base: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    let len = base.len();
    (
        proptest::collection::vec((0..len, any::<u8>()), 0..8),
        proptest::option::of(0..=len),
        proptest::option::of((0..=len, proptest::collection::vec(any::<u8>(), 1..16))),
    )
        .prop_map(move |(flips, cut, insert)| {
            let mut b = base.clone();
            for (at, v) in flips {
                b[at] = v;
            }
            if let Some((at, bytes)) = insert {
                let at = at.min(b.len());
                b.splice(at..at, bytes);
            }
            if let Some(c) = cut {
                b.truncate(c.max(1));
            }
            b
        })
}

/// Arbitrary bytes behind a format's magic (so that parsing gets past the first check).
fn behind(magic: &'static [u8]) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..400).prop_map(move |tail| {
        let mut b = magic.to_vec();
        b.extend(tail);
        b
    })
}

fn check_matrices(r: &Result<Vec<(String, Matrix)>, lmd::external::ExternalError>) -> bool {
    r.as_ref()
        .map_or(true, |v| v.iter().all(|(_, m)| consistent(m)))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn npy_reader_survives_arbitrary_bytes(bytes in prop_oneof![
        mutated(valid_npy()), behind(b"\x93NUMPY"), proptest::collection::vec(any::<u8>(), 0..200)
    ]) {
        let (r, largest) = run(&bytes, "npy", |p| read_npy(p));
        prop_assert!(r.as_ref().map_or(true, consistent));
        prop_assert!(largest <= allowed(bytes.len()), "allocated {largest} for {} bytes", bytes.len());
    }

    #[test]
    fn safetensors_reader_survives_arbitrary_bytes(bytes in prop_oneof![
        mutated(valid_safetensors()), proptest::collection::vec(any::<u8>(), 0..300)
    ]) {
        let (r, largest) = run(&bytes, "safetensors", |p| read_safetensors_all(p));
        prop_assert!(check_matrices(&r));
        prop_assert!(largest <= allowed(bytes.len()), "allocated {largest} for {} bytes", bytes.len());
    }

    #[test]
    fn torch_reader_survives_arbitrary_bytes(bytes in prop_oneof![
        mutated(valid_torch()), behind(b"PK\x03\x04"), proptest::collection::vec(any::<u8>(), 0..300)
    ]) {
        let (r, largest) = run(&bytes, "pt", |p| read_torch(p, None));
        prop_assert!(check_matrices(&r));
        prop_assert!(largest <= allowed(bytes.len()), "allocated {largest} for {} bytes", bytes.len());
    }

    #[test]
    fn torch_reader_survives_arbitrary_pickles(pkl in prop_oneof![
        mutated(valid_pickle()), behind(b"\x80\x02"),
    ]) {
        let data: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        let bytes = torchzip::zip(&[("archive/data.pkl", &pkl), ("archive/data/0", &data)]);
        let (r, largest) = run(&bytes, "pt", |p| read_torch(p, Some("x")).and(read_torch(p, None)));
        prop_assert!(check_matrices(&r));
        prop_assert!(largest <= allowed(bytes.len()), "allocated {largest} for {} bytes", bytes.len());
    }
}

#[test]
fn the_unmutated_seeds_are_read() {
    assert_eq!(read_npy_bytes(&valid_npy()).rows, 4);
    let (r, _) = run(&valid_safetensors(), "safetensors", |p| {
        read_safetensors_all(p)
    });
    assert_eq!(r.unwrap().len(), 2);
    let (r, _) = run(&valid_torch(), "pt", |p| read_torch(p, None));
    assert_eq!(r.unwrap().len(), 2);
}

fn read_npy_bytes(b: &[u8]) -> Matrix {
    run(b, "npy", |p| read_npy(p)).0.unwrap()
}
