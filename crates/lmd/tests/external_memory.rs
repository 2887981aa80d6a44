//! Peak memory of the streamed readers: `read_train_test` on a folder of `.npy` files runs in a
//! child process (this test binary again), whose peak resident set (`VmHWM`) is compared at n
//! and 4n rows. Streaming keeps it O(D² + chunk · D): reading whole files would add the files'
//! size (twice, widened to f64) at 4n.
//!
//! The measurement behind docs/lmd.md is the ignored test `measure_peak_rss`:
//! `LMD_MEMORY_SIZES=12x256x10000x2500,12x256x40000x10000,12x768x20000x5000 cargo test -p
//! lmsplit-lmd --test external_memory -- --ignored --nocapture measure_peak_rss`
//! (M×D×N_TRAIN×N_TEST; files are written under `LMD_MEMORY_DIR`, default the system's
//! temporary folder, and kept for the next run; `LMD_MEMORY_ANALYSIS=1` also runs the whole
//! analysis in the child and prints its peak and seconds).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use lmd::analysis::{analyze_with, Arithmetic};
use lmd::external::{read_train_test, write_npy, ReadOptions};
use lmd::fit::Ridge;
use lmd::moments::Accumulation;

const CHILD: &str = "LMD_MEMORY_CHILD_DIR";

/// Peak resident set of this process in bytes (`VmHWM` of /proc/self/status).
fn peak_rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status (Linux)");
    let line = s.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM");
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
}

/// Writes M models × D columns, `n_train` and `n_test` rows of f32 (cheap deterministic values
/// with a shared component), one folder per model; kept when already there.
fn write_folder(dir: &Path, m: usize, d: usize, n_train: usize, n_test: usize) -> u64 {
    let mut bytes = 0;
    for (split, n) in [("train", n_train), ("test", n_test)] {
        for model in 0..m {
            let folder = dir.join(format!("model{model:02}"));
            let file = folder.join(format!("{split}.npy"));
            bytes += (n * d * 4) as u64;
            if file.exists() {
                continue;
            }
            std::fs::create_dir_all(&folder).unwrap();
            let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ (model as u64 * 7919 + n as u64);
            let data: Vec<f32> = (0..n * d)
                .map(|k| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let noise = (state >> 40) as f32 / (1u64 << 24) as f32;
                    let shared = ((k / d * 31 + k % d * 17) % 101) as f32 / 101.0;
                    10.0 + shared + noise
                })
                .collect();
            let tmp = folder.join(format!("{split}.npy.part"));
            write_npy(&tmp, n, d, &data).unwrap();
            std::fs::rename(&tmp, &file).unwrap();
        }
    }
    bytes
}

/// Runs the child on `dir`: (peak RSS bytes, seconds, rows of train); with
/// `LMD_MEMORY_ANALYSIS` set the child also runs the analysis and prints its own line.
fn measure(dir: &Path) -> (u64, f64, u64) {
    measure_with(dir, false)
}

/// [`measure`], with the f32 products (`Accumulation::F32Products`) when `f32` is set.
fn measure_with(dir: &Path, f32: bool) -> (u64, f64, u64) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    if f32 {
        cmd.env("LMD_MEMORY_F32", "1");
    }
    let out = cmd
        .args([
            "child_reads_the_folder",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    if let Some(l) = text.lines().find_map(|l| l.split_once("ANALYSIS ")) {
        println!("analysis (peak RSS bytes, seconds, group rho): {}", l.1);
    }
    let line = text
        .lines()
        .find_map(|l| l.split_once("MEASURED ").map(|(_, v)| v))
        .unwrap_or_else(|| {
            panic!(
                "child failed: {text}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let v: Vec<f64> = line
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    (v[0] as u64, v[1], v[2] as u64)
}

/// Not a test of its own: the child process of the measurements (does nothing without the
/// folder in its environment).
#[test]
fn child_reads_the_folder() {
    let Ok(dir) = std::env::var(CHILD) else {
        return;
    };
    let opts = ReadOptions {
        accumulation: if std::env::var("LMD_MEMORY_F32").is_ok() {
            Accumulation::F32Products
        } else {
            Accumulation::F64
        },
        ..ReadOptions::default()
    };
    let t0 = Instant::now();
    let tt = read_train_test(&dir, &opts).unwrap();
    let secs = t0.elapsed().as_secs_f64();
    println!("MEASURED {} {secs} {}", peak_rss(), tt.train.n());
    if std::env::var("LMD_MEMORY_ANALYSIS").is_ok() {
        // The whole analysis as lmd_external runs it (f64, ridge 1e-6), after the moments.
        let t1 = Instant::now();
        let a = analyze_with(&tt.train, &tt.test, Ridge::Fixed(1e-6), Arithmetic::F64).unwrap();
        println!(
            "ANALYSIS {} {} group_rho {}",
            peak_rss(),
            t1.elapsed().as_secs_f64(),
            a.group.rho()
        );
    }
}

#[test]
fn peak_memory_does_not_grow_with_the_rows() {
    let root = tempfile::tempdir().unwrap();
    let (m, d) = (4, 256);
    let small = root.path().join("n");
    let large = root.path().join("4n");
    let b_small = write_folder(&small, m, d, 6000, 1500);
    let b_large = write_folder(&large, m, d, 24000, 6000);
    let (rss_small, _, n_small) = measure(&small);
    let (rss_large, _, n_large) = measure(&large);
    assert_eq!((n_small, n_large), (6000, 24000));
    let grew = rss_large.saturating_sub(rss_small);
    println!("files {b_small} -> {b_large} bytes; peak RSS {rss_small} -> {rss_large} (+{grew})");
    // Whole-file reading would add at least the extra file bytes; streaming adds nothing but
    // allocator noise.
    assert!(
        grew < (b_large - b_small) / 8,
        "peak RSS grew by {grew} bytes for {} more file bytes",
        b_large - b_small
    );
}

/// faer's square GEMM rate (GFLOP/s, 2 n³ flops, best of 3) in f64 and in f32.
fn gemm_rates(n: usize) -> (f64, f64) {
    macro_rules! rate {
        ($t:ty) => {{
            let a = faer::Mat::<$t>::from_fn(n, n, |i, j| ((i * 31 + j * 17) % 101) as $t / 101.0);
            let mut c = faer::Mat::<$t>::zeros(n, n);
            let mut best = f64::INFINITY;
            for _ in 0..3 {
                let t = Instant::now();
                faer::linalg::matmul::matmul(
                    c.as_mut(),
                    faer::Accum::Replace,
                    a.as_ref(),
                    a.transpose(),
                    1.0,
                    faer::get_global_parallelism(),
                );
                best = best.min(t.elapsed().as_secs_f64());
            }
            2.0 * (n as f64).powi(3) / best / 1e9
        }};
    }
    (rate!(f64), rate!(f32))
}

#[test]
#[ignore = "writes up to a GB of files and runs minutes: the measurement of docs/lmd.md; run it with cargo test --release -p lmsplit-lmd --test external_memory -- --ignored measure_peak_rss"]
fn measure_peak_rss() {
    let sizes = std::env::var("LMD_MEMORY_SIZES")
        .unwrap_or_else(|_| "12x256x10000x2500,12x256x40000x10000".to_string());
    let root = std::env::var("LMD_MEMORY_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir().join("lmd_memory"));
    println!("| M × D | n train + test | files | peak RSS | f64 Gram (both splits) | read + accumulate s | GFLOP/s (n·D² / s) |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for spec in sizes.split(',') {
        let v: Vec<usize> = spec.split('x').map(|x| x.parse().unwrap()).collect();
        let (m, d, n_train, n_test) = (v[0], v[1], v[2], v[3]);
        let dir = root.join(spec);
        let bytes = write_folder(&dir, m, d, n_train, n_test);
        let (rss, secs, _) = measure(&dir);
        let (rss32, secs32, _) = measure_with(&dir, true);
        let dd = (m * d) as f64;
        let gib = |b: f64| b / (1u64 << 30) as f64;
        println!(
            "| {m} × {d} | {n_train} + {n_test} | {:.2} GiB | {:.3} GiB | {:.3} GiB | {secs:.1} | {:.0} |",
            gib(bytes as f64),
            gib(rss as f64),
            gib(2.0 * dd * dd * 8.0),
            (n_train + n_test) as f64 * dd * dd / secs / 1e9,
        );
        println!(
            "|   f32 products | | | {:.3} GiB | | {secs32:.1} | {:.0} |",
            gib(rss32 as f64),
            (n_train + n_test) as f64 * dd * dd / secs32 / 1e9,
        );
    }
    let (f64_rate, f32_rate) = gemm_rates(2048);
    println!("faer square GEMM 2048 (same process, best of 3): f64 {f64_rate:.0} GFLOP/s, f32 {f32_rate:.0} GFLOP/s");
}
