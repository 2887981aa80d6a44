//! Inference building blocks shared by the encoder files: activations, finite attention masks,
//! multi-head attention, and the post-LayerNorm transformer block of the BERT family.

use candle_core::{DType, Device, Module, Result, Tensor};
use candle_nn::{LayerNorm, Linear, VarBuilder};
use serde::Deserialize;

/// A hidden activation as named in `config.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Activation {
    /// Exact GELU (erf).
    #[serde(rename = "gelu")]
    Gelu,
    /// GELU, tanh approximation.
    #[serde(alias = "gelu_new", alias = "gelu_pytorch_tanh", alias = "gelu_fast")]
    #[serde(rename = "gelu_approximate")]
    GeluTanh,
    /// ReLU.
    #[serde(rename = "relu")]
    Relu,
    /// SiLU / swish.
    #[serde(rename = "silu", alias = "swish")]
    Silu,
}

impl Activation {
    /// Applies the activation.
    pub fn forward(self, x: &Tensor) -> Result<Tensor> {
        match self {
            Activation::Gelu => x.gelu_erf(),
            Activation::GeluTanh => x.gelu(),
            Activation::Relu => x.relu(),
            Activation::Silu => x.silu(),
        }
    }
}

/// A large negative that stays finite in `dtype` (`f32::MIN` overflows to -inf in f16/bf16,
/// and 0 × -inf is NaN: the trap of candle's BERT mask).
fn mask_value(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => -6.0e4,
        _ => -1.0e9,
    }
}

/// Additive key mask [n, 1, 1, L] from a 0/1 mask [n, L] (1 = real token): 0 for real keys,
/// a large finite negative for padding.
pub fn padding_bias(mask: &Tensor, dtype: DType) -> Result<Tensor> {
    let (n, l) = mask.dims2()?;
    let m = mask.to_dtype(DType::F32)?;
    let bias = ((m - 1.0)? * (-mask_value(dtype)))?;
    bias.reshape((n, 1, 1, l))?.to_dtype(dtype)
}

/// Additive causal mask [1, 1, L, L]: position i sees keys j ≤ i.
pub fn causal_bias(l: usize, dtype: DType, device: &Device) -> Result<Tensor> {
    let neg = mask_value(dtype) as f32;
    let v: Vec<f32> = (0..l * l)
        .map(|k| if k % l > k / l { neg } else { 0.0 })
        .collect();
    Tensor::from_vec(v, (1, 1, l, l), device)?.to_dtype(dtype)
}

/// Additive band mask [1, 1, L, L]: position i sees keys j with |i − j| ≤ `half` (Longformer's
/// sliding window without global tokens).
pub fn band_bias(l: usize, half: usize, dtype: DType, device: &Device) -> Result<Tensor> {
    let neg = mask_value(dtype) as f32;
    let v: Vec<f32> = (0..l * l)
        .map(|k| {
            if (k % l).abs_diff(k / l) > half {
                neg
            } else {
                0.0
            }
        })
        .collect();
    Tensor::from_vec(v, (1, 1, l, l), device)?.to_dtype(dtype)
}

/// Scaled dot-product attention over heads: q [n, Lq, h·dq], k [n, L, h·dq], v [n, L, h·dv],
/// optional additive bias broadcastable to [n, h, Lq, L]; returns [n, Lq, h·dv].
pub fn attend(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    heads: usize,
    bias: Option<&Tensor>,
) -> Result<Tensor> {
    let (n, lq, hq) = q.dims3()?;
    let l = k.dim(1)?;
    let hv = v.dim(2)?;
    let (dq, dv) = (hq / heads, hv / heads);
    let split = |x: &Tensor, len: usize, d: usize| -> Result<Tensor> {
        x.reshape((n, len, heads, d))?.transpose(1, 2)?.contiguous()
    };
    let q = (split(q, lq, dq)? * (1.0 / (dq as f64).sqrt()))?;
    let k = split(k, l, dq)?;
    let v = split(v, l, dv)?;
    let mut scores = q.matmul(&k.t()?)?;
    if let Some(b) = bias {
        scores = scores.broadcast_add(b)?;
    }
    let probs = candle_nn::ops::softmax_last_dim(&scores)?;
    probs.matmul(&v)?.transpose(1, 2)?.reshape((n, lq, hv))
}

/// Loads a `Linear` stored as GPT-2's `Conv1D` (weight [in, out]).
pub fn conv1d_linear(in_dim: usize, out_dim: usize, vb: VarBuilder) -> Result<Linear> {
    let w = vb.get((in_dim, out_dim), "weight")?.t()?.contiguous()?;
    let b = vb.get(out_dim, "bias")?;
    Ok(Linear::new(w, Some(b)))
}

/// Names of one post-LayerNorm transformer block's weights (BERT and ALBERT spell them apart).
pub struct BlockNames {
    /// Query, key, value, attention output projections.
    pub q: &'static str,
    /// Key projection.
    pub k: &'static str,
    /// Value projection.
    pub v: &'static str,
    /// Attention output projection.
    pub o: &'static str,
    /// LayerNorm after attention.
    pub ln1: &'static str,
    /// Feed-forward input projection.
    pub ff_in: &'static str,
    /// Feed-forward output projection.
    pub ff_out: &'static str,
    /// LayerNorm after the feed-forward.
    pub ln2: &'static str,
}

/// BERT / RoBERTa / ELECTRA weight names inside `encoder.layer.{i}`.
pub const BERT_NAMES: BlockNames = BlockNames {
    q: "attention.self.query",
    k: "attention.self.key",
    v: "attention.self.value",
    o: "attention.output.dense",
    ln1: "attention.output.LayerNorm",
    ff_in: "intermediate.dense",
    ff_out: "output.dense",
    ln2: "output.LayerNorm",
};

/// Sizes of a post-LayerNorm block.
#[derive(Debug, Clone, Copy)]
pub struct BlockDims {
    /// Model width.
    pub hidden: usize,
    /// Feed-forward width.
    pub ffn: usize,
    /// Attention heads.
    pub heads: usize,
    /// LayerNorm epsilon.
    pub eps: f64,
    /// Feed-forward activation.
    pub act: Activation,
}

/// A post-LayerNorm block: x ← LN(x + Attn(x)); x ← LN(x + W2 act(W1 x)).
pub struct PostLnBlock {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    ln1: LayerNorm,
    ff_in: Linear,
    ff_out: Linear,
    ln2: LayerNorm,
    heads: usize,
    act: Activation,
}

impl PostLnBlock {
    /// Loads a block with the given weight names.
    pub fn new(d: BlockDims, names: &BlockNames, vb: VarBuilder) -> Result<Self> {
        let lin = |i, o, n: &str| candle_nn::linear(i, o, vb.pp(n));
        let ln = |n: &str| candle_nn::layer_norm(d.hidden, d.eps, vb.pp(n));
        Ok(Self {
            q: lin(d.hidden, d.hidden, names.q)?,
            k: lin(d.hidden, d.hidden, names.k)?,
            v: lin(d.hidden, d.hidden, names.v)?,
            o: lin(d.hidden, d.hidden, names.o)?,
            ln1: ln(names.ln1)?,
            ff_in: lin(d.hidden, d.ffn, names.ff_in)?,
            ff_out: lin(d.ffn, d.hidden, names.ff_out)?,
            ln2: ln(names.ln2)?,
            heads: d.heads,
            act: d.act,
        })
    }

    /// x [n, L, H] with the additive key bias [n, 1, 1, L].
    pub fn forward(&self, x: &Tensor, bias: &Tensor) -> Result<Tensor> {
        let ctx = attend(
            &self.q.forward(x)?,
            &self.k.forward(x)?,
            &self.v.forward(x)?,
            self.heads,
            Some(bias),
        )?;
        let x = self.ln1.forward(&(self.o.forward(&ctx)? + x)?)?;
        let h = self.act.forward(&self.ff_in.forward(&x)?)?;
        self.ln2.forward(&(self.ff_out.forward(&h)? + x)?)
    }
}

/// Position ids 0..L (plus `offset`), as a [L] u32 tensor.
pub fn positions(l: usize, offset: usize, device: &Device) -> Result<Tensor> {
    Tensor::arange(offset as u32, (offset + l) as u32, device)
}
