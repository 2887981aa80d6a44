//! `lmd::external` against hostile and broken files: one small fixture per case named in
//! issue 26, each made here, each expected to give a typed error naming the file and what is
//! wrong; and the streamed moments equal to the whole-file ones at every chunk size.

use std::path::{Path, PathBuf};

use lmd::external::{
    open_split, read_npy, read_safetensors_all, read_split, read_torch, read_train_test, write_npy,
    ExternalError, ReadOptions,
};
use lmd::moments::Moments;

mod torchzip;

use torchzip::{pickle, torch_f32, zip, zip_with_method, T};

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// A `.npy` v1 file with a hand-written header dict.
fn npy_with_header(dict: &str, data: &[u8]) -> Vec<u8> {
    let mut header = dict.to_string();
    while !(10 + header.len() + 1).is_multiple_of(64) {
        header.push(' ');
    }
    header.push('\n');
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend((header.len() as u16).to_le_bytes());
    b.extend(header.as_bytes());
    b.extend(data);
    b
}

/// A safetensors file with a hand-written header.
fn safetensors_with_header(header: &str, data: &[u8]) -> Vec<u8> {
    let mut b = (header.len() as u64).to_le_bytes().to_vec();
    b.extend(header.as_bytes());
    b.extend(data);
    b
}

/// The reason of a `Malformed` error on `path`, or a panic naming what came instead.
fn malformed<T: std::fmt::Debug>(r: Result<T, ExternalError>, path: &Path) -> String {
    match r {
        Err(ExternalError::Malformed { path: p, reason }) => {
            assert_eq!(p, path, "the error names the file");
            reason
        }
        other => panic!("expected Malformed on {}, got {other:?}", path.display()),
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn npy_truncated_header_lying_shapes_and_dtypes() {
    let dir = tempfile::tempdir().unwrap();
    // Truncated header: the length field announces more than the file holds.
    let mut b = npy_with_header(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }",
        &f32_bytes(&[1.0; 4]),
    );
    b.truncate(30);
    let p = write(dir.path(), "truncated_header.npy", &b);
    assert!(malformed(read_npy(&p), &p).contains("truncated header"));
    // Only the magic string.
    let p = write(dir.path(), "magic_only.npy", b"\x93NUMPY");
    assert!(malformed(read_npy(&p), &p).contains("magic"));
    // A shape whose product overflows u64 bytes.
    let b = npy_with_header(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (18446744073709551615, 4), }",
        &f32_bytes(&[1.0; 4]),
    );
    let p = write(dir.path(), "overflow.npy", &b);
    assert!(malformed(read_npy(&p), &p).contains("overflows"));
    // A shape that exceeds the file (a billion rows announced, one row there).
    let b = npy_with_header(
        "{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000, 4), }",
        &[0u8; 32],
    );
    let p = write(dir.path(), "exceeds.npy", &b);
    let reason = malformed(read_npy(&p), &p);
    assert!(reason.contains("32000000000 bytes"), "{reason}");
    // Unsupported dtype and Fortran order.
    let b = npy_with_header(
        "{'descr': '<i8', 'fortran_order': False, 'shape': (1, 1), }",
        &[0u8; 8],
    );
    let p = write(dir.path(), "int.npy", &b);
    assert!(matches!(read_npy(&p),
        Err(ExternalError::UnsupportedDtype { path, dtype, .. }) if path == p && dtype == "<i8"));
    let b = npy_with_header(
        "{'descr': '<f4', 'fortran_order': True, 'shape': (1, 1), }",
        &[0u8; 4],
    );
    let p = write(dir.path(), "fortran.npy", &b);
    assert!(malformed(read_npy(&p), &p).contains("Fortran"));
    // A shape that is not integers, and a header that is not UTF-8.
    let b = npy_with_header(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 2), }",
        &[0u8; 8],
    );
    let p = write(dir.path(), "negative.npy", &b);
    assert!(malformed(read_npy(&p), &p).contains("shape"));
    let mut b = npy_with_header("{'descr': '<f4'}", &[]);
    b[12] = 0xff;
    let p = write(dir.path(), "not_utf8.npy", &b);
    assert!(malformed(read_npy(&p), &p).contains("header"));
}

#[test]
fn safetensors_truncated_header_lying_shapes_and_offsets() {
    let dir = tempfile::tempdir().unwrap();
    // Fewer than the 8 length bytes.
    let p = write(dir.path(), "short.safetensors", &[1, 2, 3]);
    assert!(malformed(read_safetensors_all(&p), &p).contains("truncated"));
    // A header length beyond the file.
    let p = write(
        dir.path(),
        "long_header.safetensors",
        &u64::MAX.to_le_bytes(),
    );
    assert!(malformed(read_safetensors_all(&p), &p).contains("announced"));
    // A header that is not JSON.
    let p = write(
        dir.path(),
        "bad_json.safetensors",
        &safetensors_with_header("{not json", &[]),
    );
    assert!(malformed(read_safetensors_all(&p), &p).contains("header"));
    // Overflowing shape with offsets inside the file.
    let h = r#"{"a":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,16]}}"#;
    let p = write(
        dir.path(),
        "overflow.safetensors",
        &safetensors_with_header(h, &[0u8; 16]),
    );
    assert!(malformed(read_safetensors_all(&p), &p).contains("overflows"));
    // Offsets past the data.
    let h = r#"{"a":{"dtype":"F32","shape":[1000,1000],"data_offsets":[0,4000000]}}"#;
    let p = write(
        dir.path(),
        "past_end.safetensors",
        &safetensors_with_header(h, &[0u8; 16]),
    );
    assert!(malformed(read_safetensors_all(&p), &p).contains("outside"));
    // A shape larger than its own byte range.
    let h = r#"{"a":{"dtype":"F32","shape":[3,3],"data_offsets":[0,16]}}"#;
    let p = write(
        dir.path(),
        "shape_exceeds.safetensors",
        &safetensors_with_header(h, &[0u8; 16]),
    );
    assert!(malformed(read_safetensors_all(&p), &p).contains("bytes"));
    // Unsupported dtype.
    let h = r#"{"a":{"dtype":"I64","shape":[2,1],"data_offsets":[0,16]}}"#;
    let p = write(
        dir.path(),
        "int.safetensors",
        &safetensors_with_header(h, &[0u8; 16]),
    );
    assert!(matches!(read_safetensors_all(&p),
        Err(ExternalError::UnsupportedDtype { path, dtype, .. }) if path == p && dtype == "I64"));
}

#[test]
fn a_pickle_naming_os_system_is_refused_and_never_run() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("pwned");
    // pickle: os.system("touch <marker>"), as a torch.save zip named train.pt.
    let mut pkl = vec![0x80, 2];
    pkl.extend(b"cos\nsystem\n");
    pkl.push(b'X');
    let cmd = format!("touch {}", marker.display());
    pkl.extend((cmd.len() as u32).to_le_bytes());
    pkl.extend(cmd.as_bytes());
    pkl.extend([0x85, b'R', b'.']);
    let p = write(dir.path(), "train.pt", &zip(&[("archive/data.pkl", &pkl)]));
    for r in [
        read_torch(&p, None).map(|_| ()),
        read_split(dir.path(), "train", &ReadOptions::default()).map(|_| ()),
    ] {
        match r {
            Err(ExternalError::UnsafePickle { path, global }) => {
                assert_eq!(
                    (path.as_path(), global.as_str()),
                    (p.as_path(), "os.system")
                );
            }
            other => panic!("expected UnsafePickle naming train.pt, got {other:?}"),
        }
    }
    assert!(!marker.exists(), "the pickle's command ran");
    // STACK_GLOBAL (protocol 4) is checked the same way.
    let mut pkl = vec![0x80, 4, 0x8c, 8];
    pkl.extend(b"builtins");
    pkl.extend([0x8c, 4]);
    pkl.extend(b"eval");
    pkl.extend([0x93, b'.']);
    let p = write(dir.path(), "eval.pt", &zip(&[("archive/data.pkl", &pkl)]));
    assert!(matches!(read_torch(&p, None),
        Err(ExternalError::UnsafePickle { global, .. }) if global == "builtins.eval"));
}

#[test]
fn torch_zip_wrong_member_missing_storage_and_compression() {
    let dir = tempfile::tempdir().unwrap();
    let data = f32_bytes(&[1.0, 2.0, 3.0, 4.0]);
    let t = |key: &'static str| T {
        name: "m",
        storage: "Float",
        key,
        numel: 4,
        offset: 0,
        size: vec![2, 2],
        stride: vec![2, 1],
    };
    let pkl = pickle(&[t("0")]);
    // A zip whose pickle member is not <archive>/data.pkl.
    let p = write(
        dir.path(),
        "wrong_member.pt",
        &zip(&[("archive/other.pkl", &pkl), ("archive/data/0", &data)]),
    );
    assert!(malformed(read_torch(&p, None), &p).contains("data.pkl"));
    // The storage member is absent.
    let p = write(
        dir.path(),
        "no_storage.pt",
        &zip(&[("archive/data.pkl", &pkl)]),
    );
    assert!(malformed(read_torch(&p, None), &p).contains("no member archive/data/0"));
    // A deflated member (torch.save stores them).
    let p = write(
        dir.path(),
        "deflated.pt",
        &zip_with_method(&[("archive/data.pkl", &pkl), ("archive/data/0", &data)], 8),
    );
    assert!(malformed(read_torch(&p, None), &p).contains("compressed"));
    // Not a zip, and a zip cut short (no end of central directory).
    let p = write(dir.path(), "not_zip.pt", b"PKxx but not a zip");
    assert!(malformed(read_torch(&p, None), &p).contains("not a zip"));
    let whole = zip(&[("archive/data.pkl", &pkl), ("archive/data/0", &data)]);
    let p = write(dir.path(), "cut.pt", &whole[..whole.len() - 10]);
    assert!(malformed(read_torch(&p, None), &p).contains("central directory"));
    // A dict with no tensor in it.
    let p = write(
        dir.path(),
        "empty_dict.pt",
        &zip(&[("archive/data.pkl", &[0x80, 2, b'}', b'.'])]),
    );
    assert!(malformed(read_torch(&p, None), &p).contains("no tensors"));
}

#[test]
fn torch_lying_shapes_and_offsets_are_refused_before_reading() {
    let dir = tempfile::tempdir().unwrap();
    let data = f32_bytes(&[1.0; 6]);
    let case = |name: &str, numel: u64, offset: u64, size: Vec<u64>, stride: Vec<u64>| {
        let pkl = pickle(&[T {
            name: "m",
            storage: "Float",
            key: "0",
            numel,
            offset,
            size,
            stride,
        }]);
        let p = write(
            dir.path(),
            name,
            &zip(&[("archive/data.pkl", &pkl), ("archive/data/0", &data)]),
        );
        let r = read_torch(&p, None);
        (p, r)
    };
    // Storage larger than its member.
    let (p, r) = case("big_storage.pt", 1 << 40, 0, vec![2, 3], vec![3, 1]);
    assert!(malformed(r, &p).contains("needs"));
    // A shape past the storage.
    let (p, r) = case("big_shape.pt", 6, 0, vec![4, 3], vec![3, 1]);
    assert!(malformed(r, &p).contains("needs"));
    // A shape whose product overflows.
    let (p, r) = case("overflow.pt", 6, 0, vec![1 << 62, 3], vec![1 << 62, 1]);
    assert!(malformed(r, &p).contains("overflows"), "lying shape");
    // An offset past the storage.
    let (p, r) = case("offset.pt", 6, 100, vec![2, 3], vec![3, 1]);
    assert!(malformed(r, &p).contains("offset"));
    // Overlapping rows (a broadcast stride) and a 3-D tensor.
    let (p, r) = case("overlap.pt", 6, 0, vec![2, 3], vec![1, 1]);
    assert!(malformed(r, &p).contains("stride"));
    let (p, r) = case("three_d.pt", 6, 0, vec![1, 2, 3], vec![6, 3, 1]);
    assert!(matches!(r, Err(ExternalError::NotTwoD { path, .. }) if path == p));
    // An integer storage.
    let pkl = pickle(&[T {
        name: "ids",
        storage: "Long",
        key: "0",
        numel: 1,
        offset: 0,
        size: vec![1, 1],
        stride: vec![1, 1],
    }]);
    let p = write(
        dir.path(),
        "long.pt",
        &zip(&[("archive/data.pkl", &pkl), ("archive/data/0", &data)]),
    );
    assert!(matches!(read_torch(&p, None),
        Err(ExternalError::UnsupportedDtype { path, name, dtype }) if path == p && name == "ids" && dtype == "LongStorage"));
}

#[test]
fn nan_and_inf_rows_are_refused_while_streaming_naming_file_row_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = vec![1.0f32; 40 * 3];
    for (k, x) in a.iter_mut().enumerate() {
        *x = (k % 7) as f32;
    }
    let mut b = a.clone();
    b[37 * 3 + 2] = f32::INFINITY;
    std::fs::create_dir_all(dir.path().join("a")).unwrap();
    std::fs::create_dir_all(dir.path().join("b")).unwrap();
    write_npy(dir.path().join("a/train.npy"), 40, 3, &a).unwrap();
    write_npy(dir.path().join("b/train.npy"), 40, 3, &b).unwrap();
    let files = open_split(dir.path(), "train", &ReadOptions::default()).unwrap();
    for chunk in [1, 5, 64] {
        match files.to_moments_chunked(chunk) {
            Err(ExternalError::NonFinite {
                path,
                row,
                col,
                value,
                ..
            }) => {
                assert_eq!(path, dir.path().join("b/train.npy"));
                assert_eq!((row, col), (37, 2));
                assert!(value.is_infinite());
            }
            other => panic!("chunk {chunk}: expected NonFinite, got {other:?}"),
        }
    }
}

#[test]
fn row_counts_that_differ_across_files_are_refused_from_the_headers() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("a")).unwrap();
    std::fs::create_dir_all(dir.path().join("b")).unwrap();
    write_npy(dir.path().join("a/train.npy"), 4, 2, &[1.0; 8]).unwrap();
    write_npy(dir.path().join("b/train.npy"), 5, 2, &[1.0; 10]).unwrap();
    match open_split(dir.path(), "train", &ReadOptions::default()) {
        Err(ExternalError::RowMismatch {
            model,
            rows,
            first_model,
            first_rows,
            ..
        }) => assert_eq!(
            (model.as_str(), rows, first_model.as_str(), first_rows),
            ("b", 5, "a", 4)
        ),
        other => panic!("expected RowMismatch, got {other:?}"),
    }
}

#[test]
fn a_split_file_that_is_there_but_unreadable_is_reported_as_itself() {
    let dir = tempfile::tempdir().unwrap();
    // A folder named train.pt: there, but no file to read.
    std::fs::create_dir_all(dir.path().join("train.pt")).unwrap();
    match read_split(dir.path(), "train", &ReadOptions::default()) {
        Err(ExternalError::Io { path, .. }) => assert_eq!(path, dir.path().join("train.pt")),
        other => panic!("expected the file's own error, got {other:?}"),
    }
    // A per-model file that is garbage is that file's error, not a missing one.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("m")).unwrap();
    let p = write(
        &dir.path().join("m"),
        "test.safetensors",
        b"garbage!garbage!",
    );
    let e = read_split(dir.path(), "test", &ReadOptions::default()).unwrap_err();
    assert!(e.to_string().contains(&p.display().to_string()), "{e}");
}

#[test]
fn streamed_moments_equal_whole_file_moments_at_every_chunk_size() {
    let dir = tempfile::tempdir().unwrap();
    let (rows, wa, wb, wc) = (53usize, 3usize, 4usize, 2usize);
    let val = |m: usize, k: usize| ((k * 7919 + m * 104729) % 1009) as f32 / 97.0 + 10.0;
    let a: Vec<f32> = (0..rows * wa).map(|k| val(1, k)).collect();
    let b: Vec<f32> = (0..rows * wb).map(|k| val(2, k)).collect();
    let c: Vec<f32> = (0..rows * wc).map(|k| val(3, k)).collect();
    // Three formats side by side: a per-model folder of .npy, .safetensors and .pt.
    for m in ["a", "b", "c"] {
        std::fs::create_dir_all(dir.path().join(m)).unwrap();
    }
    write_npy(dir.path().join("a/train.npy"), rows, wa, &a).unwrap();
    let h = format!(
        r#"{{"__metadata__":{{"x":"y"}},"embedding":{{"dtype":"F32","shape":[{rows},{wb}],"data_offsets":[0,{}]}}}}"#,
        4 * rows * wb
    );
    write(
        &dir.path().join("b"),
        "train.safetensors",
        &safetensors_with_header(&h, &f32_bytes(&b)),
    );
    // c stored transposed (column-major) in its torch file.
    let mut ct = vec![0f32; rows * wc];
    for r in 0..rows {
        for j in 0..wc {
            ct[j * rows + r] = c[r * wc + j];
        }
    }
    let pkl = pickle(&[T {
        name: "e",
        storage: "Float",
        key: "0",
        numel: (rows * wc) as u64,
        offset: 0,
        size: vec![rows as u64, wc as u64],
        stride: vec![1, rows as u64],
    }]);
    write(
        &dir.path().join("c"),
        "train.pt",
        &zip(&[
            ("archive/data.pkl", &pkl),
            ("archive/data/0", &f32_bytes(&ct)),
        ]),
    );
    let mut direct =
        Moments::new(vec!["a".into(), "b".into(), "c".into()], vec![wa, wb, wc]).unwrap();
    direct.update(&[&a, &b, &c]).unwrap();
    let files = open_split(dir.path(), "train", &ReadOptions::default()).unwrap();
    assert_eq!(files.dtypes(), ["f32", "f32", "f32"]);
    let whole = read_split(dir.path(), "train", &ReadOptions::default()).unwrap();
    let cd = direct.covariance().unwrap();
    for m in [
        files.to_moments_chunked(1).unwrap(),
        files.to_moments_chunked(7).unwrap(),
        files.to_moments().unwrap(),
        whole.to_moments().unwrap(),
    ] {
        assert_eq!(m.n(), rows as u64);
        let cm = m.covariance().unwrap();
        for i in 0..cd.nrows() {
            for j in 0..cd.ncols() {
                assert!((cm[(i, j)] - cd[(i, j)]).abs() < 1e-12, "cov ({i}, {j})");
            }
        }
        for (x, y) in m.mean().unwrap().iter().zip(direct.mean().unwrap()) {
            assert!((x - y).abs() < 1e-12);
        }
    }
    // The torch writer here agrees with the whole-file torch reader.
    let p = write(
        dir.path(),
        "two.pt",
        &torch_f32(&[
            ("x", 2, 2, vec![1.0, 2.0, 3.0, 4.0]),
            ("y", 1, 3, vec![5.0, 6.0, 7.0]),
        ]),
    );
    let t = read_torch(&p, None).unwrap();
    assert_eq!(t.len(), 2);
    assert_eq!((t[1].1.rows, t[1].1.cols), (1, 3));
    // Both splits through read_train_test, streamed.
    for m in ["a", "b", "c"] {
        for ext in ["npy", "safetensors", "pt"] {
            let from = dir.path().join(m).join(format!("train.{ext}"));
            if from.exists() {
                std::fs::copy(&from, dir.path().join(m).join(format!("test.{ext}"))).unwrap();
            }
        }
    }
    let tt = read_train_test(dir.path(), &ReadOptions::default()).unwrap();
    assert_eq!((tt.train.n(), tt.test.n()), (rows as u64, rows as u64));
}
