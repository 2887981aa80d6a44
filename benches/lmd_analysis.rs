//! The whole LMD analysis from moments at the paper's size: 12 models × 768 dims (D = 9216):
//! 132 pairwise fits and their test R², 12 group fits through one factorisation of the joint
//! covariance, and linear CKA. The moments are the planted structure's exact population
//! moments (no sampling in the setup); only the analysis is timed.
//!
//! `cargo bench -p lmsplit --bench lmd_analysis` (LMD_BENCH_MODELS / LMD_BENCH_DIM change the size)

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use lmsplit::lmd::analysis::{analyze, group_r2, pairwise_r2};
use lmsplit::lmd::cka::linear_cka;
use lmsplit::lmd::fit::Ridge;
use lmsplit::lmd::synthetic::{Planted, PlantedSpec};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn bench(c: &mut Criterion) {
    let (models, dim) = (env("LMD_BENCH_MODELS", 12), env("LMD_BENCH_DIM", 768));
    let planted = Planted::new(PlantedSpec {
        models,
        dim,
        latent: 256,
        ..PlantedSpec::default()
    })
    .unwrap();
    let train = planted.population_moments(128_000).unwrap();
    let test = planted.population_moments(16_000).unwrap();
    let size = format!("{models}x{dim}");
    let mut g = c.benchmark_group("lmd_analysis");
    g.sample_size(10);
    g.warm_up_time(std::time::Duration::from_millis(1));
    g.measurement_time(std::time::Duration::from_secs(1));
    g.bench_function(BenchmarkId::new("pairwise_r2", &size), |b| {
        b.iter(|| pairwise_r2(&train, &test, Ridge::REFERENCE).unwrap())
    });
    g.bench_function(BenchmarkId::new("group_r2_precision", &size), |b| {
        b.iter(|| group_r2(&train, &test, Ridge::REFERENCE).unwrap())
    });
    g.bench_function(BenchmarkId::new("linear_cka", &size), |b| {
        b.iter(|| linear_cka(&test).unwrap())
    });
    g.bench_function(BenchmarkId::new("full_analysis", &size), |b| {
        b.iter(|| analyze(&train, &test, Ridge::REFERENCE).unwrap())
    });
    g.finish();
}

criterion_group! {
    name = benches;
    // criterion's plots need a system font; the numbers are what matter here.
    config = Criterion::default().without_plots();
    targets = bench
}
criterion_main!(benches);
