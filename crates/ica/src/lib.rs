//! lmsplit-ica: PCA whitening, Amari's natural-gradient ICA, the Amari index, and the
//! sparsity / word-cluster analysis of section 5.3 of the two-tower paper.
//!
//! Pipeline: word vectors `[n, D]` → [`Pca`] (second moment, top `d`, whitened) →
//! [`AmariIca`] (`W ← W + lr (I − g(Y)Yᵀ/n) W`, renormalised) → sources `[n, d]` →
//! [`analysis`] (sparsity, clusters `|y_k| > 2.5`, typical words). Quality is measured with
//! [`amari_index`] on [`LaplaceMixture`]s whose sources are known.
//!
//! ```
//! use ica::{AmariConfig, AmariIca, LaplaceMixture, Pca, PcaConfig, amari_index};
//! let mix = LaplaceMixture::generate(4000, 4, 4, 1).unwrap();
//! let pca = Pca::fit(&mix.observed, &PcaConfig::new(4)).unwrap();
//! let white = pca.transform(&mix.observed).unwrap();
//! let fit = AmariIca::new(AmariConfig::default()).fit(&white).unwrap();
//! let w_total = fit.unmixing.matmul(&pca.whitening().transpose()).unwrap();
//! assert!(amari_index(&w_total, &mix.mixing).unwrap() < 0.05);
//! ```

#![deny(missing_docs)]

mod amari;
pub mod analysis;
mod engine;
mod error;
mod index;
mod matrix;
mod pca;
pub mod score;
mod synthetic;

pub use amari::{
    AmariConfig, AmariIca, Batch, IcaResult, StepInfo, Stepper, StopRule, TrajectoryPoint,
};
pub use engine::Gemm;
pub use error::{IcaError, Result};
pub use index::{amari_index, amari_index_of};
pub use matrix::Matrix;
pub use pca::{Pca, PcaConfig};
pub use synthetic::LaplaceMixture;
