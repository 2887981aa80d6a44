//! Model configuration: the style and sizes of a K-tower model, saved as JSON with every
//! checkpoint. What depends on the style (widths, checks, presets) is decided by the style's
//! implementation (`style::registry`).

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::encoders::SharedConfig;
use crate::style::{Preset, Style, TowerConfig};
use crate::{Result, TowersError};

/// The current layout of a model's `config.json` ([`ModelConfig`]): 2 puts the style's own
/// configuration under `tower`; layout 1 (before it) was one flat object of every style's sizes,
/// still read.
pub const MODEL_CONFIG_LAYOUT: u32 = 2;

/// Configuration of a K-tower language model: the style's own configuration ([`TowerConfig`])
/// and what the shared embedding and the joint head need. Its JSON (`config.json` beside every
/// checkpoint) names the style, so reading it needs the style registered
/// ([`crate::register`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// The towers' style and its own configuration.
    pub tower: TowerConfig,
    /// Number of towers K (1 = single-tower baseline, 2 = the paper).
    pub n_towers: usize,
    /// Vocabulary size V (bert-base-uncased padded to a multiple of 8: 30528).
    pub vocab_size: usize,
    /// Longest sequence (position embeddings; GPT `n_positions`).
    pub max_positions: usize,
    /// LayerNorm epsilon (inside the square root, as BertLayerNorm).
    pub layer_norm_eps: f64,
    /// Standard deviation of the normal weight initialisation.
    pub init_std: f64,
}

impl ModelConfig {
    /// K = 2 towers of `tower` with the paper's shared settings (V 30528, 128 positions,
    /// LayerNorm epsilon 1e-12, initialisation scale 0.02).
    pub fn new(tower: TowerConfig) -> Self {
        Self {
            tower,
            n_towers: 2,
            vocab_size: 30528,
            max_positions: 128,
            layer_norm_eps: 1e-12,
            init_std: 0.02,
        }
    }

    /// A named preset of `style`, K = 2: `tiny` (tests: V 64, 64 positions, epsilon 1e-5),
    /// `peer_small` (2 layers, width 128, FFN 512, 4 heads; ELMo cell 512: the CPU
    /// reproduction), `peer_large` (4 layers, width 256, FFN 1024, 4 heads; ELMo cell 1024, H
    /// 256: the CPU protocol's size pair), `base_2tower` and `large_2tower` (the released code),
    /// `paper` (Table 1: ELMo cell 4096; GPT 12 x 768, FFN 3072, 12 heads; BERT-base 12 x 384,
    /// FFN 1024, 12 heads) and `paper_large` (BERT-large 24 x 512, 2048, 16).
    pub fn preset(style: &Style, preset: Preset) -> Result<Self> {
        let tower = style.preset(preset).ok_or_else(|| {
            let names: Vec<&str> = style.presets().iter().map(|p| p.as_str()).collect();
            TowersError::Config(format!(
                "no preset {preset} for {style} (it has {})",
                names.join(", ")
            ))
        })?;
        let mut c = Self::new(tower);
        if preset == Preset::Tiny {
            // Small enough for unit tests on any style.
            c.vocab_size = 64;
            c.max_positions = 64;
            c.layer_norm_eps = 1e-5;
        }
        Ok(c)
    }

    /// The shared settings the towers are built under.
    pub fn shared(&self) -> SharedConfig {
        SharedConfig {
            n_towers: self.n_towers,
            vocab_size: self.vocab_size,
            max_positions: self.max_positions,
            layer_norm_eps: self.layer_norm_eps,
            init_std: self.init_std,
        }
    }

    /// The towers' style.
    pub fn style(&self) -> Style {
        self.tower.style()
    }

    /// Width of one tower's output `h_k` (H for transformers, 2H for ELMo).
    pub fn tower_width(&self) -> usize {
        self.tower.tower_width()
    }

    /// Width H of one tower's input.
    pub fn input_width(&self) -> usize {
        self.tower.input_width()
    }

    /// Width E of the shared embedding (GPT: H; BERT: K·H; ELMo: 2H).
    pub fn embed_size(&self) -> usize {
        self.tower.embed_size(self.n_towers)
    }

    /// Checks that the sizes are usable.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(TowersError::Config(m));
        if self.n_towers == 0 {
            return bad("n_towers must be at least 1".into());
        }
        if self.vocab_size < 2 {
            return bad("vocab_size must be at least 2".into());
        }
        if self.max_positions == 0 {
            return bad("max_positions must be positive".into());
        }
        if let Err(why) = self.tower.validate() {
            return bad(format!("{} towers: {why}", self.style()));
        }
        if !(self.layer_norm_eps > 0.0 && self.init_std > 0.0) {
            return bad("layer_norm_eps and init_std must be positive".into());
        }
        Ok(())
    }

    /// The JSON form (layout [`MODEL_CONFIG_LAYOUT`]).
    pub fn to_json(&self) -> Value {
        json!({
            "layout": MODEL_CONFIG_LAYOUT,
            "style": self.style().name(),
            "tower": self.tower.to_json(),
            "n_towers": self.n_towers,
            "vocab_size": self.vocab_size,
            "max_positions": self.max_positions,
            "layer_norm_eps": self.layer_norm_eps,
            "init_std": self.init_std,
        })
    }

    /// Reads the JSON form: layout 2, or layout 1 (one flat object of the built-in styles'
    /// sizes, as checkpoints before it were written); a later layout or a style not registered
    /// is a [`TowersError::Config`] that says so.
    pub fn from_json(v: &Value) -> Result<Self> {
        let bad = |m: String| TowersError::Config(format!("model config: {m}"));
        let layout = v.get("layout").and_then(Value::as_u64).unwrap_or(1);
        if layout > u64::from(MODEL_CONFIG_LAYOUT) {
            return Err(bad(format!(
                "layout {layout} is newer than this build reads (up to {MODEL_CONFIG_LAYOUT})"
            )));
        }
        let name = v
            .get("style")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("no \"style\" name".into()))?;
        let style = Style::named(name)?;
        // Layout 1 kept every style's sizes beside the shared ones: the style's own fields are
        // read from the flat object (the built-in configurations keep those names).
        let tower = match layout {
            1 => style.config(v)?,
            _ => style.config(v.get("tower").ok_or_else(|| bad("no \"tower\"".into()))?)?,
        };
        fn field<T: serde::de::DeserializeOwned>(v: &Value, k: &str) -> Result<T> {
            let x = v
                .get(k)
                .ok_or_else(|| TowersError::Config(format!("model config: no {k:?}")))?;
            serde_json::from_value(x.clone())
                .map_err(|e| TowersError::Config(format!("model config: {k}: {e}")))
        }
        Ok(Self {
            tower,
            n_towers: field(v, "n_towers")?,
            vocab_size: field(v, "vocab_size")?,
            max_positions: field(v, "max_positions")?,
            layer_norm_eps: field(v, "layer_norm_eps")?,
            init_std: field(v, "init_std")?,
        })
    }
}

impl Serialize for ModelConfig {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.to_json().serialize(s)
    }
}

impl<'de> Deserialize<'de> for ModelConfig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        Self::from_json(&v).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::style::registered;
    use crate::ElmoMode;

    #[test]
    fn presets_validate_and_roundtrip() {
        for style in registered() {
            for p in style.presets() {
                let c = ModelConfig::preset(&style, p).unwrap();
                c.validate().unwrap();
                let back: ModelConfig =
                    serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
                assert_eq!(back, c);
            }
        }
        assert!(ModelConfig::preset(&Style::gpt(), Preset::PaperLarge).is_err());
        assert!("huge".parse::<Preset>().is_err());
        for p in Preset::ALL {
            assert_eq!(p.as_str().parse::<Preset>().unwrap(), p);
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(json, format!("\"{p}\""));
        }
        for st in registered() {
            assert_eq!(st.as_str().parse::<Style>().unwrap(), st);
        }
        for m in [ElmoMode::BiLstm, ElmoMode::AsReleased] {
            assert_eq!(m.as_str().parse::<ElmoMode>().unwrap(), m);
        }
        assert!("backward".parse::<ElmoMode>().is_err());
        let c = ModelConfig::preset(&Style::gpt(), Preset::Tiny).unwrap();
        let bad = ModelConfig {
            tower: c.tower.patched(&json!({"n_heads": 5})).unwrap(),
            ..c
        };
        assert!(bad.validate().is_err());
    }

    /// A layout-1 `config.json` (one flat object, written before the style trait) reads as
    /// the same model; a newer layout and an unknown style are refused with one sentence.
    #[test]
    fn a_layout_1_config_reads_and_an_unknown_style_is_named() {
        let old = json!({"style": "elmo", "n_towers": 2, "vocab_size": 64, "hidden_size": 16,
            "n_layers": 2, "n_heads": 0, "ffn_size": 0, "lstm_size": 32, "max_positions": 64,
            "elmo_mode": "AsReleased", "layer_norm_eps": 1e-5, "init_std": 0.02});
        let c = ModelConfig::from_json(&old).unwrap();
        let want = ModelConfig::preset(&Style::elmo(), Preset::Tiny).unwrap();
        let want = ModelConfig {
            tower: want.tower.patched(&json!({"mode": "AsReleased"})).unwrap(),
            ..want
        };
        assert_eq!(c, want);
        let mut newer = c.to_json();
        newer["layout"] = json!(9);
        let e = ModelConfig::from_json(&newer).unwrap_err().to_string();
        assert!(e.contains("layout 9"), "{e}");
        let mut gru = c.to_json();
        gru["style"] = json!("gru");
        let e = ModelConfig::from_json(&gru).unwrap_err().to_string();
        assert!(
            e.contains("\"gru\"") && e.contains("towers::register"),
            "{e}"
        );
    }
}
