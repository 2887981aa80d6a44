//! Streaming moments: exactness against a two-pass f64 reference, every update path, merging
//! shards, save/load, and the typed errors.

mod mathutil;

use candle_core::{Device, Tensor};
use lmd::moments::Moments;
use lmd::synthetic::PlantedSpec;
use lmd::LmdError;
use mathutil::*;

fn spec() -> PlantedSpec {
    PlantedSpec {
        models: 3,
        dim: 8,
        latent: 6,
        offset: 1000.0, // large common offset: the shift must prevent cancellation
        ..PlantedSpec::default()
    }
}

fn max_abs_diff(a: &faer::Mat<f64>, b: &nalgebra::DMatrix<f64>) -> f64 {
    let mut m: f64 = 0.0;
    for r in 0..a.nrows() {
        for c in 0..a.ncols() {
            m = m.max((a[(r, c)] - b[(r, c)]).abs());
        }
    }
    m
}

#[test]
fn covariance_matches_two_pass_reference_despite_large_offset() {
    let data = planted(spec(), 5000, 10, 1);
    let p = &data.planted;
    let m = moments_of(&p.names(), &p.widths(), &data.train, 700);
    let x = to_na(&data.train, m.dim());
    let reference = cov_na(&x);
    let cov = m.covariance().unwrap();
    // Entries are O(1) while the rows are O(1000): without the shift the error would be ~1e-7.
    assert!(
        max_abs_diff(&cov, &reference) < 1e-11,
        "{}",
        max_abs_diff(&cov, &reference)
    );
    let mean = m.mean().unwrap();
    let ref_mean = x.row_mean();
    for (a, b) in mean.iter().zip(ref_mean.iter()) {
        assert!((a - b).abs() < 1e-9);
    }
    assert_eq!(m.n(), 5000);
    assert_eq!(m.dim(), 24);
}

#[test]
fn block_stacked_and_tensor_updates_agree() {
    let data = planted(spec(), 1200, 10, 2);
    let p = &data.planted;
    let (names, widths) = (p.names(), p.widths());
    let d = 24;
    let stacked = moments_of(&names, &widths, &data.train, 500);

    let mut blocks = Moments::new(names.clone(), widths.clone()).unwrap();
    for chunk in data.train.chunks(300 * d) {
        let n = chunk.len() / d;
        let per_model: Vec<Vec<f32>> = (0..3)
            .map(|i| {
                (0..n)
                    .flat_map(|r| chunk[r * d + 8 * i..r * d + 8 * (i + 1)].to_vec())
                    .collect()
            })
            .collect();
        let refs: Vec<&[f32]> = per_model.iter().map(Vec::as_slice).collect();
        blocks.update(&refs).unwrap();
    }

    let mut tensor = Moments::new(names, widths).unwrap();
    for chunk in data.train.chunks(400 * d) {
        let t = Tensor::from_slice(chunk, (chunk.len() / d, d), &Device::Cpu).unwrap();
        tensor.update_tensor(&t).unwrap();
    }

    let c0 = stacked.covariance().unwrap();
    for other in [&blocks, &tensor] {
        assert_eq!(other.n(), stacked.n());
        let c = other.covariance().unwrap();
        for r in 0..d {
            for col in 0..d {
                assert!((c[(r, col)] - c0[(r, col)]).abs() < 1e-10);
            }
        }
    }
}

#[test]
fn merged_shards_equal_one_pass() {
    let data = planted(spec(), 3000, 10, 3);
    let p = &data.planted;
    let (names, widths) = (p.names(), p.widths());
    let d = 24;
    let one = moments_of(&names, &widths, &data.train, 3000);
    // Three shards with different shifts (each shard's first batch differs).
    let mut merged = Moments::new(names.clone(), widths.clone()).unwrap();
    for (k, shard) in data.train.chunks(1000 * d).enumerate() {
        let mut s = moments_of(&names, &widths, shard, 100 + 50 * k);
        if k == 1 {
            // Merging into an empty accumulator and merging an empty one are both no-ops.
            s.merge(&Moments::new(names.clone(), widths.clone()).unwrap())
                .unwrap();
        }
        merged.merge(&s).unwrap();
    }
    assert_eq!(merged.n(), one.n());
    let (a, b) = (merged.covariance().unwrap(), one.covariance().unwrap());
    for r in 0..d {
        for c in 0..d {
            assert!((a[(r, c)] - b[(r, c)]).abs() < 1e-10);
        }
    }
    for (x, y) in merged.mean().unwrap().iter().zip(&one.mean().unwrap()) {
        assert!((x - y).abs() < 1e-10);
    }
}

#[test]
fn save_load_round_trip_is_exact() {
    let data = planted(spec(), 800, 10, 4);
    let p = &data.planted;
    let m = moments_of(&p.names(), &p.widths(), &data.train, 300);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("train.safetensors");
    m.save(&path).unwrap();
    let back = Moments::load(&path).unwrap();
    assert_eq!(back.names(), m.names());
    assert_eq!(back.widths(), m.widths());
    assert_eq!(back.n(), m.n());
    assert_eq!(back.shift(), m.shift());
    assert_eq!(back.mean().unwrap(), m.mean().unwrap());
    let (a, b) = (back.covariance().unwrap(), m.covariance().unwrap());
    assert_eq!(a, b);

    // A truncated file is a typed error, not a panic.
    let bytes = std::fs::read(&path).unwrap();
    let bad = dir.path().join("bad.safetensors");
    std::fs::write(&bad, &bytes[..bytes.len() / 2]).unwrap();
    assert!(matches!(
        Moments::load(&bad),
        Err(LmdError::Malformed { .. })
    ));
    assert!(matches!(
        Moments::load(dir.path().join("missing")),
        Err(LmdError::Io { .. })
    ));
    // Metadata that `save` never writes: samples without their shift, sums of no samples.
    let n = m.n();
    for (from, to, want) in [
        (
            r#"has_shift\":true"#.to_string(),
            r#"has_shift\":false"#.to_string(),
            "no shift",
        ),
        (
            format!(r#"\"n\":{n},"#),
            r#"\"n\":0,"#.to_string(),
            "0 samples",
        ),
    ] {
        let edited = dir.path().join("edited.safetensors");
        std::fs::write(&edited, with_header_edit(&bytes, &from, &to)).unwrap();
        match Moments::load(&edited) {
            Err(LmdError::Malformed { reason, .. }) => assert!(reason.contains(want), "{reason}"),
            other => panic!("{from} -> {to}: {other:?}"),
        }
    }
}

/// A safetensors file with `from` replaced by `to` in its JSON header (length prefix rewritten;
/// the tensors' offsets are relative to the header's end and stay valid).
fn with_header_edit(bytes: &[u8], from: &str, to: &str) -> Vec<u8> {
    let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = std::str::from_utf8(&bytes[8..8 + len]).unwrap();
    assert!(header.contains(from), "{from} not in {header}");
    let header = header.replacen(from, to, 1);
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&bytes[8 + len..]);
    out
}

#[test]
fn bad_inputs_are_typed_errors() {
    let names = vec!["a".to_string(), "b".to_string()];
    assert!(matches!(
        Moments::new(names.clone(), vec![2]),
        Err(LmdError::InvalidArgument(_))
    ));
    assert!(Moments::new(vec!["a".into(), "a".into()], vec![1, 1]).is_err());
    let mut m = Moments::new(names.clone(), vec![2, 3]).unwrap();
    // Stacked rows must be a multiple of D = 5.
    assert!(matches!(
        m.update_stacked(&[0.0; 7]),
        Err(LmdError::WidthMismatch { .. })
    ));
    // Blocks: wrong count, then wrong width.
    assert!(matches!(
        m.update(&[&[0.0; 2]]),
        Err(LmdError::WidthMismatch { .. })
    ));
    assert!(matches!(
        m.update(&[&[0.0; 2], &[0.0; 4]]),
        Err(LmdError::WidthMismatch { .. })
    ));
    // Different row counts per model.
    assert!(m.update(&[&[0.0; 4], &[0.0; 3]]).is_err());
    // Non-finite input names the model, the row and the column.
    let mut rows = vec![1.0f32; 15];
    rows[5 + 4] = f32::NAN; // row 1, model b, column 2
    match m.update_stacked(&rows) {
        Err(LmdError::NonFinite {
            model, row, col, ..
        }) => assert_eq!((model.as_str(), row, col), ("b", 1, 2)),
        other => panic!("expected NonFinite, got {other:?}"),
    }
    // The tensor path finds it from the Gram's diagonal and names it the same way, for NaN
    // and for an infinity (whose square is no NaN), in the first batch (no shift yet).
    for bad in [f32::NAN, f32::NEG_INFINITY] {
        rows[5 + 4] = bad;
        let t = Tensor::from_slice(&rows, (3, 5), &Device::Cpu).unwrap();
        match m.update_tensor(&t) {
            Err(LmdError::NonFinite {
                model, row, col, ..
            }) => assert_eq!((model.as_str(), row, col), ("b", 1, 2)),
            other => panic!("expected NonFinite for {bad}, got {other:?}"),
        }
    }
    let mut blk = vec![0.5f32; 6];
    blk[3] = f32::INFINITY;
    assert!(matches!(
        m.update(&[&[0.0; 4], &blk]),
        Err(LmdError::NonFinite { row: 1, col: 0, .. })
    ));
    // Nothing was accumulated by the failed updates.
    assert_eq!(m.n(), 0);
    // Nor was the shift taken from a refused batch: a good batch now gives what it gives alone.
    let good: Vec<f32> = (0..15).map(|i| (i as f32 * 0.7).sin()).collect();
    let t = Tensor::from_slice(&good, (3, 5), &Device::Cpu).unwrap();
    let mut fresh = Moments::new(names.clone(), vec![2, 3]).unwrap();
    fresh.update_tensor(&t).unwrap();
    let mut after = m.clone();
    after.update_tensor(&t).unwrap();
    assert_eq!(after.covariance().unwrap(), fresh.covariance().unwrap());
    assert!(matches!(
        m.covariance(),
        Err(LmdError::TooFewSamples { .. })
    ));
    assert!(matches!(
        m.index_of("zzz"),
        Err(LmdError::UnknownModel { .. })
    ));
    // Merging different models is refused.
    let other = Moments::new(vec!["a".into(), "c".into()], vec![2, 3]).unwrap();
    assert!(m.merge(&other).is_err());
}

#[test]
fn f32_products_stay_within_their_stated_bound_of_the_f64_path() {
    use lmd::moments::{f32_product_bound, Accumulation, F32_PRODUCT_ROWS};
    use rand::{Rng, SeedableRng};
    let (n, widths) = (5000usize, vec![16usize, 32]);
    let d: usize = widths.iter().sum();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(26);
    // A large common offset, scales from 1e-3 to 10, and a shared factor (correlated columns).
    let scale: Vec<f64> = (0..d)
        .map(|j| 10f64.powf(-3.0 + 4.0 * j as f64 / d as f64))
        .collect();
    let mut rows = Vec::with_capacity(n * d);
    for _ in 0..n {
        let f: f64 = rng.random::<f64>() - 0.5;
        for s in &scale {
            rows.push(100.0 + s * (f + 0.3 * (rng.random::<f64>() - 0.5)));
        }
    }
    let names = vec!["a".to_string(), "b".to_string()];
    let mut exact = Moments::new(names.clone(), widths.clone()).unwrap();
    let mut mixed = Moments::new(names, widths).unwrap();
    mixed.set_accumulation(Accumulation::F32Products);
    // One call of n > F32_PRODUCT_ROWS rows: the products are cut into parts of at most that.
    exact
        .update_stacked_f64_in_place(&mut rows.clone())
        .unwrap();
    mixed
        .update_stacked_f64_in_place(&mut rows.clone())
        .unwrap();
    assert_eq!(exact.shift(), mixed.shift());
    let c = exact.shift();
    let (ce, cm) = (exact.covariance().unwrap(), mixed.covariance().unwrap());
    let bound = f32_product_bound(F32_PRODUCT_ROWS);
    assert!(bound < 6.2e-5 && bound > 6.0e-5, "{bound}");
    let mut worst: f64 = 0.0;
    let mut any_diff = false;
    for i in 0..d {
        for j in 0..=i {
            let s: f64 = (0..n)
                .map(|r| ((rows[r * d + i] - c[i]) * (rows[r * d + j] - c[j])).abs())
                .sum::<f64>()
                / n as f64;
            let diff = (ce[(i, j)] - cm[(i, j)]).abs();
            // The f64 path's own rounding (n · 2⁻⁵³ relative) beside the f32 bound.
            let allowed = bound * s + 1e-12 * s;
            assert!(diff <= allowed, "({i}, {j}): {diff} > {allowed}");
            worst = worst.max(diff / (bound * s));
            any_diff |= diff > 0.0;
        }
    }
    assert!(any_diff, "the f32 products were not used");
    println!("largest error / bound: {worst:.3e}");
}
