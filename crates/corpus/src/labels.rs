//! The label conventions shared by every batch builder (causal, bidirectional, masked).

/// Label value at positions that carry no loss (PAD, unmasked MLM positions, the last causal
/// position).
pub const IGNORE_LABEL: u32 = u32::MAX;
