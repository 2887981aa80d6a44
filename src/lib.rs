//! lmsplit: two-tower language-model preference and Language Model Decomposition on candle.
//!
//! This facade re-exports every crate of the workspace under one name, plus [`alloc`] (allocator
//! tuning for CPU binaries), and [`process`] (CPU time for timings).

#![deny(missing_docs)]

pub mod alloc;
pub mod process;

/// candle's tensors, for a tower style or analysis of your own (`lmsplit::candle::Tensor`).
pub use candle_core as candle;
pub use corpus;
pub use experiment;
pub use files;
pub use heads;
pub use ica;
pub use kernels;
pub use lmd;
pub use prefscore;
pub use probe;
pub use report;
pub use towers;

/// The README's Rust blocks, compiled as doctests so that its library examples stay true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
