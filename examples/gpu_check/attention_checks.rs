//! Multi-head attention on the target against the CPU's fused op, at the models' head shape.

use candle_core::{DType, Device, Tensor, Var};
use lmsplit::towers::nn::{attend, attention_bias};

use crate::compare::{host, rel_max_diff, worst};
use crate::report::{Bound, BoxError, Check};

/// f32 output, target against CPU: max |ΔO| / max |O_cpu| ≤ this. Each output is a sum of 128
/// products in f32 after a softmax in f32 on both sides, in other orders: rounding of order
/// 1e-7 of the largest entry; a dropped mask or a wrong scale is off by 1e-2 or more.
pub const ATTN_VALUE_TOL: f64 = 1e-5;

/// f32 gradients of dq, dk and dv, each against the CPU's relative to its own largest entry:
/// ≤ this (the checks' [`crate::towers_checks::GRAD_REL_TOL`]).
pub const ATTN_GRAD_TOL: f64 = crate::towers_checks::GRAD_REL_TOL;

/// bf16 (qkv and the output gradient rounded to bf16, f32 inside) against the CPU in f32,
/// output relative to its largest entry: ≤ this. The CPU's f32 op on qkv and w rounded to bf16,
/// its outputs rounded (the kernel's roundings) measured 4.9e-3 at this shape, and candle's
/// composed bf16 graph (which also rounds the scores and the probabilities) 1.3e-2; the bound
/// sits 10× above the first. A dropped mask or a wrong scale is off by 1e-1 or more.
pub const ATTN_BF16_VALUE_TOL: f64 = 0.05;

/// See [`ATTN_BF16_VALUE_TOL`]: dq, dk and dv, each relative to its largest entry (the kernel's
/// roundings on the CPU measured dq 6.2e-3, dk 9.4e-3, dv 4.6e-3; the composed bf16 graph dq
/// 1.8e-2, dk 3.8e-2, dv 9.8e-3).
pub const ATTN_BF16_GRAD_TOL: f64 = 0.1;

/// The largest of each of the three parts of the rows of a [B·T, 3H] gradient (Q, K, V) as
/// rel_max_diff against the reference's part.
fn part_diffs(target: &[f32], reference: &[f32], h: usize) -> [f64; 3] {
    let part = |x: &[f32], p: usize| -> Vec<f32> {
        x.chunks(3 * h)
            .flat_map(|row| row[p * h..(p + 1) * h].to_vec())
            .collect()
    };
    [0, 1, 2].map(|p| rel_max_diff(&part(target, p), &part(reference, p)))
}

/// Attention ([`attend`]: on CUDA our kernels, switch `attention`; on the CPU in f32 the fused
/// op) at T 128 with 12 heads of width 32 (the `base_2tower` heads), B 4: sequences 0 and 1
/// causal (GPT) and 2 and 3 not (BERT), under the models' bias (`attention_bias`), sequence 1
/// ending in 40 PADs and sequence 3 starting with 16 and ending with 8. The output and the
/// gradients of Σ w·O with respect to qkv (dq, dk, dv) on the target in f32 and in bf16 against
/// the CPU in f32.
pub fn attention_checks(target: &Device, seed: u64) -> Result<Vec<Check>, BoxError> {
    let (b, t, nh, hd) = (4, 128, 12, 32);
    let h = nh * hd;
    let s = seed as f32;
    let wave = |n: usize, f: f32, scale: f32| -> Vec<f32> {
        (0..n).map(|i| (i as f32 * f + s).sin() * scale).collect()
    };
    let qkv = wave(b * t * 3 * h, 0.37, 1.5);
    let w = wave(b * t * h, 0.23, 1.0);
    let mut mask = vec![1u8; b * t];
    mask[2 * t - 40..2 * t].fill(0);
    mask[3 * t..3 * t + 16].fill(0);
    mask[4 * t - 8..].fill(0);
    let run = |dev: &Device, dtype: DType| -> Result<[Vec<f32>; 2], BoxError> {
        let half = b / 2;
        let bias = Tensor::cat(
            &[
                attention_bias(&mask[..half * t], half, t, true, dev)?,
                attention_bias(&mask[half * t..], half, t, false, dev)?,
            ],
            0,
        )?;
        let x = Var::from_tensor(&Tensor::from_slice(&qkv, (b, t, 3 * h), dev)?)?;
        let y = attend(&x.as_tensor().to_dtype(dtype)?, &bias, nh)?;
        let weights = Tensor::from_slice(&w, (b, t, h), dev)?;
        let grads = (y.to_dtype(DType::F32)? * weights)?.sum_all()?.backward()?;
        let g = grads.get(x.as_tensor()).ok_or("qkv got no gradient")?;
        Ok([host(&y)?, host(g)?])
    };
    let cpu = run(&Device::Cpu, DType::F32)?;
    let shape = format!("B {b}, T {t}, {nh} heads of {hd}, causal and not, PADs");
    let mut checks = Vec::new();
    for (dtype, name, value_tol, grad_tol) in [
        (DType::F32, "f32", ATTN_VALUE_TOL, ATTN_GRAD_TOL),
        (DType::BF16, "bf16", ATTN_BF16_VALUE_TOL, ATTN_BF16_GRAD_TOL),
    ] {
        let tgt = run(target, dtype)?;
        let [dq, dk, dv] = part_diffs(&tgt[1], &cpu[1], h);
        checks.push(
            Check::new(
                format!("attn/{name}/value"),
                "max|dO|/max|O_cpu|",
                rel_max_diff(&tgt[0], &cpu[0]),
                Bound::AtMost(value_tol),
            )
            .with_detail(shape.clone()),
        );
        checks.push(
            Check::new(
                format!("attn/{name}/grad"),
                "max over dq, dk, dv of max|dg|/max|g_cpu|",
                worst([dq, dk, dv]),
                Bound::AtMost(grad_tol),
            )
            .with_detail(format!("dq {dq:.3e}, dk {dk:.3e}, dv {dv:.3e}")),
        );
    }
    Ok(checks)
}
