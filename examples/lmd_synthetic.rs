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
//! `cargo run --release --example lmd_synthetic -- --models 12 --dim 768 --n-train 20000 --n-test 5000`
//! (add `--mixed` for the group path with its f32 product, `--pinv` for a pseudo-inverse column)

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use lmsplit::lmd::analysis::{group_r2, group_r2_with, pairwise_r2, Arithmetic};
use lmsplit::lmd::cka::linear_cka;
use lmsplit::lmd::fit::Ridge;
use lmsplit::lmd::moments::Moments;
use lmsplit::lmd::synthetic::{Planted, PlantedSpec};
use lmsplit::lmd::{analysis, tables};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

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
    /// Rows per streamed batch.
    #[arg(long, default_value_t = 1_000)]
    batch: usize,
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
}

/// Expected held-out R² of an OLS fit with intercept on p Gaussian regressors from n samples.
fn finite_n_r2(population: f64, n: usize, p: usize) -> f64 {
    let (n, p) = (n as f64, p as f64);
    1.0 - (1.0 - population) * (n + 1.0) * (n - 2.0) / (n * (n - p - 2.0))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = Args::parse();
    let spec = PlantedSpec {
        models: a.models,
        dim: a.dim,
        latent: a.latent,
        seed: a.seed,
        ..PlantedSpec::default()
    };
    let planted = Planted::new(spec)?;
    let (names, widths) = (planted.names(), planted.widths());
    let d_total = a.models * a.dim;
    println!(
        "planted {} models × {} dims (D = {d_total}, latent {}), train {} / test {} samples",
        a.models, a.dim, a.latent, a.n_train, a.n_test
    );

    let mut rng = ChaCha8Rng::seed_from_u64(a.seed ^ 0x5eed);
    let (mut t_sample, mut t_acc) = (0.0, 0.0);
    let mut splits = Vec::new();
    for (label, n) in [("train", a.n_train), ("test", a.n_test)] {
        let mut m = Moments::new(names.clone(), widths.clone())?;
        let bar = ProgressBar::new(n as u64).with_style(ProgressStyle::with_template(
            "{msg:>6} [{bar:40}] {pos}/{len} rows ({elapsed})",
        )?);
        bar.set_message(label);
        let mut done = 0;
        while done < n {
            let rows = a.batch.min(n - done);
            let t = Instant::now();
            let batch = planted.sample(rows, &mut rng);
            t_sample += t.elapsed().as_secs_f64();
            let t = Instant::now();
            m.update_stacked(&batch)?;
            t_acc += t.elapsed().as_secs_f64();
            done += rows;
            bar.set_position(done as u64);
        }
        bar.finish();
        splits.push(m);
    }
    let (train, test) = (&splits[0], &splits[1]);
    let gflops = (a.n_train + a.n_test) as f64 * (d_total * (d_total + 1)) as f64 / t_acc / 1e9;
    println!("moments: {t_acc:.1} s ({gflops:.1} GFLOP/s, lower-triangle Gram in f64); sampling {t_sample:.1} s");

    let ridge = Ridge::Fixed(a.lambda);
    let cpu0 = lmsplit::process::cpu_seconds().unwrap_or(f64::NAN);
    let t = Instant::now();
    let pr = pairwise_r2(train, test, ridge)?;
    let t_pair = t.elapsed().as_secs_f64();
    println!(
        "pairwise: {} fits in {t_pair:.1} s",
        a.models * (a.models - 1)
    );
    let arithmetic = if a.mixed {
        Arithmetic::MixedF32
    } else {
        Arithmetic::F64
    };
    let t = Instant::now();
    let group = group_r2_with(train, test, ridge, arithmetic)?;
    let t_group = t.elapsed().as_secs_f64();
    println!(
        "group: {} fits ({:?}) in {t_group:.1} s, group ρ = {:.4}",
        a.models,
        group.method,
        group.rho()
    );
    let t = Instant::now();
    let cka = linear_cka(test)?;
    let t_cka = t.elapsed().as_secs_f64();
    let cpu_analysis = lmsplit::process::cpu_seconds().unwrap_or(f64::NAN) - cpu0;
    println!(
        "analysis from moments: {:.1} s wall, {cpu_analysis:.1} s CPU",
        t_pair + t_group + t_cka
    );

    // Compare with the planted truth, corrected for the finite training set.
    let truth = planted.pairwise_r2()?;
    let gtruth = planted.group_r2()?;
    let mut err_pair: f64 = 0.0;
    let mut err_pair_raw: f64 = 0.0;
    for i in 0..a.models {
        for j in (0..a.models).filter(|&j| j != i) {
            let want = finite_n_r2(truth.get(i, j), a.n_train, a.dim);
            err_pair = err_pair.max((pr.get(i, j) - want).abs());
            err_pair_raw = err_pair_raw.max((pr.get(i, j) - truth.get(i, j)).abs());
        }
    }
    let p_group = (a.models - 1) * a.dim;
    let mut err_group: f64 = 0.0;
    let mut err_group_raw: f64 = 0.0;
    for (got, pop) in group.r2.iter().zip(&gtruth) {
        err_group = err_group.max((got - finite_n_r2(*pop, a.n_train, p_group)).abs());
        err_group_raw = err_group_raw.max((got - pop).abs());
    }
    let err_rho = (group.rho()
        - gtruth
            .iter()
            .map(|&r| finite_n_r2(r, a.n_train, p_group))
            .sum::<f64>()
            / a.models as f64)
        .abs();
    println!(
        "max |R² − expected| pairwise {err_pair:.2e}, group {err_group:.2e}, group ρ {err_rho:.2e}"
    );
    println!("(against the population R² without the finite-n correction: pairwise {err_pair_raw:.2e}, group {err_group_raw:.2e})");

    let t = Instant::now();
    let result = analysis::Analysis {
        ridge,
        pairwise_rho: pr.symmetrized(),
        pairwise_r2: pr,
        group,
        cka,
    };
    let mut files = tables::write_analysis(&a.out, &result)?;
    // Table 2: models × settings, last row group ρ.
    let mut settings = vec![(ridge.label(), &result.group)];
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
    let t_reports = t.elapsed().as_secs_f64();
    println!("wrote {} files to {}", files.len(), a.out.display());

    let json = serde_json::json!({
        "example": "lmd_synthetic",
        "models": a.models, "dim": a.dim, "latent": a.latent,
        "n_train": a.n_train, "n_test": a.n_test, "ridge": ridge.label(),
        "group_method": format!("{:?}", result.group.method),
        "group_rho": result.group.rho(),
        "max_abs_err_pairwise_r2": err_pair,
        "max_abs_err_group_r2": err_group,
        "abs_err_group_rho": err_rho,
        "max_abs_err_vs_population": {"pairwise": err_pair_raw, "group": err_group_raw},
        "accumulate_gflops": gflops,
        "seconds": {
            "sample": t_sample, "accumulate": t_acc, "pairwise": t_pair,
            "group": t_group, "cka": t_cka, "reports": t_reports,
            "analysis_total": t_pair + t_group + t_cka,
        },
        "cpu_seconds_analysis": cpu_analysis,
        "out_dir": a.out.display().to_string(),
    });
    println!("{json}");
    Ok(())
}
