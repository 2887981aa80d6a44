//! One step of Amari's natural-gradient ICA at d = 128 (two 128×128×n GEMMs plus n·128
//! exponentials, ≈ 4·128²·n flops), next to the machine's plain f32 GEMM rate.
//!
//! `cargo bench -p lmsplit --bench ica_step`. Throughput is reported in "elements" = flops,
//! so criterion's `elem/s` reads as FLOP/s.

use std::hint::black_box;

use candle_core::{Device, Tensor};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use lmsplit::ica::{AmariConfig, AmariIca, Gemm, LaplaceMixture, Pca, PcaConfig};

const D: usize = 128;

fn whitened(n: usize) -> lmsplit::ica::Matrix {
    let mix = LaplaceMixture::generate(n, D, D, 1).expect("mixture");
    let pca = Pca::fit(&mix.observed, &PcaConfig::new(D)).expect("pca");
    pca.transform(&mix.observed).expect("whiten")
}

fn step(c: &mut Criterion) {
    let mut group = c.benchmark_group("ica_step_d128");
    group.sample_size(20);
    for n in [5_000usize, 30_000] {
        let x = whitened(n);
        group.throughput(Throughput::Elements((4 * D * D * n) as u64));
        for (name, gemm) in [("faer", Gemm::Faer), ("candle_cpu", Gemm::Candle)] {
            if n > 5_000 && gemm == Gemm::Candle {
                continue; // the slower backend once is enough
            }
            let mut stepper = AmariIca::new(AmariConfig::default())
                .with_gemm(gemm)
                .stepper(&x)
                .expect("stepper");
            group.bench_function(format!("{name}/n={n}"), |b| {
                b.iter(|| black_box(stepper.step().expect("step")))
            });
        }
    }
    group.finish();
}

fn gemm(c: &mut Criterion) {
    let mut group = c.benchmark_group("gemm_f32");
    group.sample_size(10);
    // The machine's f32 GEMM rate (square, large) and the step's own shape.
    for (m, k, n) in [(1024usize, 1024usize, 1024usize), (D, 5_000, D)] {
        let a: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i as f32 * 0.11).cos()).collect();
        let mut out = vec![0.0f32; m * n];
        group.throughput(Throughput::Elements((2 * m * k * n) as u64));
        group.bench_function(format!("faer/{m}x{k}x{n}"), |bch| {
            bch.iter(|| {
                faer::linalg::matmul::matmul(
                    faer::MatMut::from_row_major_slice_mut(&mut out, m, n),
                    faer::Accum::Replace,
                    faer::MatRef::from_row_major_slice(&a, m, k),
                    faer::MatRef::from_row_major_slice(&b, k, n),
                    1.0f32,
                    faer::Par::rayon(0),
                );
                black_box(out[0])
            })
        });
        let ta = Tensor::from_slice(&a, (m, k), &Device::Cpu).expect("tensor");
        let tb = Tensor::from_slice(&b, (k, n), &Device::Cpu).expect("tensor");
        group.bench_function(format!("candle_cpu/{m}x{k}x{n}"), |bch| {
            bch.iter(|| black_box(ta.matmul(&tb).expect("matmul")))
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    // No plots: this machine has no fonts for criterion's plotters backend.
    config = Criterion::default().without_plots();
    targets = step, gemm
}
criterion_main!(benches);
