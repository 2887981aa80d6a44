//! LMD on embeddings computed elsewhere: reads a folder of external embeddings
//! (`lmd::external`: safetensors, `.npy`, `torch.save` dicts, the reference's `embeddings.pt`),
//! accumulates one moment matrix per split, runs the whole analysis (pairwise R² and ρ, group R²
//! and ρ, CKA), writes the reports, and with `--reference` compares every number with the
//! reference implementation's JSON written by `scripts/lmd_reference_parity.py`. Prints a JSON
//! object as its last line.
//!
//! `cargo run --release --example lmd_external -- --embeddings DIR --out out/lmd_external
//!  [--reference DIR/reference.json]`
//!
//! `--moments-only` stops after the two splits' moments (streamed: memory O(D² + chunk·D));
//! `--generate M,D,N_TRAIN,N_TEST` first writes planted float32 `.npy` embeddings of M models
//! of width D into `--embeddings` (one folder per model) and exits. Every run prints its peak
//! resident memory (`VmHWM`).
//!
//! With `--out` (and without `--moments-only`), the similarity measures of `lmd::similarity`
//! are accumulated in the same pass and written beside the analysis (`similarity.*`, one
//! heatmap per measure, the measures' agreement; mutual k-NN on `--knn-sample` test rows drawn
//! by `--seed`): the moments of each split then hold a second D × D Gram (the null).
//! `--no-similarity` leaves them out.

mod common;

use std::error::Error;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use lmsplit::lmd::analysis::{analyze_with, Analysis, Arithmetic};
use lmsplit::lmd::external::{open_split, read_train_test, ReadOptions, TrainTest};
use lmsplit::lmd::fit::Ridge;
use lmsplit::lmd::similarity::{sample_indices, similarity, write_similarity, SimilarityParams};
use lmsplit::lmd::tables;
use serde_json::{json, Value};

#[derive(Parser, Debug)]
#[command(about = "LMD on external embeddings (train and test split of one folder)")]
struct Args {
    /// Folder of embeddings (layouts: see `lmd::external`).
    #[arg(long)]
    embeddings: PathBuf,
    /// Ridge α on the covariance (the reference's default 1e-6).
    #[arg(long, default_value_t = 1e-6)]
    alpha: f64,
    /// Apply α as the reference does, to the n−1-normalised covariance (`torch.cov`): our
    /// moments divide by n, so the equivalent ridge is α (n−1)/n.
    #[arg(long)]
    unbiased: bool,
    /// Group fits with the f32 product on whitened matrices (`Arithmetic::MixedF32`).
    #[arg(long)]
    mixed: bool,
    /// Models to read, comma separated, in this order (default: all, by name).
    #[arg(long, value_delimiter = ',')]
    models: Option<Vec<String>>,
    /// Tensor name in per-model files holding several tensors.
    #[arg(long)]
    tensor: Option<String>,
    /// Output folder for the tables (none written when absent).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The reference's JSON (`scripts/lmd_reference_parity.py --out`) to compare with.
    #[arg(long)]
    reference: Option<PathBuf>,
    /// Form the moments' products in f32 over chunks of 1024 rows, accumulated in f64
    /// (`Accumulation::F32Products`: faster, each Gram entry within ≈ 6·10⁻⁵ of Σ|x_i||x_j|).
    #[arg(long)]
    f32_products: bool,
    /// Stop after reading both splits into their moments (no analysis).
    #[arg(long)]
    moments_only: bool,
    /// Write planted embeddings `M,D,N_TRAIN,N_TEST` (float32 `.npy`, one folder per model)
    /// into `--embeddings`, then exit.
    #[arg(long, value_delimiter = ',')]
    generate: Option<Vec<usize>>,
    /// Leave out the similarity measures (see the module documentation).
    #[arg(long)]
    no_similarity: bool,
    /// Seed of the similarity nulls and of the mutual k-NN sample.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// SVCCA: top principal directions kept per model.
    #[arg(long, default_value_t = 20)]
    svcca_dims: usize,
    /// Mutual k-NN: neighbours per sequence.
    #[arg(long, default_value_t = 10)]
    knn_k: usize,
    /// Mutual k-NN: test rows sampled.
    #[arg(long, default_value_t = 512)]
    knn_sample: usize,
}

/// Peak resident memory of this process in bytes (Linux `VmHWM`), if known.
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Planted embeddings: u_i = A_i s + 0.5 ε + c_i with a shared latent s of width 32, one
/// folder per model, written one model at a time.
fn generate(dir: &std::path::Path, spec: &[usize]) -> Result<(), Box<dyn Error>> {
    use rand::{Rng, SeedableRng};
    let [models, d, n_train, n_test] = spec else {
        return Err("--generate needs M,D,N_TRAIN,N_TEST".into());
    };
    if spec.contains(&0) {
        return Err(
            format!("--generate {spec:?}: every one of M, D, N_TRAIN, N_TEST must be > 0").into(),
        );
    }
    let latent = 32;
    for (split, n, seed) in [("train", *n_train, 1u64), ("test", *n_test, 2)] {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let s: Vec<f32> = (0..n * latent).map(|_| rng.random::<f32>() - 0.5).collect();
        for m in 0..*models {
            let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(100 + m as u64);
            let a: Vec<f32> = (0..d * latent).map(|_| r.random::<f32>() - 0.5).collect();
            let mut noise = rand_chacha::ChaCha8Rng::seed_from_u64(1000 * seed + m as u64);
            let mut data = vec![0f32; n * d];
            for (row, out) in data.chunks_exact_mut(*d).enumerate() {
                let sr = &s[row * latent..(row + 1) * latent];
                for (j, o) in out.iter_mut().enumerate() {
                    let aj = &a[j * latent..(j + 1) * latent];
                    let dot: f32 = aj.iter().zip(sr).map(|(x, y)| x * y).sum();
                    *o = dot + 0.5 * (noise.random::<f32>() - 0.5) + 10.0 + m as f32;
                }
            }
            let folder = dir.join(format!("model{m:02}"));
            std::fs::create_dir_all(&folder)?;
            lmsplit::lmd::external::write_npy(folder.join(format!("{split}.npy")), n, *d, &data)?;
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    common::quiet_on_broken_pipe();
    common::finish(run(Args::parse()))
}

fn run(args: Args) -> Result<(), Box<dyn Error>> {
    if let Some(spec) = &args.generate {
        generate(&args.embeddings, spec)?;
        println!("{}", json!({ "generated": args.embeddings, "spec": spec }));
        return Ok(());
    }
    lmsplit::alloc::retain_freed_memory();
    let opts = ReadOptions {
        tensor: args.tensor.clone(),
        models: args.models.clone(),
        accumulation: if args.f32_products {
            lmsplit::lmd::moments::Accumulation::F32Products
        } else {
            lmsplit::lmd::moments::Accumulation::F64
        },
    };
    let t0 = Instant::now();
    let with_similarity = args.out.is_some() && !args.moments_only && !args.no_similarity;
    let (
        TrainTest {
            names,
            widths,
            train: m_train,
            test: m_test,
        },
        sample,
    ) = if with_similarity {
        let (train, test) = (
            open_split(&args.embeddings, "train", &opts)?,
            open_split(&args.embeddings, "test", &opts)?,
        );
        let sample = test.sample(&sample_indices(test.rows(), args.knn_sample, args.seed))?;
        let tt = TrainTest {
            names: train.names(),
            widths: train.widths(),
            train: train.to_moments_with_similarity(opts.accumulation, args.seed)?,
            test: test.to_moments_with_similarity(opts.accumulation, args.seed)?,
        };
        (tt, Some(sample))
    } else {
        (read_train_test(&args.embeddings, &opts)?, None)
    };
    let read_and_accumulate = t0.elapsed().as_secs_f64();
    if args.moments_only {
        println!(
            "{}",
            json!({
                "models": names,
                "widths": widths,
                "n_train": m_train.n(),
                "n_test": m_test.n(),
                "seconds": { "read_and_accumulate": read_and_accumulate },
                "peak_rss_bytes": peak_rss(),
            })
        );
        return Ok(());
    }

    let n = m_train.n() as f64;
    let lambda = if args.unbiased {
        args.alpha * (n - 1.0) / n
    } else {
        args.alpha
    };
    let arithmetic = if args.mixed {
        Arithmetic::MixedF32
    } else {
        Arithmetic::F64
    };
    let t2 = Instant::now();
    let a = analyze_with(&m_train, &m_test, Ridge::Fixed(lambda), arithmetic)?;
    let analysis = t2.elapsed().as_secs_f64();
    let t3 = Instant::now();
    let sim = match &sample {
        Some(sample) => {
            let params = SimilarityParams {
                svcca_dims: args.svcca_dims,
                knn_k: args.knn_k,
                knn_sample: args.knn_sample,
                seed: args.seed,
                ridge: Ridge::Fixed(lambda),
                ..SimilarityParams::default()
            };
            Some(similarity(&m_train, &m_test, Some(sample), &params)?)
        }
        None => None,
    };
    let similarity_seconds = t3.elapsed().as_secs_f64();
    if let Some(out) = &args.out {
        std::fs::create_dir_all(out)?;
        tables::write_analysis(out, &a)?;
        if let Some(s) = &sim {
            write_similarity(out, s)?;
        }
    }
    let mut summary = json!({
        "models": names,
        "widths": widths,
        "n_train": m_train.n(),
        "n_test": m_test.n(),
        "lambda": lambda,
        "group_method": format!("{:?}", a.group.method),
        "group_r2": a.group.r2,
        "group_rho": a.group.rho(),
        "seconds": {
            "read_and_accumulate": read_and_accumulate,
            "analysis": analysis,
            "similarity": similarity_seconds,
            "total": t0.elapsed().as_secs_f64(),
        },
        "peak_rss_bytes": peak_rss(),
    });
    if let Some(path) = &args.reference {
        let reference: Value = serde_json::from_str(&std::fs::read_to_string(path)?)?;
        summary["vs_reference"] = compare(&a, &reference)?;
    }
    println!("{summary}");
    Ok(())
}

/// Largest differences from the reference's numbers (matched by model name).
fn compare(a: &Analysis, r: &Value) -> Result<Value, Box<dyn Error>> {
    let names: Vec<String> = serde_json::from_value(r["models"].clone())?;
    let pair: Vec<Vec<f64>> = serde_json::from_value(r["pairwise_r2"].clone())?;
    let group: Vec<f64> = serde_json::from_value(r["group_r2"].clone())?;
    let group_rho = r["group_rho"].as_f64().ok_or("reference: no group_rho")?;
    let n = names.len();
    if group.len() != n || pair.len() != n || pair.iter().any(|row| row.len() != n) {
        return Err(
            format!("reference: group_r2 and pairwise_r2 must cover its {n} models").into(),
        );
    }
    let idx = |name: &str| {
        a.group
            .names
            .iter()
            .position(|n| n == name)
            .ok_or_else(|| format!("reference model {name} not in our analysis"))
    };
    let (mut d_pair, mut d_rho, mut d_group) = (0f64, 0f64, 0f64);
    for (i, ti) in names.iter().enumerate() {
        let oi = idx(ti)?;
        d_group = d_group.max((a.group.r2[oi] - group[i]).abs());
        for (j, tj) in names.iter().enumerate() {
            if i == j {
                continue;
            }
            let oj = idx(tj)?;
            d_pair = d_pair.max((a.pairwise_r2.get(oi, oj) - pair[i][j]).abs());
            let rho = (pair[i][j] + pair[j][i]) / 2.0;
            d_rho = d_rho.max((a.pairwise_rho.get(oi, oj) - rho).abs());
        }
    }
    Ok(json!({
        "reference_dtype": r["dtype"],
        "max_abs_diff_pairwise_r2": d_pair,
        "max_abs_diff_pairwise_rho": d_rho,
        "max_abs_diff_group_r2": d_group,
        "abs_diff_group_rho": (a.group.rho() - group_rho).abs(),
    }))
}
