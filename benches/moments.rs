//! Streaming moment accumulation beside the machine's f64 and f32 GEMM rates.
//!
//! Throughput is declared as `Elements(flops)`, so criterion's "elem/s" reads as FLOP/s. The
//! accumulation counts the useful flops of a symmetric rank-k update, n · D · (D + 1) (the lower
//! triangle of Σ x xᵀ), for the f64 products and for `Accumulation::F32Products` (f32 products
//! of up to 1024 rows added into f64); the GEMM peers are faer's f64 and f32 `matmul` on square
//! matrices (2 n³ flops) and the f64 one on the same D × k × D shape computed in full
//! (2 k D² flops).
//!
//! `cargo bench -p lmsplit --bench moments` (LMD_BENCH_D overrides D = 2304, i.e. 3 × 768)
//!
//! Whole-process, on the machine a lent GPU comes with: `MOMENTS_ONESHOT=3
//! target/release/deps/moments-*` times 3 batches of `MOMENTS_N` (4096) rows of width D through
//! `update_stacked` on the host (faer, all cores), and with `MOMENTS_DEVICE=cuda` (a
//! `--features cuda` build) through `update_tensor` on the GPU (the batch's Gram by cuBLAS in
//! f64, read back and added on the host) beside the device's f64 GEMM alone on the same shape;
//! one JSON line, useful GFLOP/s = n · D · (D + 1) per batch (the GEMM's own: 2 n D²).

mod common;

use candle_core::{Device, Tensor};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use faer::{Accum, Mat};
use lmsplit::lmd::moments::{Accumulation, Moments};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn d_total() -> usize {
    common::env_usize("LMD_BENCH_D", 2304)
}

fn gemm(c: &mut Criterion) {
    let mut g = c.benchmark_group("f64_gemm");
    g.sample_size(10);
    let par = faer::get_global_parallelism();
    for n in [1024usize, 2048] {
        let a = Mat::<f64>::from_fn(n, n, |i, j| ((i * 31 + j * 17) % 101) as f64 / 101.0);
        let b = a.transpose().to_owned();
        let mut out = Mat::<f64>::zeros(n, n);
        g.throughput(Throughput::Elements(2 * (n as u64).pow(3)));
        g.bench_with_input(BenchmarkId::new("square", n), &n, |bch, _| {
            bch.iter(|| {
                faer::linalg::matmul::matmul(
                    out.as_mut(),
                    Accum::Replace,
                    a.as_ref(),
                    b.as_ref(),
                    1.0,
                    par,
                )
            })
        });
    }
    let (d, k) = (d_total(), 1024);
    let x = Mat::<f64>::from_fn(d, k, |i, j| ((i * 7 + j * 13) % 97) as f64 / 97.0);
    let mut out = Mat::<f64>::zeros(d, d);
    g.throughput(Throughput::Elements(2 * (k * d * d) as u64));
    g.bench_function(BenchmarkId::new("xxt_full", format!("{d}x{k}")), |bch| {
        bch.iter(|| {
            faer::linalg::matmul::matmul(
                out.as_mut(),
                Accum::Add,
                x.as_ref(),
                x.transpose(),
                1.0,
                par,
            )
        })
    });
    g.finish();
    let mut g32 = c.benchmark_group("f32_gemm");
    g32.sample_size(10);
    for n in [1024usize, 2048] {
        let a = Mat::<f32>::from_fn(n, n, |i, j| ((i * 31 + j * 17) % 101) as f32 / 101.0);
        let b = a.transpose().to_owned();
        let mut out = Mat::<f32>::zeros(n, n);
        g32.throughput(Throughput::Elements(2 * (n as u64).pow(3)));
        g32.bench_with_input(BenchmarkId::new("square", n), &n, |bch, _| {
            bch.iter(|| {
                faer::linalg::matmul::matmul(
                    out.as_mut(),
                    Accum::Replace,
                    a.as_ref(),
                    b.as_ref(),
                    1.0,
                    par,
                )
            })
        });
    }
    g32.finish();
}

fn accumulate(c: &mut Criterion) {
    let d = d_total();
    let models = d / 768;
    let (names, widths): (Vec<String>, Vec<usize>) = if models >= 1 && d.is_multiple_of(768) {
        (
            (0..models).map(|i| format!("m{i}")).collect(),
            vec![768; models],
        )
    } else {
        (vec!["m0".into()], vec![d])
    };
    let n = 2048;
    let rows = random_rows(n, d);
    let mut g = c.benchmark_group("moments");
    g.sample_size(10);
    g.throughput(Throughput::Elements((n * d * (d + 1)) as u64));
    g.bench_function(
        BenchmarkId::new("update_stacked_f64", format!("{n}x{d}")),
        |bch| {
            let mut m = Moments::new(names.clone(), widths.clone()).unwrap();
            m.update_stacked(&rows[..d]).unwrap(); // the shift is set once, outside the timing
            bch.iter(|| m.update_stacked(&rows).unwrap())
        },
    );
    let rows64: Vec<f64> = rows.iter().map(|&x| x as f64).collect();
    for (label, acc) in [
        ("in_place_f64_products", Accumulation::F64),
        ("in_place_f32_products", Accumulation::F32Products),
    ] {
        g.bench_function(BenchmarkId::new(label, format!("{n}x{d}")), |bch| {
            let mut m = Moments::new(names.clone(), widths.clone()).unwrap();
            m.update_stacked(&rows[..d]).unwrap();
            m.set_accumulation(acc);
            let mut buf = rows64.clone();
            bch.iter(|| {
                // The in-place update shifts its input: refill it (a memcpy beside n·D² flops).
                buf.copy_from_slice(&rows64);
                m.update_stacked_f64_in_place(&mut buf).unwrap()
            })
        });
    }
    let t = Tensor::from_slice(&rows, (n, d), &Device::Cpu).unwrap();
    g.bench_function(
        BenchmarkId::new("update_tensor_cpu", format!("{n}x{d}")),
        |bch| {
            let mut m = Moments::new(names.clone(), widths.clone()).unwrap();
            m.update_stacked(&rows[..d]).unwrap();
            bch.iter(|| m.update_tensor(&t).unwrap())
        },
    );
    g.finish();
}

/// Random rows [n, d] near 5 (an offset the shift has to take out), from one seed.
fn random_rows(n: usize, d: usize) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    (0..n * d).map(|_| 5.0 + rng.random::<f32>()).collect()
}

/// `MOMENTS_ONESHOT=reps` (see the top of the file).
fn oneshot(reps: usize) {
    let d = d_total();
    let n = common::env_usize("MOMENTS_N", 4096);
    let rows = random_rows(n, d);
    let useful = (n * d * (d + 1)) as f64 * reps as f64;
    let fresh = || {
        let mut m = Moments::new(vec!["m0".into()], vec![d]).unwrap();
        m.update_stacked(&rows[..d]).unwrap(); // the shift, outside the timing
        m
    };
    let mut m = fresh();
    let t0 = std::time::Instant::now();
    for _ in 0..reps {
        m.update_stacked(&rows).unwrap();
    }
    let host = useful / t0.elapsed().as_secs_f64() / 1e9;
    let mut out = serde_json::json!({
        "moments_d": d, "n": n, "batches": reps,
        "threads": faer::get_global_parallelism().degree(),
        "host_gflop_per_s": host,
    });
    let device = match std::env::var("MOMENTS_DEVICE").as_deref() {
        Ok("cuda") => lmsplit::kernels::device::cuda(0).expect("a CUDA device (--features cuda)"),
        Ok("cpu") | Err(_) => Device::Cpu,
        Ok(other) => panic!("MOMENTS_DEVICE: cpu or cuda, not {other}"),
    };
    let t = Tensor::from_slice(&rows, (n, d), &device).unwrap();
    let mut m = fresh();
    m.update_tensor(&t).unwrap(); // a GPU loads its kernels and fills its pool on first use
    let t0 = std::time::Instant::now();
    for _ in 0..reps {
        m.update_tensor(&t).unwrap(); // reads the Gram back: synchronised
    }
    out["device"] = format!("{device:?}").into();
    out["tensor_gflop_per_s"] = (useful / t0.elapsed().as_secs_f64() / 1e9).into();
    let x = t.to_dtype(candle_core::DType::F64).unwrap();
    let _ = x.t().unwrap().matmul(&x).unwrap();
    device.synchronize().unwrap();
    let t0 = std::time::Instant::now();
    for _ in 0..reps {
        let _ = x.t().unwrap().matmul(&x).unwrap();
    }
    device.synchronize().unwrap();
    let gemm = 2.0 * (n * d * d) as f64 * reps as f64;
    out["device_dgemm_gflop_per_s"] = (gemm / t0.elapsed().as_secs_f64() / 1e9).into();
    println!("{out}");
}

fn bench(c: &mut Criterion) {
    if let Some(reps) = std::env::var("MOMENTS_ONESHOT")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        oneshot(reps);
        std::process::exit(0);
    }
    gemm(c);
    accumulate(c);
}

criterion_group! {
    name = benches;
    // criterion's plots need a system font; the numbers are what matter here.
    config = Criterion::default().without_plots();
    targets = bench
}
criterion_main!(benches);
