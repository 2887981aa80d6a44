//! Helpers shared by the benches (included with `mod common;`).

// Each bench uses some of these helpers, not all.
#![allow(dead_code)]

use std::time::Instant;

use faer::{Accum, Mat};

/// GFLOP/s of an m × k by k × n faer GEMM in precision `T` with the global parallelism: one
/// warm-up product, then the mean over `reps` (the peer rate a kernel is set against).
pub fn faer_gemm_gflops<T: faer::traits::ComplexField + Copy>(
    m: usize,
    k: usize,
    n: usize,
    one: T,
    reps: usize,
) -> f64 {
    let a = Mat::<T>::from_fn(m, k, |_, _| one);
    let b = Mat::<T>::from_fn(k, n, |_, _| one);
    let mut c = Mat::<T>::zeros(m, n);
    let mut product = || {
        faer::linalg::matmul::matmul(
            c.as_mut(),
            Accum::Replace,
            a.as_ref(),
            b.as_ref(),
            one,
            faer::get_global_parallelism(),
        )
    };
    product();
    let t = Instant::now();
    for _ in 0..reps.max(1) {
        product();
    }
    2.0 * (m * k * n) as f64 * reps.max(1) as f64 / t.elapsed().as_secs_f64() / 1e9
}

/// The environment variable `name` as a number, or `default` where it is unset or not one.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
