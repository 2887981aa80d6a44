//! `kernels`: vectorised f32 row kernels for the CPU paths of `towers` (training, with
//! derivatives) and `lmd` (encoder inference), the in-place access to candle's CPU tensor data
//! that custom ops need ([`host`]), their parallel execution on candle's own worker pool
//! ([`par`]), and the custom ops both crates apply ([`ops`]).
//!
//! candle's CPU `gelu_erf` calls a scalar `erff` per element, its elementwise ops are one pass
//! each, and `f32::exp` is a libm call the compiler cannot vectorise. These kernels are
//! branch-free loops over 8-lane chunks that LLVM turns into AVX2 code. The default target is
//! baseline x86-64 (SSE2), so each public kernel is compiled twice, once with
//! `#[target_feature(enable = "avx2,fma")]`, and picks the variant at run time. Both variants
//! run the same operations in the same order (no fused multiply-add is written and none is
//! contracted by rustc), so the row kernels' results are identical whichever CPU runs them.
//! The matrix products are not: faer's and candle's GEMMs pick FMA or AVX-512 micro-kernels
//! and block sizes from the CPU at run time, so training is bit-reproducible on one machine,
//! not across machines of one architecture.
//!
//! [`device`] opens CUDA devices with the driver's memory pool set for training.
//!
//! The row kernels need nothing; [`host`], [`par`] and [`ops`] use candle-core and faer. `towers` and
//! `lmd` both sit above this crate.

#![deny(missing_docs)]

/// Lanes per chunk (one AVX2 register of f32).
const LANES: usize = 8;

/// Defines a public kernel from an `#[inline(always)]` body: the body compiled once for the
/// baseline target and once for AVX2 + FMA, chosen at run time.
macro_rules! dispatch {
    ($(#[$doc:meta])* pub fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? => $body:ident) => {
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

pub mod device;
mod exp;
mod gelu;
pub mod host;
mod layer_norm;
mod lstm;
mod lstm_seq;
pub mod ops;
pub mod par;
mod reduce;
mod softmax;

pub use exp::exp_inplace;
pub use gelu::{bias_gelu_rows, gelu_erf_backward, gelu_erf_inplace};
pub use layer_norm::{layer_norm_backward_rows, layer_norm_rows, residual_layer_norm};
pub use lstm::{lstm_cell_backward, lstm_cell_forward};
pub use lstm_seq::{LstmSaved, LstmSeq};
pub use softmax::{nll_row, softmax_row};

#[cfg(test)]
mod test_util {
    /// `n + 1` evenly spaced points from `lo` to `hi`.
    pub(crate) fn grid(lo: f32, hi: f32, n: usize) -> Vec<f32> {
        (0..=n)
            .map(|i| lo + (hi - lo) * i as f32 / n as f32)
            .collect()
    }
}
