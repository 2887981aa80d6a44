//! The whole LMD analysis from moments at the paper's size: 12 models × 768 dims (D = 9216):
//! 132 pairwise fits and their test R², 12 group fits through one factorisation of the joint
//! covariance, and linear CKA. The moments are the planted structure's exact population
//! moments (no sampling in the setup); only the analysis is timed.
//!
//! First a one-shot pass prints every stage's seconds, its flop count and GFLOP/s beside a
//! faer f64 and f32 GEMM measured in the same run (so the rates share the machine's load); the
//! f64 group step is timed cold (first D × D buffers of the process) and warm, and the totals
//! use the warm time. Then criterion times the full analysis in both arithmetics.
//!
//! Then the similarity measures of `lmd::similarity` (every streamed measure with its null, and
//! mutual k-NN on 512 rows) on moments streamed with their accumulators
//! (`LMD_BENCH_SIM_ROWS` rows per split, default 1000: the measures' cost depends on the
//! widths, not on n), timed beside `analyze_with` on the same moments, so that the ratio
//! (analysis + similarity) / analysis is measured in one process; `LMD_BENCH_SIM_ROWS=0` skips
//! it.
//!
//! `LMD_BENCH_MODELS=12 cargo bench -p lmsplit --bench lmd_analysis`
//! (LMD_BENCH_MODELS / LMD_BENCH_DIM change the size; LMD_BENCH_ONESHOT=1 stops after the
//! one-shot pass: ten criterion samples at 12 × 768 take several minutes.)

mod common;

use std::time::Instant;

use criterion::{BenchmarkId, Criterion};
use lmsplit::lmd::analysis::{analyze_with, group_r2_with, pairwise_r2, Arithmetic};
use lmsplit::lmd::cka::linear_cka;
use lmsplit::lmd::fit::Ridge;
use lmsplit::lmd::moments::Moments;
use lmsplit::lmd::similarity::{sample_indices, similarity, KnnSample, SimilarityParams};
use lmsplit::lmd::synthetic::{Planted, PlantedSpec};

/// Flops of the group precision path (see `lmd::analysis`): two Cholesky factorisations, the
/// triangular inverse X, Z = X L'' (two lower triangles), P_ii and U_i per block, all U_iᵀ Z,
/// and R_i⁻ᵀ on each block's rows. Returns (f64 flops, flops of the U_iᵀ Z product).
fn group_flops(m: usize, d: usize) -> (f64, f64) {
    let dd = (m * d) as f64;
    let di = d as f64;
    let mut small = 0.0;
    let mut product = 0.0;
    for i in 0..m {
        let o = (i * d) as f64;
        product += di * (dd * dd - o * o);
        small += (dd - o) * di * di * 2.0 + dd * di * di;
    }
    (4.0 * dd * dd * dd / 3.0 + small, product)
}

/// Flops of the pairwise fits (whitened, fixed ridge): per basis two Cholesky factorisations
/// and Z_b = L⁻¹ L'' (d³ together) and three d × d by d × d_t triangular products
/// (G = L⁻¹ C_bt, H = L⁻¹ S'_bt, Z_bᵀ G: 3 d² d_t).
fn pairwise_flops(m: usize, d: usize) -> f64 {
    let (di, dt) = (d as f64, ((m - 1) * d) as f64);
    m as f64 * (di * di * di + 3.0 * dt * di * di)
}

fn one_shot(train: &Moments, test: &Moments, models: usize, dim: usize) {
    let ridge = Ridge::REFERENCE;
    let r64 = common::faer_gemm_gflops(4096, 4096, 4096, 1.0f64, 1);
    let r32 = common::faer_gemm_gflops(4096, 4096, 4096, 1.0f32, 1);
    println!(
        "faer GEMM 4096² ({:?}): f64 {r64:.1} GFLOP/s, f32 {r32:.1} GFLOP/s",
        faer::get_global_parallelism()
    );
    let mut cpu = Vec::new();
    let mut time = |f: &mut dyn FnMut()| {
        let (t, c) = (
            Instant::now(),
            lmsplit::process::cpu_seconds().unwrap_or(f64::NAN),
        );
        f();
        cpu.push(lmsplit::process::cpu_seconds().unwrap_or(f64::NAN) - c);
        t.elapsed().as_secs_f64()
    };
    let t_pair = time(&mut || {
        pairwise_r2(train, test, ridge).unwrap();
    });
    let mut exact = None;
    let t_g64 = time(&mut || {
        exact = Some(group_r2_with(train, test, ridge, Arithmetic::F64).unwrap());
    });
    let mut mixed = None;
    let t_gmix = time(&mut || {
        mixed = Some(group_r2_with(train, test, ridge, Arithmetic::MixedF32).unwrap());
    });
    // The first group run also faults in the process's D × D buffers (fresh memory on this VM):
    // time f64 again warm, as every later analysis of a process (lmd_table runs several) is.
    let t_g64_cold = t_g64;
    let t_g64 = time(&mut || {
        group_r2_with(train, test, ridge, Arithmetic::F64).unwrap();
    });
    let (exact, mixed) = (exact.unwrap(), mixed.unwrap());
    let mixed_dev = exact
        .r2
        .iter()
        .zip(&mixed.r2)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    let t_cka = time(&mut || {
        linear_cka(test).unwrap();
    });
    let (c_pair, c_gmix, c_g64, c_cka) = (cpu[0], cpu[2], cpu[3], cpu[4]);
    println!(
        "CPU seconds: pairwise {c_pair:.1}, group f64 {c_g64:.1}, group mixed {c_gmix:.1}, cka {c_cka:.1}"
    );
    let fp = pairwise_flops(models, dim);
    let (g64, gprod) = group_flops(models, dim);
    println!(
        "pairwise: {t_pair:.2} s, {:.2e} flops, {:.1} GFLOP/s",
        fp,
        fp / t_pair / 1e9
    );
    println!(
        "group f64: {t_g64:.2} s warm ({t_g64_cold:.2} s cold), {:.2e} flops, {:.1} GFLOP/s",
        g64 + gprod,
        (g64 + gprod) / t_g64 / 1e9
    );
    println!(
        "group mixed: {t_gmix:.2} s, {:.2e} f64 + {:.2e} f32 flops, {:.1} GFLOP/s overall",
        g64,
        gprod,
        (g64 + gprod) / t_gmix / 1e9
    );
    println!("cka: {t_cka:.2} s; max |group R² mixed − f64| = {mixed_dev:.2e}");
    println!(
        "{}",
        serde_json::json!({
            "bench": "lmd_analysis", "models": models, "dim": dim,
            "gemm_gflops": {"f64": r64, "f32": r32},
            "max_abs_group_r2_mixed_vs_f64": mixed_dev,
            "flops": {"pairwise": fp, "group_f64_part": g64, "group_product": gprod},
            "seconds": {
                "pairwise": t_pair, "group_f64": t_g64, "group_f64_cold": t_g64_cold,
                "group_mixed": t_gmix, "cka": t_cka,
                "total_f64": t_pair + t_g64 + t_cka, "total_mixed": t_pair + t_gmix + t_cka,
            },
            "cpu_seconds": {
                "pairwise": c_pair, "group_f64": c_g64, "group_mixed": c_gmix, "cka": c_cka,
                "total_f64": c_pair + c_g64 + c_cka, "total_mixed": c_pair + c_gmix + c_cka,
            },
        })
    );
}

/// Tracked moments of `n` planted rows (streamed in chunks of 500) and the mutual k-NN sample.
fn streamed(planted: &Planted, n: usize, seed: u64) -> (Moments, KnnSample) {
    use rand::SeedableRng;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
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

/// The analysis and the similarity measures on the same streamed moments, timed.
/// The analysis runs on the population moments `pop` (the group path needs more train rows
/// than D), the measures on streamed ones.
fn similarity_one_shot(planted: &Planted, pop: (&Moments, &Moments), rows: usize, dim: usize) {
    let models = planted.names().len();
    let t = Instant::now();
    let (train, _) = streamed(planted, rows, 1);
    let (test, sample) = streamed(planted, rows, 2);
    let t_stream = t.elapsed().as_secs_f64();
    let ridge = Ridge::REFERENCE;
    // Warm the process's D × D buffers first, as in the one-shot pass.
    analyze_with(pop.0, pop.1, ridge, Arithmetic::F64).unwrap();
    let t = Instant::now();
    analyze_with(pop.0, pop.1, ridge, Arithmetic::F64).unwrap();
    let t_analysis = t.elapsed().as_secs_f64();
    let params = SimilarityParams::default();
    let t = Instant::now();
    let s = similarity(&train, &test, Some(&sample), &params).unwrap();
    let t_sim = t.elapsed().as_secs_f64();
    println!(
        "similarity ({} measures with nulls, {} left out): {t_sim:.2} s beside the analysis's \
         {t_analysis:.2} s on the same moments: ratio {:.3} (streaming {rows} rows per split \
         with the accumulators took {t_stream:.1} s)",
        s.results.len(),
        s.left_out.len(),
        (t_analysis + t_sim) / t_analysis
    );
    println!(
        "{}",
        serde_json::json!({
            "bench": "lmd_analysis_similarity", "models": models, "dim": dim, "rows": rows,
            "seconds": {"analysis_f64": t_analysis, "similarity": t_sim,
                        "streaming_both_splits": t_stream},
            "ratio": (t_analysis + t_sim) / t_analysis,
            "left_out": s.left_out.iter().map(|(_, e)| e.clone()).collect::<Vec<_>>(),
        })
    );
}

fn main() {
    // As in the lmd_table example: freed D × D buffers are reused instead of being faulted in
    // again (~0.5 s per fresh 680 MB buffer on this VM; see lmsplit::alloc).
    lmsplit::alloc::retain_freed_memory();
    let (models, dim) = (
        common::env_usize("LMD_BENCH_MODELS", 12),
        common::env_usize("LMD_BENCH_DIM", 768),
    );
    let planted = Planted::new(PlantedSpec {
        models,
        dim,
        latent: 256,
        ..PlantedSpec::default()
    })
    .unwrap();
    let train = planted.population_moments(128_000).unwrap();
    let test = planted.population_moments(16_000).unwrap();
    one_shot(&train, &test, models, dim);
    let sim_rows = common::env_usize("LMD_BENCH_SIM_ROWS", 1000);
    if sim_rows > 0 {
        similarity_one_shot(&planted, (&train, &test), sim_rows, dim);
    }
    if common::env_usize("LMD_BENCH_ONESHOT", 0) == 1 {
        return;
    }
    // criterion's plots need a system font; the numbers are what matter here.
    let mut c = Criterion::default().without_plots().configure_from_args();
    let size = format!("{models}x{dim}");
    let mut g = c.benchmark_group("lmd_analysis");
    g.sample_size(10);
    g.warm_up_time(std::time::Duration::from_millis(1));
    g.measurement_time(std::time::Duration::from_secs(1));
    for (label, arithmetic) in [
        ("f64", Arithmetic::F64),
        ("mixed_f32", Arithmetic::MixedF32),
    ] {
        g.bench_function(
            BenchmarkId::new(format!("full_analysis_{label}"), &size),
            |b| b.iter(|| analyze_with(&train, &test, Ridge::REFERENCE, arithmetic).unwrap()),
        );
    }
    g.finish();
    c.final_summary();
}
