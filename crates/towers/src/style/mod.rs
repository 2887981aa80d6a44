//! Tower styles: everything that differs between ELMo, GPT and BERT towers lives behind one
//! trait, [`TowerStyle`], with one file per style. [`Style`](crate::Style) (the serde enum
//! users name) dispatches to it: `registry.rs` maps each variant to its implementation.
//!
//! Adding a style is a new file here implementing [`TowerStyle`] plus its registration: one
//! variant of [`Style`](crate::Style) and one arm of
//! [`Style::tower_style`](crate::Style::tower_style) (`registry.rs`).

mod bert;
mod elmo;
mod gpt;
mod registry;

use candle_core::{DType, Device, Tensor};
use corpus::{Document, Objective, TokenBatch, Tokenizer, TrainingData};

pub use bert::Bert;
pub use elmo::Elmo;
pub use gpt::Gpt;

use crate::attention::attention_bias;
use crate::config::{ElmoMode, ModelConfig, Preset};
use crate::params::Init;
use crate::Result;

/// The sizes a preset fixes for one style (the rest of [`ModelConfig`] is shared).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    /// Transformer layers, or LSTM layers per direction.
    pub n_layers: usize,
    /// Transformer width H, or the ELMo per-direction output width.
    pub hidden_size: usize,
    /// Feed-forward width (0 for ELMo).
    pub ffn_size: usize,
    /// Attention heads (0 for ELMo).
    pub n_heads: usize,
    /// LSTM cell width (0 for transformers).
    pub lstm_size: usize,
}

impl Sizes {
    /// A transformer's sizes: `l` layers of width `h`, FFN `f`, `nh` heads.
    pub const fn transformer(l: usize, h: usize, f: usize, nh: usize) -> Self {
        Self {
            n_layers: l,
            hidden_size: h,
            ffn_size: f,
            n_heads: nh,
            lstm_size: 0,
        }
    }

    /// An ELMo tower's sizes: `l` LSTM layers of cell `cell`, projected to `h`.
    pub const fn lstm(l: usize, h: usize, cell: usize) -> Self {
        Self {
            n_layers: l,
            hidden_size: h,
            ffn_size: 0,
            n_heads: 0,
            lstm_size: cell,
        }
    }
}

/// Which tables the shared embedding holds for a style (created in this order:
/// `tokens`, `positions`, `norm`, `proj{k}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmbeddingLayout {
    /// A learned position table (which also bounds the sequence length by `max_positions`).
    pub positions: bool,
    /// A LayerNorm over the shared representation and one Linear(E, H) per tower.
    pub projected: bool,
}

/// One encoder of a K-tower model, built by its style.
pub trait Tower: std::fmt::Debug + Send + Sync {
    /// The tower output h_k [B, T, D] of its input `x` [B, T, H] under the style's `mask`
    /// (see [`TowerStyle::device_mask`]).
    fn forward(&self, x: &Tensor, mask: &Tensor) -> Result<Tensor>;

    /// The (forward, backward) halves of a bidirectional tower, for leakage checks; `None` for
    /// towers without directions.
    fn directions(&self, _x: &Tensor, _mask: &Tensor) -> Option<Result<(Tensor, Tensor)>> {
        None
    }

    /// The tower as `Any`, so that a style's [`TowerStyle::forward_all`] can reach its own
    /// tower type.
    fn as_any(&self) -> &dyn std::any::Any;
}

/// What one tower style is: its presets, how it embeds and encodes, which positions it predicts
/// (its objective, which also fixes its scoring schedule) and how its text is cut into sequences.
pub trait TowerStyle: Send + Sync {
    /// The name command lines, labels, file names and JSON use (`elmo`, `gpt`, `bert`).
    fn name(&self) -> &'static str;

    /// The model name of a run in ELMo `mode`, or `None` where the mode does not apply to this
    /// style (only ELMo has an as-released variant).
    fn model_name(&self, mode: ElmoMode) -> Option<&'static str> {
        (mode == ElmoMode::BiLstm).then(|| self.name())
    }

    /// The presets this style knows, in the order error messages list them.
    fn presets(&self) -> Vec<Preset> {
        Preset::ALL
            .into_iter()
            .filter(|&p| self.sizes(p).is_some())
            .collect()
    }

    /// The sizes of `preset`, or `None` when the style has no such preset.
    fn sizes(&self, preset: Preset) -> Option<Sizes>;

    /// Checks the style's own sizes (the shared ones are checked by [`ModelConfig::validate`]).
    fn validate(&self, cfg: &ModelConfig) -> std::result::Result<(), &'static str>;

    /// Width of one tower's output h_k.
    fn tower_width(&self, cfg: &ModelConfig) -> usize;

    /// Width E of the shared embedding.
    fn embed_size(&self, cfg: &ModelConfig) -> usize;

    /// The tables of the shared embedding.
    fn embedding(&self) -> EmbeddingLayout;

    /// Builds tower parameters under `init` (`tower{k}.*`).
    fn tower(&self, cfg: &ModelConfig, init: Init<'_>) -> Result<Box<dyn Tower>>;

    /// Every tower's output h_k at once (tower k reading `xs[k]`, all under `mask`) where the
    /// style runs its towers together; `None` (the default) where each runs alone through
    /// [`Tower::forward`].
    fn forward_all(
        &self,
        _towers: &[Box<dyn Tower>],
        _xs: &[Tensor],
        _mask: &Tensor,
    ) -> Option<Result<Vec<Tensor>>> {
        None
    }

    /// The mask a tower reads, from a batch's real-token mask, on `dev` (`dtype` is the
    /// compute dtype).
    fn device_mask(&self, batch: &TokenBatch, dtype: DType, dev: &Device) -> Result<Tensor>;

    /// Which positions the style predicts: causal next token, masked positions or the token
    /// itself from both directions. The scoring schedule follows from it.
    fn objective(&self) -> Objective;

    /// The style's training sequences of `docs`, in document order.
    fn sequences(
        &self,
        tok: &Tokenizer,
        docs: &[Document],
        seq_len: usize,
    ) -> corpus::Result<TrainingData>;
}

/// The presets every style has: ours for tests and the CPU reproduction, the released code's
/// two sizes, and the paper's Table 1 (`paper`).
/// The presets every transformer style shares (the released code's `base_2tower` and
/// `large_2tower`, and ours for tests and the CPU reproduction).
pub(crate) fn transformer_sizes(preset: Preset) -> Option<Sizes> {
    Some(match preset {
        Preset::Tiny => Sizes::transformer(2, 32, 64, 4),
        // The CPU reproduction's shape (and the PyTorch peer's): 2 layers of width 128.
        Preset::PeerSmall => Sizes::transformer(2, 128, 512, 4),
        // The size pair of the CPU protocol (the paper's base vs large row): twice as wide,
        // twice as deep.
        Preset::PeerLarge => Sizes::transformer(4, 256, 1024, 4),
        Preset::Base2Tower => Sizes::transformer(12, 384, 1536, 12),
        Preset::Large2Tower => Sizes::transformer(24, 512, 2048, 16),
        _ => return None,
    })
}

/// The transformer checks: heads divide the width, a non-empty FFN.
pub(crate) fn validate_transformer(cfg: &ModelConfig) -> std::result::Result<(), &'static str> {
    if cfg.n_heads == 0 || !cfg.hidden_size.is_multiple_of(cfg.n_heads) {
        return Err("hidden_size must be a positive multiple of n_heads");
    }
    if cfg.ffn_size == 0 {
        return Err("ffn_size must be positive");
    }
    Ok(())
}

/// The additive attention bias of a transformer style ([B, 1, T, T], causal or not).
pub(crate) fn transformer_mask(batch: &TokenBatch, causal: bool, dev: &Device) -> Result<Tensor> {
    attention_bias(
        &batch.attention_mask,
        batch.batch_size,
        batch.seq_len,
        causal,
        dev,
    )
}

/// BERT windows (`[CLS] s1 [SEP] s2 [SEP]`) at sentence boundaries, as BERT and ELMo read.
pub(crate) fn bert_windows(
    tok: &Tokenizer,
    docs: &[Document],
    seq_len: usize,
) -> corpus::Result<TrainingData> {
    let it = docs.iter().cloned().map(Ok);
    corpus::windows::bert_windows(tok, it, &corpus::SentenceSplitter::default(), seq_len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Style;

    #[test]
    fn every_style_registers_itself_under_its_serde_name() {
        for st in Style::ALL {
            let imp = st.tower_style();
            let json = serde_json::to_string(&st).unwrap();
            assert_eq!(json, format!("\"{}\"", imp.name()));
            assert_eq!(imp.model_name(ElmoMode::BiLstm), Some(imp.name()));
            // Every style has every preset but BERT-large's.
            let want = if st == Style::Bert { 7 } else { 6 };
            assert_eq!(imp.presets().len(), want, "{st}");
        }
        assert_eq!(
            Style::Elmo.tower_style().model_name(ElmoMode::AsReleased),
            Some("elmo_released")
        );
        assert_eq!(
            Style::Gpt.tower_style().model_name(ElmoMode::AsReleased),
            None
        );
    }
}
