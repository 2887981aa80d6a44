//! Two-tower models on the target against the CPU: initial weights, f32 gradients of every
//! variable, and short training runs (f32, and bf16 compute against f32).

use candle_core::{DType, Device, Tensor, Var};
use lmsplit::corpus::TokenBatch;
use lmsplit::towers::nn::{
    linear_cross_entropy, lstm_chain_recurrence, lstm_recurrence, score_log_probs,
};
use lmsplit::towers::{
    AdamW, AdamWConfig, BatchSource, Budget, MarkovSource, ModelConfig, NllPass, ParamStore,
    Preset, Style, TrainConfig, Trainer, TwoTowerLm,
};

use crate::compare::{host, loss_deviation, max_abs, rel_max_diff, worst};
use crate::report::{Bound, BoxError, Check};

/// f32 gradients, target against CPU, per variable: max |Δg| / max |g_cpu| ≤ this. Both sides
/// compute in f32 but a GPU reorders every reduction (GEMM tiles, sums over the batch, atomics)
/// and runs the composed candle graph where the CPU runs fused custom ops: rounding of order
/// 1e-7 per operation, summed over a few hundred terms, should stay near 1e-6–1e-5 of a
/// variable's largest entry (the towers' tests hold each fused op to the composed graph at
/// 2e-5); a wrong op (a dropped mask, a missing term) is off by 1e-2 or more.
pub const GRAD_REL_TOL: f64 = 1e-4;

/// f32 training, target against CPU: per step |Δloss| ≤ `F32_LOSS_ABS` + `F32_LOSS_REL`·|loss|.
/// The trajectories differ only by rounding, which AdamW amplifies where a gradient entry is
/// near zero (its first updates are ≈ ±lr whatever the size). bf16 compute, whose rounding is
/// 2¹⁶ times coarser, moved the loss by at most 1.1e-3 nats over 20 steps on the CPU, so f32
/// rounding should stay far below this bound; a wrong update moves the loss by 1e-2 or more.
pub const F32_LOSS_ABS: f64 = 1e-3;
/// See [`F32_LOSS_ABS`].
pub const F32_LOSS_REL: f64 = 1e-3;

/// bf16 compute (f32 masters) against f32, per step: |Δloss| ≤ `BF16_LOSS_ABS` +
/// `BF16_LOSS_REL`·|loss|. bf16 keeps 8 significant bits (relative rounding 2⁻⁹ ≈ 0.2%), so
/// activations and logits differ by a few tenths of a percent and the trajectories drift
/// apart slowly: on candle's CPU bf16 path the losses (4–5.6 nats) stayed within 1.1e-3 nats of
/// f32 over 20 steps. The bound leaves room for other kernels and longer runs; a broken bf16
/// path (NaN, a mask overflowing to −∞, a master weight rounded to bf16) is off by far more.
pub const BF16_LOSS_ABS: f64 = 0.05;
/// See [`BF16_LOSS_ABS`].
pub const BF16_LOSS_REL: f64 = 0.02;

/// One model shape under test: a name, its configuration and the batch it trains on.
#[derive(Debug, Clone)]
pub struct Shape {
    /// `tiny` (the tests' preset) or `wide`.
    pub name: String,
    /// The model configuration.
    pub cfg: ModelConfig,
    /// Sequences per batch.
    pub batch_size: usize,
    /// Tokens per sequence.
    pub seq_len: usize,
}

impl Shape {
    /// `tiny`: the preset of the towers' tests (H 32, or ELMo H 16 / cell 32, V 64), 8 × 32
    /// tokens. `wide`: 4x the width and vocabulary (H 128, FFN 512, 4 heads, V 256; ELMo H 64,
    /// cell 128), 8 × 64 tokens (ELMo 8 × 32), so GEMMs span several GPU tiles.
    pub fn new(style: Style, name: &str) -> Result<Self, BoxError> {
        let mut cfg = ModelConfig::preset(&style, Preset::Tiny)?;
        let (batch_size, seq_len) = match name {
            "tiny" => (8, 32),
            "wide" => {
                cfg.vocab_size = 256;
                // Every width of the style's configuration 4x; a recurrent tower (one with an
                // LSTM cell) over shorter sequences, its steps being sequential.
                let tiny = cfg.tower.to_json();
                let mut patch = serde_json::Map::new();
                for key in ["hidden_size", "lstm_size", "ffn_size"] {
                    if let Some(w) = tiny.get(key).and_then(serde_json::Value::as_u64) {
                        patch.insert(key.into(), (4 * w).into());
                    }
                }
                cfg.tower = cfg.tower.patched(&patch.into())?;
                match tiny.get("lstm_size") {
                    Some(_) => (8, 32),
                    None => (8, 64),
                }
            }
            other => return Err(format!("unknown shape {other:?} (tiny, wide)").into()),
        };
        Ok(Self {
            name: name.to_string(),
            cfg,
            batch_size,
            seq_len,
        })
    }

    /// `n` batches of the style's objective from a seeded Markov chain over the vocabulary.
    pub fn batches(&self, n: usize, seed: u64) -> Result<Vec<TokenBatch>, BoxError> {
        let c = &self.cfg;
        let mut src = MarkovSource::new(
            c.style(),
            c.vocab_size,
            4,
            self.batch_size,
            self.seq_len,
            seed ^ 0x5eed,
            seed,
        )?;
        Ok((0..n).map(|_| src.next_batch()).collect::<Result<_, _>>()?)
    }

    /// The prefix of this shape's check names: `grad/gpt/tiny`.
    fn label(&self, group: &str) -> String {
        format!("{group}/{}/{}", self.cfg.style(), self.name)
    }
}

/// Every variable's name and its gradient on the host (`None` where it got no gradient).
fn gradients(model: &TwoTowerLm, batch: &TokenBatch) -> Result<Vec<GradOf>, BoxError> {
    let grads = model.loss(batch)?.backward()?;
    let mut out = Vec::new();
    for p in model.params().params() {
        let g = grads.get(p.var.as_tensor()).map(host).transpose()?;
        out.push((p.name, g));
    }
    Ok(out)
}

/// A variable's name and its host gradient, if any.
type GradOf = (String, Option<Vec<f32>>);

/// Initial weights, gradients and their finiteness for one shape: the same seed builds the
/// model on the CPU and on the target (weights are drawn on the host from a seeded ChaCha8,
/// so they must be bit-identical), one batch, f32 gradients of every variable compared.
pub fn gradient_checks(shape: &Shape, target: &Device, seed: u64) -> Result<Vec<Check>, BoxError> {
    let cpu = TwoTowerLm::new(&shape.cfg, &Device::Cpu, seed)?;
    let dev = TwoTowerLm::new(&shape.cfg, target, seed)?;
    let init = weight_difference(&cpu, &dev)?;
    let batch = shape.batches(1, seed)?.remove(0);
    let (gc, gt) = (gradients(&cpu, &batch)?, gradients(&dev, &batch)?);
    let cmp = compare_gradients(&gc, &gt);
    let name = |aspect: &str| format!("{}/{aspect}", shape.label("grad"));
    Ok(vec![
        Check::new(
            name("init"),
            "max |w_target - w_cpu|",
            init,
            Bound::AtMost(0.0),
        )
        .with_detail(format!("{} variables", gc.len())),
        Check::new(
            name("f32"),
            "max_var max|dg|/max|g_cpu|",
            cmp.worst,
            Bound::AtMost(GRAD_REL_TOL),
        )
        .with_detail(if cmp.worst == 0.0 {
            format!("all {} equal", gc.len())
        } else {
            format!("worst {}", cmp.worst_name)
        }),
        Check::new(
            name("finite-nonzero"),
            "variables without finite g != 0",
            cmp.bad.len() as f64,
            Bound::AtMost(0.0),
        )
        .with_detail(cmp.bad.join(", ")),
    ])
}

/// What [`compare_gradients`] found.
struct GradComparison {
    /// The largest per-variable max |Δg| / max |g_cpu| (NaN if any is not measurable).
    worst: f64,
    /// The variable where it was.
    worst_name: String,
    /// Variables without a finite, non-zero gradient on the target.
    bad: Vec<String>,
}

/// Compares the target's gradients (`gt`) with the CPU's (`gc`), variable by variable.
fn compare_gradients(gc: &[GradOf], gt: &[GradOf]) -> GradComparison {
    let mut out = GradComparison {
        worst: if gc.len() == gt.len() { 0.0 } else { f64::NAN },
        worst_name: String::new(),
        bad: Vec::new(),
    };
    for ((name, c), (_, t)) in gc.iter().zip(gt) {
        let ok = t
            .as_ref()
            .is_some_and(|t| t.iter().all(|x| x.is_finite()) && t.iter().any(|&x| x != 0.0));
        if !ok {
            out.bad.push(name.clone());
        }
        let r = match (c, t) {
            (Some(c), Some(t)) => rel_max_diff(t, c),
            _ => f64::NAN,
        };
        if !out.worst.is_nan() && (r.is_nan() || r > out.worst || out.worst_name.is_empty()) {
            (out.worst, out.worst_name) = (r, name.clone());
        }
    }
    out
}

/// The largest |w_target − w_cpu| over every initial weight (NaN if the variables differ).
fn weight_difference(cpu: &TwoTowerLm, dev: &TwoTowerLm) -> Result<f64, BoxError> {
    let (a, b) = (cpu.params().params(), dev.params().params());
    if a.len() != b.len() {
        return Ok(f64::NAN);
    }
    let mut worst = 0f64;
    for (p, q) in a.iter().zip(&b) {
        let (x, y) = (host(p.var.as_tensor())?, host(q.var.as_tensor())?);
        let d: Vec<f32> = x.iter().zip(&y).map(|(u, v)| u - v).collect();
        worst = worst.max(max_abs(&d));
    }
    Ok(worst)
}

/// The loss of every update of a fresh trainer (the default AdamW recipe with clipping, warmup
/// and linear decay over `batches.len()` steps), one batch per update.
fn train_losses(model: &TwoTowerLm, batches: &[TokenBatch]) -> Result<Vec<f64>, BoxError> {
    let tc = TrainConfig {
        budget: Budget::Steps(batches.len() as u64),
        ..TrainConfig::default()
    };
    let mut trainer = Trainer::new(model, tc, None)?;
    let mut losses = Vec::with_capacity(batches.len());
    for b in batches {
        losses.push(trainer.step(std::slice::from_ref(b))?.loss);
    }
    Ok(losses)
}

/// `steps` training updates from the same initial weights and batches: on the CPU in f32 (the
/// reference), on the target in f32 and on the target with bf16 compute (f32 masters).
/// Each step's loss must stay within the stated tolerance of the reference's; a NaN (the
/// trainer stops on a non-finite loss or gradient norm) fails that run's check.
pub fn training_checks(
    shape: &Shape,
    target: &Device,
    seed: u64,
    steps: usize,
) -> Result<Vec<Check>, BoxError> {
    let batches = shape.batches(steps.max(1), seed.wrapping_add(1))?;
    let reference = train_losses(&TwoTowerLm::new(&shape.cfg, &Device::Cpu, seed)?, &batches)?;
    let variants = [
        ("f32", DType::F32, F32_LOSS_ABS, F32_LOSS_REL),
        ("bf16", DType::BF16, BF16_LOSS_ABS, BF16_LOSS_REL),
    ];
    let mut checks = Vec::new();
    for (aspect, dtype, abs, rel) in variants {
        let name = format!("{}/{aspect}", shape.label("train"));
        let model = TwoTowerLm::new(&shape.cfg, target, seed)?.with_compute_dtype(dtype);
        checks.push(match train_losses(&model, &batches) {
            Ok(run) => loss_check(name, &run, &reference, abs, rel),
            Err(e) => Check::failed(name, e.as_ref()),
        });
    }
    Ok(checks)
}

/// The check of one training trajectory against the reference's losses.
fn loss_check(name: String, run: &[f64], reference: &[f64], abs: f64, rel: f64) -> Check {
    let (ratio, step, delta) = loss_deviation(run, reference, abs, rel);
    Check::new(
        name,
        "max_step |dloss|/(abs+rel*|loss|)",
        ratio,
        Bound::AtMost(1.0),
    )
    .with_detail(format!(
        "abs {abs}, rel {rel}; worst step {step}: |dloss| {delta:.2e}; cpu f32 loss {:.4} -> {:.4}",
        reference[0],
        reference[reference.len() - 1]
    ))
}

/// The LSTM recurrence's values on the target against the CPU's, relative to their largest
/// entry: both run the fused whole-sequence op in f32 (the CPU's SIMD exp against CUDA's
/// expf/tanhf, each within a few ulp), so h differs by rounding carried through T steps; a
/// wrong gate or mask is off by 1e-2 or more.
pub const LSTM_VALUE_TOL: f64 = 1e-5;

/// (B, T, C) of an LSTM check's shape: `tiny` B 3, T 9, C 8; `wide` B 16, T 64, C 512 (GEMMs
/// over several tiles).
fn lstm_shape(shape: &str) -> Result<(usize, usize, usize), BoxError> {
    match shape {
        "tiny" => Ok((3, 9, 8)),
        "wide" => Ok((16, 64, 512)),
        other => Err(format!("unknown shape {other:?} (tiny, wide)").into()),
    }
}

/// The LSTM layer's recurrence ([`lstm_recurrence`], the fused whole-sequence op where it
/// applies) on the target against the CPU: the hidden states and the gradients of gx and W_hh
/// of Σ w·h, with PADs at the start of sequence 0, the middle of sequence 1 and the end of
/// sequence 2, at [`lstm_shape`].
pub fn lstm_checks(shape: &str, target: &Device, seed: u64) -> Result<Vec<Check>, BoxError> {
    let (b, t, c) = lstm_shape(shape)?;
    let s = seed as f32;
    let wave = |n: usize, f: f32, scale: f32| -> Vec<f32> {
        (0..n).map(|i| (i as f32 * f + s).sin() * scale).collect()
    };
    let gx = wave(b * t * 4 * c, 0.37, 2.0);
    let w = wave(4 * c * c, 0.11, 1.0 / (c as f32).sqrt());
    let wt = wave(b * t * c, 0.23, 1.0);
    let mut mask = vec![1f32; b * t];
    (mask[0], mask[t + t / 2], mask[3 * t - 1]) = (0.0, 0.0, 0.0);
    let run = |dev: &Device| -> Result<[Vec<f32>; 3], BoxError> {
        let gx = Var::from_tensor(&Tensor::from_slice(&gx, (b, t, 4 * c), dev)?)?;
        let w = Var::from_tensor(&Tensor::from_slice(&w, (4 * c, c), dev)?)?;
        let mask = Tensor::from_slice(&mask, (b, t, 1), dev)?;
        let h = lstm_recurrence(gx.as_tensor(), w.as_tensor(), &mask, true)?;
        let grads = (&h * Tensor::from_slice(&wt, (b, t, c), dev)?)?
            .sum_all()?
            .backward()?;
        let grad = |v: &Var| -> Result<Vec<f32>, BoxError> {
            Ok(host(grads.get(v.as_tensor()).ok_or("no gradient")?)?)
        };
        Ok([host(&h)?, grad(&gx)?, grad(&w)?])
    };
    let (cpu, tgt) = (run(&Device::Cpu)?, run(target)?);
    let detail = format!("B {b}, T {t}, C {c}, 3 PADs");
    let tols = (LSTM_VALUE_TOL, GRAD_REL_TOL);
    Ok(lstm_value_grad(
        &format!("lstm/{shape}"),
        &cpu,
        &tgt,
        tols,
        detail,
    ))
}

/// The chained bf16 recurrence on the target against the CPU's f32 op, relative to the largest
/// entry: bf16 gx and W_hh carry 8 significant bits (relative rounding 2⁻⁹ ≈ 2e-3), h is rounded
/// to bf16 at every step before the next step's GEMM reads it, and the gate gradients where they
/// are stored and read; gates, cell state and the GEMMs' sums stay f32. The op's kernels
/// compiled for the host, their GEMMs summed in f32 on bf16 operands, measured against the
/// same kernels in f32 on this check's `wide` inputs: h 6.4e-3, dgx 4.1e-3, dW_hh 1.3e-2 (a
/// sum over B·T = 1,024 rows of bf16 products); the bounds sit 8× above. With the CPU as the
/// target the check runs candle's per-step graph in bf16, its cell state rounded too: 2.7e-2
/// and 4.7e-2 there. A reversed chain read forwards or a step's product left out is off by
/// 1e-1 or more (subtler defects are the host harness's, whose bounds sit at a few bf16
/// roundings).
pub const LSTM_BF16_VALUE_TOL: f64 = 5e-2;
/// See [`LSTM_BF16_VALUE_TOL`]: the gradients of gx and W_hh.
pub const LSTM_BF16_GRAD_TOL: f64 = 1e-1;

/// The chained recurrence of a tower's two directions ([`lstm_chain_recurrence`]: on CUDA the
/// bf16 op, switch `lstm_bf16`) on the target in bf16 against the CPU in f32 (its f32 op): the
/// hidden states and the gradients of gx and W_hh of Σ w·h, chain 1 reading time reversed, with
/// PADs at the start of sequence 0, the middle of sequence 1 and the end of sequence 2. Shapes
/// as [`lstm_checks`], per chain.
pub fn lstm_bf16_checks(shape: &str, target: &Device, seed: u64) -> Result<Vec<Check>, BoxError> {
    let (b, t, c) = lstm_shape(shape)?;
    let n = 2;
    let s = seed as f32;
    let wave = |len: usize, f: f32, scale: f32| -> Vec<f32> {
        (0..len).map(|i| (i as f32 * f + s).sin() * scale).collect()
    };
    let gx = wave(n * b * t * 4 * c, 0.37, 2.0);
    let w = wave(n * 4 * c * c, 0.11, 1.0 / (c as f32).sqrt());
    let wt = wave(n * b * t * c, 0.23, 1.0);
    let mut mask = vec![1f32; b * t];
    (mask[0], mask[t + t / 2], mask[3 * t - 1]) = (0.0, 0.0, 0.0);
    let run = |dev: &Device, dtype: DType| -> Result<[Vec<f32>; 3], BoxError> {
        let gx = Var::from_tensor(&Tensor::from_slice(&gx, (n, b, t, 4 * c), dev)?)?;
        let w = Var::from_tensor(&Tensor::from_slice(&w, (n, 4 * c, c), dev)?)?;
        let mask = Tensor::from_slice(&mask, (b, t, 1), dev)?.to_dtype(dtype)?;
        // The masters stay f32, the input part of the gates is in the compute dtype.
        let gx_c = gx.as_tensor().to_dtype(dtype)?;
        let h = lstm_chain_recurrence(&gx_c, w.as_tensor(), &mask, &[false, true], true)?;
        let weights = Tensor::from_slice(&wt, (n, b, t, c), dev)?.to_dtype(dtype)?;
        let grads = (&h * weights)?.sum_all()?.backward()?;
        let grad = |v: &Var| -> Result<Vec<f32>, BoxError> {
            Ok(host(grads.get(v.as_tensor()).ok_or("no gradient")?)?)
        };
        Ok([host(&h)?, grad(&gx)?, grad(&w)?])
    };
    let (cpu, tgt) = (run(&Device::Cpu, DType::F32)?, run(target, DType::BF16)?);
    let detail = format!("2 chains (1 reversed) of B {b}, T {t}, C {c}, 3 PADs");
    let tols = (LSTM_BF16_VALUE_TOL, LSTM_BF16_GRAD_TOL);
    let prefix = format!("lstm_bf16/{shape}");
    Ok(lstm_value_grad(&prefix, &cpu, &tgt, tols, detail))
}

/// The two checks of an LSTM recurrence, `<prefix>/value` (h) and `<prefix>/grad` (the worse
/// of dgx and dW_hh), the target's [h, dgx, dW_hh] against the CPU's relative to their largest
/// entry, within `(value, grad)` tolerances.
fn lstm_value_grad(
    prefix: &str,
    cpu: &[Vec<f32>; 3],
    tgt: &[Vec<f32>; 3],
    (value_tol, grad_tol): (f64, f64),
    detail: String,
) -> Vec<Check> {
    let (dgx, dw) = (
        rel_max_diff(&tgt[1], &cpu[1]),
        rel_max_diff(&tgt[2], &cpu[2]),
    );
    vec![
        Check::new(
            format!("{prefix}/value"),
            "max|dh|/max|h_cpu|",
            rel_max_diff(&tgt[0], &cpu[0]),
            Bound::AtMost(value_tol),
        )
        .with_detail(detail),
        Check::new(
            format!("{prefix}/grad"),
            "max over dgx, dW_hh of max|dg|/max|g_cpu|",
            worst([dgx, dw]),
            Bound::AtMost(grad_tol),
        )
        .with_detail(format!("dgx {dgx:.3e}, dW_hh {dw:.3e}")),
    ]
}

/// AdamW on the target against the CPU: three updates (gradients clipped by 0.7 inside the
/// update) of a decayed parameter of 1,001 entries and an undecayed one of 7, from the same
/// initial weights and host-made gradients. Both run one fused f32 pass per parameter with one
/// rounding per operation (on CUDA `adamw.cu`), so the weights must agree bit for bit.
pub fn adamw_checks(target: &Device, seed: u64) -> Result<Vec<Check>, BoxError> {
    let run = |dev: &Device| -> Result<Vec<f32>, BoxError> {
        let store = ParamStore::new(dev, seed);
        store.root().uniform("w", &[1001], 1.0)?;
        store.root().uniform_no_decay("b", &[7], 1.0)?;
        let mut opt = AdamW::new(store.params(), AdamWConfig::default())?;
        for step in 0..3 {
            let grads = store
                .params()
                .iter()
                .map(|p| {
                    let n = p.var.elem_count();
                    let g: Vec<f32> = (0..n)
                        .map(|i| ((i * 7 + step * 13) as f32 * 0.37).sin() * 0.5)
                        .collect();
                    Ok(Some(Tensor::from_vec(g, n, dev)?))
                })
                .collect::<Result<Vec<_>, BoxError>>()?;
            opt.step_scaled(&grads, 1e-3, 0.7)?;
        }
        let mut all = Vec::new();
        for p in store.params() {
            all.extend(host(p.var.as_tensor())?);
        }
        Ok(all)
    };
    let (cpu, tgt) = (run(&Device::Cpu)?, run(target)?);
    let diff: Vec<f32> = cpu.iter().zip(&tgt).map(|(a, b)| a - b).collect();
    let value = if cpu.len() == tgt.len() {
        max_abs(&diff)
    } else {
        f64::NAN
    };
    Ok(vec![Check::new(
        "adamw/f32",
        "max |w_target - w_cpu| after 3 updates",
        value,
        Bound::AtMost(0.0),
    )
    .with_detail(format!("{} weights, 2 parameters", cpu.len()))])
}

/// The relative difference of the gradient norms of [`update_checks`], target against CPU:
/// both sum the same exact f64 squares, in different orders (the CPU in chunks of 65,536, the
/// device by chunk, lane and butterfly), so they differ by f64 rounding, 1e-16 relative a sum
/// of a few thousand terms; a norm summed in f32 is off by 1e-8 or more, a dropped chunk by far
/// more.
pub const UPDATE_NORM_TOL: f64 = 1e-12;

/// Clipping and AdamW over several parameters in one pass on the target (on CUDA
/// `adamw_multi.cu`, switch `update`: the norm, the clip factor and every update in three
/// launches) against the CPU (the norm, then the fused update per parameter): three
/// [`AdamW::step_clipped`] updates at a `max_norm` of 1, under every step's norm (about 27), of
/// parameters of 3,001, 2,049, 700, 33 and 1 entries (decayed and not) and one without a
/// gradient, from the same weights and host-made gradients. The norms must agree within
/// [`UPDATE_NORM_TOL`]; the weights and moments bit for bit (the factor is the norm's rounded
/// to f32, which two norms 1e-16 apart share unless they straddle a rounding boundary, about
/// once in 10⁹ inputs, and these inputs are fixed).
pub fn update_checks(target: &Device, seed: u64) -> Result<Vec<Check>, BoxError> {
    const MAX_NORM: f64 = 1.0;
    let run = |dev: &Device| -> Result<(Vec<f32>, Vec<f64>), BoxError> {
        let store = ParamStore::new(dev, seed);
        store.root().uniform("w", &[3001], 1.0)?;
        store.root().uniform("u", &[2049], 1.0)?;
        store.root().uniform_no_decay("b", &[700], 1.0)?;
        store.root().uniform_no_decay("c", &[33], 1.0)?;
        store.root().uniform("s", &[1], 1.0)?;
        store.root().uniform("frozen", &[9], 1.0)?;
        let params = store.params();
        let mut opt = AdamW::new(params.clone(), AdamWConfig::default())?;
        let mut norms = Vec::new();
        for step in 0..3 {
            let grads = params
                .iter()
                .enumerate()
                .map(|(k, p)| {
                    if p.name.ends_with("frozen") {
                        return Ok(None);
                    }
                    let n = p.var.elem_count();
                    let g: Vec<f32> = (0..n)
                        .map(|i| ((i * 7 + step * 13 + k * 5) as f32 * 0.37).sin() * 0.5)
                        .collect();
                    Ok(Some(Tensor::from_vec(g, n, dev)?))
                })
                .collect::<Result<Vec<_>, BoxError>>()?;
            norms.push(opt.step_clipped(&grads, 1e-3, MAX_NORM)?);
        }
        let mut all = Vec::new();
        let moments = opt.state_tensors()?;
        for p in &params {
            all.extend(host(p.var.as_tensor())?);
            all.extend(host(&moments[&format!("m.{}", p.name)])?);
            all.extend(host(&moments[&format!("v.{}", p.name)])?);
        }
        Ok((all, norms))
    };
    let ((cpu, cpu_norms), (tgt, tgt_norms)) = (run(&Device::Cpu)?, run(target)?);
    let diff: Vec<f32> = cpu.iter().zip(&tgt).map(|(a, b)| a - b).collect();
    // Clipping must have been active at every step, or the check would not test it.
    let clipped = cpu_norms.iter().all(|&n| n > MAX_NORM);
    let value = if cpu.len() == tgt.len() && clipped {
        max_abs(&diff)
    } else {
        f64::NAN
    };
    let norm_diff = worst(
        cpu_norms
            .iter()
            .zip(&tgt_norms)
            .map(|(c, t)| ((t - c) / c).abs()),
    );
    let switch = match lmsplit::towers::cuda_kernel_enabled(lmsplit::towers::CudaKernel::Update) {
        true => "on",
        false => "off",
    };
    Ok(vec![
        Check::new(
            "update/f32",
            "max |x_target - x_cpu| over weights, m, v after 3 clipped updates",
            value,
            Bound::AtMost(0.0),
        )
        .with_detail(format!(
            "{} values, 6 parameters (one without a gradient), norms {:.4} {:.4} {:.4} clipped \
             to {MAX_NORM}, switch update {switch}",
            cpu.len(),
            cpu_norms[0],
            cpu_norms[1],
            cpu_norms[2]
        )),
        Check::new(
            "update/f32/norm",
            "max |norm_target - norm_cpu| / norm_cpu over 3 steps",
            norm_diff,
            Bound::AtMost(UPDATE_NORM_TOL),
        ),
    ])
}

/// One pass of [`output_loss_checks`] on a device: the loss, the gradients of x, W and b, and
/// the per-position scores.
struct LossPass {
    loss: f64,
    grads: Vec<Vec<f32>>,
    scores: Vec<f32>,
}

/// The output layer's loss at the paper's vocabulary width on the target against the CPU:
/// the mean NLL of x·Wᵀ + b (N 300, E 64, V 30,528; on the CPU the fused linear op, on CUDA
/// one GEMM and `softmax_nll.cu`) and its gradients in x, W and b, in f32 and with x and W in
/// bf16 (against the same f32 reference, at the training checks' bf16 tolerance), and the
/// per-position scores that the heads' evaluation reads ([`score_log_probs`]).
pub fn output_loss_checks(target: &Device, seed: u64) -> Result<Vec<Check>, BoxError> {
    let (n, e, v) = (300, 64, 30_528);
    let s = seed as f32;
    let wave = |len: usize, f: f32, scale: f32| -> Vec<f32> {
        (0..len).map(|i| (i as f32 * f + s).sin() * scale).collect()
    };
    let (x, w, b) = (
        wave(n * e, 0.37, 1.0),
        wave(v * e, 0.11, 0.5),
        wave(v, 0.29, 0.3),
    );
    let labels: Vec<u32> = (0..n).map(|i| ((i * 7919) % v) as u32).collect();
    let run = |dev: &Device, dtype: DType| -> Result<LossPass, BoxError> {
        let var = |data: &[f32], shape: &[usize]| {
            Var::from_tensor(&Tensor::from_slice(data, shape, dev)?)
        };
        let (xv, wv, bv) = (var(&x, &[n, e])?, var(&w, &[v, e])?, var(&b, &[v])?);
        let (xt, wt) = (
            xv.as_tensor().to_dtype(dtype)?,
            wv.as_tensor().to_dtype(dtype)?,
        );
        let loss = linear_cross_entropy(&xt, &wt, bv.as_tensor(), &labels, NllPass::Train)?;
        let grads = loss.backward()?;
        let mut g = Vec::new();
        for var in [&xv, &wv, &bv] {
            let gi = grads
                .get(var.as_tensor())
                .ok_or("a variable without a gradient")?;
            g.push(host(gi)?);
        }
        // The scores of the logits in the pass's dtype, bias added in f32 (as the loss does).
        let logits = xt.matmul(&wt.t()?)?.to_dtype(DType::F32)?;
        let logits = logits.broadcast_add(bv.as_tensor())?.to_dtype(dtype)?;
        let scores = score_log_probs(&logits, &labels)?;
        Ok(LossPass {
            loss: loss.to_dtype(DType::F32)?.to_scalar::<f32>()? as f64,
            grads: g,
            scores,
        })
    };
    let cpu = run(&Device::Cpu, DType::F32)?;
    let f32s = run(target, DType::F32)?;
    let h_loss = run(target, DType::BF16)?.loss;
    let cpu_loss = cpu.loss;
    let grad_diff = worst(
        f32s.grads
            .iter()
            .zip(&cpu.grads)
            .map(|(a, c)| rel_max_diff(a, c)),
    );
    let score_diff: Vec<f32> = f32s
        .scores
        .iter()
        .zip(&cpu.scores)
        .map(|(a, c)| a - c)
        .collect();
    let rel = |l: f64| (l - cpu_loss).abs() / cpu_loss.abs().max(1e-12);
    let shape = format!("N {n}, E {e}, V {v}; loss {cpu_loss:.5} on the CPU");
    Ok(vec![
        Check::new(
            "nll/f32/value",
            "|loss - cpu| / cpu",
            rel(f32s.loss),
            Bound::AtMost(1e-5),
        )
        .with_detail(shape.clone()),
        Check::new(
            "nll/f32/grad",
            "max over x, W, b of rel max |g - g_cpu|",
            grad_diff,
            Bound::AtMost(GRAD_REL_TOL),
        )
        .with_detail(shape.clone()),
        Check::new(
            "nll/bf16/value",
            "|loss(bf16 x, W) - cpu f32| / cpu",
            rel(h_loss),
            Bound::AtMost(BF16_LOSS_REL),
        )
        .with_detail(shape),
        Check::new(
            "nll/f32/scores",
            "max |log p - log p_cpu| over the labels",
            max_abs(&score_diff),
            Bound::AtMost(1e-4),
        )
        .with_detail(format!("{n} positions")),
    ])
}
