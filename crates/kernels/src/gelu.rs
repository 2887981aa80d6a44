//! Exact-form GELU, x·Φ(x), and its derivative Φ(x) + x·φ(x), with Φ through erfc by
//! Abramowitz & Stegun 7.1.26.

use crate::exp::exp_lane;
use crate::LANES;

/// 1/√(2π), the normal density's constant.
const INV_SQRT_2PI: f32 = 0.398_942_3;
/// Beyond ±16 the exact GELU is x or −0 in f32 and its derivative 1 or 0.
const TAIL: f32 = 16.0;

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
    if x < -TAIL {
        -0.0
    } else {
        y
    }
}

/// d/dx x·Φ(x) = Φ(x) + x·φ(x), φ(x) = e^{−x²/2}/√(2π). Outside ±16 it is 0 or 1 exactly
/// (x·φ(x) would be ∞·0 at ±∞); NaN stays NaN.
#[inline(always)]
fn gelu_grad_lane(x: f32) -> f32 {
    let d = normal_cdf_lane(x) + x * INV_SQRT_2PI * exp_lane(-0.5 * x * x);
    let d = if x < -TAIL { 0.0 } else { d };
    let d = if x > TAIL { 1.0 } else { d };
    if x.is_nan() {
        x
    } else {
        d
    }
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
fn gelu_backward_body(x: &[f32], dy: &[f32], dx: &mut [f32]) {
    for ((d, &xv), &g) in dx.iter_mut().zip(x).zip(dy) {
        *d = g * gelu_grad_lane(xv);
    }
}

dispatch! {
    /// The backward pass of [`gelu_erf_inplace`]: `dx ← dy · GELU'(x)` elementwise, GELU'(x) =
    /// Φ(x) + x·φ(x) (slices of equal length; the shortest one bounds the loop).
    pub fn gelu_erf_backward(x: &[f32], dy: &[f32], dx: &mut [f32]) => gelu_backward_body
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::grid;
    use candle_core::{Device, Tensor, Var};

    /// Exact GELU in f64 through candle's (libm) erf: an independent reference.
    fn gelu_f64(xs: &[f32]) -> Vec<f64> {
        let v: Vec<f64> = xs.iter().map(|&x| x as f64).collect();
        Tensor::from_vec(v, xs.len(), &Device::Cpu)
            .and_then(|t| t.gelu_erf())
            .and_then(|t| t.to_vec1())
            .expect("reference gelu")
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
    fn derivative_matches_central_differences_of_the_f64_reference() {
        // f64 central differences of libm's exact GELU: an independent check of Φ + xφ.
        let xs = grid(-12.0, 12.0, 24_001);
        let h = 1e-5;
        let lo: Vec<f32> = xs.clone();
        let dy = vec![1f32; xs.len()];
        let mut got = vec![0f32; xs.len()];
        gelu_erf_backward(&lo, &dy, &mut got);
        let v: Vec<f64> = xs.iter().map(|&x| x as f64).collect();
        let t = Tensor::from_vec(v, xs.len(), &Device::Cpu).unwrap();
        let plus: Vec<f64> = (&t + h).unwrap().gelu_erf().unwrap().to_vec1().unwrap();
        let minus: Vec<f64> = (&t - h).unwrap().gelu_erf().unwrap().to_vec1().unwrap();
        let mut worst = 0f64;
        for (k, g) in got.iter().enumerate() {
            let want = (plus[k] - minus[k]) / (2.0 * h);
            let err = (*g as f64 - want).abs();
            assert!(
                err < 5e-7,
                "gelu'({}) = {g}, differences give {want}",
                xs[k]
            );
            worst = worst.max(err);
        }
        assert!(worst > 1e-10, "suspiciously exact: {worst}");
    }

    #[test]
    fn backward_matches_candles_autograd_and_scales_by_dy() {
        let dev = Device::Cpu;
        let xs: Vec<f32> = grid(-6.0, 6.0, 1000);
        let dy: Vec<f32> = (0..xs.len()).map(|i| (i as f32 * 0.37).sin()).collect();
        let var = Var::from_vec(xs.clone(), xs.len(), &dev).unwrap();
        let w = Tensor::from_vec(dy.clone(), xs.len(), &dev).unwrap();
        let grads = (var.gelu_erf().unwrap() * &w)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let want: Vec<f32> = grads.get(&var).unwrap().to_vec1().unwrap();
        let mut got = vec![0f32; xs.len()];
        gelu_erf_backward(&xs, &dy, &mut got);
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-6, "{g} vs candle {w}");
        }
    }

    #[test]
    fn derivative_handles_non_finite_and_tails() {
        let x = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -30.0, 30.0, 0.0];
        let mut d = [0f32; 6];
        gelu_erf_backward(&x, &[1.0; 6], &mut d);
        assert!(d[0].is_nan());
        assert_eq!(&d[1..5], &[1.0, 0.0, 0.0, 1.0]);
        assert!((d[5] - 0.5).abs() < 1e-7, "gelu'(0) = {}", d[5]);
    }
}
