//! Vectorisable f32 kernels for CPU inference: exp, exact-form GELU (erf), softmax and
//! LayerNorm rows.
//!
//! candle's CPU `gelu_erf` calls a scalar `erff` per element and its elementwise ops are one
//! pass each; these kernels are branch-free loops over 8-lane chunks that LLVM turns into
//! AVX2 code. The default target is baseline x86-64 (SSE2), so each public kernel is compiled
//! twice, once with `#[target_feature(enable = "avx2,fma")]`, and picks the variant at run time.
//! Both variants run the same operations in the same order (no fused multiply-add), so the
//! results are identical whichever CPU runs them.

/// Lanes per chunk (one AVX2 register of f32).
const LANES: usize = 8;

/// ln 2 split for Cody-Waite range reduction: `HI` has trailing zero bits so n·HI is exact.
const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;
/// Below this, exp underflows to 0 in f32 (e^-87.34 ≈ the smallest normal).
const EXP_MIN: f32 = -87.33;
/// Above this, exp overflows to +inf in f32.
const EXP_MAX: f32 = 88.72;

/// 1.5·2²³: adding it rounds a small float to an integer held in the low mantissa bits.
const SHIFT: f32 = 12_582_912.0;

/// e^x for finite inputs, NaN kept, 0 below [`EXP_MIN`], +inf above [`EXP_MAX`]; relative error
/// ≈ 2e-7. x = n·ln2 + r with |r| ≤ ln2/2, e^r by its Taylor polynomial to r⁷ (remainder
/// < 6e-9), scaled by 2ⁿ built from the exponent bits. Integer work stays in wrapping bit
/// operations (a float-to-int cast would be scalarised for its saturation rules).
#[inline(always)]
fn exp_lane(x: f32) -> f32 {
    let xc = x.clamp(EXP_MIN, EXP_MAX);
    let t = xc * std::f32::consts::LOG2_E + SHIFT;
    let n = t - SHIFT;
    let r = (xc - n * LN2_HI) - n * LN2_LO;
    let mut p = 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    // n ∈ [-126, 128]: 2^n as two factors so n = 128 (x near EXP_MAX) stays representable.
    let ni = t.to_bits().wrapping_sub(SHIFT.to_bits()) as i32;
    let half = ni >> 1;
    let s1 = f32::from_bits((half.wrapping_add(127) as u32) << 23);
    let s2 = f32::from_bits((ni.wrapping_sub(half).wrapping_add(127) as u32) << 23);
    let y = p * s1 * s2;
    let y = if x < EXP_MIN { 0.0 } else { y };
    let y = if x > EXP_MAX { f32::INFINITY } else { y };
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// Φ(x), the standard normal CDF, through erfc(|x|/√2) by Abramowitz & Stegun 7.1.26
/// (|error of erf| ≤ 1.5e-7): Φ(x) = ½·erfc(−x/√2), with no cancellation in the lower tail.
#[inline(always)]
fn normal_cdf_lane(x: f32) -> f32 {
    const P: f32 = 0.327_591_1;
    const A1: f32 = 0.254_829_6;
    const A2: f32 = -0.284_496_74;
    const A3: f32 = 1.421_413_8;
    const A4: f32 = -1.453_152_1;
    const A5: f32 = 1.061_405_4;
    let z = x.abs() * std::f32::consts::FRAC_1_SQRT_2;
    let t = 1.0 / (1.0 + P * z);
    let poly = ((((A5 * t + A4) * t + A3) * t + A2) * t + A1) * t;
    // ½·erfc(z) for z ≥ 0.
    let tail = 0.5 * poly * exp_lane(-z * z);
    if x < 0.0 {
        tail
    } else {
        1.0 - tail
    }
}

/// x·Φ(x): exact-form GELU (`0.5·x·(1 + erf(x/√2))`). NaN stays NaN, +inf gives +inf and
/// x < −16 gives −0 (the exact value underflows f32 there), so −inf gives −0 rather than NaN.
#[inline(always)]
fn gelu_lane(x: f32) -> f32 {
    let y = x * normal_cdf_lane(x);
    if x < -16.0 {
        -0.0
    } else {
        y
    }
}

macro_rules! dispatch {
    ($(#[$doc:meta])* pub fn $name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)? => $body:ident) => {
        $(#[$doc])*
        pub fn $name($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                if std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                {
                    #[target_feature(enable = "avx2,fma")]
                    unsafe fn fast($($arg: $ty),*) $(-> $ret)? {
                        $body($($arg),*)
                    }
                    // SAFETY: the CPU was just checked for AVX2 and FMA.
                    return unsafe { fast($($arg),*) };
                }
            }
            $body($($arg),*)
        }
    };
}

#[inline(always)]
fn gelu_body(xs: &mut [f32]) {
    let mut chunks = xs.chunks_exact_mut(LANES);
    for c in &mut chunks {
        for v in c.iter_mut() {
            *v = gelu_lane(*v);
        }
    }
    for v in chunks.into_remainder() {
        *v = gelu_lane(*v);
    }
}

dispatch! {
    /// Exact-form GELU in place (max abs error ≈ 1e-7·max(1, |x|); see the tests).
    pub fn gelu_erf_inplace(xs: &mut [f32]) => gelu_body
}

#[inline(always)]
fn bias_gelu_body(rows: &mut [f32], bias: &[f32]) {
    for row in rows.chunks_exact_mut(bias.len()) {
        for (v, b) in row.iter_mut().zip(bias) {
            *v = gelu_lane(*v + *b);
        }
    }
}

dispatch! {
    /// `rows ← gelu(rows + bias)` on whole rows of width `bias.len()` (a Linear's bias fused
    /// with the exact GELU).
    pub fn bias_gelu_rows(rows: &mut [f32], bias: &[f32]) => bias_gelu_body
}

#[inline(always)]
fn exp_body(xs: &mut [f32]) {
    for v in xs.iter_mut() {
        *v = exp_lane(*v);
    }
}

dispatch! {
    /// e^x in place (relative error ≈ 2e-7; 0 below −87.33, +inf above 88.72, NaN kept).
    pub fn exp_inplace(xs: &mut [f32]) => exp_body
}

/// Sum in 8 lanes (a fixed order, vectorisable without reassociation by the compiler).
#[inline(always)]
fn lane_sum(xs: &[f32]) -> f32 {
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

#[inline(always)]
fn lane_max(xs: &[f32]) -> f32 {
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

#[inline(always)]
fn softmax_body(row: &mut [f32], bias: &[f32], scale: f32) {
    for (v, b) in row.iter_mut().zip(bias) {
        *v = *v * scale + *b;
    }
    let m = lane_max(row);
    for v in row.iter_mut() {
        *v = exp_lane(*v - m);
    }
    let inv = 1.0 / lane_sum(row);
    for v in row.iter_mut() {
        *v *= inv;
    }
}

dispatch! {
    /// `row ← softmax(row·scale + bias)` (bias as long as the row: the additive key mask).
    pub fn softmax_row(row: &mut [f32], bias: &[f32], scale: f32) => softmax_body
}

#[inline(always)]
fn residual_ln_body(
    rows: &mut [f32],
    bias: &[f32],
    residual: &[f32],
    gamma: &[f32],
    beta: &[f32],
    eps: f32,
) {
    let h = gamma.len();
    let inv_h = 1.0 / h as f32;
    for (row, res) in rows.chunks_exact_mut(h).zip(residual.chunks_exact(h)) {
        for ((v, r), b) in row.iter_mut().zip(res).zip(bias) {
            *v = *v + *b + *r;
        }
        let mean = lane_sum(row) * inv_h;
        for v in row.iter_mut() {
            *v -= mean;
        }
        let mut sq = [0f32; LANES];
        let mut chunks = row.chunks_exact(LANES);
        for c in &mut chunks {
            for (a, v) in sq.iter_mut().zip(c) {
                *a += *v * *v;
            }
        }
        let tail: f32 = chunks.remainder().iter().map(|v| v * v).sum();
        let var = (sq.iter().sum::<f32>() + tail) * inv_h;
        let inv_std = 1.0 / (var + eps).sqrt();
        for ((v, g), b) in row.iter_mut().zip(gamma).zip(beta) {
            *v = *v * inv_std * *g + *b;
        }
    }
}

dispatch! {
    /// Post-LN residual step on whole rows:
    /// `rows ← LayerNorm(rows + bias + residual)·gamma + beta` (row width = `gamma.len()`,
    /// biased variance, as torch; `bias` is the preceding Linear's).
    pub fn residual_layer_norm(
        rows: &mut [f32],
        bias: &[f32],
        residual: &[f32],
        gamma: &[f32],
        beta: &[f32],
        eps: f32
    ) => residual_ln_body
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};

    /// Exact GELU in f64 through candle's (libm) erf: an independent reference.
    fn gelu_f64(xs: &[f32]) -> Vec<f64> {
        let v: Vec<f64> = xs.iter().map(|&x| x as f64).collect();
        Tensor::from_vec(v, xs.len(), &Device::Cpu)
            .and_then(|t| t.gelu_erf())
            .and_then(|t| t.to_vec1())
            .expect("reference gelu")
    }

    fn grid(lo: f32, hi: f32, n: usize) -> Vec<f32> {
        (0..=n)
            .map(|i| lo + (hi - lo) * i as f32 / n as f32)
            .collect()
    }

    #[test]
    fn gelu_matches_the_exact_form_over_a_wide_range() {
        let mut xs = grid(-20.0, 20.0, 200_001);
        xs.extend(grid(-1e-3, 1e-3, 1001));
        xs.extend([1e4, -1e4, 3e38, -3e38, 1e-30, -1e-30, 0.0, -0.0]);
        let want = gelu_f64(&xs);
        let mut got = xs.clone();
        gelu_erf_inplace(&mut got);
        let mut worst = 0f64;
        for ((x, g), w) in xs.iter().zip(&got).zip(&want) {
            let err = (*g as f64 - w).abs() / (x.abs() as f64).max(1.0);
            assert!(err <= 2.5e-7, "gelu({x}) = {g}, exact {w}");
            worst = worst.max(err);
        }
        // The bound is tight enough to catch a wrong coefficient, loose enough for f32.
        assert!(worst > 1e-9, "suspiciously exact: {worst}");
    }

    #[test]
    fn bias_gelu_equals_adding_then_gelu() {
        let bias = [0.5f32, -1.0, 2.0];
        let x: Vec<f32> = (0..12).map(|i| i as f32 * 0.3 - 2.0).collect();
        let mut fused = x.clone();
        bias_gelu_rows(&mut fused, &bias);
        let mut apart: Vec<f32> = x.iter().enumerate().map(|(i, v)| v + bias[i % 3]).collect();
        gelu_erf_inplace(&mut apart);
        assert_eq!(fused, apart);
    }

    #[test]
    fn gelu_handles_non_finite_and_tails() {
        let mut v = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -30.0, 30.0];
        gelu_erf_inplace(&mut v);
        assert!(v[0].is_nan());
        assert_eq!(v[1], f32::INFINITY);
        assert_eq!(v[2], 0.0);
        assert_eq!(v[3], 0.0);
        assert_eq!(v[4], 30.0);
    }

    #[test]
    fn exp_is_accurate_and_saturates() {
        let xs = grid(-87.0, 88.0, 100_003);
        let mut got = xs.clone();
        exp_inplace(&mut got);
        for (x, g) in xs.iter().zip(&got) {
            let w = (*x as f64).exp();
            assert!(
                ((*g as f64 - w) / w).abs() < 4e-7,
                "exp({x}) = {g}, exact {w}"
            );
        }
        let mut v = [
            -1e9,
            -100.0,
            100.0,
            f32::NAN,
            f32::NEG_INFINITY,
            f32::INFINITY,
            0.0,
        ];
        exp_inplace(&mut v);
        assert_eq!(&v[..3], &[0.0, 0.0, f32::INFINITY]);
        assert!(v[3].is_nan());
        assert_eq!(&v[4..], &[0.0, f32::INFINITY, 1.0]);
    }

    #[test]
    fn softmax_and_layer_norm_match_candle() {
        let dev = Device::Cpu;
        let n = 37; // not a multiple of the lanes
        let x: Vec<f32> = (0..n)
            .map(|i| ((i * 7919) % 101) as f32 * 0.173 - 8.0)
            .collect();
        let bias: Vec<f32> = (0..n)
            .map(|i| if i % 5 == 4 { -1e9 } else { 0.0 })
            .collect();
        let mut got = x.clone();
        softmax_row(&mut got, &bias, 0.5);
        let t = ((Tensor::from_vec(x.clone(), (1, n), &dev).unwrap() * 0.5).unwrap()
            + Tensor::from_vec(bias.clone(), (1, n), &dev).unwrap())
        .unwrap();
        let want: Vec<f32> = candle_nn::ops::softmax_last_dim(&t)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-6, "softmax {g} vs {w}");
        }
        assert!(
            (4..n).step_by(5).all(|i| got[i] == 0.0),
            "masked keys get 0"
        );

        let (rows, h) = (3, n);
        let a: Vec<f32> = (0..rows * h)
            .map(|i| (i as f32 * 0.37).sin() * 3.0)
            .collect();
        let r: Vec<f32> = (0..rows * h).map(|i| (i as f32 * 0.11).cos()).collect();
        let g: Vec<f32> = (0..h).map(|i| 1.0 + i as f32 * 0.01).collect();
        let b: Vec<f32> = (0..h).map(|i| i as f32 * -0.02).collect();
        let lin_b: Vec<f32> = (0..h).map(|i| (i as f32 * 0.7).cos() * 0.5).collect();
        let mut got = a.clone();
        residual_layer_norm(&mut got, &lin_b, &r, &g, &b, 1e-12);
        let sum = (Tensor::from_vec(a, (rows, h), &dev).unwrap()
            + Tensor::from_vec(r, (rows, h), &dev).unwrap())
        .unwrap()
        .broadcast_add(&Tensor::from_vec(lin_b, h, &dev).unwrap())
        .unwrap();
        let ln = candle_nn::LayerNorm::new(
            Tensor::from_vec(g, h, &dev).unwrap(),
            Tensor::from_vec(b, h, &dev).unwrap(),
            1e-12,
        );
        let want: Vec<f32> = candle_core::Module::forward(&ln, &sum)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 2e-6, "layer norm {g} vs {w}");
        }
    }
}
