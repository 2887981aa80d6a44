//! The in-place Cholesky factorisation of the group path, recursive on faer's GEMM-rate kernels.
//!
//! faer's `llt` copies its D × D input into a fresh allocation; at D = 9216 a fresh 680 MB
//! buffer costs ~0.5 s of page faults on this 2-core VM (more the first time the process
//! touches that much memory), and the copying factorisation ran at 46–53 GFLOP/s beside 81 for
//! GEMM. [`cholesky_in_place`] factors the caller's buffer where it is (measured 3.0–3.4 s at
//! D = 9216, 77–87 GFLOP/s), so one buffer can carry C + λI, its factor, then S'' and its
//! factor. faer's own in-place `linalg::cholesky::llt::factor::cholesky_in_place` avoids the
//! copy but not the slower blocked kernel: in the whole 12 × 768 analysis it took ~3.4 s more
//! than this recursion.

use faer::linalg::matmul::triangular::{self, BlockStructure};
use faer::linalg::triangular_solve::solve_lower_triangular_in_place;
use faer::prelude::{Reborrow, ReborrowMut};
use faer::{Accum, MatMut, Par, Side};

/// Leaf size of [`cholesky_in_place`] (and the row-block width of the pairwise Z_bᵀ G product):
/// large enough that each GEMM call runs near its peak, small enough that the tiles done by
/// faer's small kernels stay cheap.
pub(crate) const BLOCK: usize = 256;

/// Zeroes the strict upper triangle of a square matrix.
pub(crate) fn zero_upper<T: faer::traits::ComplexField + Copy>(mut a: MatMut<'_, T>) {
    for c in 1..a.ncols() {
        for r in 0..c.min(a.nrows()) {
            a[(r, c)] = T::zero_impl();
        }
    }
}

/// Lower Cholesky factor of a symmetric positive definite matrix, in place: reads the lower
/// triangle of `a`, leaves L there and zeroes the strict upper triangle. Recursive on halves:
/// L₁₁ = chol(A₁₁), L₂₁ = A₂₁ L₁₁⁻ᵀ (a triangular solve), A₂₂ −= L₂₁ L₂₁ᵀ (lower triangle only),
/// L₂₂ = chol(A₂₂); tiles of [`BLOCK`] go to faer. `false` when `a` is not numerically
/// positive definite (its content is then unspecified).
pub(crate) fn cholesky_in_place(mut a: MatMut<'_, f64>, par: Par) -> bool {
    let n = a.nrows();
    if n <= BLOCK {
        let Ok(llt) = a.rb().to_owned().llt(Side::Lower) else {
            return false;
        };
        a.copy_from(llt.L());
        zero_upper(a);
        return true;
    }
    let h = (n / 2).div_ceil(BLOCK) * BLOCK;
    let (mut a11, mut a12, mut a21, mut a22) = a.split_at_mut(h, h);
    if !cholesky_in_place(a11.rb_mut(), par) {
        return false;
    }
    // L₁₁ L₂₁ᵀ = A₂₁ᵀ.
    solve_lower_triangular_in_place(a11.rb(), a21.rb_mut().transpose_mut(), par);
    triangular::matmul(
        a22.rb_mut(),
        BlockStructure::TriangularLower,
        Accum::Add,
        a21.rb(),
        BlockStructure::Rectangular,
        a21.rb().transpose(),
        BlockStructure::Rectangular,
        -1.0,
        par,
    );
    a12.fill(0.0);
    cholesky_in_place(a22, par)
}

#[cfg(test)]
mod tests {
    use super::*;
    use faer::{Mat, MatRef};

    /// A deterministic well-conditioned SPD matrix: M Mᵀ / n + I with pseudo-random M.
    fn spd(n: usize, seed: u64) -> Mat<f64> {
        let mut s = seed;
        let m = Mat::<f64>::from_fn(n, n, |_, _| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) - 0.5
        });
        let mut a = &m * m.transpose() * (1.0 / n as f64);
        for k in 0..n {
            a[(k, k)] += 1.0;
        }
        a
    }

    fn max_abs_diff(a: MatRef<'_, f64>, b: MatRef<'_, f64>) -> f64 {
        let mut d = 0.0f64;
        for c in 0..a.ncols() {
            for r in 0..a.nrows() {
                d = d.max((a[(r, c)] - b[(r, c)]).abs());
            }
        }
        d
    }

    // An odd size with several blocks and a ragged last block.
    const N: usize = 2 * BLOCK + 77;

    #[test]
    fn blocked_cholesky_equals_faer() {
        let a = spd(N, 1);
        let mut l = a.clone();
        assert!(cholesky_in_place(l.as_mut(), Par::Seq));
        let reference = a.llt(Side::Lower).unwrap().L().to_owned();
        let mut reference = reference;
        zero_upper(reference.as_mut());
        assert!(max_abs_diff(l.as_ref(), reference.as_ref()) < 1e-12);
        // Not positive definite: reported, not a NaN factor.
        let mut bad = a.clone();
        bad[(N - 3, N - 3)] = -1.0;
        assert!(!cholesky_in_place(bad.as_mut(), Par::Seq));
    }
}
