//! XLNet (content stream only, as a plain encoder: no memory, no permutation mask,
//! `attn_type: bi`). Attention adds a content term (q + r_w_bias)·k and a position term
//! (q + r_r_bias)·r over sinusoidal encodings of the distances L, L−1, …, −L+1; the position
//! term of (i, j) is read at index L − i + j (XLNet's `rel_shift`). Right padding gives the
//! same real-token states as XLNet's usual left padding: only distances matter.
//!
//! Segments follow XLNet's tokenizer, which the LMD reference feeds as `token_type_ids`: the
//! text and its `<sep>` are segment 0 and the final `<cls>` (the last real token) segment 2, so
//! a third term (q + r_s_bias)·seg_embed[same/different segment] enters every score.

use candle_core::{DType, Device, Module, Result, Tensor};
use candle_nn::{Embedding, LayerNorm, Linear, VarBuilder};
use serde::Deserialize;

use super::layers::{padding_bias, Activation};

fn default_act() -> Activation {
    Activation::Gelu
}
fn default_eps() -> f64 {
    1e-12
}
fn default_attn() -> String {
    "bi".into()
}

/// `config.json` of an XLNet model (the fields this crate reads).
#[derive(Debug, Clone, Deserialize)]
pub struct Config {
    /// Token vocabulary size.
    pub vocab_size: usize,
    /// Model width.
    pub d_model: usize,
    /// Number of layers.
    pub n_layer: usize,
    /// Attention heads.
    pub n_head: usize,
    /// Width per head.
    pub d_head: usize,
    /// Feed-forward width.
    pub d_inner: usize,
    /// Feed-forward activation.
    #[serde(default = "default_act")]
    pub ff_activation: Activation,
    /// LayerNorm epsilon.
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    /// Only "bi" is supported.
    #[serde(default = "default_attn")]
    pub attn_type: String,
    /// Clamp of relative distances (≤ 0: none).
    #[serde(default)]
    pub clamp_len: i64,
    /// Bidirectional data pipeline (not supported).
    #[serde(default)]
    pub bi_data: bool,
}

struct Layer {
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o: Tensor,
    r: Tensor,
    r_w_bias: Tensor,
    r_r_bias: Tensor,
    r_s_bias: Tensor,
    seg_embed: Tensor,
    ln1: LayerNorm,
    ff_in: Linear,
    ff_out: Linear,
    ln2: LayerNorm,
}

/// An XLNet encoder returning the last hidden states.
pub struct Model {
    word: Embedding,
    layers: Vec<Layer>,
    heads: usize,
    d_head: usize,
    d_model: usize,
    clamp_len: i64,
    act: Activation,
}

impl Model {
    /// Loads from Hugging Face weight names (`word_embedding`, `layer.{i}.rel_attn.*`, `layer.{i}.ff.*`).
    pub fn new(cfg: &Config, vb: VarBuilder) -> Result<Self> {
        if cfg.attn_type != "bi" || cfg.bi_data {
            candle_core::bail!("only attn_type \"bi\" without bi_data is supported");
        }
        let (dm, nh, dh) = (cfg.d_model, cfg.n_head, cfg.d_head);
        let eps = cfg.layer_norm_eps;
        let layers = (0..cfg.n_layer)
            .map(|i| {
                let a = vb.pp(format!("layer.{i}.rel_attn"));
                let f = vb.pp(format!("layer.{i}.ff"));
                // Projections are stored [d_model, heads, d_head]: flatten to [d_model, heads·d_head].
                let proj = |n: &str| a.get((dm, nh, dh), n)?.reshape((dm, nh * dh));
                Ok(Layer {
                    q: proj("q")?,
                    k: proj("k")?,
                    v: proj("v")?,
                    o: proj("o")?,
                    r: proj("r")?,
                    r_w_bias: a.get((nh, dh), "r_w_bias")?.reshape((1, nh, 1, dh))?,
                    r_r_bias: a.get((nh, dh), "r_r_bias")?.reshape((1, nh, 1, dh))?,
                    r_s_bias: a.get((nh, dh), "r_s_bias")?.reshape((1, nh, 1, dh))?,
                    // [2, nh, dh] -> [nh, dh, 2]: column 0 same segment, 1 different.
                    seg_embed: a
                        .get((2, nh, dh), "seg_embed")?
                        .permute((1, 2, 0))?
                        .reshape((1, nh, dh, 2))?,
                    ln1: candle_nn::layer_norm(dm, eps, a.pp("layer_norm"))?,
                    ff_in: candle_nn::linear(dm, cfg.d_inner, f.pp("layer_1"))?,
                    ff_out: candle_nn::linear(cfg.d_inner, dm, f.pp("layer_2"))?,
                    ln2: candle_nn::layer_norm(dm, eps, f.pp("layer_norm"))?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            word: candle_nn::embedding(cfg.vocab_size, dm, vb.pp("word_embedding"))?,
            layers,
            heads: nh,
            d_head: dh,
            d_model: dm,
            clamp_len: cfg.clamp_len,
            act: cfg.ff_activation,
        })
    }

    /// Sinusoidal encodings [2L, d_model] of the distances L, L−1, …, −L+1 ([sin | cos]).
    fn pos_emb(&self, l: usize, dtype: DType, device: &Device) -> Result<Tensor> {
        let half = self.d_model / 2;
        let mut v = vec![0f32; 2 * l * self.d_model];
        for m in 0..2 * l {
            let mut p = l as f32 - m as f32;
            if self.clamp_len > 0 {
                p = p.clamp(-self.clamp_len as f32, self.clamp_len as f32);
            }
            for k in 0..half {
                let inv = 1.0 / 10000f32.powf((2 * k) as f32 / self.d_model as f32);
                v[m * self.d_model + k] = (p * inv).sin();
                v[m * self.d_model + half + k] = (p * inv).cos();
            }
        }
        Tensor::from_vec(v, (2 * l, self.d_model), device)?.to_dtype(dtype)
    }

    /// 1 where tokens i and j lie in different segments (the last real token is `<cls>`,
    /// segment 2; padding segment 3), as [n, 1, L, L].
    fn segment_difference(mask: &Tensor, dtype: DType) -> Result<Tensor> {
        let (n, l) = mask.dims2()?;
        let m = mask.to_dtype(DType::F32)?.to_vec2::<f32>()?;
        let mut v = vec![0f32; n * l * l];
        for (r, row) in m.iter().enumerate() {
            let len = row.iter().filter(|&&x| x > 0.5).count();
            let seg = |i: usize| match i {
                i if i >= len => 3u8,
                i if i + 1 == len => 2,
                _ => 0,
            };
            for i in 0..l {
                for j in 0..l {
                    v[(r * l + i) * l + j] = f32::from(seg(i) != seg(j));
                }
            }
        }
        Tensor::from_vec(v, (n, 1, l, l), mask.device())?.to_dtype(dtype)
    }

    /// ids [n, L] u32, mask [n, L] (1 = real token) -> hidden [n, L, d_model].
    pub fn forward(&self, ids: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let (n, l) = ids.dims2()?;
        let dev = ids.device();
        let mut h = self.word.forward(ids)?;
        let dtype = h.dtype();
        let (nh, dh) = (self.heads, self.d_head);
        let bias = padding_bias(mask, dtype)?;
        let pos = self.pos_emb(l, dtype, dev)?;
        // rel_shift as a gather: score (i, j) reads position column L − i + j.
        let idx: Vec<u32> = (0..l * l).map(|k| (l - k / l + k % l) as u32).collect();
        let idx = Tensor::from_vec(idx, (1, 1, l, l), dev)?
            .broadcast_as((n, nh, l, l))?
            .contiguous()?;
        let heads = |t: Tensor, rows: usize, lead: usize| -> Result<Tensor> {
            t.reshape((lead, rows, nh, dh))?
                .transpose(1, 2)?
                .contiguous()
        };
        let scale = 1.0 / (dh as f64).sqrt();
        let diff = Self::segment_difference(mask, dtype)?; // [n, 1, L, L]
        for layer in &self.layers {
            let q = heads(h.broadcast_matmul(&layer.q)?, l, n)?;
            let k = heads(h.broadcast_matmul(&layer.k)?, l, n)?;
            let v = heads(h.broadcast_matmul(&layer.v)?, l, n)?;
            let kr = heads(pos.matmul(&layer.r)?, 2 * l, 1)?; // [1, nh, 2L, dh]
            let ac = q.broadcast_add(&layer.r_w_bias)?.matmul(&k.t()?)?;
            let bd = q
                .broadcast_add(&layer.r_r_bias)?
                .broadcast_matmul(&kr.t()?)?
                .contiguous()?
                .gather(&idx, 3)?;
            // ef(i, j) = (q_i + r_s_bias)·seg_embed[same/different]: e0 + diff · (e1 − e0).
            let e = q
                .broadcast_add(&layer.r_s_bias)?
                .broadcast_matmul(&layer.seg_embed)?; // [n, nh, L, 2]
            let e0 = e.narrow(3, 0, 1)?;
            let ef = diff
                .broadcast_mul(&(e.narrow(3, 1, 1)? - &e0)?)?
                .broadcast_add(&e0)?;
            let scores = ((ac + bd + ef)? * scale)?.broadcast_add(&bias)?;
            let ctx = candle_nn::ops::softmax_last_dim(&scores)?
                .matmul(&v)?
                .transpose(1, 2)?
                .reshape((n, l, nh * dh))?;
            let out = ctx.broadcast_matmul(&layer.o.t()?)?;
            h = layer.ln1.forward(&(out + &h)?)?;
            let f = self.act.forward(&layer.ff_in.forward(&h)?)?;
            h = layer.ln2.forward(&(layer.ff_out.forward(&f)? + &h)?)?;
        }
        Ok(h)
    }
}
