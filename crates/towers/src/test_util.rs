//! Test helpers shared by the fused-op tests.

use candle_core::{Tensor, Var};

/// max |t|.
pub(crate) fn max_abs(t: &Tensor) -> f32 {
    t.abs().unwrap().max_all().unwrap().to_scalar().unwrap()
}

/// Asserts that a fused op's output equals the composed reference and that the gradients of
/// Σ w·y with respect to every var agree: each difference ≤ `tol`·max(1, scale of the
/// reference), and every reference gradient is non-zero (so the check cannot pass vacuously).
pub(crate) fn assert_same_op(
    fused: &Tensor,
    reference: &Tensor,
    w: &Tensor,
    vars: &[&Var],
    tol: f32,
) {
    assert_eq!(fused.dims(), reference.dims());
    let d = max_abs(&(fused - reference).unwrap());
    assert!(
        d <= tol * max_abs(reference).max(1.0),
        "values differ by {d}"
    );
    let grads = |y: &Tensor| (y * w).unwrap().sum_all().unwrap().backward().unwrap();
    let (gf, gc) = (grads(fused), grads(reference));
    for (k, v) in vars.iter().enumerate() {
        let (a, c) = (gf.get(v).unwrap(), gc.get(v).unwrap());
        let (d, s) = (max_abs(&(a - c).unwrap()), max_abs(c));
        assert!(s > 0.0, "input {k}: zero reference gradient");
        assert!(
            d <= tol * s.max(1.0),
            "input {k}: gradients differ by {d} (scale {s})"
        );
    }
}
