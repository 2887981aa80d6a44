//! What defines one two-tower run: corpus, model, the settings of the three phases and the seeds. A
//! [`RunSpec`] is saved in `manifest.json` in the run's folder; a folder holding another run is
//! refused with the differing fields named ([`spec_diff`]).

use std::path::PathBuf;

pub use corpus::Vocabulary;

use corpus::Format;
use heads::HeadInput;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use towers::{ElmoMode, ModelConfig, Preset, Schedule, Style, TowerConfig};

use crate::error::{ExperimentError, Result};

/// The text of a study: the embedded generator, or files of one format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Corpus {
    /// The embedded synthetic corpus (documents with gold word classes).
    Synthetic {
        /// Documents generated.
        documents: usize,
        /// The generator's seed.
        seed: u64,
    },
    /// A text file or folder.
    Text {
        /// The file or folder.
        path: PathBuf,
        /// How it is laid out.
        format: Format,
    },
}

impl std::fmt::Display for Corpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Corpus::Synthetic { documents, seed } => {
                write!(
                    f,
                    "the synthetic corpus ({documents} documents, seed {seed})"
                )
            }
            Corpus::Text { path, .. } => write!(f, "the corpus {}", path.display()),
        }
    }
}

/// Where the text and the tokenizer of a run come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CorpusSpec {
    /// The text.
    pub source: Corpus,
    /// Tokenizer file (`vocab.txt` or `tokenizer.json`); `None`: a WordPiece vocabulary of
    /// `train_vocab` pieces trained once on the training documents and saved beside the data.
    pub tokenizer: Option<PathBuf>,
    /// WordPiece size when a vocabulary is trained.
    pub train_vocab: usize,
}

impl CorpusSpec {
    /// The embedded synthetic corpus: `documents` documents from `seed`, a 1024-piece
    /// vocabulary trained on it.
    pub fn synthetic(documents: usize, seed: u64) -> Self {
        Self {
            source: Corpus::Synthetic { documents, seed },
            tokenizer: None,
            train_vocab: 1024,
        }
    }

    /// A text file or folder of `format` with a given tokenizer (`None`: train an
    /// 8,192-piece one).
    pub fn text(path: impl Into<PathBuf>, format: Format, tokenizer: Option<PathBuf>) -> Self {
        Self {
            source: Corpus::Text {
                path: path.into(),
                format,
            },
            tokenizer,
            train_vocab: 8192,
        }
    }

    /// The same text with another vocabulary.
    pub fn with_vocabulary(mut self, vocab: &Vocabulary) -> Self {
        match vocab {
            Vocabulary::File(p) => self.tokenizer = Some(p.clone()),
            Vocabulary::Trained(n) => {
                self.tokenizer = None;
                self.train_vocab = *n;
            }
        }
        self
    }
}

/// Phase 1: the K towers trained jointly through the tied joint head.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Phase1Settings {
    /// Token positions of training (batch size × sequence length per update).
    pub budget_tokens: u64,
    /// Sequence length.
    pub seq_len: usize,
    /// Sequences per batch.
    pub batch_size: usize,
    /// Peak learning rate (AdamW).
    pub lr: f64,
    /// The learning-rate schedule: warmup then linear decay to 0 (the default, the 24hBERT
    /// recipe), or a constant rate after a fixed warmup, under which a finished run continues
    /// bit-exactly to a larger `budget_tokens`.
    #[serde(default)]
    pub schedule: Schedule,
    /// Held-out batches validating training.
    pub eval_batches: usize,
    /// Validate every this many updates.
    pub eval_every: u64,
    /// Weight snapshots at these fractions of training (for the emergence figure), e.g.
    /// `[0.0625, 0.125, 0.25, 0.5]`; the end of training is always kept.
    pub snapshots: Vec<f64>,
}

impl Default for Phase1Settings {
    /// 200k tokens of 64-token sequences, batch 16, lr 2e-3, 8 validation batches, every 100
    /// updates, no snapshots.
    fn default() -> Self {
        Self {
            budget_tokens: 200_000,
            seq_len: 64,
            batch_size: 16,
            lr: 2e-3,
            eval_batches: 8,
            eval_every: 100,
            snapshots: Vec::new(),
            schedule: Schedule::LinearDecay,
        }
    }
}

/// Phases 2 and 3: one head per frozen tower, trained together on identical batches until the
/// validation NLL stops improving.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeadSettings {
    /// The most token positions the heads may train on (early stopping usually ends sooner).
    /// A masked LM's positions are targets only at its masked share: the real-text protocols
    /// divide its cap (and `eval_every`) by that share so every style's heads may see as many
    /// targets.
    pub max_budget_tokens: u64,
    /// Peak learning rate.
    pub lr: f64,
    /// What each head reads ([`HeadInput::TowerLayerNorm`] by default: its own tower,
    /// normalised, so the step size does not depend on the tower's scale).
    pub input: HeadInput,
    /// Clip each head's gradient on its own (otherwise one global clip over all heads).
    pub per_head_clip: bool,
    /// Validate every this many updates.
    pub eval_every: u64,
    /// Validations without an improvement of `min_delta` nats before stopping.
    pub patience: u64,
    /// Smallest improvement of the summed head NLL that counts.
    pub min_delta: f64,
}

impl Default for HeadSettings {
    /// 400k tokens at most, lr 2e-3, per-tower LayerNorm input, per-head clipping, validation
    /// every 50 updates, patience 3, min_delta 1e-3.
    fn default() -> Self {
        Self {
            max_budget_tokens: 400_000,
            lr: 2e-3,
            input: HeadInput::TowerLayerNorm,
            per_head_clip: true,
            eval_every: 50,
            patience: 3,
            min_delta: 1e-3,
        }
    }
}

/// One two-tower run: the spec its `manifest.json` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSpec {
    /// Tower style.
    pub style: Style,
    /// Model size ([`towers::ModelConfig::preset`]).
    pub preset: Preset,
    /// Text and tokenizer.
    pub corpus: CorpusSpec,
    /// Phase 1.
    pub phase1: Phase1Settings,
    /// Phases 2/3.
    pub heads: HeadSettings,
    /// Seed of the weights, the shuffling and the training masks of phase 1.
    pub seed: u64,
    /// Seed of the heads' initialisation and batches.
    pub head_seed: u64,
    /// Also retrain the heads with `head_seed + 1` and score them: the head-seed (test-retest)
    /// reliability of the run's scores.
    pub retest_heads: bool,
    /// Fields of the style's own configuration that replace the preset's (a JSON object, e.g.
    /// `{"mode": "AsReleased"}` for the released code's forward-only ELMo towers); `None`: the
    /// preset as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tower: Option<Value>,
    /// The model's name in labels and tables (e.g. `gpt_large` for a second size of one
    /// style); `None`: the configuration's ([`towers::TowerStyle::model_name`]: the style's
    /// name, `elmo_released` for as-released ELMo).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl RunSpec {
    /// A run of `style` at `preset` on `corpus` with default settings and seed 0.
    pub fn new(style: Style, preset: Preset, corpus: CorpusSpec) -> Self {
        Self {
            style,
            preset,
            corpus,
            phase1: Phase1Settings::default(),
            heads: HeadSettings::default(),
            seed: 0,
            head_seed: 1000,
            retest_heads: true,
            tower: None,
            name: None,
        }
    }

    /// The same run with the fields of `patch` replacing the preset's in the style's own
    /// configuration ([`RunSpec::tower`]); checked by [`RunSpec::validate`].
    pub fn with_tower(mut self, patch: Value) -> Self {
        self.tower = Some(patch);
        self
    }

    /// The same run with ELMo's towers in `mode` (`with_tower({"mode": mode})`; a run of
    /// another style is refused by [`RunSpec::validate`], its configuration having no mode).
    pub fn with_elmo_mode(self, mode: ElmoMode) -> Self {
        match mode {
            ElmoMode::BiLstm => self,
            mode => self.with_tower(serde_json::json!({ "mode": mode })),
        }
    }

    /// The style's configuration of this run: the preset's, patched by [`RunSpec::tower`].
    pub fn tower_config(&self) -> Result<TowerConfig> {
        let preset = ModelConfig::preset(&self.style, self.preset)?.tower;
        Ok(match &self.tower {
            Some(patch) => preset.patched(patch)?,
            None => preset,
        })
    }

    /// The same run under another model name (see [`RunSpec::name`]).
    pub fn named(mut self, name: &str) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The model's name: [`RunSpec::name`], else the style's (`elmo_released` for as-released
    /// ELMo). Runs of one model differ only in their seeds.
    pub fn model_name(&self) -> String {
        match (&self.name, self.tower_config()) {
            (Some(n), _) => n.clone(),
            (None, Ok(c)) => c.model_name(),
            // An invalid configuration is refused by `validate` before any work; its label
            // meanwhile is the style's.
            (None, Err(_)) => self.style.name().to_string(),
        }
    }

    /// The same run with another seed (the head seed moves with it).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self.head_seed = 1000 + 2 * seed;
        self
    }

    /// The run's label, `<model>-s<seed>` ([`RunSpec::model_name`]).
    pub fn label(&self) -> String {
        format!("{}-s{}", self.model_name(), self.seed)
    }

    /// The model configuration for a tokenizer of `vocab_size` pieces (padded to a multiple of
    /// 8 by the caller).
    pub fn model_config(&self, padded_vocab: usize) -> Result<ModelConfig> {
        let mut cfg = ModelConfig::preset(&self.style, self.preset)?;
        cfg.tower = self.tower_config()?;
        cfg.vocab_size = padded_vocab;
        cfg.max_positions = cfg.max_positions.max(self.phase1.seq_len);
        Ok(cfg)
    }

    /// Checks the settings before any work starts.
    pub fn validate(&self) -> Result<()> {
        let (p, h) = (&self.phase1, &self.heads);
        let check = |ok: bool, field: &str, value: &dyn std::fmt::Display, why: &str| match ok {
            true => Ok(()),
            false => Err(ExperimentError::bad_setting(field, value, why)),
        };
        check(
            p.budget_tokens > 0,
            "phase1.budget_tokens",
            &p.budget_tokens,
            "must be > 0 tokens",
        )?;
        let heads_budget = h.max_budget_tokens;
        check(
            heads_budget > 0,
            "heads.max_budget_tokens",
            &heads_budget,
            "must be > 0 tokens",
        )?;
        check(p.seq_len >= 4, "phase1.seq_len", &p.seq_len, "must be >= 4")?;
        check(
            p.batch_size > 0,
            "phase1.batch_size",
            &p.batch_size,
            "must be >= 1",
        )?;
        check(
            p.lr > 0.0,
            "phase1.lr",
            &p.lr,
            "a learning rate must be > 0",
        )?;
        check(h.lr > 0.0, "heads.lr", &h.lr, "a learning rate must be > 0")?;
        if let Some(f) = p.snapshots.iter().find(|f| !(**f > 0.0 && **f < 1.0)) {
            let why = "snapshot fractions must lie strictly between 0 and 1";
            return Err(ExperimentError::bad_setting("phase1.snapshots", f, why));
        }
        let early = "early stopping needs it >= 1";
        check(h.eval_every > 0, "heads.eval_every", &h.eval_every, early)?;
        check(h.patience > 0, "heads.patience", &h.patience, early)?;
        if let Err(e) = self.tower_config() {
            let patch = self.tower.as_ref().map_or(String::new(), Value::to_string);
            return Err(ExperimentError::bad_setting("tower", patch, e.to_string()));
        }
        match &self.name {
            Some(n) if n.is_empty() || n.contains(['-', '/', '\\', ' ']) => {
                let why = "a run name must be non-empty, without '-', '/', '\\' or spaces";
                Err(ExperimentError::bad_setting("name", format!("{n:?}"), why))
            }
            _ => Ok(()),
        }
    }
}

/// The fields (dotted paths, e.g. `phase1.lr`) in which two specs differ, in order.
pub fn spec_diff(a: &RunSpec, b: &RunSpec) -> Vec<String> {
    let (va, vb) = (
        serde_json::to_value(a).unwrap_or(Value::Null),
        serde_json::to_value(b).unwrap_or(Value::Null),
    );
    let mut out = Vec::new();
    diff_values("", &va, &vb, &mut out);
    out
}

fn diff_values(prefix: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                diff_values(
                    &path,
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        _ if a != b => out.push(prefix.to_string()),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_names_nested_fields() {
        let a = RunSpec::new(Style::gpt(), Preset::Tiny, CorpusSpec::synthetic(100, 0));
        let mut b = a.clone();
        b.phase1.lr = 1e-3;
        b.heads.patience = 9;
        assert_eq!(spec_diff(&a, &b), vec!["heads.patience", "phase1.lr"]);
        assert!(spec_diff(&a, &a).is_empty());
    }

    #[test]
    fn labels_name_the_model_and_layout_2_records_keep_their_elmo_mode() {
        let c = CorpusSpec::synthetic(100, 0);
        let elmo = RunSpec::new(Style::elmo(), Preset::Tiny, c.clone()).with_seed(1);
        assert_eq!(elmo.label(), "elmo-s1");
        let released = elmo.clone().with_elmo_mode(ElmoMode::AsReleased);
        assert_eq!(released.label(), "elmo_released-s1");
        let cfg: towers::ElmoConfig = released.model_config(64).unwrap().tower.get().unwrap();
        assert_eq!(cfg.mode, ElmoMode::AsReleased);
        let large = RunSpec::new(Style::gpt(), Preset::PeerLarge, c.clone()).named("gpt_large");
        assert_eq!(large.label(), "gpt_large-s0");
        assert!(RunSpec::new(Style::gpt(), Preset::Tiny, c.clone())
            .with_elmo_mode(ElmoMode::AsReleased)
            .validate()
            .is_err());
        assert!(large.clone().named("gpt-large").validate().is_err());
        // A patch naming a field the style does not have is refused before any work.
        let e = elmo.clone().with_tower(serde_json::json!({"n_heads": 4}));
        assert!(e.validate().unwrap_err().to_string().contains("n_heads"));
        // A layout-2 manifest's spec reads with its ELMo mode as the patch.
        for (mode, want) in [("BiLstm", &elmo), ("AsReleased", &released)] {
            let mut spec = serde_json::to_value(want).unwrap();
            spec.as_object_mut().unwrap().remove("tower");
            spec["elmo_mode"] = mode.into();
            let mut m = serde_json::json!({"version": 2, "spec": spec});
            crate::manifest::upgrade_layout_2(&mut m);
            let back: RunSpec = serde_json::from_value(m["spec"].clone()).unwrap();
            assert_eq!(&back, want, "{mode}");
        }
    }

    #[test]
    fn a_vocabulary_replaces_the_tokenizer() {
        let c = CorpusSpec::synthetic(10, 0).with_vocabulary(&Vocabulary::Trained(300));
        assert_eq!((c.tokenizer.clone(), c.train_vocab), (None, 300));
    }
}
