//! Pretrained encoders: a loaded model turns texts into sequence embeddings [n, d].
//!
//! [`load`] reads a local model folder and picks the architecture from `config.json`'s
//! `model_type` (or recognises a llama2.c folder: `*.bin` weights beside a `tok*.bin`
//! tokenizer). Every model re-tokenizes the text with its own tokenizer, truncated to T tokens
//! (special tokens included, as Hugging Face's `max_length`), and pools its last hidden layer.

pub mod albert;
pub mod bert;
mod cpu_block;
pub mod deberta;
pub mod deberta_v2;
pub mod distilbert;
pub mod gpt2;
pub mod hub;
pub mod identity;
pub mod layers;
pub mod llama2c;
pub mod tokenize;
pub(crate) mod weights;
pub mod xlnet;

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, IndexOp, Tensor};
use candle_nn::VarBuilder;
use serde::{Deserialize, Serialize};

use crate::error::{LmdError, Result};
pub use hub::resolve;
pub use identity::{file_safe, folder_fingerprint, model_name};
pub use tokenize::TextTokenizer;
use weights::{read_config, Weights};

/// How the last hidden layer [n, L, d] becomes one vector per sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Pooling {
    /// Mean over the real (unpadded) tokens: the default.
    #[default]
    MaskedMean,
    /// The LMD reference code's pooling: the masked sum divided by T (the padded length), so
    /// = MaskedMean × (real tokens / T). Paper-faithful mode.
    PaperDivideByT,
    /// The first token's state (BERT's `[CLS]`).
    Cls,
    /// The last real token's state (for causal decoders).
    LastToken,
}

impl Pooling {
    /// Short name for file names and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Pooling::MaskedMean => "mean",
            Pooling::PaperDivideByT => "sum-over-T",
            Pooling::Cls => "cls",
            Pooling::LastToken => "last",
        }
    }

    /// Parses [`Pooling::as_str`] names (and `masked-mean`, `paper`).
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "mean" | "masked-mean" => Ok(Pooling::MaskedMean),
            "sum-over-T" | "paper" | "sum-over-t" => Ok(Pooling::PaperDivideByT),
            "cls" => Ok(Pooling::Cls),
            "last" | "last-token" => Ok(Pooling::LastToken),
            _ => Err(LmdError::InvalidArgument(format!(
                "unknown pooling {s:?} (mean, paper, cls, last)"
            ))),
        }
    }
}

/// Where and at which precision a model runs.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Device for weights and compute.
    pub device: Device,
    /// Compute dtype (f32 on CPU; bf16 on GPU is fine: masks stay finite).
    pub dtype: DType,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            device: Device::Cpu,
            dtype: DType::F32,
        }
    }
}

impl LoadOptions {
    /// The first CUDA device when this build has one, else the CPU, computing in `dtype`.
    pub fn best_device(dtype: DType) -> Self {
        Self {
            device: kernels::device::cuda_if_available(0).unwrap_or(Device::Cpu),
            dtype,
        }
    }

    /// The first CUDA device at bf16 when this build has one, else CPU at f32.
    pub fn auto() -> Self {
        match kernels::device::cuda_if_available(0) {
            Ok(d) if d.is_cuda() => Self {
                device: d,
                dtype: DType::BF16,
            },
            _ => Self::default(),
        }
    }
}

/// A loaded model that embeds texts. Object safe: experiments hold `Box<dyn Encoder>`.
pub trait Encoder: Send + Sync {
    /// Display name (the model folder's name).
    fn name(&self) -> &str;
    /// The folder it was loaded from (named in errors).
    fn source(&self) -> &Path;
    /// Embedding width d.
    fn width(&self) -> usize;
    /// The most tokens per sequence (position table size).
    fn max_tokens(&self) -> usize;
    /// The pooling this kind of model is usually read with (mean; last token for decoders).
    fn natural_pooling(&self) -> Pooling;
    /// The model's device.
    fn device(&self) -> &Device;
    /// The dtype the model computes in (embeddings are returned as f32 whatever it is).
    fn dtype(&self) -> DType;
    /// What the model is, byte for byte: SHA-256 of its folder's files ([`folder_fingerprint`]).
    /// Stored embeddings and moments record it, so a changed model is never read from a store.
    fn fingerprint(&self) -> Result<String> {
        folder_fingerprint(self.source())
    }
    /// Token ids of each text, special tokens included, truncated to at most `t`.
    fn tokenize(&self, texts: &[&str], t: usize) -> Result<Vec<Vec<u32>>>;
    /// Last hidden states [n, L, d] (model dtype) of right-padded ids [n, L] with mask [n, L]
    /// (1 = real token).
    fn hidden_states(&self, ids: &Tensor, mask: &Tensor) -> Result<Tensor>;

    /// Embeddings [n, d] (f32, on the model's device) of already tokenized sequences, each at
    /// most `t` ids. PaperDivideByT divides by `t`, whatever the batch's padded length.
    fn embed_ids(&self, ids: &[Vec<u32>], t: usize, pooling: Pooling) -> Result<Tensor> {
        let (ids_t, mask) = pad_batch(ids, self.device())?;
        let h = self.hidden_states(&ids_t, &mask)?;
        let e = pool(&h, &mask, t, pooling)?;
        check_finite(&e, self.name())?;
        Ok(e)
    }

    /// Embeddings [n, d] (f32) of texts truncated to `t` tokens.
    fn embed(&self, texts: &[&str], t: usize, pooling: Pooling) -> Result<Tensor> {
        let ids = self.tokenize(texts, t)?;
        self.embed_ids(&ids, t, pooling)
    }
}

/// Right-pads sequences into ids [n, L] u32 and mask [n, L] f32 (L = longest).
pub fn pad_batch(ids: &[Vec<u32>], device: &Device) -> Result<(Tensor, Tensor)> {
    let n = ids.len();
    let l = ids.iter().map(Vec::len).max().unwrap_or(0);
    if n == 0 || l == 0 {
        return Err(LmdError::InvalidArgument(
            "empty batch or empty sequence".into(),
        ));
    }
    if let Some(i) = ids.iter().position(Vec::is_empty) {
        return Err(LmdError::InvalidArgument(format!(
            "sequence {i} has no tokens"
        )));
    }
    let mut flat = vec![0u32; n * l];
    let mut mask = vec![0f32; n * l];
    for (r, s) in ids.iter().enumerate() {
        flat[r * l..r * l + s.len()].copy_from_slice(s);
        mask[r * l..r * l + s.len()]
            .iter_mut()
            .for_each(|m| *m = 1.0);
    }
    Ok((
        Tensor::from_vec(flat, (n, l), device)?,
        Tensor::from_vec(mask, (n, l), device)?,
    ))
}

/// Pools hidden states [n, L, d] with mask [n, L] (1 = real, right padding) into [n, d] f32.
pub fn pool(hidden: &Tensor, mask: &Tensor, t: usize, pooling: Pooling) -> Result<Tensor> {
    let h = hidden.to_dtype(DType::F32)?;
    let m = mask.to_dtype(DType::F32)?;
    Ok(match pooling {
        Pooling::MaskedMean | Pooling::PaperDivideByT => {
            let sum = h.broadcast_mul(&m.unsqueeze(2)?)?.sum(1)?;
            let denom = match pooling {
                Pooling::MaskedMean => m.sum_keepdim(1)?,
                _ => Tensor::full(t as f32, (m.dim(0)?, 1), m.device())?,
            };
            sum.broadcast_div(&denom)?
        }
        Pooling::Cls => h.i((.., 0, ..))?.contiguous()?,
        Pooling::LastToken => {
            let (n, _, d) = h.dims3()?;
            let last = (m.sum(1)? - 1.0)?.to_dtype(DType::U32)?;
            let idx = last
                .reshape((n, 1, 1))?
                .broadcast_as((n, 1, d))?
                .contiguous()?;
            h.gather(&idx, 1)?.squeeze(1)?
        }
    })
}

fn check_finite(e: &Tensor, model: &str) -> Result<()> {
    let s = e
        .abs()?
        .sum_all()?
        .to_dtype(DType::F32)?
        .to_scalar::<f32>()?;
    if s.is_finite() {
        Ok(())
    } else {
        Err(LmdError::NonFiniteEmbedding {
            model: model.to_string(),
            context: "pooled last hidden layer".into(),
        })
    }
}

/// Architectures selected by `model_type`.
pub const MODEL_TYPES: &[&str] = &[
    "bert",
    "roberta",
    "xlm-roberta",
    "camembert",
    "electra",
    "longformer",
    "distilbert",
    "deberta",
    "deberta-v2",
    "albert",
    "gpt2",
    "xlnet",
    "llama2c",
];

#[derive(Deserialize)]
struct TypeProbe {
    model_type: Option<String>,
}

/// Internal: a network from ids and mask to hidden states.
pub(crate) trait Backbone: Send + Sync {
    fn forward(&self, ids: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor>;
}

macro_rules! backbone {
    ($($m:ident),*) => {$(
        impl Backbone for $m::Model {
            fn forward(&self, ids: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
                $m::Model::forward(self, ids, mask)
            }
        }
    )*};
}
backbone!(bert, deberta, deberta_v2, distilbert, albert, gpt2, llama2c, xlnet);

/// An [`Encoder`] made of a backbone and its tokenizer.
pub struct LoadedEncoder {
    name: String,
    dir: PathBuf,
    model_type: String,
    model: Box<dyn Backbone>,
    tokenizer: TextTokenizer,
    width: usize,
    max_tokens: usize,
    natural: Pooling,
    device: Device,
    dtype: DType,
    fingerprint: std::sync::OnceLock<String>,
}

impl LoadedEncoder {
    /// The `model_type` it was built as.
    pub fn model_type(&self) -> &str {
        &self.model_type
    }
    /// Its tokenizer.
    pub fn tokenizer(&self) -> &TextTokenizer {
        &self.tokenizer
    }
}

impl Encoder for LoadedEncoder {
    fn name(&self) -> &str {
        &self.name
    }
    fn source(&self) -> &Path {
        &self.dir
    }
    fn width(&self) -> usize {
        self.width
    }
    fn max_tokens(&self) -> usize {
        self.max_tokens
    }
    fn natural_pooling(&self) -> Pooling {
        self.natural
    }
    fn device(&self) -> &Device {
        &self.device
    }
    fn dtype(&self) -> DType {
        self.dtype
    }
    fn fingerprint(&self) -> Result<String> {
        // Hashing a checkpoint takes about a second per 500 MB: once per loaded model.
        if let Some(f) = self.fingerprint.get() {
            return Ok(f.clone());
        }
        let f = folder_fingerprint(&self.dir)?;
        Ok(self.fingerprint.get_or_init(|| f).clone())
    }
    fn tokenize(&self, texts: &[&str], t: usize) -> Result<Vec<Vec<u32>>> {
        if t > self.max_tokens {
            return Err(LmdError::SequenceTooLong {
                path: self.dir.clone(),
                t,
                max: self.max_tokens,
            });
        }
        self.tokenizer.encode_batch(texts, t)
    }
    fn hidden_states(&self, ids: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let l = ids.dim(1)?;
        if l > self.max_tokens {
            return Err(LmdError::SequenceTooLong {
                path: self.dir.clone(),
                t: l,
                max: self.max_tokens,
            });
        }
        Ok(self.model.forward(ids, mask)?)
    }
}

/// Loads the model in `dir` (a Hugging Face folder or a llama2.c folder).
pub fn load(dir: impl AsRef<Path>, opts: &LoadOptions) -> Result<LoadedEncoder> {
    let dir = dir.as_ref();
    let name = model_name(dir);
    if !dir.join("config.json").is_file() {
        if llama2c::find_files(dir).is_some() {
            return llama2c::load(dir, name, opts);
        }
        return Err(LmdError::ModelConfig {
            path: dir.join("config.json"),
            message: "missing (and no llama2.c *.bin + tok*.bin either)".into(),
        });
    }
    let probe: TypeProbe = read_config(dir)?;
    let model_type = probe.model_type.unwrap_or_default();
    let Built {
        model,
        width,
        max_tokens,
        vocab,
        natural,
        roberta_tok,
        dtype,
    } = build_model_type(dir, opts, &model_type)?;
    let tokenizer = TextTokenizer::from_hf_dir(dir, roberta_tok)?;
    check_vocab(&tokenizer, vocab)?;
    Ok(LoadedEncoder {
        name,
        dir: dir.to_path_buf(),
        model_type,
        model,
        tokenizer,
        width,
        max_tokens,
        natural,
        device: opts.device.clone(),
        dtype,
        fingerprint: Default::default(),
    })
}

/// Builds the backbone of `dir` as the architecture its `model_type` names (one of
/// [`MODEL_TYPES`] other than llama2c).
fn build_model_type(dir: &Path, opts: &LoadOptions, model_type: &str) -> Result<Built> {
    match model_type {
        "bert" | "roberta" | "xlm-roberta" | "camembert" | "electra" | "longformer" => {
            build(dir, opts, bert_arch())
        }
        "distilbert" => build(dir, opts, distilbert_arch()),
        "deberta" => build(dir, opts, deberta_arch()),
        "deberta-v2" => build(dir, opts, deberta_v2_arch()),
        "albert" => build(dir, opts, albert_arch()),
        "gpt2" => build(dir, opts, gpt2_arch()),
        "xlnet" => build(dir, opts, xlnet_arch()),
        _ => Err(LmdError::UnknownModelType {
            path: dir.join("config.json"),
            model_type: model_type.to_string(),
            known: MODEL_TYPES.join(", "),
        }),
    }
}

/// The token embedding of the BERT-like encoders.
const WORD_EMB: &str = "embeddings.word_embeddings.weight";

/// BERT and its relatives (RoBERTa, XLM-R, CamemBERT, ELECTRA, Longformer): the checkpoint's
/// prefix tells them apart; only absolute position embeddings are supported.
fn bert_arch() -> Arch<bert::Config, bert::Model> {
    let prefixes = &[
        "bert.",
        "roberta.",
        "electra.",
        "camembert.",
        "longformer.",
        "model.",
    ];
    Arch::new(WORD_EMB, prefixes, bert::Model::new, |c: &bert::Config| {
        (
            c.hidden_size,
            c.max_tokens(),
            c.vocab_size,
            c.position_offset() > 0,
        )
    })
    .check(|c, path| match c.position_embedding_type.as_deref() {
        Some(p) if p != "absolute" => Err(LmdError::ModelConfig {
            path: path.to_path_buf(),
            message: "only absolute position embeddings are supported".into(),
        }),
        _ => Ok(()),
    })
}

fn distilbert_arch() -> Arch<distilbert::Config, distilbert::Model> {
    Arch::new(
        WORD_EMB,
        &["distilbert."],
        distilbert::Model::new,
        |c: &distilbert::Config| (c.dim, c.max_position_embeddings, c.vocab_size, false),
    )
}

/// The position table limits T only when positions are added to the input; relative
/// positions alone do not.
fn deberta_position_limit(position_biased_input: bool, max_position_embeddings: usize) -> usize {
    if position_biased_input {
        max_position_embeddings
    } else {
        usize::MAX
    }
}

fn deberta_arch() -> Arch<deberta::Config, deberta::Model> {
    Arch::new(
        WORD_EMB,
        &["deberta."],
        deberta::Model::new,
        |c: &deberta::Config| {
            let max = deberta_position_limit(c.position_biased_input, c.max_position_embeddings);
            (c.hidden_size, max, c.vocab_size, false)
        },
    )
}

/// candle's DeBERTa-v2 builds its masks in f32: always run it at f32.
fn deberta_v2_arch() -> Arch<deberta_v2::Config, deberta_v2::Model> {
    Arch::new(
        WORD_EMB,
        &["deberta."],
        deberta_v2::Model::new,
        |c: &deberta_v2::Config| {
            let max = deberta_position_limit(c.position_biased_input, c.max_position_embeddings);
            (c.hidden_size, max, c.vocab_size, false)
        },
    )
    .dtype(DType::F32)
}

fn albert_arch() -> Arch<albert::Config, albert::Model> {
    Arch::new(
        WORD_EMB,
        &["albert."],
        albert::Model::new,
        |c: &albert::Config| {
            (
                c.hidden_size,
                c.max_position_embeddings,
                c.vocab_size,
                false,
            )
        },
    )
}

/// A causal decoder: read at its last token.
fn gpt2_arch() -> Arch<gpt2::Config, gpt2::Model> {
    Arch::new(
        "wte.weight",
        &["transformer."],
        gpt2::Model::new,
        |c: &gpt2::Config| (c.n_embd, c.n_positions, c.vocab_size, false),
    )
    .pooling(Pooling::LastToken)
}

/// Relative sinusoidal positions: no table limits T.
fn xlnet_arch() -> Arch<xlnet::Config, xlnet::Model> {
    Arch::new(
        "word_embedding.weight",
        &["transformer."],
        xlnet::Model::new,
        |c: &xlnet::Config| (c.d_model, usize::MAX, c.vocab_size, false),
    )
}

/// (width, position limit, vocabulary, RoBERTa-style tokenizer) read from a config.
type Shape = (usize, usize, usize, bool);

/// One architecture as the loader sees it: the name of its token embedding (which finds the
/// checkpoint's weight-name prefix among `prefixes`), its constructor, what its config says
/// about the encoder, an optional config check, a forced dtype and its natural pooling.
struct Arch<C, M> {
    embedding: &'static str,
    prefixes: &'static [&'static str],
    new: fn(&C, VarBuilder<'static>) -> candle_core::Result<M>,
    shape: fn(&C) -> Shape,
    check: fn(&C, &Path) -> Result<()>,
    dtype: Option<DType>,
    pooling: Pooling,
}

impl<C, M> Arch<C, M> {
    fn new(
        embedding: &'static str,
        prefixes: &'static [&'static str],
        new: fn(&C, VarBuilder<'static>) -> candle_core::Result<M>,
        shape: fn(&C) -> Shape,
    ) -> Self {
        Self {
            embedding,
            prefixes,
            new,
            shape,
            check: |_, _| Ok(()),
            dtype: None,
            pooling: Pooling::MaskedMean,
        }
    }

    fn check(self, check: fn(&C, &Path) -> Result<()>) -> Self {
        Self { check, ..self }
    }

    fn dtype(self, dtype: DType) -> Self {
        Self {
            dtype: Some(dtype),
            ..self
        }
    }

    fn pooling(self, pooling: Pooling) -> Self {
        Self { pooling, ..self }
    }
}

/// What [`build`] returns to [`load`].
struct Built {
    model: Box<dyn Backbone>,
    width: usize,
    max_tokens: usize,
    vocab: usize,
    natural: Pooling,
    roberta_tok: bool,
    dtype: DType,
}

/// Reads the config of `dir` as `C`, checks it, loads the weights with their prefix stripped
/// and builds the model: the one shape every architecture shares.
fn build<C: serde::de::DeserializeOwned, M: Backbone + 'static>(
    dir: &Path,
    opts: &LoadOptions,
    arch: Arch<C, M>,
) -> Result<Built> {
    let cfg: C = read_config(dir)?;
    (arch.check)(&cfg, &dir.join("config.json"))?;
    let w = Weights::load(dir, &opts.device)?.strip_prefix(arch.embedding, arch.prefixes);
    let dtype = arch.dtype.unwrap_or(opts.dtype);
    let vb = w.var_builder(dtype, &opts.device);
    let model = (arch.new)(&cfg, vb).map_err(|e| w.error(e))?;
    let (width, max_tokens, vocab, roberta_tok) = (arch.shape)(&cfg);
    Ok(Built {
        model: Box::new(model),
        width,
        max_tokens,
        vocab,
        natural: arch.pooling,
        roberta_tok,
        dtype,
    })
}

fn check_vocab(tok: &TextTokenizer, model_vocab: usize) -> Result<()> {
    let ids = tok.id_bound();
    if ids > model_vocab {
        return Err(LmdError::VocabMismatch {
            path: tok.path().to_path_buf(),
            tokenizer: ids,
            model: model_vocab,
        });
    }
    Ok(())
}
