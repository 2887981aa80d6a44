//! Measurements for docs/lmd.md, run by hand (ignored: minutes, gigabytes):
//!
//! `cargo test -p lmsplit-lmd --test similarity_measured -- --ignored --nocapture`
//!
//! - the analysis (pairwise R², group R², CKA) and the similarity measures with their nulls on
//!   the same streamed moments at the paper's 12 × 768 (`LMD_SIM_MODELS`, `LMD_SIM_DIM`,
//!   `LMD_SIM_ROWS` rows per split: the measures' cost depends on the widths, not on n);
//! - the similarity table of planted synthetic models (known structure).

use std::time::Instant;

use lmd::analysis::{analyze_with, Arithmetic};
use lmd::fit::Ridge;
use lmd::moments::Moments;
use lmd::similarity::{sample_indices, similarity, similarity_table, KnnSample, SimilarityParams};
use lmd::synthetic::{Planted, PlantedSpec};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Tracked moments of `n` planted rows (chunks of 500) and the mutual k-NN sample of 512.
fn streamed(planted: &Planted, n: usize, seed: u64) -> (Moments, KnnSample) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut m = Moments::new(planted.names(), planted.widths()).unwrap();
    m.track_similarity(seed, 0).unwrap();
    let (widths, d) = (planted.widths(), m.dim());
    let keep = sample_indices(n, 512, seed);
    let mut blocks: Vec<Vec<f64>> = vec![Vec::new(); widths.len()];
    let (mut done, mut next) = (0, 0);
    while done < n {
        let rows = 500.min(n - done);
        let batch = planted.sample(rows, &mut rng);
        m.update_stacked(&batch).unwrap();
        while next < keep.len() && keep[next] < done + rows {
            let row = &batch[(keep[next] - done) * d..(keep[next] - done + 1) * d];
            let mut col = 0;
            for (b, &w) in blocks.iter_mut().zip(&widths) {
                b.extend(row[col..col + w].iter().map(|&x| x as f64));
                col += w;
            }
            next += 1;
        }
        done += rows;
    }
    (m, KnnSample::new(planted.names(), widths, blocks).unwrap())
}

#[test]
#[ignore = "a timing of minutes (docs/lmd.md); run it with cargo test --release -p lmsplit-lmd --test similarity_measured -- --ignored --nocapture analysis_and_similarity_times"]
fn analysis_and_similarity_times_at_the_paper_size() {
    let (models, dim, rows) = (
        env("LMD_SIM_MODELS", 12),
        env("LMD_SIM_DIM", 768),
        env("LMD_SIM_ROWS", 1000),
    );
    let planted = Planted::new(PlantedSpec {
        models,
        dim,
        latent: 256.min(models * dim / 2),
        ..PlantedSpec::default()
    })
    .unwrap();
    // The analysis on the population moments, as `benches/lmd_analysis.rs` times it (the group
    // path needs more train rows than D); the similarity measures on streamed moments with
    // their accumulators (their cost depends on the widths, not on n).
    let pop_train = planted.population_moments(128_000).unwrap();
    let pop_test = planted.population_moments(16_000).unwrap();
    let t = Instant::now();
    let (train, _) = streamed(&planted, rows, 1);
    let (test, sample) = streamed(&planted, rows, 2);
    let t_stream = t.elapsed().as_secs_f64();
    let ridge = Ridge::REFERENCE;
    let params = SimilarityParams::default();
    let mut times = Vec::new();
    // Twice each: the first analysis also faults in the process's D × D buffers.
    for _ in 0..2 {
        let t = Instant::now();
        analyze_with(&pop_train, &pop_test, ridge, Arithmetic::F64).unwrap();
        let t_a = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let s = similarity(&train, &test, Some(&sample), &params).unwrap();
        let t_s = t.elapsed().as_secs_f64();
        assert!(s.left_out.is_empty(), "{:?}", s.left_out);
        times.push((t_a, t_s));
    }
    for (k, (t_a, t_s)) in times.iter().enumerate() {
        println!(
            "run {k}: {models} × {dim}: analysis {t_a:.2} s, similarity (7 measures with nulls) \
             {t_s:.2} s, (analysis + similarity) / analysis = {:.3}",
            (t_a + t_s) / t_a
        );
    }
    println!("streaming {rows} rows per split with the accumulators: {t_stream:.1} s");
}

#[test]
#[ignore = "prints the planted models' table of docs/lmd.md; run it with cargo test --release -p lmsplit-lmd --test similarity_measured -- --ignored --nocapture similarity_table_of_planted_models"]
fn similarity_table_of_planted_models() {
    let planted = Planted::new(PlantedSpec {
        models: 4,
        dim: 32,
        latent: 24,
        seed: 7,
        ..PlantedSpec::default()
    })
    .unwrap();
    let (train, _) = streamed(&planted, 4000, 1);
    let (test, sample) = streamed(&planted, 2000, 2);
    let s = similarity(&train, &test, Some(&sample), &SimilarityParams::default()).unwrap();
    println!("{}", similarity_table(&s).to_markdown());
    println!(
        "{}",
        lmd::similarity::rank_agreement_table(&s).to_markdown()
    );
}

#[test]
#[ignore = "runs the LMD study over ../shared's models for minutes (docs/lmd.md); run it with cargo test --release -p lmsplit-lmd --test similarity_measured -- --ignored --nocapture similarity_table_over_the_offline_models"]
fn similarity_table_over_the_offline_models() {
    use lmd::study::{run_lmd_study, LmdStudySpec};
    let shared = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared"));
    let need = |rel: &str| {
        let p = shared.join(rel);
        assert!(p.exists(), "shared input {} is missing", p.display());
        p
    };
    let mut spec = LmdStudySpec::new(
        vec![need("models/all-MiniLM-L6-v2"), need("data/stories260K")],
        need("data/wikitext-2/test.txt"),
        need("data/bert-base-uncased/vocab.txt"),
    );
    // CCA needs more test sequences than MiniLM's 384 dimensions.
    (spec.ts, spec.n_train, spec.n_test) = (
        vec![16],
        env("LMD_SIM_TRAIN", 1200),
        env("LMD_SIM_TEST", 600),
    );
    let out = std::env::var("LMD_SIM_OUT").unwrap_or_else(|_| "/tmp/lmd_similarity_offline".into());
    let t = Instant::now();
    let o = run_lmd_study(&spec, out.as_ref(), &report::Progress::silent()).unwrap();
    println!(
        "study in {:.1} s: {:?}",
        t.elapsed().as_secs_f64(),
        o.per_t[0].similarity
    );
    let md = std::path::Path::new(&out).join("T16/similarity.md");
    println!("{}", std::fs::read_to_string(md).unwrap());
}
