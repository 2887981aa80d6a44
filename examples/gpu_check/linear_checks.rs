//! A Linear layer on the target against the CPU's fused Linear, at the
//! `base_2tower` feed-forward shape.

use candle_core::{DType, Device, Tensor, Var};
use lmsplit::towers::nn::Linear;

use crate::compare::{host, rel_max_diff, worst};
use crate::report::{Bound, BoxError, Check};

/// f32 output, target against CPU: max |Δy| / max |y_cpu| ≤ this. Each output is a sum of 384
/// products and a bias in f32 on both sides, in other orders (cuBLAS without TF32, faer):
/// rounding of order 1e-7 of the largest entry; a dropped bias or a transposed W is off by far
/// more.
pub const LINEAR_VALUE_TOL: f64 = 1e-5;

/// f32 gradients dx, dW and db, each against the CPU's relative to its own largest entry: ≤ this
/// (the checks' [`crate::towers_checks::GRAD_REL_TOL`]).
pub const LINEAR_GRAD_TOL: f64 = crate::towers_checks::GRAD_REL_TOL;

/// bf16 (x and W rounded to bf16, f32 sums, y and dx rounded to bf16; dW and db in f32) against
/// the CPU in f32, y relative to its largest entry: ≤ this. Candle's composed bf16 graph on the
/// CPU (the `--device cpu` run) measured 6.4e-3 at this shape; a dropped bias or a transposed
/// W is off by order 1.
pub const LINEAR_BF16_VALUE_TOL: f64 = 0.05;

/// See [`LINEAR_BF16_VALUE_TOL`]: dx, dW and db, each relative to its largest entry. The
/// composed bf16 graph on the CPU measured dx 5–9e-3, dW 4.0e-3 and db 0.108 (its bias gradient
/// summed in bf16); our CUDA op sums db in f32, so the bound sits about 2× above the composed
/// graph's db, and a wrong operand is still off by order 1.
pub const LINEAR_BF16_GRAD_TOL: f64 = 0.25;

/// A Linear(384, 1536) with a bias, as a block's `fc1` ([`Linear::forward`]: on CUDA our
/// op, switch `linear`; on the CPU in f32 the fused CPU op), on x [4, 128, 384]: y and the
/// gradients of Σ w·y with respect to x, W and b on the target in f32 and in bf16 (x in bf16,
/// W and b f32 masters) against the CPU in f32.
pub fn linear_checks(target: &Device, seed: u64) -> Result<Vec<Check>, BoxError> {
    let (b, t, d_in, d_out) = (4, 128, 384, 1536);
    // Hashed values, uniform in [-scale, scale): no regular pattern whose sums cancel (a sine
    // wave along a row sums to almost nothing, and bf16's roundings then dominate the gradient).
    let noise = |n: usize, salt: u64, scale: f32| -> Vec<f32> {
        (0..n as u64)
            .map(|i| {
                let h = (i ^ (salt << 40) ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                ((h >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
            })
            .collect()
    };
    let (x, w, bias) = (
        noise(b * t * d_in, 1, 1.5),
        noise(d_out * d_in, 2, 0.05),
        noise(d_out, 3, 0.5),
    );
    let wy = noise(b * t * d_out, 4, 1.0);
    let run = |dev: &Device, dtype: DType| -> Result<[Vec<f32>; 4], BoxError> {
        let xv = Var::from_tensor(&Tensor::from_slice(&x, (b, t, d_in), dev)?)?;
        let wv = Var::from_tensor(&Tensor::from_slice(&w, (d_out, d_in), dev)?)?;
        let bv = Var::from_tensor(&Tensor::from_slice(&bias, d_out, dev)?)?;
        let lin = Linear::from_parts(wv.as_tensor().clone(), Some(bv.as_tensor().clone()));
        let y = lin.forward(&xv.as_tensor().to_dtype(dtype)?)?;
        let weights = Tensor::from_slice(&wy, (b, t, d_out), dev)?;
        let grads = (y.to_dtype(DType::F32)? * weights)?.sum_all()?.backward()?;
        let g = |v: &Var, name: &str| -> Result<Vec<f32>, BoxError> {
            let g = grads
                .get(v.as_tensor())
                .ok_or(format!("{name} got no gradient"))?;
            if v.dtype() != g.dtype() {
                return Err(format!("{name}'s gradient is {:?}", g.dtype()).into());
            }
            Ok(host(g)?)
        };
        Ok([host(&y)?, g(&xv, "x")?, g(&wv, "W")?, g(&bv, "b")?])
    };
    let cpu = run(&Device::Cpu, DType::F32)?;
    let shape = format!("x [{b}, {t}, {d_in}], W [{d_out}, {d_in}], b [{d_out}]");
    let mut checks = Vec::new();
    for (dtype, name, value_tol, grad_tol) in [
        (DType::F32, "f32", LINEAR_VALUE_TOL, LINEAR_GRAD_TOL),
        (
            DType::BF16,
            "bf16",
            LINEAR_BF16_VALUE_TOL,
            LINEAR_BF16_GRAD_TOL,
        ),
    ] {
        let tgt = run(target, dtype)?;
        let [dx, dw, db] = [1, 2, 3].map(|k| rel_max_diff(&tgt[k], &cpu[k]));
        checks.push(
            Check::new(
                format!("linear/{name}/value"),
                "max|dy|/max|y_cpu|",
                rel_max_diff(&tgt[0], &cpu[0]),
                Bound::AtMost(value_tol),
            )
            .with_detail(shape.clone()),
        );
        checks.push(
            Check::new(
                format!("linear/{name}/grad"),
                "max over dx, dW, db of max|dg|/max|g_cpu|",
                worst([dx, dw, db]),
                Bound::AtMost(grad_tol),
            )
            .with_detail(format!("dx {dx:.3e}, dW {dw:.3e}, db {db:.3e}")),
        );
    }
    Ok(checks)
}
