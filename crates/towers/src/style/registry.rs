//! The registration of the tower styles: which implementation each [`Style`] variant is, and
//! what a [`ModelConfig`] asks of its style (widths, checks, presets).

use super::{Bert, Elmo, Gpt, TowerStyle};
use crate::config::{ElmoMode, ModelConfig, Preset, Style};
use crate::{Result, TowersError};

impl Style {
    /// Every registered style, in the order help texts list them.
    pub const ALL: [Style; 3] = [Style::Elmo, Style::Gpt, Style::Bert];

    /// The implementation of this style: its presets, embedding, towers and objective.
    pub fn tower_style(self) -> &'static dyn TowerStyle {
        match self {
            Style::Elmo => &Elmo,
            Style::Gpt => &Gpt,
            Style::Bert => &Bert,
        }
    }

    /// The name the command lines, labels and file names use: `elmo`, `gpt`, `bert`.
    pub fn as_str(self) -> &'static str {
        self.tower_style().name()
    }
}

impl std::fmt::Display for Style {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Style {
    type Err = TowersError;
    fn from_str(s: &str) -> Result<Self> {
        let s_lower = s.to_ascii_lowercase();
        Style::ALL
            .into_iter()
            .find(|st| st.as_str() == s_lower)
            .ok_or_else(|| {
                let names: Vec<&str> = Style::ALL.iter().map(|st| st.as_str()).collect();
                TowersError::Config(format!("unknown style {s:?} ({})", names.join(", ")))
            })
    }
}

impl ModelConfig {
    /// Width of one tower's output `h_k`: H for transformers, 2H (forward ++ backward) for ELMo.
    pub fn tower_width(&self) -> usize {
        self.style.tower_style().tower_width(self)
    }

    /// Width E of the shared embedding: GPT shares width-H token and position tables; BERT shares
    /// a K·H table projected into each tower; ELMo a 2H table (the released code).
    pub fn embed_size(&self) -> usize {
        self.style.tower_style().embed_size(self)
    }

    /// Checks that the sizes are usable.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: &str| Err(TowersError::Config(m.to_string()));
        if self.n_towers == 0 {
            return bad("n_towers must be at least 1");
        }
        if self.vocab_size < 2 || self.hidden_size == 0 || self.n_layers == 0 {
            return bad("vocab_size >= 2, hidden_size >= 1 and n_layers >= 1 are required");
        }
        if self.max_positions == 0 {
            return bad("max_positions must be positive");
        }
        self.style.tower_style().validate(self).or_else(bad)?;
        if !(self.layer_norm_eps > 0.0 && self.init_std > 0.0) {
            return bad("layer_norm_eps and init_std must be positive");
        }
        Ok(())
    }

    /// A named preset for a style, K = 2: `tiny` (tests), `peer_small` (2 layers, width 128, FFN
    /// 512, 4 heads; ELMo cell 512: the CPU reproduction), `peer_large` (4 layers, width 256, FFN
    /// 1024, 4 heads; ELMo cell 1024, H 256: the CPU protocol's size pair), `base_2tower` and
    /// `large_2tower` (the released code), `paper` (Table 1: ELMo cell 4096; GPT 12 x 768, FFN
    /// 3072, 12 heads; BERT-base 12 x 384, FFN 1024, 12 heads) and `paper_large` (BERT-large 24 x
    /// 512, 2048, 16).
    pub fn preset(style: Style, preset: Preset) -> Result<Self> {
        let imp = style.tower_style();
        let sizes = imp.sizes(preset).ok_or_else(|| {
            let names: Vec<&str> = imp.presets().iter().map(|p| p.as_str()).collect();
            TowersError::Config(format!(
                "no preset {preset} for {style} (it has {})",
                names.join(", ")
            ))
        })?;
        let mut c = ModelConfig {
            style,
            n_towers: 2,
            vocab_size: 30528,
            hidden_size: sizes.hidden_size,
            n_layers: sizes.n_layers,
            n_heads: sizes.n_heads,
            ffn_size: sizes.ffn_size,
            lstm_size: sizes.lstm_size,
            max_positions: 128,
            elmo_mode: ElmoMode::BiLstm,
            layer_norm_eps: 1e-12,
            init_std: 0.02,
        };
        if preset == Preset::Tiny {
            // Small enough for unit tests on any style.
            c.vocab_size = 64;
            c.max_positions = 64;
            c.layer_norm_eps = 1e-5;
        }
        Ok(c)
    }
}
