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

/// A named size of a style's towers ([`ModelConfig::preset`]); in JSON and on command lines by
/// its name (`tiny`, `peer_small`, `peer_large`, `base_2tower`, `large_2tower`, `paper`,
/// `paper_large`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Preset {
    /// Small enough for unit tests on any style (V 64).
    #[serde(rename = "tiny")]
    Tiny,
    /// The CPU reproduction's towers (2 layers of width 128, FFN 512, 4 heads; ELMo cell 512).
    #[serde(rename = "peer_small")]
    PeerSmall,
    /// The CPU protocol's larger size (4 layers of width 256, FFN 1024; ELMo cell 1024, H 256).
    #[serde(rename = "peer_large")]
    PeerLarge,
    /// The released code's `base_2tower` (12 x 384, FFN 1536, 12 heads; ELMo cell 2048).
    #[serde(rename = "base_2tower")]
    Base2Tower,
    /// The released code's `large_2tower` (24 x 512, FFN 2048, 16 heads; ELMo cell 4096).
    #[serde(rename = "large_2tower")]
    Large2Tower,
    /// Table 1 of the paper (ELMo cell 4096; GPT 12 x 768, FFN 3072; BERT-base 12 x 384, 1024).
    #[serde(rename = "paper")]
    Paper,
    /// Table 1's BERT-large (24 x 512, FFN 2048, 16 heads); BERT only.
    #[serde(rename = "paper_large")]
    PaperLarge,
}

impl Preset {
    /// Every preset, in the order help texts list them.
    pub const ALL: [Preset; 7] = [
        Preset::Tiny,
        Preset::PeerSmall,
        Preset::PeerLarge,
        Preset::Base2Tower,
        Preset::Large2Tower,
        Preset::Paper,
        Preset::PaperLarge,
    ];

    /// The name in JSON and on command lines.
    pub fn as_str(self) -> &'static str {
        match self {
            Preset::Tiny => "tiny",
            Preset::PeerSmall => "peer_small",
            Preset::PeerLarge => "peer_large",
            Preset::Base2Tower => "base_2tower",
            Preset::Large2Tower => "large_2tower",
            Preset::Paper => "paper",
            Preset::PaperLarge => "paper_large",
        }
    }
}

impl std::fmt::Display for Preset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Preset {
    type Err = TowersError;
    fn from_str(s: &str) -> Result<Self> {
        Preset::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Preset::ALL.iter().map(|p| p.as_str()).collect();
                TowersError::Config(format!("unknown preset {s:?} ({})", names.join(", ")))
            })
    }
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
            for p in style.tower_style().presets() {
                let c = ModelConfig::preset(style, p).unwrap();
                c.validate().unwrap();
                let back: ModelConfig =
                    serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
                assert_eq!(back, c);
            }
        }
        assert!(ModelConfig::preset(Style::Gpt, Preset::PaperLarge).is_err());
        assert!("huge".parse::<Preset>().is_err());
        for p in Preset::ALL {
            assert_eq!(p.as_str().parse::<Preset>().unwrap(), p);
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(json, format!("\"{p}\""));
        }
        for st in [Style::Elmo, Style::Gpt, Style::Bert] {
            assert_eq!(st.as_str().parse::<Style>().unwrap(), st);
        }
        for m in [ElmoMode::BiLstm, ElmoMode::AsReleased] {
            assert_eq!(m.as_str().parse::<ElmoMode>().unwrap(), m);
        }
        assert!("backward".parse::<ElmoMode>().is_err());
        let mut c = ModelConfig::preset(Style::Gpt, Preset::Tiny).unwrap();
        c.n_heads = 5;
        assert!(c.validate().is_err());
    }
}
