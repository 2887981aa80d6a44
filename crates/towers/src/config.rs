//! Model configuration: the style and sizes of a K-tower model, saved as JSON with every
//! checkpoint. What depends on the style (widths, checks, presets) is decided by the style's
//! implementation (`style::registry`).

use serde::{Deserialize, Serialize};

use crate::{Result, TowersError};

/// Which encoder every tower is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Style {
    /// Two-layer LSTMs, forward (sees x_<t) and backward (sees x_>t); labels are the tokens.
    Elmo,
    /// Causal pre-LN transformer; labels are the next tokens.
    Gpt,
    /// Bidirectional pre-LN transformer trained by masked LM.
    Bert,
}

/// How an ELMo tower combines its directions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ElmoMode {
    /// Forward and backward LSTM outputs concatenated (the intended model).
    #[default]
    BiLstm,
    /// As the released code behaves: its `flip_seq` zeroes the backward output, so the tower is
    /// forward-only with a zero second half (we do not build the unused backward LSTM).
    AsReleased,
}

impl ElmoMode {
    /// The name the command lines use: `full` or `as-released`.
    pub fn as_str(self) -> &'static str {
        match self {
            ElmoMode::BiLstm => "full",
            ElmoMode::AsReleased => "as-released",
        }
    }
}

impl std::fmt::Display for ElmoMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ElmoMode {
    type Err = TowersError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "full" | "bilstm" => Ok(ElmoMode::BiLstm),
            "as-released" | "released" | "forward-only" => Ok(ElmoMode::AsReleased),
            _ => Err(TowersError::Config(format!(
                "unknown ELMo backward mode {s:?} (full, as-released)"
            ))),
        }
    }
}

/// Configuration of a K-tower language model (mirrors the released code's config keys).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// Encoder style of every tower.
    pub style: Style,
    /// Number of towers K (1 = single-tower baseline, 2 = the paper).
    pub n_towers: usize,
    /// Vocabulary size V (bert-base-uncased padded to a multiple of 8: 30528).
    pub vocab_size: usize,
    /// Transformer width H; for ELMo the per-direction output width (`model_size`).
    pub hidden_size: usize,
    /// Transformer layers (ELMo: LSTM layers per direction).
    pub n_layers: usize,
    /// Attention heads (transformers only).
    pub n_heads: usize,
    /// Feed-forward width (transformers only).
    pub ffn_size: usize,
    /// LSTM cell width (ELMo only; the released `hidden_size` 2048/4096).
    pub lstm_size: usize,
    /// Longest sequence (position embeddings; GPT `n_positions`).
    pub max_positions: usize,
    /// ELMo direction handling.
    pub elmo_mode: ElmoMode,
    /// LayerNorm epsilon (inside the square root, as BertLayerNorm).
    pub layer_norm_eps: f64,
    /// Standard deviation of the normal weight initialisation.
    pub init_std: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_validate_and_roundtrip() {
        for style in Style::ALL {
            for name in style.tower_style().preset_names() {
                let c = ModelConfig::preset(style, name).unwrap();
                c.validate().unwrap();
                let back: ModelConfig =
                    serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
                assert_eq!(back, c);
            }
        }
        assert!(ModelConfig::preset(Style::Gpt, "huge").is_err());
        for st in [Style::Elmo, Style::Gpt, Style::Bert] {
            assert_eq!(st.as_str().parse::<Style>().unwrap(), st);
        }
        for m in [ElmoMode::BiLstm, ElmoMode::AsReleased] {
            assert_eq!(m.as_str().parse::<ElmoMode>().unwrap(), m);
        }
        assert!("backward".parse::<ElmoMode>().is_err());
        let mut c = ModelConfig::preset(Style::Gpt, "tiny").unwrap();
        c.n_heads = 5;
        assert!(c.validate().is_err());
    }
}
