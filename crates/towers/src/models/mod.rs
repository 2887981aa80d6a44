//! The K-tower model (`model.rs`): the shared embedding (`embedding.rs`), the towers of one
//! style (built through the style, `crate::style`) and the joint head (`joint_head.rs`).

pub(crate) mod embedding;
pub(crate) mod joint_head;
pub(crate) mod model;
