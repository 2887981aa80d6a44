//! One training step (forward, backward, clipping, AdamW) of a two-tower model, per style, in
//! token positions per second (criterion's "elem/s").
//!
//! Shapes: `tiny` presets (B 16, T 64); `peer_small` = the PyTorch two-tower GPT peer's
//! 2 layers, H 128, 4 heads, V 8192, T 128, B 16 (6,820 tokens/s on 2 threads); `peer_medium`
//! = 4 layers, H 256, V 30528, T 128, B 8 (927 tokens/s); `base_2tower` = the released preset
//! at B 4, T 128 (set LMSPLIT_BENCH_BASE=0 to skip it). ELMo uses H 128 / cell 512 at the peer
//! shapes.
//!
//! `cargo bench -p lmsplit --bench train_step`
//!
//! Whole-process timing beside the PyTorch peer (`scripts/peer_two_tower_gpt.py`):
//! `TRAIN_STEP_ONESHOT=gpt/peer_small/10 target/release/deps/train_step-*` builds that shape, runs
//! one warm-up step and 10 timed steps, prints JSON and exits; the JSON also splits a step into
//! `forward_s`, `backward_s` (each timed alone over as many steps, between device synchronisations)
//! and `update_s` (the rest: clipping, AdamW, the loss read back); on a device the update is split
//! again into `grad_norm_s`, `adamw_s` and, for comparison, `grad_norm_sum_all_s` (the norm's sums
//! with one whole-gradient `sum_all` each). For ELMo it also prints the step's GFLOP/s (matrix
//! products only, backward = 2x forward) beside faer's f32 GEMM rate at the recurrent product's
//! shape and at 1024^3, measured in the same process.
//!
//! On a GPU (a `--features cuda` build): `TRAIN_STEP_DEVICE=cuda` (default cpu),
//! `TRAIN_STEP_DTYPE=bf16` (bf16 compute on f32 master weights; default f32) and
//! `TRAIN_STEP_BATCH=64` (default: the shape's batch) set where and how the one-shot runs; it
//! then also prints the model FLOPs per token, the TFLOP/s and the MFU against the H100/H200
//! dense peak of the dtype (bf16 989.4, f32 66.9 TFLOP/s; SXM data sheet).
//! The device opens through `kernels::device::cuda`: its memory pool keeps freed memory across
//! synchronisations and cudarc's per-buffer events are off; `LMSPLIT_CUDA_POOL=release` and
//! `LMSPLIT_CUDA_EVENTS=on` restore the defaults, to measure what each costs a launch-bound
//! step (the JSON says which ran).
//!
//! `head_step_<style>`: one step of phases 2/3 (the K heads trained on frozen towers, the bulk
//! of a reproduction's CPU time) at the `cpu` protocol's shape: `peer_small` with the paper's
//! vocabulary (V 30,528), B 16, T 128. `HEAD_STEP_ONESHOT=elmo/20 target/release/deps/train_step-*`
//! times 20 steps after one warm-up and prints JSON with the heads' matrix-product GFLOP/s beside
//! faer's f32 GEMM rate at 1024^3 in the same process (the machine's practical limit).

use candle_core::{DType, Device};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use lmsplit::corpus::TokenBatch;
use lmsplit::heads::{FrozenTowers, HeadConfig, HeadInput, TowerHeads};
use lmsplit::towers::BatchSource;
use lmsplit::towers::{
    clip_factor, grad_norm, AdamW, AdamWConfig, Budget, ElmoConfig, MarkovSource, ModelConfig,
    Preset, Style, TrainConfig, Trainer, TransformerConfig, TwoTowerLm,
};

mod common;

fn shapes(style: Style) -> Vec<(&'static str, ModelConfig, usize, usize)> {
    let tiny = ModelConfig::preset(&style, Preset::Tiny).unwrap();
    let mut small = tiny.clone();
    small.vocab_size = 8192;
    small.max_positions = 128;
    let mut medium = small.clone();
    let elmo = style == Style::elmo();
    let patch = |c: &ModelConfig, p: serde_json::Value| c.tower.patched(&p).unwrap();
    if elmo {
        small.tower = patch(
            &small,
            serde_json::json!({"hidden_size": 128, "lstm_size": 512}),
        );
    } else {
        let sizes = |l: usize, h: usize, f: usize| serde_json::json!({"n_layers": l, "hidden_size": h, "n_heads": 4, "ffn_size": f});
        small.tower = patch(&small, sizes(2, 128, 512));
        medium.tower = patch(&medium, sizes(4, 256, 1024));
        medium.vocab_size = 30528;
    }
    let mut v = vec![("tiny", tiny, 16, 64), ("peer_small", small, 16, 128)];
    if !elmo {
        v.push(("peer_medium", medium, 8, 128));
    }
    if std::env::var("LMSPLIT_BENCH_BASE")
        .map(|s| s != "0")
        .unwrap_or(true)
    {
        v.push((
            "base_2tower",
            ModelConfig::preset(&style, Preset::Base2Tower).unwrap(),
            4,
            128,
        ));
    }
    v
}

/// A model of `cfg` on the CPU and one batch of B x T tokens.
fn setup(cfg: &ModelConfig, b: usize, t: usize) -> (TwoTowerLm, TokenBatch) {
    setup_on(cfg, b, t, &Device::Cpu)
}

/// A model of `cfg` on `device` and one batch of B x T tokens.
fn setup_on(cfg: &ModelConfig, b: usize, t: usize, device: &Device) -> (TwoTowerLm, TokenBatch) {
    let model = TwoTowerLm::new(cfg, device, 0).unwrap();
    let mut src = MarkovSource::new(cfg.style(), cfg.vocab_size, 4, b, t, 1, 2).unwrap();
    (model, src.next_batch().unwrap())
}

/// The default trainer (AdamW, clipping, schedule) with a budget the bench never reaches.
fn trainer(model: &TwoTowerLm) -> Trainer<'_, TwoTowerLm> {
    let tc = TrainConfig {
        budget: Budget::Steps(1_000_000),
        ..TrainConfig::default()
    };
    Trainer::new(model, tc, None).unwrap()
}

/// Where a step's update goes on a device, each part timed alone between synchronisations over
/// `steps` fresh gradients: the gradient norm as the trainer computes it, the same sums with one
/// `sum_all` per gradient (candle's reduction then runs on one block per gradient: what
/// `grad_norm` did before it summed rows first), and AdamW with the clip factor (a second
/// optimiser on the model's parameters: it moves the weights, after the step's timing).
fn update_split(
    model: &TwoTowerLm,
    batch: &TokenBatch,
    device: &Device,
    steps: usize,
) -> (f64, f64, f64) {
    let mut opt = AdamW::new(model.params().params(), AdamWConfig::default()).unwrap();
    let (mut norm_s, mut adamw_s, mut sum_all_s) = (0f64, 0f64, 0f64);
    for _ in 0..steps {
        let g = model.loss(batch).unwrap().backward().unwrap();
        let grads = opt.collect_grads(&g);
        device.synchronize().unwrap();
        let t0 = std::time::Instant::now();
        let norm = grad_norm(&grads).unwrap(); // reads the sum back: synchronised
        let t1 = std::time::Instant::now();
        let sums: Vec<_> = grads
            .iter()
            .flatten()
            .map(|g| g.to_dtype(DType::F64)?.sqr()?.sum_all())
            .collect::<candle_core::Result<_>>()
            .unwrap();
        let old = candle_core::Tensor::stack(&sums, 0)
            .unwrap()
            .sum_all()
            .unwrap();
        let old = old.to_scalar::<f64>().unwrap().sqrt();
        assert!((old - norm).abs() <= 1e-9 * norm, "norms {old} vs {norm}");
        let t2 = std::time::Instant::now();
        opt.step_scaled(&grads, 1e-4, clip_factor(norm, 1.0))
            .unwrap();
        device.synchronize().unwrap();
        norm_s += (t1 - t0).as_secs_f64();
        sum_all_s += (t2 - t1).as_secs_f64();
        adamw_s += t2.elapsed().as_secs_f64();
    }
    let per = |x: f64| x / steps as f64;
    (per(norm_s), per(adamw_s), per(sum_all_s))
}

/// Matrix-product flops of one ELMo training step per token (forward x 3: the backward pass
/// costs two products per forward one): per tower the input projection Linear(2H, H); per
/// direction and layer the input-to-gate product (width H, then C, to 4C) and the recurrent one
/// (C to 4C); per direction the projection Linear(C, H); the joint head's Linear(K 2H, 2H) and
/// the tied output layer (2H to V). Elementwise work is left out.
fn elmo_flops_per_token(cfg: &ModelConfig) -> f64 {
    let e: ElmoConfig = cfg.tower.get().unwrap();
    let (h, c, v, k) = (
        e.hidden_size as f64,
        e.lstm_size as f64,
        cfg.vocab_size as f64,
        cfg.n_towers as f64,
    );
    let layers: f64 = (0..e.n_layers)
        .map(|l| {
            let d_in = if l == 0 { h } else { c };
            2.0 * d_in * 4.0 * c + 2.0 * c * 4.0 * c
        })
        .sum();
    let tower = 2.0 * (2.0 * h) * h + 2.0 * (layers + 2.0 * c * h);
    let head = 2.0 * (k * 2.0 * h) * (2.0 * h) + 2.0 * (2.0 * h) * v;
    3.0 * (k * tower + head)
}

/// Model FLOPs of one transformer training step per token (forward x 3; matrix products and
/// attention, the PaLM-paper count): per tower and layer Q, K, V, O (4 H^2) and the FFN (2 H F)
/// and attention's QK^T and AV (2 T H, counted in full for GPT too); BERT's projection of the
/// shared K H embedding into each tower (K H^2); the joint head's dense (K H to H for GPT, K H
/// to K H for BERT) and the tied output layer (to V).
fn transformer_flops_per_token(cfg: &ModelConfig, t: usize) -> f64 {
    let tc: TransformerConfig = cfg.tower.get().unwrap();
    let (h, f, v, k, l) = (
        tc.hidden_size as f64,
        tc.ffn_size as f64,
        cfg.vocab_size as f64,
        cfg.n_towers as f64,
        tc.n_layers as f64,
    );
    let e = cfg.embed_size() as f64;
    let layer = 4.0 * h * h + 2.0 * h * f + 2.0 * t as f64 * h;
    let bert = cfg.style() == Style::bert();
    let proj = if bert { e * h } else { 0.0 };
    let head_width = if bert { e } else { h };
    let macs = k * (l * layer + proj) + k * h * head_width + head_width * v;
    3.0 * 2.0 * macs
}

/// The `cpu` protocol's model and batch: the `peer_small` preset with the paper's vocabulary
/// (V 30,528), B 16, T 128.
fn head_shape(style: Style) -> (ModelConfig, usize, usize) {
    let mut cfg = ModelConfig::preset(&style, Preset::PeerSmall).unwrap();
    cfg.vocab_size = 30528;
    (cfg, 16, 128)
}

/// A model at [`head_shape`], its heads (the protocol's input, head seed 1000), one batch and
/// its number of labelled positions.
fn head_setup(style: Style) -> (TwoTowerLm, TowerHeads, TokenBatch, usize) {
    let (cfg, b, t) = head_shape(style);
    let (model, batch) = setup(&cfg, b, t);
    let hc = HeadConfig::for_model(&model, HeadInput::TowerLayerNorm);
    let heads = TowerHeads::new(&hc, &Device::Cpu, 1000).unwrap();
    let labelled = (batch.labels.iter())
        .filter(|&&l| l != lmsplit::corpus::IGNORE_LABEL)
        .count();
    (model, heads, batch, labelled)
}

/// Matrix-product flops of one head-training step per labelled token (forward x 3): per tower
/// its head's dense layer (D to D) and output layer (D to V). The frozen towers' forward pass
/// is left out.
fn head_flops_per_token(heads: &HeadConfig) -> f64 {
    let (d, v, k) = (
        heads.tower_width as f64,
        heads.vocab_size as f64,
        heads.n_towers as f64,
    );
    3.0 * k * 2.0 * (d * d + d * v)
}

/// A one-shot spec's style: gpt, bert or elmo.
fn parse_style(s: &str) -> Style {
    Style::named(s).unwrap_or_else(|e| panic!("{e}"))
}

/// `HEAD_STEP_ONESHOT=style/steps`: times `steps` head-training steps after one warm-up step.
fn head_oneshot(spec: &str) {
    let (style, steps) = spec
        .split_once('/')
        .unwrap_or_else(|| panic!("HEAD_STEP_ONESHOT wants style/steps, got {spec}"));
    let style = parse_style(style);
    let steps: usize = steps.parse().expect("steps");
    let (model, heads, batch, labelled) = head_setup(style.clone());
    let hc = heads.config().clone();
    let frozen = FrozenTowers {
        model: &model,
        heads: &heads,
    };
    let mut tr = head_trainer(&frozen);
    tr.step(std::slice::from_ref(&batch)).unwrap();
    let start = std::time::Instant::now();
    for _ in 0..steps {
        tr.step(std::slice::from_ref(&batch)).unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    let per_s = (steps * labelled) as f64 / secs;
    let flops = head_flops_per_token(&hc);
    println!(
        "{}",
        serde_json::json!({
            "style": style.name(), "batch": batch.batch_size, "seq": batch.seq_len,
            "vocab": hc.vocab_size,
            "tower_width": hc.tower_width, "labelled_per_step": labelled,
            "s_per_step": secs / steps as f64, "labelled_tokens_per_s": per_s,
            "head_mflop_per_token": flops / 1e6, "head_gflop_per_s": flops * per_s / 1e9,
            "faer_gemm_1024_gflop_per_s": common::faer_gemm_gflops(1024, 1024, 1024, 1.0f32, 10),
        })
    );
}

/// The heads' trainer, as [`trainer`] (the protocol's heads clip per head; the bench clips
/// jointly, the same work).
fn head_trainer<'a>(frozen: &'a FrozenTowers<'a>) -> Trainer<'a, FrozenTowers<'a>> {
    let tc = TrainConfig {
        budget: Budget::Steps(1_000_000),
        ..TrainConfig::default()
    };
    Trainer::new(frozen, tc, None).unwrap()
}

/// `TRAIN_STEP_ONESHOT=style/shape/steps`: times `steps` steps after one warm-up step.
fn oneshot(spec: &str) {
    let parts: Vec<&str> = spec.split('/').collect();
    let [style, shape, steps] = parts[..] else {
        panic!("TRAIN_STEP_ONESHOT wants style/shape/steps, got {spec}")
    };
    let style = parse_style(style);
    let steps: usize = steps.parse().expect("steps");
    let (_, cfg, b, t) = shapes(style.clone())
        .into_iter()
        .find(|s| s.0 == shape)
        .unwrap_or_else(|| panic!("unknown shape {shape}"));
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_string());
    let b = env("TRAIN_STEP_BATCH", &b.to_string())
        .parse()
        .expect("TRAIN_STEP_BATCH");
    let device = match env("TRAIN_STEP_DEVICE", "cpu").as_str() {
        "cpu" => Device::Cpu,
        "cuda" => lmsplit::kernels::device::cuda_with(0, cuda_options_from_env())
            .expect("a CUDA device (a --features cuda build)"),
        other => panic!("TRAIN_STEP_DEVICE: cpu or cuda, not {other}"),
    };
    let (dtype, peak_tflops) = match env("TRAIN_STEP_DTYPE", "f32").as_str() {
        "f32" => (DType::F32, 66.9),
        "bf16" => (DType::BF16, 989.4),
        other => panic!("TRAIN_STEP_DTYPE: f32 or bf16, not {other}"),
    };
    let (model, batch) = setup_on(&cfg, b, t, &device);
    let model = model.with_compute_dtype(dtype);
    let mut tr = trainer(&model);
    tr.step(std::slice::from_ref(&batch)).unwrap();
    device.synchronize().unwrap();
    let start = std::time::Instant::now();
    for _ in 0..steps {
        tr.step(std::slice::from_ref(&batch)).unwrap();
    }
    device.synchronize().unwrap();
    let secs = start.elapsed().as_secs_f64();
    let tokens_per_s = (steps * b * t) as f64 / secs;
    let mut out = serde_json::json!({
        "style": style.name(), "shape": shape, "batch": b, "seq": t,
        "device": format!("{device:?}"), "dtype": format!("{dtype:?}"),
        "tokens_per_s": tokens_per_s, "s_per_step": secs / steps as f64,
    });
    if device.is_cuda() {
        out["event_tracking"] = lmsplit::kernels::device::event_tracking(&device).into();
        out["cuda_kernels"] = lmsplit::towers::cuda_kernels_enabled().into();
        let off = lmsplit::towers::cuda_kernels().off();
        out["cuda_kernels_off"] = off.iter().map(|k| k.name()).collect::<Vec<_>>().into();
        out["pool_release_threshold"] = lmsplit::kernels::device::pool_release_threshold(&device)
            .unwrap()
            .into();
    }
    // Where a step's time goes: the forward pass to the loss and the backward pass, each timed
    // alone between device synchronisations; the rest of a step (clipping, AdamW, the loss read
    // back) is the difference.
    let (mut fwd, mut bwd) = (0f64, 0f64);
    for _ in 0..steps {
        let t0 = std::time::Instant::now();
        let loss = model.loss(&batch).unwrap();
        device.synchronize().unwrap();
        let t1 = std::time::Instant::now();
        loss.backward().unwrap();
        device.synchronize().unwrap();
        (fwd, bwd) = (
            fwd + (t1 - t0).as_secs_f64(),
            bwd + t1.elapsed().as_secs_f64(),
        );
    }
    let per = |x: f64| x / steps as f64;
    out["forward_s"] = per(fwd).into();
    out["backward_s"] = per(bwd).into();
    out["update_s"] = (secs / steps as f64 - per(fwd) - per(bwd)).into();
    if device.is_cuda() {
        let (norm_s, adamw_s, sum_all_s) = update_split(&model, &batch, &device, steps);
        out["grad_norm_s"] = norm_s.into();
        out["adamw_s"] = adamw_s.into();
        out["grad_norm_sum_all_s"] = sum_all_s.into();
    }
    let flops = match style == Style::elmo() {
        true => elmo_flops_per_token(&cfg),
        false => transformer_flops_per_token(&cfg, t),
    };
    out["model_gflop_per_token"] = (flops / 1e9).into();
    out["model_tflop_per_s"] = (flops * tokens_per_s / 1e12).into();
    if device.is_cuda() {
        out["mfu"] = (flops * tokens_per_s / 1e12 / peak_tflops).into();
    }
    if style == Style::elmo() && !device.is_cuda() {
        let c = cfg.tower.get::<ElmoConfig>().unwrap().lstm_size;
        out["mflop_per_token"] = (flops / 1e6).into();
        out["gflop_per_s"] = (flops * tokens_per_s / 1e9).into();
        out["faer_gemm_recurrent_gflop_per_s"] =
            common::faer_gemm_gflops(b, c, 4 * c, 1.0f32, 200).into();
        out["faer_gemm_1024_gflop_per_s"] =
            common::faer_gemm_gflops(1024, 1024, 1024, 1.0f32, 10).into();
    }
    println!("{out}");
}

/// The examples' environment variables, read here as there: the CUDA kernel switches
/// (`LMSPLIT_CUDA_KERNELS`) set for the process.
fn kernels_from_env() {
    let value = std::env::var(lmsplit::towers::CUDA_KERNELS_ENV).ok();
    let kernels = lmsplit::towers::CudaKernels::from_env_value(value.as_deref())
        .unwrap_or_else(|e| panic!("{e}"));
    lmsplit::towers::set_cuda_kernels(kernels);
}

/// `LMSPLIT_CUDA_POOL` and `LMSPLIT_CUDA_EVENTS` as the examples read them.
fn cuda_options_from_env() -> lmsplit::kernels::device::CudaOptions {
    use lmsplit::kernels::device::{CudaOptions, EVENTS_ENV, POOL_ENV};
    let var = |k: &str| std::env::var(k).ok();
    CudaOptions::from_env_values(var(POOL_ENV).as_deref(), var(EVENTS_ENV).as_deref())
}

fn train_step(c: &mut Criterion) {
    // As the examples do: freed buffers stay in the process (see lmsplit::alloc).
    lmsplit::alloc::retain_freed_memory();
    kernels_from_env();
    if let Ok(spec) = std::env::var("TRAIN_STEP_ONESHOT") {
        oneshot(&spec);
        std::process::exit(0);
    }
    if let Ok(spec) = std::env::var("HEAD_STEP_ONESHOT") {
        head_oneshot(&spec);
        std::process::exit(0);
    }
    for style in [Style::gpt(), Style::bert(), Style::elmo()] {
        let mut g = c.benchmark_group(format!("train_step_{style}"));
        g.sample_size(10);
        for (name, cfg, b, t) in shapes(style) {
            let (model, batch) = setup(&cfg, b, t);
            let mut tr = trainer(&model);
            g.throughput(Throughput::Elements((b * t) as u64));
            g.bench_function(BenchmarkId::new(name, format!("B{b}xT{t}")), |bench| {
                bench.iter(|| tr.step(std::slice::from_ref(&batch)).unwrap())
            });
        }
        g.finish();
    }
    for style in [Style::gpt(), Style::bert(), Style::elmo()] {
        let mut g = c.benchmark_group(format!("head_step_{style}"));
        g.sample_size(10);
        let (model, heads, batch, labelled) = head_setup(style.clone());
        let frozen = FrozenTowers {
            model: &model,
            heads: &heads,
        };
        let mut tr = head_trainer(&frozen);
        g.throughput(Throughput::Elements(labelled as u64));
        g.bench_function(
            BenchmarkId::new(
                "peer_small_v30528",
                format!("B{}xT{}", batch.batch_size, batch.seq_len),
            ),
            |bench| bench.iter(|| tr.step(std::slice::from_ref(&batch)).unwrap()),
        );
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().without_plots();
    targets = train_step
}
criterion_main!(benches);
