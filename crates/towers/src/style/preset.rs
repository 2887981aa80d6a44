//! The named sizes every style may offer ([`crate::TowerStyle::preset`]).

use serde::{Deserialize, Serialize};

use crate::{Result, TowersError};

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
