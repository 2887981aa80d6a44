//! [`Style`], a handle to a tower style, and [`TowerConfig`], a style's configuration bound to
//! its style: the values the rest of lmsplit passes around, whatever the style.

use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use corpus::{Document, Objective, TokenBatch, Tokenizer, TrainingData};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::erased::{AnyConfig, AnyStyle, Held, TowerStack};
use super::{Bert, Elmo, EmbeddingLayout, Gpt, Preset, SharedConfig, TowerStyle};
use crate::layers::params::Init;
use crate::{Result, TowersError};

/// A tower style: a cheap handle to an implementation of [`TowerStyle`], compared, ordered and
/// hashed by name, written to JSON as its name (read back through the registry, [`register`]).
///
/// [`register`]: super::register
#[derive(Clone)]
pub struct Style(Arc<dyn AnyStyle>);

impl Style {
    /// A handle to `style`. Training, scoring and analysing in this process need nothing more;
    /// reading the style back from a run folder needs it registered ([`super::register`]).
    pub fn of<S: TowerStyle>(style: S) -> Self {
        Self(Arc::new(Held(Arc::new(style))))
    }

    pub(crate) fn from_erased(s: Arc<dyn AnyStyle>) -> Self {
        Self(s)
    }

    pub(crate) fn erased(&self) -> &dyn AnyStyle {
        &*self.0
    }

    /// The built-in ELMo style ([`Elmo`]).
    pub fn elmo() -> Self {
        Self::of(Elmo)
    }

    /// The built-in GPT style ([`Gpt`]).
    pub fn gpt() -> Self {
        Self::of(Gpt)
    }

    /// The built-in BERT style ([`Bert`]).
    pub fn bert() -> Self {
        Self::of(Bert)
    }

    /// The registered style named `name` (case-insensitive), or a [`TowersError::Config`]
    /// naming it and how to register it.
    pub fn named(name: &str) -> Result<Self> {
        super::registry::lookup(name)
    }

    /// The style's name ([`TowerStyle::name`]).
    pub fn name(&self) -> &'static str {
        self.0.name()
    }

    /// The same as [`Style::name`] (the command lines' spelling).
    pub fn as_str(&self) -> &'static str {
        self.0.name()
    }

    /// The presets the style has, in the order error messages list them.
    pub fn presets(&self) -> Vec<Preset> {
        Preset::ALL
            .into_iter()
            .filter(|&p| self.0.preset(p).is_some())
            .collect()
    }

    /// The configuration of `preset`, or `None` when the style has no such preset.
    pub fn preset(&self, preset: Preset) -> Option<TowerConfig> {
        self.0.preset(preset)
    }

    /// The style's configuration read from its JSON form.
    pub fn config(&self, v: &Value) -> Result<TowerConfig> {
        self.0.config(v)
    }

    /// The tables of the shared embedding ([`TowerStyle::embedding`]).
    pub fn embedding(&self) -> EmbeddingLayout {
        self.0.embedding()
    }

    /// The mask the towers read ([`TowerStyle::device_mask`]).
    pub fn device_mask(&self, batch: &TokenBatch, dtype: DType, dev: &Device) -> Result<Tensor> {
        self.0.device_mask(batch, dtype, dev)
    }

    /// The positions the style predicts ([`TowerStyle::objective`]).
    pub fn objective(&self) -> Objective {
        self.0.objective()
    }

    /// The style's training sequences ([`TowerStyle::sequences`]).
    pub fn sequences(
        &self,
        tok: &Tokenizer,
        docs: &[Document],
        seq_len: usize,
    ) -> corpus::Result<TrainingData> {
        self.0.sequences(tok, docs, seq_len)
    }

    /// The style whose scoring set this style's runs are scored on ([`TowerStyle::scoring_set`]):
    /// itself, or the registered style it names.
    pub fn scoring_style(&self) -> Result<Style> {
        match self.0.scoring_set() {
            n if n == self.name() => Ok(self.clone()),
            n => Style::named(n),
        }
    }
}

impl PartialEq for Style {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Style {}

impl PartialOrd for Style {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Style {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.name().cmp(other.name())
    }
}

impl std::hash::Hash for Style {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name().hash(state)
    }
}

impl std::fmt::Debug for Style {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Style({})", self.name())
    }
}

impl std::fmt::Display for Style {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Style {
    type Err = TowersError;
    fn from_str(s: &str) -> Result<Self> {
        Style::named(s)
    }
}

impl Serialize for Style {
    fn serialize<Se: Serializer>(&self, s: Se) -> std::result::Result<Se::Ok, Se::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Style {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Style::named(&name).map_err(serde::de::Error::custom)
    }
}

/// A style's configuration bound to its style: what [`ModelConfig::tower`] holds. Written to
/// JSON as the style's own configuration (the style's name beside it, in [`ModelConfig`]).
#[derive(Clone)]
pub struct TowerConfig(Arc<dyn AnyConfig>);

impl TowerConfig {
    /// `cfg` of `style`.
    pub fn new<S: TowerStyle>(style: S, cfg: S::Config) -> Self {
        Held(Arc::new(style)).bind(cfg)
    }

    pub(crate) fn from_erased(c: Arc<dyn AnyConfig>) -> Self {
        Self(c)
    }

    /// The style.
    pub fn style(&self) -> Style {
        self.0.style()
    }

    /// The configuration's JSON form (the style's own type, serialised).
    pub fn to_json(&self) -> Value {
        self.0.to_json()
    }

    /// The configuration as the style's own type `C` (read from its JSON form).
    pub fn get<C: serde::de::DeserializeOwned>(&self) -> Result<C> {
        serde_json::from_value(self.to_json()).map_err(|e| {
            TowersError::Config(format!("a {} tower configuration: {e}", self.style()))
        })
    }

    /// The same configuration with the fields of the JSON object `patch` replaced (e.g.
    /// `{"mode": "AsReleased"}` for ELMo as released, `{"n_layers": 4}`); a field the style
    /// does not know is an error naming it.
    pub fn patched(&self, patch: &Value) -> Result<Self> {
        let mut v = self.to_json();
        let (Some(obj), Some(p)) = (v.as_object_mut(), patch.as_object()) else {
            return Err(TowersError::Config(format!(
                "a {} tower configuration patch must be a JSON object, not {patch}",
                self.style()
            )));
        };
        for (k, val) in p {
            if !obj.contains_key(k) {
                let known: Vec<&str> = obj.keys().map(String::as_str).collect();
                return Err(TowersError::Config(format!(
                    "a {} tower configuration has no field {k:?} (it has {})",
                    self.style(),
                    known.join(", ")
                )));
            }
            obj.insert(k.clone(), val.clone());
        }
        self.style().config(&v)
    }

    /// Checks the style's own sizes.
    pub fn validate(&self) -> std::result::Result<(), String> {
        self.0.validate()
    }

    /// Width H of one tower's input ([`TowerStyle::input_width`]).
    pub fn input_width(&self) -> usize {
        self.0.input_width()
    }

    /// Width D of one tower's output ([`TowerStyle::tower_width`]).
    pub fn tower_width(&self) -> usize {
        self.0.tower_width()
    }

    /// Width E of the shared embedding of `n_towers` towers ([`TowerStyle::embed_size`]).
    pub fn embed_size(&self, n_towers: usize) -> usize {
        self.0.embed_size(n_towers)
    }

    /// The model name in labels and tables ([`TowerStyle::model_name`]).
    pub fn model_name(&self) -> String {
        self.0.model_name()
    }

    pub(crate) fn build(
        &self,
        shared: &SharedConfig,
        root: Init<'_>,
    ) -> Result<Box<dyn TowerStack>> {
        self.0.build(shared, root)
    }
}

impl PartialEq for TowerConfig {
    fn eq(&self, other: &Self) -> bool {
        self.style() == other.style() && self.to_json() == other.to_json()
    }
}

impl std::fmt::Debug for TowerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}
