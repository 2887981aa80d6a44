//! llama2.c checkpoints (Karpathy's `run.c` format, e.g. `stories260K.bin` + `tok512.bin`):
//! a Llama decoder (RMSNorm, interleaved RoPE, grouped-query attention, SwiGLU). Read by our
//! own loader because candle's `llama2_c_weights` reads `wk`/`wv` as [dim, dim], which is wrong
//! for grouped-query checkpoints such as stories260K (4 key/value heads for 8 query heads).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Module, Result, Tensor};
use candle_nn::{Embedding, Linear, RmsNorm, VarBuilder};

use super::layers::causal_bias;
use super::tokenize::TextTokenizer;
use super::weights::Weights;
use super::{LoadOptions, LoadedEncoder, Pooling};
use crate::error::{LmdError, Result as LmdResult};

/// The llama2.c header (seven little-endian i32).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Model width.
    pub dim: usize,
    /// SwiGLU width.
    pub hidden_dim: usize,
    /// Number of layers.
    pub n_layers: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads.
    pub n_kv_heads: usize,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Position table length.
    pub seq_len: usize,
    /// Whether the output classifier shares the token embedding (positive vocab in the header).
    pub shared_classifier: bool,
}

impl Config {
    /// Parses the 28-byte header.
    pub fn parse(bytes: &[u8]) -> std::result::Result<Self, String> {
        if bytes.len() < 28 {
            return Err("shorter than the 28-byte header".into());
        }
        let h: Vec<i32> = (0..7)
            .map(|i| i32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().expect("4 bytes")))
            .collect();
        let pos = |v: i32, what: &str| {
            usize::try_from(v)
                .ok()
                .filter(|&u| u > 0)
                .ok_or_else(|| format!("{what} = {v} in the header"))
        };
        let cfg = Self {
            dim: pos(h[0], "dim")?,
            hidden_dim: pos(h[1], "hidden_dim")?,
            n_layers: pos(h[2], "n_layers")?,
            n_heads: pos(h[3], "n_heads")?,
            n_kv_heads: pos(h[4], "n_kv_heads")?,
            vocab_size: pos(h[5].abs(), "vocab_size")?,
            seq_len: pos(h[6], "seq_len")?,
            shared_classifier: h[5] > 0,
        };
        if !cfg.dim.is_multiple_of(cfg.n_heads) || !cfg.n_heads.is_multiple_of(cfg.n_kv_heads) {
            return Err("heads do not divide dim / kv heads do not divide heads".into());
        }
        Ok(cfg)
    }

    fn head_size(&self) -> usize {
        self.dim / self.n_heads
    }

    fn kv_dim(&self) -> usize {
        self.head_size() * self.n_kv_heads
    }
}

/// Reads every tensor of a llama2.c checkpoint into Hugging Face Llama names.
fn read_tensors(
    cfg: &Config,
    body: &[u8],
    device: &Device,
) -> std::result::Result<HashMap<String, Tensor>, String> {
    let (d, hd, l, kv) = (cfg.dim, cfg.hidden_dim, cfg.n_layers, cfg.kv_dim());
    let hs2 = cfg.head_size() / 2;
    let mut pos = 0usize;
    let mut take = |shape: &[usize]| -> std::result::Result<Tensor, String> {
        let n: usize = shape.iter().product();
        let bytes = body.get(pos..pos + 4 * n).ok_or_else(|| {
            format!(
                "truncated: needs {} more bytes at offset {}",
                4 * n,
                28 + pos
            )
        })?;
        pos += 4 * n;
        let v: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
        Tensor::from_vec(v, shape, device).map_err(|e| e.to_string())
    };
    let mut ws = HashMap::new();
    ws.insert(
        "model.embed_tokens.weight".into(),
        take(&[cfg.vocab_size, d])?,
    );
    let per_layer: [(&str, Vec<usize>); 9] = [
        ("input_layernorm.weight", vec![d]),
        ("self_attn.q_proj.weight", vec![d, d]),
        ("self_attn.k_proj.weight", vec![kv, d]),
        ("self_attn.v_proj.weight", vec![kv, d]),
        ("self_attn.o_proj.weight", vec![d, d]),
        ("post_attention_layernorm.weight", vec![d]),
        ("mlp.gate_proj.weight", vec![hd, d]),
        ("mlp.down_proj.weight", vec![d, hd]),
        ("mlp.up_proj.weight", vec![hd, d]),
    ];
    // The file stores each kind for all layers before the next kind.
    for (name, shape) in per_layer.iter() {
        for i in 0..l {
            ws.insert(format!("model.layers.{i}.{name}"), take(shape)?);
        }
    }
    ws.insert("model.norm.weight".into(), take(&[d])?);
    ws.insert("rot.cos".into(), take(&[cfg.seq_len, hs2])?);
    ws.insert("rot.sin".into(), take(&[cfg.seq_len, hs2])?);
    Ok(ws)
}

struct Layer {
    rms_1: RmsNorm,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    rms_2: RmsNorm,
    gate: Linear,
    up: Linear,
    down: Linear,
}

/// A llama2.c Llama decoder returning the last hidden states (after the final RMSNorm).
pub struct Model {
    embed: Embedding,
    layers: Vec<Layer>,
    norm: RmsNorm,
    cos: Tensor,
    sin: Tensor,
    heads: usize,
    kv_heads: usize,
}

impl Model {
    /// Loads from Hugging Face Llama names (`model.layers.{i}.*`) plus `rot.cos`/`rot.sin`.
    pub fn new(cfg: &Config, vb: VarBuilder) -> Result<Self> {
        let (d, hd, kv) = (cfg.dim, cfg.hidden_dim, cfg.kv_dim());
        let lin = |i, o, vb: VarBuilder| candle_nn::linear_no_bias(i, o, vb);
        let eps = 1e-5;
        let layers = (0..cfg.n_layers)
            .map(|i| {
                let b = vb.pp(format!("model.layers.{i}"));
                Ok(Layer {
                    rms_1: candle_nn::rms_norm(d, eps, b.pp("input_layernorm"))?,
                    q: lin(d, d, b.pp("self_attn.q_proj"))?,
                    k: lin(d, kv, b.pp("self_attn.k_proj"))?,
                    v: lin(d, kv, b.pp("self_attn.v_proj"))?,
                    o: lin(d, d, b.pp("self_attn.o_proj"))?,
                    rms_2: candle_nn::rms_norm(d, eps, b.pp("post_attention_layernorm"))?,
                    gate: lin(d, hd, b.pp("mlp.gate_proj"))?,
                    up: lin(d, hd, b.pp("mlp.up_proj"))?,
                    down: lin(hd, d, b.pp("mlp.down_proj"))?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let hs2 = cfg.head_size() / 2;
        Ok(Self {
            embed: candle_nn::embedding(cfg.vocab_size, d, vb.pp("model.embed_tokens"))?,
            layers,
            norm: candle_nn::rms_norm(d, eps, vb.pp("model.norm"))?,
            cos: vb.get((cfg.seq_len, hs2), "rot.cos")?,
            sin: vb.get((cfg.seq_len, hs2), "rot.sin")?,
            heads: cfg.n_heads,
            kv_heads: cfg.n_kv_heads,
        })
    }

    /// ids [n, L] u32 (right padded; causality hides the padding) -> hidden [n, L, dim].
    pub fn forward(&self, ids: &Tensor, _mask: &Tensor) -> Result<Tensor> {
        let (n, l) = ids.dims2()?;
        let mut x = self.embed.forward(ids)?;
        let d = x.dim(2)?;
        let hs = d / self.heads;
        let rep = self.heads / self.kv_heads;
        let bias = causal_bias(l, x.dtype(), ids.device())?;
        let cos = self.cos.narrow(0, 0, l)?.to_dtype(x.dtype())?;
        let sin = self.sin.narrow(0, 0, l)?.to_dtype(x.dtype())?;
        let heads = |t: Tensor, h: usize| -> Result<Tensor> {
            t.reshape((n, l, h, hs))?.transpose(1, 2)?.contiguous()
        };
        for layer in &self.layers {
            let h = layer.rms_1.forward(&x)?;
            let q = candle_nn::rotary_emb::rope_i(
                &heads(layer.q.forward(&h)?, self.heads)?,
                &cos,
                &sin,
            )?;
            let k = candle_nn::rotary_emb::rope_i(
                &heads(layer.k.forward(&h)?, self.kv_heads)?,
                &cos,
                &sin,
            )?;
            let v = heads(layer.v.forward(&h)?, self.kv_heads)?;
            // Grouped-query attention: query head j reads key/value head j / rep.
            let expand = |t: Tensor| -> Result<Tensor> {
                if rep == 1 {
                    return Ok(t);
                }
                t.unsqueeze(2)?
                    .broadcast_as((n, self.kv_heads, rep, l, hs))?
                    .reshape((n, self.heads, l, hs))
            };
            let (k, v) = (expand(k)?, expand(v)?);
            let scores = (q.matmul(&k.t()?)? * (1.0 / (hs as f64).sqrt()))?.broadcast_add(&bias)?;
            let ctx = candle_nn::ops::softmax_last_dim(&scores)?
                .matmul(&v.contiguous()?)?
                .transpose(1, 2)?
                .reshape((n, l, d))?;
            x = (x + layer.o.forward(&ctx)?)?;
            let h = layer.rms_2.forward(&x)?;
            let f = (layer.gate.forward(&h)?.silu()? * layer.up.forward(&h)?)?;
            x = (&x + layer.down.forward(&f)?)?;
        }
        self.norm.forward(&x)
    }
}

/// The weights (`*.bin` not starting with `tok`) and tokenizer (`tok*.bin`) of a llama2.c folder.
pub fn find_files(dir: &Path) -> Option<(PathBuf, PathBuf)> {
    let mut model = None;
    let mut tok = None;
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for p in entries {
        let name = p.file_name()?.to_string_lossy().to_string();
        if !name.ends_with(".bin") {
            continue;
        }
        if name.starts_with("tok") {
            tok.get_or_insert(p);
        } else {
            model.get_or_insert(p);
        }
    }
    Some((model?, tok?))
}

/// Loads a llama2.c folder as an encoder (natural pooling: last token).
pub(crate) fn load(dir: &Path, name: String, opts: &LoadOptions) -> LmdResult<LoadedEncoder> {
    let (model_path, tok_path) = find_files(dir).ok_or_else(|| LmdError::Weights {
        path: dir.to_path_buf(),
        message: "no llama2.c *.bin + tok*.bin".into(),
    })?;
    let bytes = std::fs::read(&model_path).map_err(|source| LmdError::Io {
        path: model_path.clone(),
        source,
    })?;
    let cfg = Config::parse(&bytes).map_err(|message| LmdError::ModelConfig {
        path: model_path.clone(),
        message,
    })?;
    let tensors =
        read_tensors(&cfg, &bytes[28..], &Device::Cpu).map_err(|message| LmdError::Weights {
            path: model_path.clone(),
            message,
        })?;
    let tensors = tensors
        .into_iter()
        .map(|(k, v)| Ok((k, v.to_device(&opts.device)?)))
        .collect::<Result<HashMap<_, _>>>()?;
    let w = Weights::from_tensors(model_path, tensors);
    let model =
        Model::new(&cfg, w.var_builder(opts.dtype, &opts.device)).map_err(|e| w.error(e))?;
    let tokenizer = TextTokenizer::from_llama2c(&tok_path, cfg.vocab_size)?;
    Ok(LoadedEncoder {
        name,
        dir: dir.to_path_buf(),
        model_type: "llama2c".into(),
        model: Box::new(model),
        tokenizer,
        width: cfg.dim,
        max_tokens: cfg.seq_len,
        natural: Pooling::LastToken,
        device: opts.device.clone(),
        dtype: opts.dtype,
        fingerprint: Default::default(),
    })
}
