//! `lmd::external`: every layout and format read back exactly, moments equal to a direct
//! accumulation, the analysis runs on what was read, and every input error is typed.
//!
//! safetensors and `.npy` fixtures are written here; the `torch.save` and numpy-written fixtures
//! under `tests/fixtures/external` come from `scripts/lmd_external_fixtures.py` (values
//! 100·model + 10·row + col, so they are checked in closed form).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use lmd::analysis::analyze;
use lmd::external::{
    read_npy, read_safetensors_all, read_split, read_torch, read_train_test, write_npy,
    ExternalError, Layout, Matrix, ReadOptions, TrainTest, Values,
};
use lmd::fit::Ridge;
use lmd::moments::Moments;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/external")
}

/// The closed-form fixture block: 100·model + 10·row + col.
fn block(model: usize, rows: usize, cols: usize) -> Vec<f64> {
    (0..rows * cols)
        .map(|k| (100 * model + 10 * (k / cols) + k % cols) as f64)
        .collect()
}

fn as_f64(m: &Matrix) -> Vec<f64> {
    match &m.values {
        Values::F32(v) => v.iter().map(|&x| x as f64).collect(),
        Values::F64(v) => v.clone(),
    }
}

/// Correlated random rows of three models (widths 3, 4, 2), f32.
fn random_models(rows: usize, seed: u64) -> Vec<(String, usize, Vec<f32>)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let latent: Vec<f32> = (0..rows * 2).map(|_| rng.random::<f32>() - 0.5).collect();
    [("a", 3), ("b", 4), ("c", 2)]
        .into_iter()
        .enumerate()
        .map(|(m, (name, w))| {
            let data = (0..rows * w)
                .map(|k| {
                    let (r, c) = (k / w, k % w);
                    latent[2 * r + c % 2] * (1.0 + m as f32 + c as f32)
                        + 0.3 * (rng.random::<f32>() - 0.5)
                        + 5.0
                })
                .collect();
            (name.to_string(), w, data)
        })
        .collect()
}

fn direct_moments(models: &[(String, usize, Vec<f32>)]) -> Moments {
    let mut m = Moments::new(
        models.iter().map(|(n, _, _)| n.clone()).collect(),
        models.iter().map(|(_, w, _)| *w).collect(),
    )
    .unwrap();
    let blocks: Vec<&[f32]> = models.iter().map(|(_, _, d)| d.as_slice()).collect();
    m.update(&blocks).unwrap();
    m
}

fn assert_same_moments(a: &Moments, b: &Moments, tol: f64) {
    assert_eq!(a.names(), b.names());
    assert_eq!(a.widths(), b.widths());
    assert_eq!(a.n(), b.n());
    let (ca, cb) = (a.covariance().unwrap(), b.covariance().unwrap());
    for r in 0..a.dim() {
        for c in 0..a.dim() {
            assert!((ca[(r, c)] - cb[(r, c)]).abs() <= tol, "cov ({r}, {c})");
        }
    }
    for (x, y) in a.mean().unwrap().iter().zip(&b.mean().unwrap()) {
        assert!((x - y).abs() <= tol);
    }
}

fn save_safetensors(path: &Path, tensors: &[(&str, Tensor)]) {
    let map: HashMap<String, Tensor> = tensors
        .iter()
        .map(|(n, t)| (n.to_string(), t.clone()))
        .collect();
    candle_core::safetensors::save(&map, path).unwrap();
}

fn f32_tensor(rows: usize, cols: usize, data: &[f32]) -> Tensor {
    Tensor::from_slice(data, (rows, cols), &Device::Cpu).unwrap()
}

#[test]
fn per_model_npy_folder_gives_the_direct_moments() {
    let dir = tempfile::tempdir().unwrap();
    for (split, rows, seed) in [("train", 60, 1), ("test", 25, 2)] {
        for (name, w, data) in random_models(rows, seed) {
            std::fs::create_dir_all(dir.path().join(&name)).unwrap();
            write_npy(
                dir.path().join(&name).join(format!("{split}.npy")),
                rows,
                w,
                &data,
            )
            .unwrap();
        }
    }
    let s = read_split(dir.path(), "train", &ReadOptions::default()).unwrap();
    assert_eq!(s.layout, Layout::PerModel(dir.path().to_path_buf()));
    assert_eq!(s.names(), ["a", "b", "c"]);
    assert_eq!(s.widths(), [3, 4, 2]);
    assert_eq!(s.rows(), 60);
    let TrainTest { train, test, .. } =
        read_train_test(dir.path(), &ReadOptions::default()).unwrap();
    // f32 inputs go through Moments::update: bit-identical to feeding the blocks directly.
    assert_same_moments(&train, &direct_moments(&random_models(60, 1)), 0.0);
    assert_same_moments(&test, &direct_moments(&random_models(25, 2)), 0.0);
    // The analysis and the reports run on what was read.
    let a = analyze(&train, &test, Ridge::REFERENCE).unwrap();
    assert!(a.group.rho().is_finite());
    let out = tempfile::tempdir().unwrap();
    let files = lmd::tables::write_analysis(out.path(), &a).unwrap();
    assert!(!files.is_empty());
}

#[test]
fn models_option_selects_and_orders() {
    let dir = tempfile::tempdir().unwrap();
    for (name, w, data) in random_models(10, 3) {
        std::fs::create_dir_all(dir.path().join(&name)).unwrap();
        write_npy(dir.path().join(&name).join("train.npy"), 10, w, &data).unwrap();
    }
    // A folder that is not a model is ignored when the models are named.
    std::fs::create_dir_all(dir.path().join("reports")).unwrap();
    let opts = ReadOptions {
        models: Some(vec!["c".into(), "a".into()]),
        ..Default::default()
    };
    let s = read_split(dir.path(), "train", &opts).unwrap();
    assert_eq!(s.names(), ["c", "a"]);
    assert_eq!(s.widths(), [2, 3]);
}

#[test]
fn npy_written_here_and_by_numpy_read_back_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<f32> = (0..12).map(|k| k as f32 * 0.25 - 1.0).collect();
    let p = dir.path().join("x.npy");
    write_npy(&p, 3, 4, &data).unwrap();
    let m = read_npy(&p).unwrap();
    assert_eq!((m.rows, m.cols, m.dtype.as_str()), (3, 4, "f32"));
    assert_eq!(m.values, Values::F32(data));
    // numpy.save output, f32 and f64.
    let f32m = read_npy(fixtures().join("numpy_f32.npy")).unwrap();
    assert_eq!((f32m.rows, f32m.cols, f32m.dtype.as_str()), (3, 4, "f32"));
    assert_eq!(as_f64(&f32m), block(6, 3, 4));
    let f64m = read_npy(fixtures().join("numpy_f64.npy")).unwrap();
    assert_eq!((f64m.rows, f64m.cols, f64m.dtype.as_str()), (2, 3, "f64"));
    assert_eq!(f64m.values, Values::F64(block(7, 2, 3)));
}

#[test]
fn safetensors_per_split_and_per_model_all_dtypes() {
    let dir = tempfile::tempdir().unwrap();
    let models = random_models(40, 4);
    let dtypes = [DType::F32, DType::F16, DType::BF16];
    let tensors: Vec<(&str, Tensor)> = models
        .iter()
        .zip(dtypes)
        .map(|((n, w, d), dt)| (n.as_str(), f32_tensor(40, *w, d).to_dtype(dt).unwrap()))
        .collect();
    save_safetensors(&dir.path().join("train.safetensors"), &tensors);
    let s = read_split(dir.path(), "train", &ReadOptions::default()).unwrap();
    assert_eq!(
        s.layout,
        Layout::SplitFile(dir.path().join("train.safetensors"))
    );
    assert_eq!(s.names(), ["a", "b", "c"]);
    let dts: Vec<&str> = s.models.iter().map(|m| m.matrix.dtype.as_str()).collect();
    assert_eq!(dts, ["f32", "f16", "bf16"]);
    for (m, (_, t)) in s.models.iter().zip(&tensors) {
        let want: Vec<f64> = t
            .to_dtype(DType::F64)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert_eq!(as_f64(&m.matrix), want, "{}", m.name);
    }

    // Per-model files; one holds two tensors and the `embedding` one is taken.
    let dir = tempfile::tempdir().unwrap();
    for (name, w, d) in &models {
        std::fs::create_dir_all(dir.path().join(name)).unwrap();
        let t = f32_tensor(40, *w, d);
        let mut list = vec![("embedding", t.clone())];
        if name == "b" {
            list.push((
                "mask",
                Tensor::ones((40, 1), DType::F32, &Device::Cpu).unwrap(),
            ));
        }
        save_safetensors(&dir.path().join(name).join("train.safetensors"), &list);
    }
    let s = read_split(dir.path(), "train", &ReadOptions::default()).unwrap();
    let m = s.to_moments().unwrap();
    assert_same_moments(&m, &direct_moments(&models), 0.0);
    // A name that is not there.
    let opts = ReadOptions {
        tensor: Some("pooled".into()),
        ..Default::default()
    };
    match read_split(dir.path(), "train", &opts) {
        Err(ExternalError::MissingTensor { name, found, .. }) => {
            assert_eq!(name, "pooled");
            assert_eq!(found, ["embedding"]);
        }
        other => panic!("expected MissingTensor, got {other:?}"),
    }
}

#[test]
fn f64_inputs_stay_f64_in_the_moments() {
    let dir = tempfile::tempdir().unwrap();
    let models = random_models(50, 5);
    // Values with more than f32 precision around a large offset.
    let f64_data: Vec<(String, usize, Vec<f64>)> = models
        .iter()
        .map(|(n, w, d)| {
            let v = d
                .iter()
                .enumerate()
                .map(|(k, &x)| 1e4 + x as f64 + 1e-9 * k as f64)
                .collect();
            (n.clone(), *w, v)
        })
        .collect();
    let tensors: Vec<(&str, Tensor)> = f64_data
        .iter()
        .map(|(n, w, d)| {
            (
                n.as_str(),
                Tensor::from_slice(d, (50, *w), &Device::Cpu).unwrap(),
            )
        })
        .collect();
    save_safetensors(&dir.path().join("train.safetensors"), &tensors);
    let m = read_split(dir.path(), "train", &ReadOptions::default())
        .unwrap()
        .to_moments()
        .unwrap();
    // Two-pass f64 reference covariance.
    let (d, n) = (9usize, 50usize);
    let rows: Vec<Vec<f64>> = (0..n)
        .map(|r| {
            f64_data
                .iter()
                .flat_map(|(_, w, v)| v[r * w..(r + 1) * w].to_vec())
                .collect()
        })
        .collect();
    let mean: Vec<f64> = (0..d)
        .map(|c| rows.iter().map(|r| r[c]).sum::<f64>() / n as f64)
        .collect();
    let cov = m.covariance().unwrap();
    for a in 0..d {
        for b in 0..d {
            let want = rows
                .iter()
                .map(|r| (r[a] - mean[a]) * (r[b] - mean[b]))
                .sum::<f64>()
                / n as f64;
            assert!((cov[(a, b)] - want).abs() < 1e-9, "({a}, {b})");
        }
    }
    for (x, y) in m.mean().unwrap().iter().zip(&mean) {
        assert!((x - y).abs() < 1e-9);
    }
}

#[test]
fn torch_save_per_split_nested_and_transposed() {
    let check = |dir: &Path, layout: &dyn Fn(&str) -> Layout| {
        for (split, rows) in [("train", 5), ("test", 4)] {
            let s = read_split(dir, split, &ReadOptions::default()).unwrap();
            assert_eq!(s.layout, layout(split));
            assert_eq!(s.names(), ["alpha", "beta", "gamma"]);
            assert_eq!(s.widths(), [3, 2, 4]);
            let dts: Vec<&str> = s.models.iter().map(|m| m.matrix.dtype.as_str()).collect();
            assert_eq!(dts, ["f32", "f64", "bf16"]);
            for (i, m) in s.models.iter().enumerate() {
                let mut want = block(i + 1, rows, m.matrix.cols);
                if m.matrix.dtype == "bf16" {
                    // 8 significant bits: 301 is stored as 300.
                    want = Tensor::from_vec(want, rows * m.matrix.cols, &Device::Cpu)
                        .and_then(|t| t.to_dtype(DType::BF16))
                        .and_then(|t| t.to_dtype(DType::F64))
                        .and_then(|t| t.to_vec1())
                        .unwrap();
                }
                assert_eq!(as_f64(&m.matrix), want);
            }
        }
        let TrainTest { train, test, .. } = read_train_test(dir, &ReadOptions::default()).unwrap();
        assert_eq!((train.n(), test.n()), (5, 4));
    };
    let per_split = fixtures().join("per_split");
    check(&per_split, &|s| {
        Layout::SplitFile(per_split.join(format!("{s}.pt")))
    });
    let nested = fixtures().join("nested");
    check(&nested, &|_| Layout::Nested(nested.join("embeddings.pt")));
    // The reference's own code saves a collections.defaultdict: read the same way.
    let dd = fixtures().join("defaultdict");
    check(&dd, &|_| Layout::Nested(dd.join("embeddings.pt")));
    // A Fortran-contiguous (transposed) f16 tensor comes back in row-major order.
    let t = read_torch(fixtures().join("transposed_f16.pt"), None).unwrap();
    assert_eq!(t.len(), 1);
    let m = &t[0].1;
    assert_eq!((m.rows, m.cols, m.dtype.as_str()), (5, 3, "f16"));
    let b = block(4, 3, 5);
    let want: Vec<f64> = (0..15).map(|k| b[(k % 3) * 5 + k / 3]).collect();
    assert_eq!(as_f64(m), want);
}

#[test]
fn missing_file_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    for (name, w, data) in random_models(10, 6) {
        std::fs::create_dir_all(dir.path().join(&name)).unwrap();
        write_npy(dir.path().join(&name).join("train.npy"), 10, w, &data).unwrap();
    }
    match read_train_test(dir.path(), &ReadOptions::default()) {
        Err(e @ ExternalError::MissingFile { .. }) => {
            let ExternalError::MissingFile { path } = &e else {
                unreachable!()
            };
            assert_eq!(path, &dir.path().join("a").join("test"));
            assert!(e.to_string().contains("test.{safetensors,npy,pt}"), "{e}");
        }
        other => panic!("expected MissingFile, got {other:?}"),
    }
    // A missing .npy read directly is an I/O error naming the file.
    match read_npy(dir.path().join("nope.npy")) {
        Err(ExternalError::Io { path, .. }) => assert!(path.ends_with("nope.npy")),
        other => panic!("expected Io, got {other:?}"),
    }
    // A split key that the reference's file does not hold.
    match read_split(
        fixtures().join("nested"),
        "validation",
        &ReadOptions::default(),
    ) {
        Err(ExternalError::MissingTensor { name, .. }) => assert_eq!(name, "validation"),
        other => panic!("expected MissingTensor, got {other:?}"),
    }
    // A model asked for that the per-split file does not hold.
    let opts = ReadOptions {
        models: Some(vec!["alpha".into(), "delta".into()]),
        ..Default::default()
    };
    match read_split(fixtures().join("per_split"), "train", &opts) {
        Err(ExternalError::MissingTensor { name, .. }) => assert_eq!(name, "delta"),
        other => panic!("expected MissingTensor, got {other:?}"),
    }
}

#[test]
fn rows_that_differ_between_models_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let a: Vec<f32> = (0..30).map(|k| k as f32).collect();
    save_safetensors(
        &dir.path().join("train.safetensors"),
        &[("a", f32_tensor(10, 3, &a)), ("b", f32_tensor(15, 2, &a))],
    );
    match read_split(dir.path(), "train", &ReadOptions::default()) {
        Err(ExternalError::RowMismatch {
            split,
            model,
            rows,
            first_model,
            first_rows,
        }) => {
            assert_eq!((split.as_str(), model.as_str(), rows), ("train", "b", 15));
            assert_eq!((first_model.as_str(), first_rows), ("a", 10));
        }
        other => panic!("expected RowMismatch, got {other:?}"),
    }
}

#[test]
fn tensors_that_are_not_2d_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("cube.safetensors");
    save_safetensors(
        &p,
        &[(
            "x",
            Tensor::zeros((2, 2, 2), DType::F32, &Device::Cpu).unwrap(),
        )],
    );
    match read_safetensors_all(&p) {
        Err(ExternalError::NotTwoD { name, shape, .. }) => {
            assert_eq!((name.as_str(), shape), ("x", vec![2, 2, 2]))
        }
        other => panic!("expected NotTwoD, got {other:?}"),
    }
    match read_torch(fixtures().join("three_d.pt"), None) {
        Err(ExternalError::NotTwoD { shape, .. }) => assert_eq!(shape, [2, 2, 2]),
        other => panic!("expected NotTwoD, got {other:?}"),
    }
    // A 1-D .npy (numpy header written by hand).
    let mut header = "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }".to_string();
    while !(10 + header.len() + 1).is_multiple_of(64) {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(&[0u8; 16]);
    let p = dir.path().join("vec.npy");
    std::fs::write(&p, bytes).unwrap();
    match read_npy(&p) {
        Err(ExternalError::NotTwoD { shape, .. }) => assert_eq!(shape, [4]),
        other => panic!("expected NotTwoD, got {other:?}"),
    }
    // An empty tensor.
    let p = dir.path().join("empty.safetensors");
    save_safetensors(
        &p,
        &[(
            "x",
            Tensor::zeros((0, 3), DType::F32, &Device::Cpu).unwrap(),
        )],
    );
    assert!(matches!(
        read_safetensors_all(&p),
        Err(ExternalError::EmptyTensor { .. })
    ));
}

#[test]
fn nan_and_inf_are_refused_with_their_position() {
    let dir = tempfile::tempdir().unwrap();
    let mut data: Vec<f32> = (0..12).map(|k| k as f32).collect();
    data[7] = f32::INFINITY;
    let p = dir.path().join("inf.npy");
    write_npy(&p, 4, 3, &data).unwrap();
    match read_npy(&p) {
        Err(ExternalError::NonFinite {
            row, col, value, ..
        }) => {
            assert_eq!((row, col), (2, 1));
            assert!(value.is_infinite());
        }
        other => panic!("expected NonFinite, got {other:?}"),
    }
    data[7] = 0.0;
    data[10] = f32::NAN;
    let p = dir.path().join("nan.safetensors");
    save_safetensors(&p, &[("m", f32_tensor(4, 3, &data))]);
    match read_safetensors_all(&p) {
        Err(ExternalError::NonFinite { name, row, col, .. }) => {
            assert_eq!((name.as_str(), row, col), ("m", 3, 1))
        }
        other => panic!("expected NonFinite, got {other:?}"),
    }
    match read_torch(fixtures().join("nan.pt"), None) {
        Err(ExternalError::NonFinite {
            name,
            row,
            col,
            value,
            ..
        }) => {
            assert_eq!((name.as_str(), row, col), ("x", 2, 1));
            assert!(value.is_nan());
        }
        other => panic!("expected NonFinite, got {other:?}"),
    }
}

#[test]
fn unsupported_dtypes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("ints.safetensors");
    save_safetensors(
        &p,
        &[(
            "i",
            Tensor::zeros((2, 3), DType::U32, &Device::Cpu).unwrap(),
        )],
    );
    match read_safetensors_all(&p) {
        Err(ExternalError::UnsupportedDtype { name, dtype, .. }) => {
            assert_eq!((name.as_str(), dtype.as_str()), ("i", "U32"))
        }
        other => panic!("expected UnsupportedDtype, got {other:?}"),
    }
    match read_torch(fixtures().join("int64.pt"), None) {
        Err(ExternalError::UnsupportedDtype { name, .. }) => assert_eq!(name, "ints"),
        other => panic!("expected UnsupportedDtype, got {other:?}"),
    }
    for (file, dtype) in [("numpy_int32.npy", "<i4"), ("numpy_big_endian.npy", ">f4")] {
        match read_npy(fixtures().join(file)) {
            Err(ExternalError::UnsupportedDtype { dtype: d, .. }) => assert_eq!(d, dtype),
            other => panic!("{file}: expected UnsupportedDtype, got {other:?}"),
        }
    }
    // Fortran order is refused (not silently transposed).
    match read_npy(fixtures().join("numpy_fortran.npy")) {
        Err(ExternalError::Malformed { reason, .. }) => assert!(reason.contains("Fortran")),
        other => panic!("expected Malformed, got {other:?}"),
    }
}

#[test]
fn empty_folder_and_other_malformed_inputs() {
    let dir = tempfile::tempdir().unwrap();
    match read_split(dir.path(), "train", &ReadOptions::default()) {
        Err(ExternalError::EmptyFolder { path, split }) => {
            assert_eq!((path.as_path(), split.as_str()), (dir.path(), "train"))
        }
        other => panic!("expected EmptyFolder, got {other:?}"),
    }
    // A folder that does not exist.
    assert!(matches!(
        read_split(dir.path().join("absent"), "train", &ReadOptions::default()),
        Err(ExternalError::Io { .. })
    ));
    // Truncated data and a file that is not .npy.
    let p = dir.path().join("t.npy");
    write_npy(&p, 3, 3, &[1.0; 9]).unwrap();
    let bytes = std::fs::read(&p).unwrap();
    std::fs::write(&p, &bytes[..bytes.len() - 4]).unwrap();
    assert!(matches!(read_npy(&p), Err(ExternalError::Malformed { .. })));
    std::fs::write(&p, b"not numpy at all").unwrap();
    assert!(matches!(read_npy(&p), Err(ExternalError::Malformed { .. })));
    // Not a zip: a .pt that torch did not write.
    let p = dir.path().join("train.pt");
    std::fs::write(&p, b"garbage").unwrap();
    assert!(matches!(
        read_split(dir.path(), "train", &ReadOptions::default()),
        Err(ExternalError::Malformed { .. })
    ));
}

#[test]
fn splits_with_different_models_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let a: Vec<f32> = (0..30).map(|k| (k * k % 7) as f32).collect();
    save_safetensors(
        &dir.path().join("train.safetensors"),
        &[("a", f32_tensor(10, 3, &a)), ("b", f32_tensor(10, 3, &a))],
    );
    save_safetensors(
        &dir.path().join("test.safetensors"),
        &[("a", f32_tensor(10, 3, &a)), ("b", f32_tensor(15, 2, &a))],
    );
    // (test's b has 15 × 2 = 30 values as well: the width differs)
    match read_train_test(dir.path(), &ReadOptions::default()) {
        Err(ExternalError::RowMismatch { .. }) => {}
        other => panic!("expected RowMismatch, got {other:?}"),
    }
    save_safetensors(
        &dir.path().join("test.safetensors"),
        &[("a", f32_tensor(15, 2, &a)), ("b", f32_tensor(15, 2, &a))],
    );
    assert!(matches!(
        read_train_test(dir.path(), &ReadOptions::default()),
        Err(ExternalError::SplitMismatch(_))
    ));
}
