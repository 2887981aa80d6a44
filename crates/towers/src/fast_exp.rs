//! Softmax rows at vector speed: a vectorisable exp (libm's scalar `expf` took a tenth of a CPU
//! training step) and the per-row NLL/gradient kernel of the fused output layer, compiled for
//! AVX2 and chosen at run time (the default x86-64 target has SSE2 only).
//!
//! exp: Cody–Waite range reduction x = n·ln2 + r, |r| ≤ ln2/2, a degree-7 Taylor polynomial for
//! e^r (relative error < 2e-7 on the reduced range) and 2^n from the exponent bits. Inputs
//! below −87.3 give ~0 (no subnormals), NaN stays NaN.

const LOG2E: f32 = std::f32::consts::LOG2_E;
// ln 2 split so that n·LN2_HI is exact for |n| < 2^9.
const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;
const ROUND: f32 = 12_582_912.0;

/// e^x for x ≤ 88 (callers pass x − max ≤ 0); relative error < 3e-7 where the result is normal.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    let x = x.clamp(-87.3, 88.0);
    // Round to nearest by the 1.5·2^23 trick: `f32::round` is a libm call without SSE4.1.
    let n = (x * LOG2E + ROUND) - ROUND;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    // Horner form of Σ_{k≤7} r^k / k!.
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0
                        + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    let scale = f32::from_bits((((n as i32) + 127) as u32) << 23);
    // clamp keeps NaN; a NaN input must stay NaN for the caller's finiteness check.
    if x.is_nan() {
        x
    } else {
        p * scale
    }
}

/// Σ_j e^{x_j − m} over a row (the softmax denominator).
#[inline(always)]
pub(crate) fn sum_exp_shifted(row: &[f32], m: f32) -> f32 {
    // Eight partial sums: independent lanes that the compiler keeps in one vector register.
    let mut acc = [0f32; 8];
    let mut chunks = row.chunks_exact(8);
    for c in &mut chunks {
        for k in 0..8 {
            acc[k] += exp(c[k] - m);
        }
    }
    let tail: f32 = chunks.remainder().iter().map(|&x| exp(x - m)).sum();
    acc.iter().sum::<f32>() + tail
}

/// max_j x_j (−∞ for an empty row; NaN-free rows assumed, NaN handled by the caller).
#[inline(always)]
pub(crate) fn row_max(row: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; 8];
    let mut chunks = row.chunks_exact(8);
    for c in &mut chunks {
        for k in 0..8 {
            acc[k] = acc[k].max(c[k]);
        }
    }
    let tail = chunks
        .remainder()
        .iter()
        .fold(f32::NEG_INFINITY, |a, &x| a.max(x));
    acc.iter().fold(tail, |a, &x| a.max(x))
}

/// One row of the fused output layer: adds `bias` to the logits in `row`, returns
/// −log softmax(row)[label] and, when `grad`, overwrites `row` with
/// scale·(softmax(row) − one-hot(label)).
#[inline(always)]
fn nll_row_generic(row: &mut [f32], bias: &[f32], label: usize, scale: f32, grad: bool) -> f32 {
    for (z, &b) in row.iter_mut().zip(bias) {
        *z += b;
    }
    let m = row_max(row);
    let lse = m + sum_exp_shifted(row, m).ln();
    let nll = lse - row[label];
    if grad {
        for z in row.iter_mut() {
            *z = exp(*z - lse) * scale;
        }
        row[label] -= scale;
    }
    nll
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn nll_row_avx2(row: &mut [f32], bias: &[f32], label: usize, scale: f32, grad: bool) -> f32 {
    nll_row_generic(row, bias, label, scale, grad)
}

/// [`nll_row_generic`] with the widest vector unit available.
pub(crate) fn nll_row(row: &mut [f32], bias: &[f32], label: usize, scale: f32, grad: bool) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports the features the function was compiled for.
        return unsafe { nll_row_avx2(row, bias, label, scale, grad) };
    }
    nll_row_generic(row, bias, label, scale, grad)
}

/// Softmax of `row + bias` in place (attention rows; −1e9 biases give exact zeros).
#[inline(always)]
fn softmax_row_generic(row: &mut [f32], bias: &[f32]) {
    for (z, &b) in row.iter_mut().zip(bias) {
        *z += b;
    }
    let m = row_max(row);
    let mut sum = 0f32;
    for z in row.iter_mut() {
        *z = exp(*z - m);
        sum += *z;
    }
    let inv = 1.0 / sum;
    for z in row.iter_mut() {
        *z *= inv;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn softmax_row_avx2(row: &mut [f32], bias: &[f32]) {
    softmax_row_generic(row, bias)
}

/// [`softmax_row_generic`] with the widest vector unit available.
pub(crate) fn softmax_row(row: &mut [f32], bias: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports the features the function was compiled for.
        return unsafe { softmax_row_avx2(row, bias) };
    }
    softmax_row_generic(row, bias)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_std_exp_to_3e7_relative() {
        let mut worst = 0f64;
        let mut x = -87.0f32;
        while x <= 88.0 {
            let (a, b) = (exp(x) as f64, (x as f64).exp());
            worst = worst.max(((a - b) / b).abs());
            x += 0.000_731;
        }
        assert!(worst < 3e-7, "worst relative error {worst}");
        assert_eq!(exp(-1000.0).min(1e-37), exp(-1000.0));
        assert!(exp(f32::NAN).is_nan());
        assert_eq!(exp(0.0), 1.0);
    }

    #[test]
    fn nll_row_matches_f64_softmax() {
        let mut row: Vec<f32> = (0..1003)
            .map(|i| ((i * 37 % 101) as f32) * 0.13 - 6.0)
            .collect();
        let bias: Vec<f32> = (0..1003).map(|i| ((i % 7) as f32) * 0.2).collect();
        let z: Vec<f64> = row
            .iter()
            .zip(&bias)
            .map(|(&x, &b)| (x + b) as f64)
            .collect();
        let m = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = m + z.iter().map(|&v| (v - m).exp()).sum::<f64>().ln();
        let nll = nll_row(&mut row, &bias, 17, 0.5, true) as f64;
        assert!((nll - (lse - z[17])).abs() < 1e-5 * nll.abs().max(1.0));
        for (j, (&g, &v)) in row.iter().zip(&z).enumerate() {
            let want = 0.5 * ((v - lse).exp() - if j == 17 { 1.0 } else { 0.0 });
            assert!((g as f64 - want).abs() < 1e-7, "{j}: {g} vs {want}");
        }
    }

    #[test]
    fn row_helpers_match_scalar_loops() {
        let row: Vec<f32> = (0..37)
            .map(|i| ((i * 13 % 17) as f32) * 0.7 - 5.0)
            .collect();
        let m = row.iter().fold(f32::NEG_INFINITY, |a, &x| a.max(x));
        assert_eq!(row_max(&row), m);
        let s: f64 = row.iter().map(|&x| ((x - m) as f64).exp()).sum();
        assert!((sum_exp_shifted(&row, m) as f64 - s).abs() < 1e-6 * s);
    }
}
