//! Row reductions in 8 lanes: a fixed summation order the compiler can vectorise without
//! reassociating (so both dispatch variants agree bit for bit).

use crate::LANES;

/// Σ x in 8 lane accumulators, then the lanes, then the tail.
#[inline(always)]
pub(crate) fn lane_sum(xs: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let mut chunks = xs.chunks_exact(LANES);
    for c in &mut chunks {
        for (a, v) in acc.iter_mut().zip(c) {
            *a += *v;
        }
    }
    let mut s = 0.0;
    for v in chunks.remainder() {
        s += *v;
    }
    acc.iter().sum::<f32>() + s
}

/// max x (−∞ for an empty row). NaN entries are skipped here; callers see them through the
/// exponentials, which keep NaN.
#[inline(always)]
pub(crate) fn lane_max(xs: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let mut chunks = xs.chunks_exact(LANES);
    for c in &mut chunks {
        for (a, v) in acc.iter_mut().zip(c) {
            *a = if *v > *a { *v } else { *a };
        }
    }
    let mut m = f32::NEG_INFINITY;
    for v in chunks.remainder().iter().chain(&acc) {
        m = if *v > m { *v } else { m };
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lane_reductions_match_scalar_loops() {
        let row: Vec<f32> = (0..37)
            .map(|i| ((i * 13 % 17) as f32) * 0.7 - 5.0)
            .collect();
        let m = row.iter().fold(f32::NEG_INFINITY, |a, &x| a.max(x));
        assert_eq!(lane_max(&row), m);
        assert_eq!(lane_max(&[]), f32::NEG_INFINITY);
        let s: f64 = row.iter().map(|&x| x as f64).sum();
        assert!((lane_sum(&row) as f64 - s).abs() < 1e-5 * s.abs().max(1.0));
        assert_eq!(lane_sum(&[]), 0.0);
    }
}
