//! The encoders a tower style builds its towers from: the [`Tower`] trait every tower
//! implements, the [`SharedConfig`] a style's towers are built under, the pre-LN transformer
//! (GPT, BERT: `transformer.rs`, with its `TransformerConfig`) and the ELMo BiLSTM (`elmo.rs`,
//! with its `ElmoConfig`).

pub(crate) mod elmo;
mod tower;
pub(crate) mod transformer;

pub use tower::{SharedConfig, Tower};
