//! The object-safe side of [`TowerStyle`]: a style, a configuration bound to its style and a
//! model's towers behind trait objects, so that one [`crate::TwoTowerLm`] holds any style's
//! towers without knowing their type (no downcasts: each object calls its own style's typed
//! methods).

use std::any::TypeId;
use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use corpus::{Document, Objective, TokenBatch, Tokenizer, TrainingData};
use serde_json::Value;

use super::{EmbeddingLayout, Preset, SharedConfig, Style, Tower, TowerConfig, TowerStyle};
use crate::layers::params::Init;
use crate::{Result, TowersError};

/// A style behind a trait object.
pub(crate) trait AnyStyle: Send + Sync {
    fn name(&self) -> &'static str;
    /// The Rust type of the style (two registrations of one name must be one type).
    fn style_type(&self) -> TypeId;
    fn preset(&self, preset: Preset) -> Option<TowerConfig>;
    fn config(&self, v: &Value) -> Result<TowerConfig>;
    fn embedding(&self) -> EmbeddingLayout;
    fn device_mask(&self, batch: &TokenBatch, dtype: DType, dev: &Device) -> Result<Tensor>;
    fn objective(&self) -> Objective;
    fn sequences(
        &self,
        tok: &Tokenizer,
        docs: &[Document],
        seq_len: usize,
    ) -> corpus::Result<TrainingData>;
    fn scoring_set(&self) -> &'static str;
}

/// A typed style as an [`AnyStyle`].
pub(crate) struct Held<S: TowerStyle>(pub(crate) Arc<S>);

impl<S: TowerStyle> Held<S> {
    pub(crate) fn bind(&self, cfg: S::Config) -> TowerConfig {
        TowerConfig::from_erased(Arc::new(Bound {
            style: self.0.clone(),
            cfg,
        }))
    }
}

impl<S: TowerStyle> AnyStyle for Held<S> {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn style_type(&self) -> TypeId {
        TypeId::of::<S>()
    }

    fn preset(&self, preset: Preset) -> Option<TowerConfig> {
        self.0.preset(preset).map(|c| self.bind(c))
    }

    fn config(&self, v: &Value) -> Result<TowerConfig> {
        let cfg: S::Config = serde_json::from_value(v.clone()).map_err(|e| {
            TowersError::Config(format!("a {} tower configuration: {e}", self.0.name()))
        })?;
        Ok(self.bind(cfg))
    }

    fn embedding(&self) -> EmbeddingLayout {
        self.0.embedding()
    }

    fn device_mask(&self, batch: &TokenBatch, dtype: DType, dev: &Device) -> Result<Tensor> {
        self.0.device_mask(batch, dtype, dev)
    }

    fn objective(&self) -> Objective {
        self.0.objective()
    }

    fn sequences(
        &self,
        tok: &Tokenizer,
        docs: &[Document],
        seq_len: usize,
    ) -> corpus::Result<TrainingData> {
        self.0.sequences(tok, docs, seq_len)
    }

    fn scoring_set(&self) -> &'static str {
        self.0.scoring_set()
    }
}

/// A configuration bound to its style, behind a trait object.
pub(crate) trait AnyConfig: std::fmt::Debug + Send + Sync {
    fn style(&self) -> Style;
    fn to_json(&self) -> Value;
    fn validate(&self) -> std::result::Result<(), String>;
    fn input_width(&self) -> usize;
    fn tower_width(&self) -> usize;
    fn embed_size(&self, n_towers: usize) -> usize;
    fn model_name(&self) -> String;
    fn build(&self, shared: &SharedConfig, root: Init<'_>) -> Result<Box<dyn TowerStack>>;
}

/// A typed configuration and its style.
struct Bound<S: TowerStyle> {
    style: Arc<S>,
    cfg: S::Config,
}

impl<S: TowerStyle> std::fmt::Debug for Bound<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {:?}", self.style.name(), self.cfg)
    }
}

impl<S: TowerStyle> AnyConfig for Bound<S> {
    fn style(&self) -> Style {
        Style::from_erased(Arc::new(Held(self.style.clone())))
    }

    fn to_json(&self) -> Value {
        // A serde-derived configuration always has a JSON form; Null marks one that has not.
        serde_json::to_value(&self.cfg).unwrap_or(Value::Null)
    }

    fn validate(&self) -> std::result::Result<(), String> {
        self.style.validate(&self.cfg)
    }

    fn input_width(&self) -> usize {
        self.style.input_width(&self.cfg)
    }

    fn tower_width(&self) -> usize {
        self.style.tower_width(&self.cfg)
    }

    fn embed_size(&self, n_towers: usize) -> usize {
        self.style.embed_size(&self.cfg, n_towers)
    }

    fn model_name(&self) -> String {
        self.style.model_name(&self.cfg)
    }

    fn build(&self, shared: &SharedConfig, root: Init<'_>) -> Result<Box<dyn TowerStack>> {
        let towers = (0..shared.n_towers)
            .map(|k| {
                self.style
                    .tower(&self.cfg, shared, root.pp(format!("tower{k}")))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Box::new(Stack {
            style: self.style.clone(),
            cfg: self.cfg.clone(),
            towers,
        }))
    }
}

/// The K towers of one model, run through their style.
pub(crate) trait TowerStack: std::fmt::Debug + Send + Sync {
    /// Every tower's output (tower k reading `xs[k]`), as the style runs them.
    fn outputs(&self, xs: &[Tensor], mask: &Tensor) -> Result<Vec<Tensor>>;
    /// Tower `k`'s directions, where it has them.
    fn directions(&self, k: usize, x: &Tensor, mask: &Tensor) -> Option<Result<(Tensor, Tensor)>>;
}

struct Stack<S: TowerStyle> {
    style: Arc<S>,
    cfg: S::Config,
    towers: Vec<S::Tower>,
}

impl<S: TowerStyle> std::fmt::Debug for Stack<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stack")
            .field("style", &self.style.name())
            .field("towers", &self.towers)
            .finish()
    }
}

impl<S: TowerStyle> TowerStack for Stack<S> {
    fn outputs(&self, xs: &[Tensor], mask: &Tensor) -> Result<Vec<Tensor>> {
        if xs.len() != self.towers.len() {
            return Err(TowersError::Config(format!(
                "{} tower inputs for {} towers",
                xs.len(),
                self.towers.len()
            )));
        }
        self.style.forward_all(&self.cfg, &self.towers, xs, mask)
    }

    fn directions(&self, k: usize, x: &Tensor, mask: &Tensor) -> Option<Result<(Tensor, Tensor)>> {
        self.towers.get(k)?.directions(x, mask)
    }
}
