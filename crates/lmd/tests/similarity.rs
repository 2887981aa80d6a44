//! The similarity measures: against an independent NumPy computation (committed fixtures of
//! `scripts/similarity_fixtures.py`), streamed = in memory, merged shards = one pass, known
//! answers, debiased CKA's smaller bias, and bad input naming the measure.

use std::path::Path;

use lmd::moments::Moments;
use lmd::similarity::{
    deranged_rows, mutual_knn, similarity, streamed_measure, KnnSample, Measure, MeasureResult,
    SimilarityParams,
};
use lmd::LmdError;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;

/// The five measures that read the test moments only.
const TEST_ONLY: [Measure; 5] = [
    Measure::LinearCka,
    Measure::DebiasedCka,
    Measure::MeanCca,
    Measure::Svcca,
    Measure::Procrustes,
];

struct Fixture {
    widths: Vec<usize>,
    n: usize,
    x: Vec<f64>,
    svcca_dims: usize,
    knn_k: usize,
    expected: Vec<(String, Vec<f64>)>,
}

fn fixture(case: &str) -> Fixture {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/fixtures/similarity/{case}.safetensors"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let meta = header.metadata().clone().unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let read = |name: &str| -> (Vec<usize>, Vec<f64>) {
        let t = st.tensor(name).unwrap();
        let v = t
            .data()
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
            .collect();
        (t.shape().to_vec(), v)
    };
    let (shape, x) = read("x");
    let widths: Vec<usize> = serde_json::from_str(&meta["widths"]).unwrap();
    let names = [
        "linear_cka",
        "debiased_cka",
        "mean_cca",
        "svcca",
        "procrustes",
        "mutual_knn",
    ];
    Fixture {
        widths,
        n: shape[0],
        x,
        svcca_dims: meta["svcca_dims"].parse().unwrap(),
        knn_k: meta["knn_k"].parse().unwrap(),
        expected: names.iter().map(|n| (n.to_string(), read(n).1)).collect(),
    }
}

fn names(m: usize) -> Vec<String> {
    (0..m).map(|i| format!("m{i}")).collect()
}

/// Tracked moments of row-major rows fed `chunk` rows per update.
fn streamed(widths: &[usize], rows: &[f64], chunk: usize, seed: u64, first_row: u64) -> Moments {
    let d: usize = widths.iter().sum();
    let mut m = Moments::new(names(widths.len()), widths.to_vec()).unwrap();
    m.track_similarity(seed, first_row).unwrap();
    for part in rows.chunks(chunk * d) {
        m.update_stacked_f64(part).unwrap();
    }
    m
}

fn params(svcca_dims: usize) -> SimilarityParams {
    SimilarityParams {
        svcca_dims,
        knn_k: 3,
        knn_sample: 40,
        ..SimilarityParams::default()
    }
}

fn sample_of(widths: &[usize], rows: &[f64]) -> KnnSample {
    let d: usize = widths.iter().sum();
    let mut start = 0;
    let blocks = widths
        .iter()
        .map(|&w| {
            let b: Vec<f64> = rows
                .chunks_exact(d)
                .flat_map(|r| r[start..start + w].to_vec())
                .collect();
            start += w;
            b
        })
        .collect();
    KnnSample::new(names(widths.len()), widths.to_vec(), blocks).unwrap()
}

fn stem(m: Measure) -> &'static str {
    match m {
        Measure::LinearCka => "linear_cka",
        Measure::DebiasedCka => "debiased_cka",
        Measure::MeanCca => "mean_cca",
        Measure::Svcca => "svcca",
        Measure::Procrustes => "procrustes",
        _ => "mutual_knn",
    }
}

#[test]
fn every_measure_equals_numpy_on_planted_arrays_with_and_without_a_large_offset() {
    for case in ["planted", "offset"] {
        let f = fixture(case);
        let m = streamed(&f.widths, &f.x, 7, 3, 0);
        assert_eq!(m.n() as usize, f.n);
        let p = params(f.svcca_dims);
        let k = f.widths.len();
        for measure in TEST_ONLY {
            let r = streamed_measure(measure, &m, &m, &p).unwrap();
            let want = &f
                .expected
                .iter()
                .find(|(n, _)| n == stem(measure))
                .unwrap()
                .1;
            for i in 0..k {
                for j in 0..k {
                    let (got, exp) = (r.values.get(i, j), want[i * k + j]);
                    assert!(
                        (got - exp).abs() < 1e-9,
                        "{case} {} ({i},{j}): {got} vs NumPy {exp}",
                        measure.name()
                    );
                }
            }
        }
        let knn = mutual_knn(&sample_of(&f.widths, &f.x), f.knn_k, 3).unwrap();
        let want = &f
            .expected
            .iter()
            .find(|(n, _)| n == "mutual_knn")
            .unwrap()
            .1;
        for (a, b) in knn.values.values.iter().zip(want) {
            assert!(
                (a - b).abs() < 1e-12,
                "{case} mutual k-NN: {a} vs NumPy {b}"
            );
        }
    }
}

fn planted_rows(n: usize, widths: &[usize], seed: u64, offset: f64) -> Vec<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let d: usize = widths.iter().sum();
    let mut rows = Vec::with_capacity(n * d);
    for _ in 0..n {
        let z: [f64; 3] = [
            rng.sample(StandardNormal),
            rng.sample(StandardNormal),
            rng.sample(StandardNormal),
        ];
        for c in 0..d {
            let e: f64 = rng.sample(StandardNormal);
            rows.push(offset + z[c % 3] * (1.0 + c as f64 / 7.0) + 0.5 * e);
        }
    }
    rows
}

fn assert_close(a: &MeasureResult, b: &MeasureResult, tol: f64, what: &str) {
    for (x, y) in a.values.values.iter().zip(&b.values.values) {
        assert!(
            (x - y).abs() < tol,
            "{what} {}: {x} vs {y}",
            a.measure.name()
        );
    }
    for (x, y) in a.null.values.iter().zip(&b.null.values) {
        assert!(
            (x - y).abs() < tol,
            "{what} {} null: {x} vs {y}",
            a.measure.name()
        );
    }
}

#[test]
fn streamed_over_chunks_equals_in_memory_and_the_null_is_the_deranged_rows() {
    let widths = [4usize, 3, 5];
    let d = 12;
    let (n, chunk, seed) = (96, 16, 11);
    let rows = planted_rows(n, &widths, 1, 250.0);
    let chunked = streamed(&widths, &rows, chunk, seed, 0);
    let whole = streamed(&widths, &rows, n, seed, 0);
    // The broken pairing built by hand: model p of row r is row deranged_rows(..)[r] of its chunk.
    let mut broken = vec![0.0; n * d];
    for c0 in (0..n).step_by(chunk) {
        let mut col = 0;
        for (p, &w) in widths.iter().enumerate() {
            let from = deranged_rows(seed, c0 as u64, chunk, p);
            for (r, &f) in from.iter().enumerate() {
                let (dst, src) = ((c0 + r) * d + col, (c0 + f) * d + col);
                broken[dst..dst + w].copy_from_slice(&rows[src..src + w]);
            }
            col += w;
        }
    }
    let by_hand = streamed(&widths, &broken, n, seed, 0);
    let p = params(2);
    for measure in TEST_ONLY {
        let a = streamed_measure(measure, &chunked, &chunked, &p).unwrap();
        let b = streamed_measure(measure, &whole, &whole, &p).unwrap();
        for (x, y) in a.values.values.iter().zip(&b.values.values) {
            assert!((x - y).abs() < 1e-10, "{}: {x} vs {y}", measure.name());
        }
        let h = streamed_measure(measure, &by_hand, &by_hand, &p).unwrap();
        for (x, y) in a.null.values.iter().zip(&h.values.values) {
            assert!((x - y).abs() < 1e-10, "{} null: {x} vs {y}", measure.name());
        }
    }
}

#[test]
fn merged_shards_equal_one_pass_and_survive_a_save() {
    let widths = [4usize, 3, 5];
    let d = 12;
    let (n, chunk, seed) = (120, 8, 5);
    let rows = planted_rows(n, &widths, 2, -40.0);
    let one = streamed(&widths, &rows, chunk, seed, 0);
    // Two shards cut on the chunk grid, each tracking its first global row.
    let a = streamed(&widths, &rows[..48 * d], chunk, seed, 0);
    let b = streamed(&widths, &rows[48 * d..], chunk, seed, 48);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.safetensors");
    b.save(&path).unwrap();
    let b = Moments::load(&path).unwrap();
    assert_eq!(b.similarity_tracking(), Some((seed, 48)));
    let mut merged = a.clone();
    merged.merge(&b).unwrap();
    let p = params(2);
    for measure in Measure::STREAMED {
        let x = streamed_measure(measure, &one, &one, &p).unwrap();
        let y = streamed_measure(measure, &merged, &merged, &p).unwrap();
        assert_close(&x, &y, 1e-10, "merged vs one pass");
    }
    // Merging untracked moments into tracked ones is refused.
    let mut plain = Moments::new(names(3), widths.to_vec()).unwrap();
    plain.update_stacked_f64(&rows[..8 * d]).unwrap();
    let e = merged.merge(&plain).unwrap_err();
    assert!(e.to_string().contains("similarity"), "{e}");
}

/// A random orthogonal d × d matrix (QR of a Gaussian one, by Gram-Schmidt).
fn rotation(d: usize, rng: &mut ChaCha8Rng) -> Vec<Vec<f64>> {
    let mut q: Vec<Vec<f64>> = Vec::new();
    while q.len() < d {
        let mut v: Vec<f64> = (0..d).map(|_| rng.sample(StandardNormal)).collect();
        for u in &q {
            let dot: f64 = v.iter().zip(u).map(|(a, b)| a * b).sum();
            v.iter_mut().zip(u).for_each(|(a, b)| *a -= dot * b);
        }
        let norm = v.iter().map(|a| a * a).sum::<f64>().sqrt();
        q.push(v.into_iter().map(|a| a / norm).collect());
    }
    q
}

#[test]
fn known_answers_rotation_and_independent_noise() {
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    let (n, w) = (400, 5);
    let q = rotation(w, &mut rng);
    // Model b = model a rotated (and shifted); model c independent noise.
    let mut rows = Vec::with_capacity(n * 3 * w);
    for _ in 0..n {
        let x: Vec<f64> = (0..w)
            .map(|c| (1.0 + c as f64) * rng.sample::<f64, _>(StandardNormal))
            .collect();
        rows.extend(&x);
        rows.extend((0..w).map(|r| 7.0 + (0..w).map(|c| q[r][c] * x[c]).sum::<f64>()));
        rows.extend((0..w).map(|_| rng.sample::<f64, _>(StandardNormal)));
    }
    let m = streamed(&[w, w, w], &rows, 64, 4, 0);
    let p = params(3);
    let s = similarity(
        &m,
        &m,
        Some(&sample_of(&[w, w, w], &rows[..200 * 3 * w])),
        &p,
    )
    .unwrap();
    let get = |measure: Measure| s.get(measure).unwrap();
    let want = [
        (Measure::Procrustes, 0.0),
        (Measure::LinearCka, 1.0),
        (Measure::DebiasedCka, 1.0),
        (Measure::MeanCca, 1.0),
        (Measure::Svcca, 1.0),
    ];
    for (measure, v) in want {
        let got = get(measure).values.get(1, 0);
        assert!((got - v).abs() < 1e-9, "rotation {}: {got}", measure.name());
    }
    // Against independent noise every measure is near its null (and far from the rotation's).
    for r in &s.results {
        let (v, z) = (r.values.get(2, 0), r.null.get(2, 0));
        let tol = if r.measure == Measure::HeldOutR2 {
            0.02
        } else {
            0.06
        };
        assert!(
            (v - z).abs() < tol,
            "{}: independent noise {v} vs its null {z}",
            r.measure.name()
        );
        if r.measure != Measure::HeldOutR2 {
            assert!(
                r.calibrated(1, 0) > 0.9,
                "{}: {}",
                r.measure.name(),
                r.calibrated(1, 0)
            );
        }
    }
}

#[test]
fn debiased_cka_is_less_biased_than_linear_cka_at_small_n() {
    // Independent models: the population CKA is 0; at n = 24 with d = 10 linear CKA is far
    // above it, debiased CKA about it.
    let (n, w, runs) = (24, 10, 40);
    let (mut lin, mut deb) = (0.0, 0.0);
    for seed in 0..runs {
        let mut rng = ChaCha8Rng::seed_from_u64(100 + seed);
        let rows: Vec<f64> = (0..n * 2 * w).map(|_| rng.sample(StandardNormal)).collect();
        let m = streamed(&[w, w], &rows, n, seed, 0);
        let p = params(2);
        lin += streamed_measure(Measure::LinearCka, &m, &m, &p)
            .unwrap()
            .values
            .get(1, 0);
        deb += streamed_measure(Measure::DebiasedCka, &m, &m, &p)
            .unwrap()
            .values
            .get(1, 0);
    }
    let (lin, deb) = (lin / runs as f64, deb / runs as f64);
    assert!(lin > 0.2, "linear CKA's mean {lin}");
    assert!(deb.abs() < 0.05, "debiased CKA's mean {deb}");
    assert!(
        deb.abs() < lin / 4.0,
        "bias: debiased {deb} vs linear {lin}"
    );
}

/// The error is a typed measure error naming `measure`, in one sentence.
fn names_measure(e: LmdError, measure: &str) {
    let text = e.to_string();
    assert!(matches!(e, LmdError::Measure { .. }), "{e:?}");
    assert!(text.starts_with(measure), "{text}");
    assert!(
        !text.contains('\n') && !text.trim_end_matches('.').contains(". "),
        "{text}"
    );
}

#[test]
fn bad_input_is_one_sentence_naming_the_measure() {
    let widths = [4usize, 3];
    let rows = planted_rows(3, &widths, 3, 0.0);
    let m = streamed(&widths, &rows, 3, 1, 0);
    let p = params(2);
    // Three sequences: too few for debiased CKA (n − 3 = 0), for CCA (n ≤ d) and SVCCA (n ≤ k).
    for measure in [Measure::DebiasedCka, Measure::MeanCca] {
        let e = streamed_measure(measure, &m, &m, &p).unwrap_err();
        names_measure(e, measure.name());
    }
    let e = streamed_measure(Measure::Svcca, &m, &m, &params(3)).unwrap_err();
    names_measure(e, "SVCCA");
    // A model with zero variance: every measure says so.
    let mut rows = planted_rows(50, &widths, 4, 0.0);
    for r in rows.chunks_exact_mut(7) {
        r[4..].fill(2.5);
    }
    let m = streamed(&widths, &rows, 10, 1, 0);
    for measure in TEST_ONLY {
        let e = streamed_measure(measure, &m, &m, &p).unwrap_err();
        assert!(e.to_string().contains("m1"), "{e}");
        names_measure(e, measure.name());
    }
    // k larger than the sample.
    let s = sample_of(&widths, &planted_rows(5, &widths, 5, 0.0));
    names_measure(mutual_knn(&s, 8, 0).unwrap_err(), "mutual k-NN");
    let mut bad = params(2);
    bad.knn_k = 50;
    names_measure(bad.check().unwrap_err(), "mutual k-NN");
    // Moments without the accumulators.
    let mut plain = Moments::new(names(2), widths.to_vec()).unwrap();
    plain.update_stacked_f64(&rows).unwrap();
    names_measure(
        streamed_measure(Measure::LinearCka, &plain, &plain, &p).unwrap_err(),
        "linear CKA",
    );
}
