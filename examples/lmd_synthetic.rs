//! LMD end to end on synthetic embeddings with a planted linear structure.
//!
//! Plants M models u_i = A_i s + σ_i ε_i + c_i (shared latent s), streams a train and a test
//! split into `lmd::moments::Moments`, runs the whole analysis from moments (pairwise R² and ρ,
//! group R² via the precision identity, group ρ, linear CKA), writes the reports, and compares
//! every R² with the planted truth. The population R² is corrected for the finite training set
//! (for Gaussian regressors the expected held-out residual variance of an OLS fit with an
//! intercept and p regressors is σ²(n+1)(n−2)/(n(n−p−2))), so the error is an estimation error,
//! not a bias. Prints a JSON object as its last line.
//!
//! Beside R², the field's similarity measures from the same pass (`lmd::similarity`: linear and
//! debiased CKA, mean CCA, SVCCA, Procrustes, mutual k-NN on a seeded sample of the test rows),
//! each with its null, written as `similarity.{csv,md,json}`, `similarity_agreement.*` and one
//! heatmap per measure (`--no-similarity` leaves them out).
//!
//! `cargo run --release --example lmd_synthetic -- --models 12 --dim 768 --n-train 20000 --n-test 5000`
//! (add `--mixed` for the group path with its f32 product, `--pinv` for a pseudo-inverse column)

mod common;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use lmsplit::lmd::analysis::{group_r2, group_r2_with, pairwise_r2, Analysis, Arithmetic};
use lmsplit::lmd::cka::linear_cka;
use lmsplit::lmd::fit::Ridge;
use lmsplit::lmd::moments::Moments;
use lmsplit::lmd::similarity::{
    sample_indices, similarity, write_similarity, KnnSample, Similarity, SimilarityParams,
};
use lmsplit::lmd::synthetic::{expected_held_out_r2, Planted, PlantedSpec};
use lmsplit::lmd::tables;
use lmsplit::lmd::LmdError;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

type Res<T> = Result<T, LmdError>;

#[derive(Parser, Debug)]
#[command(
    about = "LMD on planted synthetic embeddings: every quantity from moments, checked against the truth"
)]
struct Args {
    /// Number of models M.
    #[arg(long, default_value_t = 12)]
    models: usize,
    /// Embedding width of every model.
    #[arg(long, default_value_t = 768)]
    dim: usize,
    /// Width of the shared latent.
    #[arg(long, default_value_t = 256)]
    latent: usize,
    /// Training samples.
    #[arg(long, default_value_t = 20_000)]
    n_train: usize,
    /// Test samples.
    #[arg(long, default_value_t = 5_000)]
    n_test: usize,
    /// Rows per streamed batch (at least 1).
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..))]
    batch: u64,
    /// Fixed ridge λ (the reference uses 1e-6).
    #[arg(long, default_value_t = 1e-6)]
    lambda: f64,
    /// Seed of the structure and the samples.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Also compute the group fits under the pseudo-inverse (a second column of Table 2).
    #[arg(long)]
    pinv: bool,
    /// Group fits with the f32 product on whitened matrices (`Arithmetic::MixedF32`) instead of
    /// all-f64.
    #[arg(long)]
    mixed: bool,
    /// Output folder.
    #[arg(long, default_value = "out/lmd_synthetic")]
    out: PathBuf,
    /// Leave out the similarity measures (and their accumulators: half the moments' memory).
    #[arg(long)]
    no_similarity: bool,
    /// SVCCA: top principal directions kept per model.
    #[arg(long, default_value_t = 20)]
    svcca_dims: usize,
    /// Mutual k-NN: neighbours per sequence.
    #[arg(long, default_value_t = 10)]
    knn_k: usize,
    /// Mutual k-NN: test rows sampled by seed.
    #[arg(long, default_value_t = 512)]
    knn_sample: usize,
}

/// Wall-clock seconds per stage (and CPU seconds of the analysis).
#[derive(Default)]
struct Seconds {
    sample: f64,
    accumulate: f64,
    pairwise: f64,
    group: f64,
    cka: f64,
    similarity: f64,
    reports: f64,
    cpu_analysis: f64,
}

/// Largest absolute errors against the finite-n expectation and the raw population value.
struct Errors {
    pair: f64,
    pair_raw: f64,
    group: f64,
    group_raw: f64,
    rho: f64,
}

fn main() -> ExitCode {
    common::quiet_on_broken_pipe();
    common::finish(run(Args::parse()))
}

fn run(a: Args) -> Res<()> {
    let planted = Planted::new(PlantedSpec {
        models: a.models,
        dim: a.dim,
        latent: a.latent,
        seed: a.seed,
        ..PlantedSpec::default()
    })?;
    let d_total = a.models * a.dim;
    println!(
        "planted {} models × {} dims (D = {d_total}, latent {}), train {} / test {} samples",
        a.models, a.dim, a.latent, a.n_train, a.n_test
    );
    let mut secs = Seconds::default();
    let mut rng = ChaCha8Rng::seed_from_u64(a.seed ^ 0x5eed);
    let (train, _) = stream_split(&a, &planted, "train", a.n_train, &mut rng, &mut secs)?;
    let (test, sample) = stream_split(&a, &planted, "test", a.n_test, &mut rng, &mut secs)?;
    let gflops =
        (a.n_train + a.n_test) as f64 * (d_total * (d_total + 1)) as f64 / secs.accumulate / 1e9;
    println!(
        "moments: {:.1} s ({gflops:.1} GFLOP/s, lower-triangle Gram in f64); sampling {:.1} s",
        secs.accumulate, secs.sample
    );
    let result = analyse(&a, &train, &test, &mut secs)?;
    let err = errors_vs_truth(&a, &planted, &result)?;
    println!(
        "max |R² − expected| pairwise {:.2e}, group {:.2e}, group ρ {:.2e}",
        err.pair, err.group, err.rho
    );
    println!("(against the population R² without the finite-n correction: pairwise {:.2e}, group {:.2e})", err.pair_raw, err.group_raw);
    let sim = match sample {
        None => None,
        Some(sample) => {
            let params = SimilarityParams {
                svcca_dims: a.svcca_dims,
                knn_k: a.knn_k,
                knn_sample: a.knn_sample,
                seed: a.seed,
                ridge: Ridge::Fixed(a.lambda),
                ..SimilarityParams::default()
            };
            let s = timed(&mut secs.similarity, || {
                similarity(&train, &test, Some(&sample), &params)
            })?;
            println!(
                "similarity: {} measures with their nulls in {:.1} s",
                s.results.len(),
                secs.similarity
            );
            print_similarity(&s);
            Some(s)
        }
    };
    let t = Instant::now();
    let mut files = write_reports(&a, &train, &test, &result)?;
    if let Some(s) = &sim {
        files.extend(write_similarity(&a.out, s)?);
    }
    secs.reports = t.elapsed().as_secs_f64();
    println!("wrote {} files to {}", files.len(), a.out.display());
    println!("{}", summary(&a, &result, &err, &secs, gflops));
    Ok(())
}

/// Per measure: the mean over pairs of the value, the null and the calibrated value.
fn print_similarity(s: &Similarity) {
    let m = s.names.len();
    for r in &s.results {
        let pairs: Vec<(usize, usize)> = (0..m)
            .flat_map(|i| (0..m).map(move |j| (i, j)))
            .filter(|&(i, j)| if r.measure.directed() { i != j } else { i > j })
            .collect();
        let mean = |f: &dyn Fn(usize, usize) -> f64| {
            pairs.iter().map(|&(i, j)| f(i, j)).sum::<f64>() / pairs.len().max(1) as f64
        };
        println!(
            "  {:<32} mean over pairs {:>8.4}, null {:>8.4}, calibrated {:>8.4}",
            r.measure.name(),
            mean(&|i, j| r.values.get(i, j)),
            mean(&|i, j| r.null.get(i, j)),
            mean(&|i, j| r.calibrated(i, j)),
        );
    }
}

/// Streams `n` planted rows in batches into the moments of one split (with the similarity
/// accumulators unless `--no-similarity`), with a progress bar; keeps the rows of the seeded
/// mutual k-NN sample of the split.
fn stream_split(
    a: &Args,
    planted: &Planted,
    label: &str,
    n: usize,
    rng: &mut ChaCha8Rng,
    secs: &mut Seconds,
) -> Res<(Moments, Option<KnnSample>)> {
    let mut m = Moments::new(planted.names(), planted.widths())?;
    let widths = planted.widths();
    let d: usize = widths.iter().sum();
    let keep = if a.no_similarity {
        Vec::new()
    } else {
        m.track_similarity(a.seed, 0)?;
        sample_indices(n, a.knn_sample, a.seed)
    };
    let mut kept: Vec<Vec<f64>> = vec![Vec::new(); widths.len()];
    let mut next = 0;
    let style = ProgressStyle::with_template("{msg:>6} [{bar:40}] {pos}/{len} rows ({elapsed})")
        .map_err(|e| LmdError::bad_setting("progress template", "rows", e.to_string()))?;
    let bar = ProgressBar::new(n as u64).with_style(style);
    bar.set_message(label.to_string());
    let mut done = 0;
    while done < n {
        let rows = (a.batch as usize).min(n - done);
        let t = Instant::now();
        let batch = planted.sample(rows, rng);
        secs.sample += t.elapsed().as_secs_f64();
        let t = Instant::now();
        m.update_stacked(&batch)?;
        secs.accumulate += t.elapsed().as_secs_f64();
        while next < keep.len() && keep[next] < done + rows {
            let row = &batch[(keep[next] - done) * d..(keep[next] - done + 1) * d];
            let mut col = 0;
            for (block, &w) in kept.iter_mut().zip(&widths) {
                block.extend(row[col..col + w].iter().map(|&x| x as f64));
                col += w;
            }
            next += 1;
        }
        done += rows;
        bar.set_position(done as u64);
    }
    bar.finish();
    let sample = if keep.is_empty() {
        None
    } else {
        Some(KnnSample::new(planted.names(), widths, kept)?)
    };
    Ok((m, sample))
}

/// Pairwise R², group R² and linear CKA from the moments, timed.
fn analyse(a: &Args, train: &Moments, test: &Moments, secs: &mut Seconds) -> Res<Analysis> {
    let ridge = Ridge::Fixed(a.lambda);
    let cpu0 = lmsplit::process::cpu_seconds().unwrap_or(f64::NAN);
    let pr = timed(&mut secs.pairwise, || pairwise_r2(train, test, ridge))?;
    let fits = a.models * (a.models - 1);
    println!("pairwise: {fits} fits in {:.1} s", secs.pairwise);
    let arithmetic = if a.mixed {
        Arithmetic::MixedF32
    } else {
        Arithmetic::F64
    };
    let group = timed(&mut secs.group, || {
        group_r2_with(train, test, ridge, arithmetic)
    })?;
    println!(
        "group: {} fits ({:?}) in {:.1} s, group ρ = {:.4}",
        a.models,
        group.method,
        secs.group,
        group.rho()
    );
    let cka = timed(&mut secs.cka, || linear_cka(test))?;
    secs.cpu_analysis = lmsplit::process::cpu_seconds().unwrap_or(f64::NAN) - cpu0;
    let wall = secs.pairwise + secs.group + secs.cka;
    println!(
        "analysis from moments: {wall:.1} s wall, {:.1} s CPU",
        secs.cpu_analysis
    );
    Ok(Analysis {
        ridge,
        pairwise_rho: pr.symmetrized(),
        pairwise_r2: pr,
        group,
        cka,
    })
}

/// Runs `f`, storing its wall-clock seconds in `slot`.
fn timed<T>(slot: &mut f64, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let value = f();
    *slot = t.elapsed().as_secs_f64();
    value
}

/// Compares every R² with the planted truth, corrected for the finite training set.
fn errors_vs_truth(a: &Args, planted: &Planted, result: &Analysis) -> Res<Errors> {
    let (truth, gtruth) = (planted.pairwise_r2()?, planted.group_r2()?);
    let (pr, group) = (&result.pairwise_r2, &result.group);
    let (mut pair, mut pair_raw, mut group_err, mut group_raw) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    for i in 0..a.models {
        for j in (0..a.models).filter(|&j| j != i) {
            let want = expected_held_out_r2(truth.get(i, j), a.n_train, a.dim);
            pair = pair.max((pr.get(i, j) - want).abs());
            pair_raw = pair_raw.max((pr.get(i, j) - truth.get(i, j)).abs());
        }
    }
    let p_group = (a.models - 1) * a.dim;
    for (got, pop) in group.r2.iter().zip(&gtruth) {
        group_err = group_err.max((got - expected_held_out_r2(*pop, a.n_train, p_group)).abs());
        group_raw = group_raw.max((got - pop).abs());
    }
    let expected_rho = gtruth
        .iter()
        .map(|&r| expected_held_out_r2(r, a.n_train, p_group))
        .sum::<f64>()
        / a.models as f64;
    Ok(Errors {
        pair,
        pair_raw,
        group: group_err,
        group_raw,
        rho: (group.rho() - expected_rho).abs(),
    })
}

/// The analysis' tables and heatmaps, and Table 2 (models × settings, last row group ρ) with a
/// pseudo-inverse column under `--pinv`.
fn write_reports(
    a: &Args,
    train: &Moments,
    test: &Moments,
    result: &Analysis,
) -> Res<Vec<PathBuf>> {
    let mut files = tables::write_analysis(&a.out, result)?;
    let mut settings = vec![(result.ridge.label(), &result.group)];
    let pinv_group = if a.pinv {
        Some(group_r2(train, test, Ridge::None)?)
    } else {
        None
    };
    if let Some(g) = &pinv_group {
        println!(
            "group under pinv ({:?}): group ρ = {:.4}",
            g.method,
            g.rho()
        );
        settings.push((Ridge::None.label(), g));
    }
    files.extend(tables::group_table(&settings)?.write_all(&a.out, "table2")?);
    Ok(files)
}

/// The JSON summary printed as the last line.
fn summary(
    a: &Args,
    result: &Analysis,
    err: &Errors,
    secs: &Seconds,
    gflops: f64,
) -> serde_json::Value {
    serde_json::json!({
        "example": "lmd_synthetic",
        "models": a.models, "dim": a.dim, "latent": a.latent,
        "n_train": a.n_train, "n_test": a.n_test, "ridge": result.ridge.label(),
        "group_method": format!("{:?}", result.group.method),
        "group_rho": result.group.rho(),
        "max_abs_err_pairwise_r2": err.pair,
        "max_abs_err_group_r2": err.group,
        "abs_err_group_rho": err.rho,
        "max_abs_err_vs_population": {"pairwise": err.pair_raw, "group": err.group_raw},
        "accumulate_gflops": gflops,
        "seconds": {
            "sample": secs.sample, "accumulate": secs.accumulate, "pairwise": secs.pairwise,
            "group": secs.group, "cka": secs.cka, "similarity": secs.similarity,
            "reports": secs.reports,
            "analysis_total": secs.pairwise + secs.group + secs.cka,
        },
        "cpu_seconds_analysis": secs.cpu_analysis,
        "out_dir": a.out.display().to_string(),
    })
}
