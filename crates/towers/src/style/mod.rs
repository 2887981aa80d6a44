//! Tower styles: everything that differs between ELMo, GPT, BERT or a researcher's own towers
//! lives behind one public trait, [`TowerStyle`], with one file per style.
//!
//! A style has its own configuration type (serde; what its towers need and nothing else), its
//! presets, its tower type and how the towers run, how its text is cut into sequences and which
//! positions it predicts. The built-in [`Elmo`], [`Gpt`] and [`Bert`] implement the same trait
//! as a user's style, with nothing privileged.
//!
//! A [`Style`] is a handle to a style (cheap to clone, compared by name, written to JSON as its
//! name); a [`TowerConfig`] is a style's configuration bound to its style. Runs written to disk
//! name their style, so reading one back needs the style registered in the process:
//! [`register`] (one call) returns its handle; the built-ins are always registered.
//!
//! Adding a style outside lmsplit: one file of the user's implementing [`TowerStyle`] (see
//! `examples/custom_tower.rs`, a GRU), and `towers::register(MyStyle)`. Inside lmsplit: one file
//! here and one line in `registry.rs`'s `builtins`.

mod bert;
mod elmo;
mod erased;
mod gpt;
mod handle;
mod preset;
mod registry;

use candle_core::{DType, Device, Tensor};
use corpus::{Document, Objective, TokenBatch, Tokenizer, TrainingData};
use serde::de::DeserializeOwned;
use serde::Serialize;

pub use crate::encoders::{SharedConfig, Tower};
pub use bert::Bert;
pub use elmo::Elmo;
pub use gpt::Gpt;
pub use handle::{Style, TowerConfig};
pub use preset::Preset;
pub use registry::{register, registered};

pub(crate) use erased::TowerStack;

use crate::layers::attention::attention_bias;
use crate::layers::params::Init;
use crate::Result;

/// Which tables the shared embedding holds for a style (created in this order:
/// `tokens`, `positions`, `norm`, `proj{k}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmbeddingLayout {
    /// A learned position table (which also bounds the sequence length by `max_positions`).
    pub positions: bool,
    /// A LayerNorm over the shared representation and one Linear(E, H) per tower, H being
    /// [`TowerStyle::input_width`].
    pub projected: bool,
}

/// The bounds of a style's configuration type: cloned, compared and written with every
/// checkpoint and manifest as JSON.
pub trait StyleConfig:
    Clone + std::fmt::Debug + PartialEq + Serialize + DeserializeOwned + Send + Sync + 'static
{
}

impl<T> StyleConfig for T where
    T: Clone + std::fmt::Debug + PartialEq + Serialize + DeserializeOwned + Send + Sync + 'static
{
}

/// What one tower style is: its configuration and presets, how it embeds and encodes, which
/// positions it predicts (its objective, which also fixes its scoring schedule) and how its text
/// is cut into sequences. Implemented by the built-in [`Elmo`], [`Gpt`] and [`Bert`] and by a
/// user's own style; [`register`] makes a style known by name.
pub trait TowerStyle: Send + Sync + 'static {
    /// The style's own configuration (its `config.json` section under `tower`).
    type Config: StyleConfig;
    /// One tower of the style.
    type Tower: Tower;

    /// The name command lines, labels, file names and JSON use (`elmo`, `gpt`, `bert`, ...).
    fn name(&self) -> &'static str;

    /// The model name of a run of `cfg` in labels and tables: the style's name unless a
    /// configuration is a named variant (ELMo as released: `elmo_released`).
    fn model_name(&self, _cfg: &Self::Config) -> String {
        self.name().to_string()
    }

    /// The configuration of `preset`, or `None` when the style has no such preset.
    fn preset(&self, preset: Preset) -> Option<Self::Config>;

    /// Checks the style's own sizes (the shared ones are checked by
    /// [`crate::ModelConfig::validate`]);
    /// the error says what is wrong in one sentence.
    fn validate(&self, cfg: &Self::Config) -> std::result::Result<(), String>;

    /// Width H of one tower's input (the projection of the shared embedding, or the embedding
    /// itself when the layout has no projection).
    fn input_width(&self, cfg: &Self::Config) -> usize;

    /// Width D of one tower's output h_k.
    fn tower_width(&self, cfg: &Self::Config) -> usize;

    /// Width E of the shared embedding of `n_towers` towers.
    fn embed_size(&self, cfg: &Self::Config, n_towers: usize) -> usize;

    /// The tables of the shared embedding.
    fn embedding(&self) -> EmbeddingLayout;

    /// Builds one tower's parameters under `init` (named `tower{k}.*` by the caller); `shared`
    /// gives the model's shared settings (initialisation scale, LayerNorm epsilon, K, V).
    fn tower(
        &self,
        cfg: &Self::Config,
        shared: &SharedConfig,
        init: Init<'_>,
    ) -> Result<Self::Tower>;

    /// Every tower's output h_k (tower k reading `xs[k]`, all under `mask`). The default runs
    /// each through [`Tower::forward`]; a style may run its towers together (ELMo's bf16 chains
    /// on CUDA).
    fn forward_all(
        &self,
        _cfg: &Self::Config,
        towers: &[Self::Tower],
        xs: &[Tensor],
        mask: &Tensor,
    ) -> Result<Vec<Tensor>> {
        towers
            .iter()
            .zip(xs)
            .map(|(t, x)| t.forward(x, mask))
            .collect()
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

    /// The name of the scoring set the style's runs are scored on: its own by default. A style
    /// that cuts its text and chooses its targets as another does may name that one, so that
    /// both are scored on identical positions (a causal GRU beside GPT: `"gpt"`); the set's
    /// fingerprint is checked, so a style that cuts differently is refused, not mixed in.
    fn scoring_set(&self) -> &'static str {
        self.name()
    }
}

/// The presets every transformer style shares (the released code's `base_2tower` and
/// `large_2tower`, and ours for tests and the CPU reproduction).
pub(crate) fn transformer_preset(
    preset: Preset,
) -> Option<crate::encoders::transformer::TransformerConfig> {
    use crate::encoders::transformer::TransformerConfig as C;
    Some(match preset {
        Preset::Tiny => C::new(2, 32, 64, 4),
        // The CPU reproduction's shape (and the PyTorch peer's): 2 layers of width 128.
        Preset::PeerSmall => C::new(2, 128, 512, 4),
        // The size pair of the CPU protocol (the paper's base vs large row): twice as wide,
        // twice as deep.
        Preset::PeerLarge => C::new(4, 256, 1024, 4),
        Preset::Base2Tower => C::new(12, 384, 1536, 12),
        Preset::Large2Tower => C::new(24, 512, 2048, 16),
        _ => return None,
    })
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

    #[test]
    fn every_builtin_style_is_registered_under_its_name_and_has_its_presets() {
        for st in registered() {
            let json = serde_json::to_string(&st).unwrap();
            assert_eq!(json, format!("\"{}\"", st.name()));
            assert_eq!(serde_json::from_str::<Style>(&json).unwrap(), st);
            // Every built-in style has every preset but BERT-large's.
            let want = if st == Style::bert() { 7 } else { 6 };
            assert_eq!(st.presets().len(), want, "{st}");
            let c = st.preset(Preset::Tiny).unwrap();
            assert_eq!(c.model_name(), st.name());
        }
        let released = Style::elmo()
            .preset(Preset::Tiny)
            .unwrap()
            .patched(&serde_json::json!({"mode": "AsReleased"}))
            .unwrap();
        assert_eq!(released.model_name(), "elmo_released");
        let err = serde_json::from_str::<Style>("\"gru\"").unwrap_err();
        assert!(err.to_string().contains("towers::register"), "{err}");
    }
}
