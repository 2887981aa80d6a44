//! lmsplit: two-tower language-model preference and Language Model Decomposition on candle.
//!
//! This facade re-exports every crate of the workspace under one name.

pub use corpus;
pub use heads;
pub use ica;
pub use lmd;
pub use prefscore;
pub use report;
pub use towers;
