//! Numerical comparisons of a target's results with the reference's, on the host in f64.

use candle_core::{DType, Device, Tensor};

/// A tensor's values as a flat host f32 vector (any device, any float dtype).
pub fn host(t: &Tensor) -> candle_core::Result<Vec<f32>> {
    t.to_device(&Device::Cpu)?
        .to_dtype(DType::F32)?
        .flatten_all()?
        .to_vec1::<f32>()
}

/// The largest |x| (NaN if any entry is not finite).
pub fn max_abs<T: Copy + Into<f64>>(x: &[T]) -> f64 {
    let mut m = 0f64;
    for &v in x {
        let v: f64 = v.into();
        if !v.is_finite() {
            return f64::NAN;
        }
        m = m.max(v.abs());
    }
    m
}

/// The largest of `values`, NaN if any is NaN (a difference that could not be measured fails
/// every bound); 0 for none.
pub fn worst(values: impl IntoIterator<Item = f64>) -> f64 {
    values.into_iter().fold(0f64, |m, d| {
        if d.is_nan() || m.is_nan() {
            f64::NAN
        } else {
            m.max(d)
        }
    })
}

/// max |target − reference| / max |reference|: the worst difference on the scale of the
/// reference's largest entry. 0 when both are all zeros; NaN when the lengths differ or any
/// entry is not finite (a NaN never passes a bound).
pub fn rel_max_diff<T: Copy + Into<f64>>(target: &[T], reference: &[T]) -> f64 {
    if target.len() != reference.len() {
        return f64::NAN;
    }
    let (mut diff, scale) = (0f64, max_abs(reference));
    for (&a, &b) in target.iter().zip(reference) {
        let (a, b): (f64, f64) = (a.into(), b.into());
        if !a.is_finite() {
            return f64::NAN;
        }
        diff = diff.max((a - b).abs());
    }
    if diff == 0.0 {
        0.0
    } else {
        diff / scale
    }
}

/// The smallest cosine similarity between corresponding rows (width `d`) of two row-major
/// matrices; NaN when a row has zero norm or an entry is not finite.
pub fn min_row_cosine(a: &[f32], b: &[f32], d: usize) -> f64 {
    if a.len() != b.len() || d == 0 || a.is_empty() {
        return f64::NAN;
    }
    let mut worst = f64::INFINITY;
    for (ra, rb) in a.chunks(d).zip(b.chunks(d)) {
        let (mut dot, mut na, mut nb) = (0f64, 0f64, 0f64);
        for (&x, &y) in ra.iter().zip(rb) {
            let (x, y) = (x as f64, y as f64);
            dot += x * y;
            na += x * x;
            nb += y * y;
        }
        let cos = dot / (na.sqrt() * nb.sqrt());
        if !cos.is_finite() {
            return f64::NAN;
        }
        worst = worst.min(cos);
    }
    worst
}

/// Per-step loss deviation of a target trajectory from a reference one, measured against the
/// allowed |Δ| ≤ `abs + rel·|reference|`: returns (the worst ratio |Δ| / allowed, its step
/// (1-based), its |Δ|). Any non-finite target loss or a length mismatch gives a NaN ratio.
pub fn loss_deviation(target: &[f64], reference: &[f64], abs: f64, rel: f64) -> (f64, usize, f64) {
    if target.len() != reference.len() || target.is_empty() {
        return (f64::NAN, 0, f64::NAN);
    }
    let mut worst = (0f64, 0usize, 0f64);
    for (k, (&a, &b)) in target.iter().zip(reference).enumerate() {
        if !a.is_finite() {
            return (f64::NAN, k + 1, f64::NAN);
        }
        let delta = (a - b).abs();
        let ratio = delta / (abs + rel * b.abs());
        if ratio > worst.0 || k == 0 {
            worst = (ratio, k + 1, delta);
        }
    }
    worst
}
