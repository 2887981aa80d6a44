//! e^x for f32 lanes without libm: Cody–Waite range reduction and a Taylor polynomial.

/// ln 2 split for Cody–Waite range reduction: `HI` has trailing zero bits so n·HI is exact.
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
/// operations: a float-to-int cast would be scalarised for its saturation rules.
#[inline(always)]
pub(crate) fn exp_lane(x: f32) -> f32 {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::grid;

    #[test]
    fn exp_is_accurate_and_saturates() {
        let xs = grid(-87.0, 88.0, 100_003);
        let mut got = xs.clone();
        exp_inplace(&mut got);
        let mut worst = 0f64;
        for (x, g) in xs.iter().zip(&got) {
            let w = (*x as f64).exp();
            let err = ((*g as f64 - w) / w).abs();
            assert!(err < 4e-7, "exp({x}) = {g}, exact {w}");
            worst = worst.max(err);
        }
        assert!(worst > 1e-9, "suspiciously exact: {worst}");
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
    fn dispatched_and_baseline_variants_agree_bit_for_bit() {
        let xs = grid(-90.0, 90.0, 10_007);
        let mut fast = xs.clone();
        exp_inplace(&mut fast);
        let base: Vec<f32> = xs.iter().map(|&x| exp_lane(x)).collect();
        assert_eq!(
            fast.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            base.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
    }
}
