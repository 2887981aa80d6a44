//! `lmd`: Language Model Decomposition.
//!
//! How much of one language model's sequence embedding is a linear function of other models'
//! embeddings? Pretrained encoders turn text into mean-pooled sequence embeddings; streaming
//! joint moments (one per split) hold everything the closed-form fits need; the fits give
//! held-out R², pairwise and group ρ, and linear CKA beside them. [`study`] runs the whole LMD
//! study (Zhang, Table 2 and its heatmaps) over local model folders and a corpus.

#![deny(missing_docs)]

pub mod error;

// --- the mathematical core (moments, fits, scores, reports) ---
pub mod analysis;
pub mod cka;
mod dense;
pub mod fit;
pub mod moments;
pub mod pair_matrix;
pub mod similarity;
pub mod synthetic;
pub mod tables;

// --- pretrained encoders and embedding extraction ---
pub mod encoder;
pub mod external;
pub mod extract;
pub mod shard;
pub mod store;

// --- the study: corpus to Table 2 ---
pub mod study;

pub use error::{LmdError, Result};
