//! DeBERTa (v1, `model_type: deberta`, e.g. microsoft/deberta-base): disentangled attention.
//! Scores add content→position and position→content terms over relative distances
//! r(i, j) = clamp(i − j + s, 0, 2s − 1), s = min(L, max_relative_positions), all divided by
//! √(d · (1 + number of position terms)). q, k, v come from one bias-free `in_proj` laid out per
//! head as [q | k | v], plus separate `q_bias` and `v_bias`.

use candle_core::{Device, Module, Result, Tensor};
use candle_nn::{Embedding, LayerNorm, Linear, VarBuilder};
use serde::Deserialize;

use super::layers::{padding_bias, positions, Activation};

fn default_act() -> Activation {
    Activation::Gelu
}
fn default_eps() -> f64 {
    1e-7
}
fn default_true() -> bool {
    true
}
fn default_max_rel() -> i64 {
    -1
}

/// `pos_att_type` as a `"c2p|p2c"` string or a list.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum PosAttType {
    /// `"c2p|p2c"`.
    Joined(String),
    /// `["c2p", "p2c"]`.
    List(Vec<String>),
}

impl PosAttType {
    fn has(&self, what: &str) -> bool {
        match self {
            PosAttType::Joined(s) => s.split('|').any(|p| p == what),
            PosAttType::List(v) => v.iter().any(|p| p == what),
        }
    }
}

/// `config.json` of a DeBERTa (v1) model (the fields this crate reads).
#[derive(Debug, Clone, Deserialize)]
pub struct Config {
    /// Token vocabulary size.
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// Number of layers.
    pub num_hidden_layers: usize,
    /// Attention heads.
    pub num_attention_heads: usize,
    /// Feed-forward width.
    pub intermediate_size: usize,
    /// Feed-forward activation.
    #[serde(default = "default_act")]
    pub hidden_act: Activation,
    /// Rows of the absolute position table (and the default relative range).
    pub max_position_embeddings: usize,
    /// Rows of the token-type table (0: none).
    #[serde(default)]
    pub type_vocab_size: usize,
    /// LayerNorm epsilon.
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    /// Whether the disentangled relative terms are used.
    #[serde(default)]
    pub relative_attention: bool,
    /// Relative distance range (< 1: `max_position_embeddings`).
    #[serde(default = "default_max_rel")]
    pub max_relative_positions: i64,
    /// Which relative terms: c2p, p2c.
    #[serde(default)]
    pub pos_att_type: Option<PosAttType>,
    /// Whether absolute positions are added to the input embedding.
    #[serde(default = "default_true")]
    pub position_biased_input: bool,
    /// Embedding width when narrower than `hidden_size`.
    #[serde(default)]
    pub embedding_size: Option<usize>,
    /// Talking-head attention (not supported).
    #[serde(default)]
    pub talking_head: bool,
}

impl Config {
    fn max_rel(&self) -> usize {
        if self.max_relative_positions < 1 {
            self.max_position_embeddings
        } else {
            self.max_relative_positions as usize
        }
    }

    fn has(&self, what: &str) -> bool {
        self.pos_att_type.as_ref().is_some_and(|p| p.has(what))
    }
}

struct Layer {
    in_proj: Linear,
    q_bias: Tensor,
    v_bias: Tensor,
    pos_proj: Option<Linear>,
    pos_q_proj: Option<Linear>,
    out: Linear,
    ln1: LayerNorm,
    ff_in: Linear,
    ff_out: Linear,
    ln2: LayerNorm,
}

/// A DeBERTa (v1) encoder returning the last hidden states.
pub struct Model {
    word: Embedding,
    position: Option<Embedding>,
    token_type: Option<Embedding>,
    embed_proj: Option<Linear>,
    ln: LayerNorm,
    rel: Option<Tensor>,
    layers: Vec<Layer>,
    heads: usize,
    max_rel: usize,
    n_pos_terms: usize,
    act: Activation,
}

impl Model {
    /// Loads from Hugging Face weight names (`embeddings.*`, `encoder.layer.{i}.*`,
    /// `encoder.rel_embeddings`).
    pub fn new(cfg: &Config, vb: VarBuilder) -> Result<Self> {
        if cfg.talking_head {
            candle_core::bail!("talking_head attention is not supported");
        }
        let (h, e) = (
            cfg.hidden_size,
            cfg.embedding_size.unwrap_or(cfg.hidden_size),
        );
        let emb = vb.pp("embeddings");
        let eps = cfg.layer_norm_eps;
        let (c2p, p2c) = (
            cfg.relative_attention && cfg.has("c2p"),
            cfg.relative_attention && cfg.has("p2c"),
        );
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| {
                let b = vb.pp(format!("encoder.layer.{i}"));
                let a = b.pp("attention.self");
                Ok(Layer {
                    in_proj: candle_nn::linear_no_bias(h, 3 * h, a.pp("in_proj"))?,
                    q_bias: a.get(h, "q_bias")?,
                    v_bias: a.get(h, "v_bias")?,
                    pos_proj: c2p
                        .then(|| candle_nn::linear_no_bias(h, h, a.pp("pos_proj")))
                        .transpose()?,
                    pos_q_proj: p2c
                        .then(|| candle_nn::linear(h, h, a.pp("pos_q_proj")))
                        .transpose()?,
                    out: candle_nn::linear(h, h, b.pp("attention.output.dense"))?,
                    ln1: candle_nn::layer_norm(h, eps, b.pp("attention.output.LayerNorm"))?,
                    ff_in: candle_nn::linear(h, cfg.intermediate_size, b.pp("intermediate.dense"))?,
                    ff_out: candle_nn::linear(cfg.intermediate_size, h, b.pp("output.dense"))?,
                    ln2: candle_nn::layer_norm(h, eps, b.pp("output.LayerNorm"))?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let rel = if cfg.relative_attention {
            Some(vb.get((2 * cfg.max_rel(), h), "encoder.rel_embeddings.weight")?)
        } else {
            None
        };
        Ok(Self {
            word: candle_nn::embedding(cfg.vocab_size, e, emb.pp("word_embeddings"))?,
            position: cfg
                .position_biased_input
                .then(|| {
                    candle_nn::embedding(
                        cfg.max_position_embeddings,
                        e,
                        emb.pp("position_embeddings"),
                    )
                })
                .transpose()?,
            token_type: (cfg.type_vocab_size > 0)
                .then(|| {
                    candle_nn::embedding(cfg.type_vocab_size, e, emb.pp("token_type_embeddings"))
                })
                .transpose()?,
            embed_proj: (e != h)
                .then(|| candle_nn::linear_no_bias(e, h, emb.pp("embed_proj")))
                .transpose()?,
            ln: candle_nn::layer_norm(h, eps, emb.pp("LayerNorm"))?,
            rel,
            layers,
            heads: cfg.num_attention_heads,
            max_rel: cfg.max_rel(),
            n_pos_terms: usize::from(c2p) + usize::from(p2c),
            act: cfg.hidden_act,
        })
    }

    /// Index tensor [1, 1, L, L] u32 of `clamp(sign · (i − j) + s, 0, 2s − 1)`.
    fn rel_index(l: usize, s: usize, sign: i64, device: &Device) -> Result<Tensor> {
        let v: Vec<u32> = (0..l * l)
            .map(|k| {
                let (i, j) = ((k / l) as i64, (k % l) as i64);
                (sign * (i - j) + s as i64).clamp(0, 2 * s as i64 - 1) as u32
            })
            .collect();
        Tensor::from_vec(v, (1, 1, l, l), device)
    }

    /// ids [n, L] u32, mask [n, L] (1 = real token) -> hidden [n, L, H].
    pub fn forward(&self, ids: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let (n, l) = ids.dims2()?;
        let dev = ids.device();
        let mut x = self.word.forward(ids)?;
        if let Some(p) = &self.position {
            x = x.broadcast_add(&p.forward(&positions(l, 0, dev)?)?)?;
        }
        if let Some(t) = &self.token_type {
            x = x.broadcast_add(&t.embeddings().narrow(0, 0, 1)?)?;
        }
        if let Some(p) = &self.embed_proj {
            x = p.forward(&x)?;
        }
        let mut x = self.ln.forward(&x)?;
        let dtype = x.dtype();
        let hsz = x.dim(2)?;
        let (heads, d) = (self.heads, hsz / self.heads);
        let bias = padding_bias(mask, dtype)?;
        let s = l.min(self.max_rel);
        let rel = match &self.rel {
            Some(r) => Some(r.narrow(0, self.max_rel - s, 2 * s)?),
            None => None,
        };
        let full = |t: Tensor| -> Result<Tensor> { t.broadcast_as((n, heads, l, l))?.contiguous() };
        let c2p_idx = full(Self::rel_index(l, s, 1, dev)?)?;
        // p2c reads row j at r(i, j): gather G[j, i] at clamp(i − j + s), then transpose.
        let p2c_idx = full(Self::rel_index(l, s, -1, dev)?)?;
        let scale = 1.0 / ((d * (1 + self.n_pos_terms)) as f64).sqrt();
        let split = |t: &Tensor, rows: usize, lead: usize| -> Result<Tensor> {
            t.reshape((lead, rows, heads, d))?
                .transpose(1, 2)?
                .contiguous()
        };
        for layer in &self.layers {
            // in_proj is laid out per head as [q | k | v].
            let qkv = layer
                .in_proj
                .forward(&x)?
                .reshape((n, l, heads, 3 * d))?
                .transpose(1, 2)?;
            let hb = |b: &Tensor| b.reshape((1, heads, 1, d));
            let q =
                (qkv.narrow(3, 0, d)?.broadcast_add(&hb(&layer.q_bias)?)? * scale)?.contiguous()?;
            let k = qkv.narrow(3, d, d)?.contiguous()?;
            let v = qkv
                .narrow(3, 2 * d, d)?
                .broadcast_add(&hb(&layer.v_bias)?)?
                .contiguous()?;
            let mut scores = q.matmul(&k.t()?)?;
            if let Some(rel) = &rel {
                if let Some(pp) = &layer.pos_proj {
                    let pk = split(&pp.forward(rel)?, 2 * s, 1)?; // [1, h, 2s, d]
                    let c2p = q.broadcast_matmul(&pk.t()?)?; // [n, h, L, 2s]
                    scores = (scores + c2p.contiguous()?.gather(&c2p_idx, 3)?)?;
                }
                if let Some(pq) = &layer.pos_q_proj {
                    let pq = (split(&pq.forward(rel)?, 2 * s, 1)? * scale)?;
                    let p2c = k.broadcast_matmul(&pq.t()?)?; // [n, h, L(j), 2s]
                    let g = p2c.contiguous()?.gather(&p2c_idx, 3)?;
                    scores = (scores + g.transpose(2, 3)?)?;
                }
            }
            let probs =
                candle_nn::ops::softmax_last_dim(&scores.broadcast_add(&bias)?.contiguous()?)?;
            let ctx = probs.matmul(&v)?.transpose(1, 2)?.reshape((n, l, hsz))?;
            let a = layer.ln1.forward(&(layer.out.forward(&ctx)? + &x)?)?;
            let f = self.act.forward(&layer.ff_in.forward(&a)?)?;
            x = layer.ln2.forward(&(layer.ff_out.forward(&f)? + a)?)?;
        }
        Ok(x)
    }
}
