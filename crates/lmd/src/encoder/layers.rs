//! Inference building blocks shared by the encoder files: activations, finite attention masks,
//! multi-head attention, and the post-LayerNorm transformer block of the BERT family.
//!
//! On the CPU at f32 the exact GELU and the whole post-LN block take fused, vectorised paths
//! ([`kernels`], `cpu_block`); every other device and dtype runs candle's ops.

use candle_core::{DType, Device, Module, Result, Tensor};
use candle_nn::{LayerNorm, Linear, VarBuilder};
use serde::Deserialize;

use super::cpu_block::{self, BiasView, BlockWeights};

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
            Activation::Gelu if kernels::host::on_host_f32(&[x]) => {
                x.contiguous()?.apply_op1_no_bwd(&kernels::ops::GeluErf)
            }
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
/// Q, K and V are stored as one projection [3H, H] (one GEMM instead of three).
pub struct PostLnBlock {
    qkv: Linear,
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
        let (q, k, v) = (
            lin(d.hidden, d.hidden, names.q)?,
            lin(d.hidden, d.hidden, names.k)?,
            lin(d.hidden, d.hidden, names.v)?,
        );
        let cat = |f: fn(&Linear) -> Option<&Tensor>| -> Result<Tensor> {
            let parts = [&q, &k, &v]
                .into_iter()
                .map(|l| {
                    f(l).cloned()
                        .ok_or_else(|| candle_core::Error::Msg("bias".into()))
                })
                .collect::<Result<Vec<_>>>()?;
            Tensor::cat(&parts, 0)
        };
        let qkv = Linear::new(cat(|l| Some(l.weight()))?, Some(cat(Linear::bias)?));
        Ok(Self {
            qkv,
            o: lin(d.hidden, d.hidden, names.o)?,
            ln1: ln(names.ln1)?,
            ff_in: lin(d.hidden, d.ffn, names.ff_in)?,
            ff_out: lin(d.ffn, d.hidden, names.ff_out)?,
            ln2: ln(names.ln2)?,
            heads: d.heads,
            act: d.act,
        })
    }

    /// x [n, L, H] with the additive key bias [n or 1, 1, 1 or L, L].
    pub fn forward(&self, x: &Tensor, bias: &Tensor) -> Result<Tensor> {
        if let Some(y) = self.forward_cpu_f32(x, bias) {
            return y;
        }
        self.forward_ops(x, bias)
    }

    /// The block as candle ops (any device and dtype).
    pub fn forward_ops(&self, x: &Tensor, bias: &Tensor) -> Result<Tensor> {
        let h = x.dim(2)?;
        let qkv = self.qkv.forward(x)?;
        let ctx = attend(
            &qkv.narrow(2, 0, h)?,
            &qkv.narrow(2, h, h)?,
            &qkv.narrow(2, 2 * h, h)?,
            self.heads,
            Some(bias),
        )?;
        let x = self.ln1.forward(&(self.o.forward(&ctx)? + x)?)?;
        let h = self.act.forward(&self.ff_in.forward(&x)?)?;
        self.ln2.forward(&(self.ff_out.forward(&h)? + x)?)
    }
}

impl PostLnBlock {
    /// The fused CPU f32 path ([`cpu_block`]); `None` when x, the bias or the weights are not
    /// contiguous CPU f32 or the activation is not the exact GELU.
    fn forward_cpu_f32(&self, x: &Tensor, bias: &Tensor) -> Option<Result<Tensor>> {
        if self.act != Activation::Gelu {
            return None;
        }
        let (n, l, hidden) = x.dims3().ok()?;
        if n * l * hidden == 0 || hidden % self.heads != 0 {
            return None;
        }
        let (seq_stride, row_stride) = cpu_block::bias_strides(bias.dims(), n, l)?;
        let ts = [
            x,
            bias,
            self.qkv.weight(),
            self.qkv.bias()?,
            self.o.weight(),
            self.o.bias()?,
            self.ln1.weight(),
            self.ln1.bias()?,
            self.ff_in.weight(),
            self.ff_in.bias()?,
            self.ff_out.weight(),
            self.ff_out.bias()?,
            self.ln2.weight(),
            self.ln2.bias()?,
        ];
        let y = kernels::host::with_host_f32(&ts, |s| {
            let w = BlockWeights {
                qkv_w: s[2],
                qkv_b: s[3],
                o_w: s[4],
                o_b: s[5],
                ln1_g: s[6],
                ln1_b: s[7],
                ff_in_w: s[8],
                ff_in_b: s[9],
                ff_out_w: s[10],
                ff_out_b: s[11],
                ln2_g: s[12],
                ln2_b: s[13],
                eps1: self.ln1.eps() as f32,
                eps2: self.ln2.eps() as f32,
                heads: self.heads,
            };
            let bias = BiasView {
                data: s[1],
                seq_stride,
                row_stride,
            };
            cpu_block::post_ln_block(s[0], n, l, bias, &w)
        })?;
        Some(Tensor::from_vec(y, (n, l, hidden), x.device()))
    }
}

/// Position ids 0..L (plus `offset`), as a \[L\] u32 tensor.
pub fn positions(l: usize, offset: usize, device: &Device) -> Result<Tensor> {
    Tensor::arange(offset as u32, (offset + l) as u32, device)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use candle_core::{DType, Device, Tensor};
    use candle_nn::VarBuilder;
    use rand::SeedableRng;
    use rand_distr::{Distribution, Normal};

    use super::*;

    /// A block with seeded random weights (hidden 24, 3 heads, ffn 40).
    fn random_block(act: Activation) -> PostLnBlock {
        let (h, f) = (24, 40);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let normal = Normal::new(0.0f32, 0.3).expect("normal");
        let mut t = |shape: &[usize]| {
            let n = shape.iter().product();
            let v: Vec<f32> = (0..n).map(|_| normal.sample(&mut rng)).collect();
            Tensor::from_vec(v, shape, &Device::Cpu).expect("tensor")
        };
        let mut m = HashMap::new();
        for (name, i, o) in [
            ("attention.self.query", h, h),
            ("attention.self.key", h, h),
            ("attention.self.value", h, h),
            ("attention.output.dense", h, h),
            ("intermediate.dense", h, f),
            ("output.dense", f, h),
        ] {
            m.insert(format!("{name}.weight"), t(&[o, i]));
            m.insert(format!("{name}.bias"), t(&[o]));
        }
        for name in ["attention.output.LayerNorm", "output.LayerNorm"] {
            m.insert(format!("{name}.weight"), (t(&[h]) + 1.0).expect("gamma"));
            m.insert(format!("{name}.bias"), t(&[h]));
        }
        let vb = VarBuilder::from_tensors(m, DType::F32, &Device::Cpu);
        let dims = BlockDims {
            hidden: h,
            ffn: f,
            heads: 3,
            eps: 1e-12,
            act,
        };
        PostLnBlock::new(dims, &BERT_NAMES, vb).expect("block")
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b)
            .and_then(|d| d.abs())
            .and_then(|d| d.max_all())
            .and_then(|d| d.to_scalar::<f32>())
            .expect("diff")
    }

    #[test]
    fn fused_cpu_block_equals_candle_ops_for_every_mask_shape() {
        let dev = Device::Cpu;
        let block = random_block(Activation::Gelu);
        let (n, l) = (3, 13);
        let x = Tensor::randn(0f32, 1.0, (n, l, 24), &dev).expect("x");
        let lengths = [13usize, 9, 1];
        let mask: Vec<f32> = lengths
            .iter()
            .flat_map(|&k| (0..l).map(move |j| if j < k { 1.0 } else { 0.0 }))
            .collect();
        let mask = Tensor::from_vec(mask, (n, l), &dev).expect("mask");
        let pad = padding_bias(&mask, DType::F32).expect("pad");
        let band = band_bias(l, 2, DType::F32, &dev).expect("band");
        let biases = [
            pad.clone(),
            pad.broadcast_add(&band).expect("pad + band"),
            causal_bias(l, DType::F32, &dev).expect("causal"),
        ];
        for bias in &biases {
            let fused = block
                .forward_cpu_f32(&x, bias)
                .expect("the fused path applies")
                .expect("fused");
            let ops = block.forward_ops(&x, bias).expect("ops");
            let d = max_diff(&fused, &ops);
            assert!(d < 2e-5, "bias {:?}: max diff {d}", bias.dims());
        }
    }

    #[test]
    fn other_activations_and_dtypes_take_candle_ops() {
        let dev = Device::Cpu;
        let x = Tensor::randn(0f32, 1.0, (2, 5, 24), &dev).expect("x");
        let bias = Tensor::zeros((2, 1, 1, 5), DType::F32, &dev).expect("bias");
        assert!(random_block(Activation::GeluTanh)
            .forward_cpu_f32(&x, &bias)
            .is_none());
        let block = random_block(Activation::Gelu);
        let xh = x.to_dtype(DType::F64).expect("f64");
        assert!(block.forward_cpu_f32(&xh, &bias).is_none());
        let odd = Tensor::zeros((2, 2, 1, 5), DType::F32, &dev).expect("odd bias");
        assert!(block.forward_cpu_f32(&x, &odd).is_none());
    }

    #[test]
    fn gelu_activation_matches_candle_exact_gelu() {
        let x = Tensor::randn(0f32, 3.0, (4, 33), &Device::Cpu).expect("x");
        let fast = Activation::Gelu.forward(&x).expect("fast");
        let exact = x.gelu_erf().expect("exact");
        assert!(max_diff(&fast, &exact) < 2e-6);
    }
}
