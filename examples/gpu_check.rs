//! A target device's numbers against the CPU's, in one command: two-tower gradients and short
//! training runs (f32, and bf16 compute against f32), pretrained encoders' pooled embeddings
//! (f32, bf16, and against transformers' reference outputs) and LMD's joint moments.
//!
//! ```text
//! # here (CPU target against the CPU reference: the f32 comparisons are trivially equal, the
//! # bf16 ones are real because candle's CPU backend computes bf16 through the composed graph)
//! cargo run --example gpu_check -- --device cpu
//! # build for the GPU machine (see docs/gpu.md), then run the binary there without cargo
//! source ../shared/tools/cuda-env.sh
//! cargo build --release --features cuda --example gpu_check
//! bin/gpu_check --device cuda --no-minilm --fixtures crates/lmd/tests/fixtures --out out/gpu_check
//! ```
//!
//! Checks (one line each on stdout: name, metric, measured value, bound, PASS/FAIL, detail):
//! - `grad/<style>/<shape>/init`: the initial weights are bit-identical (drawn on the host);
//!   `/f32`: every variable's f32 gradient within [`towers_checks::GRAD_REL_TOL`] of the CPU's,
//!   relative to its largest entry; `/finite-nonzero`: every variable gets a finite, non-zero
//!   gradient on the target. Styles ELMo, GPT, BERT; shapes `tiny` and `wide`.
//! - `train/<style>/<shape>/f32`, `/bf16`: `--steps` AdamW updates from the same weights and
//!   batches on the target (f32, then bf16 compute on f32 masters) against the CPU in f32,
//!   each step's loss within the stated tolerance; a NaN fails.
//! - `lstm/<shape>/value`, `/grad`: one LSTM layer's recurrence (the fused whole-sequence op,
//!   on CUDA cuBLAS plus our nvcc-compiled kernels) on the target against the CPU's, with PADs:
//!   hidden states within [`towers_checks::LSTM_VALUE_TOL`], gradients of gx and W_hh within
//!   [`towers_checks::GRAD_REL_TOL`]. Shapes `tiny` (B 3, T 9, C 8) and `wide` (16, 64, 512).
//! - `lstm_bf16/<shape>/value`, `/grad`: a tower's two directions as one chained recurrence
//!   (on CUDA the bf16 op: bf16 GEMMs batched over the chains, f32 gates and cell state) in
//!   bf16 on the target against the CPU's f32 op: within [`towers_checks::LSTM_BF16_VALUE_TOL`]
//!   and [`towers_checks::LSTM_BF16_GRAD_TOL`]. Shapes as `lstm/*`, two chains each.
//! - `attn/f32/{value,grad}`, `attn/bf16/{value,grad}`: multi-head attention (on CUDA our
//!   kernels, `attention.cu`) at T 128 with 12 heads of 32, causal and not, with PADs, on the
//!   target against the CPU's fused op in f32: the output and dq, dk, dv within
//!   [`attention_checks::ATTN_VALUE_TOL`] and [`attention_checks::ATTN_GRAD_TOL`] (bf16:
//!   [`attention_checks::ATTN_BF16_VALUE_TOL`], [`attention_checks::ATTN_BF16_GRAD_TOL`]).
//! - `adamw/f32`: three AdamW updates on the target against the CPU, same weights and host-made
//!   gradients: equal bit for bit (both one fused f32 pass, one rounding per operation).
//! - `update/f32`, `update/f32/norm`: three clipped AdamW updates of six parameters in one pass
//!   (on CUDA `adamw_multi.cu`: norm, clip factor and update in three launches) against the
//!   CPU: weights and moments equal bit for bit, norms within
//!   [`towers_checks::UPDATE_NORM_TOL`].
//! - `enc/<model>/f32/{rel,cos}`, `/bf16/{rel,cos}`, `/transformers`: the parity fixtures under
//!   `--fixtures` and MiniLM (`--minilm`, skipped with `--no-minilm`): pooled embeddings of
//!   eight texts on the target against the CPU in f32, and the target's against transformers.
//! - `moments/embed/{mean,cov}`: joint moments streamed from the target's embeddings against
//!   the CPU's; `moments/f64/{mean,cov}`: the same embeddings accumulated on the target
//!   (`Moments::update_tensor`) against the host.
//!
//! `--no-encoders` leaves the `enc/*` and `moments/*` checks out (the two-tower checks alone, as
//! `scripts/gpu_measure.sh sanitize` runs them under compute-sanitizer).
//!
//! The JSON report (`<out>/gpu_check.json`) lists every check with its result. The exit code is
//! 1 when any check fails, naming the failed checks; errors are printed as sentences.

#[path = "gpu_check/attention_checks.rs"]
mod attention_checks;
mod common;
#[path = "gpu_check/compare.rs"]
mod compare;
#[path = "gpu_check/encoder_checks.rs"]
mod encoder_checks;
#[path = "gpu_check/linear_checks.rs"]
mod linear_checks;
#[path = "gpu_check/report.rs"]
mod report;
#[path = "gpu_check/towers_checks.rs"]
mod towers_checks;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use candle_core::{Device, DeviceLocation};
use clap::Parser;
use serde_json::json;

use report::{guarded, BoxError, Check};
use towers_checks::Shape;

/// The parity fixtures where this binary was built (absent on another machine: then the
/// relative `crates/lmd/tests/fixtures` of a checkout's root is used).
const BUILT_FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/crates/lmd/tests/fixtures");

#[derive(Parser, Debug)]
#[command(
    about = "Correctness of a target device (GPU) against the CPU: gradients, bf16 \
                   training, encoders, moments"
)]
struct Args {
    /// Target device: cpu (against itself: f32 equal by construction, bf16 real), cuda or
    /// cuda:<N> (a `--features cuda` build); default: cuda when this build has it and a GPU is
    /// present, else cpu.
    #[arg(long)]
    device: Option<String>,
    /// Seed of the model weights and the batches.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Training updates per run in the training checks.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    steps: u64,
    /// Folder of the encoder parity fixtures (default: the built checkout's, else
    /// `crates/lmd/tests/fixtures`).
    #[arg(long)]
    fixtures: Option<PathBuf>,
    /// The all-MiniLM-L6-v2 folder (default: `../shared/models/` beside the checkout).
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/models/all-MiniLM-L6-v2"))]
    minilm: PathBuf,
    /// Leave MiniLM out (its 90 MB folder does not travel to the GPU machine).
    #[arg(long)]
    no_minilm: bool,
    /// Leave the encoders and the moments out: the two-tower checks alone (e.g. under
    /// compute-sanitizer, where every kernel runs many times slower).
    #[arg(long)]
    no_encoders: bool,
    /// Two-tower shapes: tiny, wide (comma separated).
    #[arg(long, value_delimiter = ',', default_value = "tiny,wide")]
    shapes: Vec<String>,
    /// Output folder of `gpu_check.json`.
    #[arg(long, default_value = "out/gpu_check")]
    out: PathBuf,
}

/// Runs the checks; exit code 1 (with an error sentence) when any fails or the run cannot start.
fn main() -> ExitCode {
    common::quiet_on_broken_pipe();
    // candle allocates per op: keep freed buffers for reuse (see lmsplit::alloc).
    lmsplit::alloc::retain_freed_memory();
    common::finish(run(Args::parse()))
}

/// `cpu` or `cuda:<id>`.
fn device_name(d: &Device) -> String {
    match d.location() {
        DeviceLocation::Cpu => "cpu".into(),
        DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
        DeviceLocation::Metal { gpu_id } => format!("metal:{gpu_id}"),
    }
}

/// The fixtures folder: the flag, else the built checkout's, else the relative one.
fn fixtures_dir(arg: Option<PathBuf>) -> PathBuf {
    arg.unwrap_or_else(|| {
        let built = PathBuf::from(BUILT_FIXTURES);
        if built.is_dir() {
            built
        } else {
            PathBuf::from("crates/lmd/tests/fixtures")
        }
    })
}

/// Gradient and training checks of every style and shape.
fn towers_section(shapes: &[String], target: &Device, seed: u64, steps: usize) -> Vec<Check> {
    let mut checks = Vec::new();
    for style in lmsplit::towers::registered() {
        for name in shapes {
            let label = format!("{style}/{name}");
            eprintln!("gpu_check: two-tower {label}");
            match Shape::new(style.clone(), name) {
                Ok(shape) => {
                    checks.extend(guarded(&format!("grad/{label}"), || {
                        towers_checks::gradient_checks(&shape, target, seed)
                    }));
                    checks.extend(guarded(&format!("train/{label}"), || {
                        towers_checks::training_checks(&shape, target, seed, steps)
                    }));
                }
                Err(e) => checks.push(Check::failed(format!("shape/{label}"), e.as_ref())),
            }
        }
    }
    eprintln!("gpu_check: the output layer's loss");
    checks.extend(guarded("nll", || {
        towers_checks::output_loss_checks(target, seed)
    }));
    eprintln!("gpu_check: attention");
    checks.extend(guarded("attn", || {
        attention_checks::attention_checks(target, seed)
    }));
    eprintln!("gpu_check: a Linear layer");
    checks.extend(guarded("linear", || {
        linear_checks::linear_checks(target, seed)
    }));
    eprintln!("gpu_check: AdamW");
    checks.extend(guarded("adamw", || {
        towers_checks::adamw_checks(target, seed)
    }));
    eprintln!("gpu_check: clipping and AdamW in one pass");
    checks.extend(guarded("update", || {
        towers_checks::update_checks(target, seed)
    }));
    for name in shapes {
        eprintln!("gpu_check: LSTM recurrence {name}");
        checks.extend(guarded(&format!("lstm/{name}"), || {
            towers_checks::lstm_checks(name, target, seed)
        }));
        checks.extend(guarded(&format!("lstm_bf16/{name}"), || {
            towers_checks::lstm_bf16_checks(name, target, seed)
        }));
    }
    checks
}

/// Every check against the target, the table, the JSON report and the verdict.
fn run(args: Args) -> Result<(), BoxError> {
    let start = Instant::now();
    let target = common::device(args.device.as_deref())?;
    let fixtures = fixtures_dir(args.fixtures.clone());
    let mut notices = Vec::new();
    if target.is_cpu() {
        notices.push(
            "the target is the CPU: the f32 comparisons are equal by construction; the bf16 ones \
             are real (candle's CPU backend computes bf16 through the composed graph)"
                .to_string(),
        );
    }
    let kernels_off: Vec<&str> = lmsplit::towers::cuda_kernels()
        .off()
        .iter()
        .map(|k| k.name())
        .collect();
    if !kernels_off.is_empty() {
        notices.push(format!(
            "{} of our CUDA kernels switched off by {}: {}; the composed candle graph runs in \
             their place",
            kernels_off.len(),
            lmsplit::towers::CUDA_KERNELS_ENV,
            kernels_off.join(", ")
        ));
    }
    // The pool's release threshold as the driver reports it (u64::MAX: freed memory stays
    // mapped across synchronisations; None: no CUDA pool).
    let pool_threshold = lmsplit::kernels::device::pool_release_threshold(&target)?;
    if target.is_cuda() && !common::cuda_options().keep_pool {
        notices.push(format!(
            "the CUDA memory pool releases freed memory at every synchronisation ({}=release)",
            lmsplit::kernels::device::POOL_ENV
        ));
    }
    let specs = if args.no_encoders {
        notices.push("the encoders and the moments are left out (--no-encoders)".to_string());
        Vec::new()
    } else {
        let minilm = minilm_folder(&args, &mut notices)?;
        encoder_checks::encoder_specs(&fixtures, minilm)?
    };
    for n in &notices {
        eprintln!("gpu_check: note: {n}");
    }
    let mut checks = towers_section(&args.shapes, &target, args.seed, args.steps as usize);
    if !args.no_encoders {
        eprintln!("gpu_check: encoders ({}) and moments", specs.len());
        checks.extend(encoder_checks::encoder_section(&specs, &target));
    }
    report::print_table(&checks);
    let meta = json!({
        "target": device_name(&target),
        "reference": "cpu",
        "cuda_kernels": lmsplit::towers::cuda_kernels_enabled(),
        "cuda_kernels_off": kernels_off,
        "cuda_pool_release_threshold": pool_threshold,
        "seed": args.seed,
        "steps": args.steps,
        "shapes": args.shapes,
        "fixtures": fixtures.display().to_string(),
        "encoders": specs.iter().map(|s| s.name.clone()).collect::<Vec<_>>(),
        "seconds": start.elapsed().as_secs_f64(),
    });
    let path = write_report(&args.out, report::to_json(meta, &checks, &notices))?;
    conclude(&checks, &path)
}

/// The MiniLM folder, or `None` (with a notice) under `--no-minilm`; a missing folder is an
/// error that names both ways out.
fn minilm_folder<'a>(
    args: &'a Args,
    notices: &mut Vec<String>,
) -> Result<Option<&'a Path>, BoxError> {
    if args.no_minilm {
        notices.push(format!(
            "MiniLM skipped (--no-minilm): {}",
            args.minilm.display()
        ));
        return Ok(None);
    }
    if !args.minilm.is_dir() {
        return Err(format!(
            "the MiniLM folder {} is missing: pass --minilm DIR, or --no-minilm to skip it",
            args.minilm.display()
        )
        .into());
    }
    Ok(Some(args.minilm.as_path()))
}

/// Writes the report as `<out>/gpu_check.json` and returns its path.
fn write_report(out: &Path, report: serde_json::Value) -> Result<PathBuf, BoxError> {
    std::fs::create_dir_all(out)
        .map_err(|e| format!("cannot create the output folder {}: {e}", out.display()))?;
    let path = out.join("gpu_check.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report)? + "\n")
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}

/// Prints the JSON summary line; an error naming the failed checks when there are any.
fn conclude(checks: &[Check], path: &Path) -> Result<(), BoxError> {
    let failed = report::failed(checks);
    let summary = json!({
        "checks": checks.len(),
        "failed": failed.len(),
        "report": path.display().to_string(),
    });
    println!("{summary}");
    if failed.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{} of {} checks failed: {}",
        failed.len(),
        checks.len(),
        failed.join(", ")
    )
    .into())
}
