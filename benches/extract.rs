//! Extraction throughput of all-MiniLM-L6-v2 (BERT, 6 layers, width 384) on CPU at T = 128,
//! batch 32, masked mean: sequences/s beside the FLOPs per sequence.
//!
//! Peer (issue 5): Hugging Face transformers + PyTorch fp32, 2 threads, batch 32, masked mean,
//! T = 128: 62 sequences/s on this kind of machine.
//!
//! Run: `cargo bench -p lmsplit --bench extract` (needs ../shared/models/all-MiniLM-L6-v2 and
//! ../shared/data/wikitext-2/train.txt). The glibc allocator keeps freed buffers for reuse
//! (`lmsplit::alloc::retain_freed_memory`) unless `EXTRACT_SYSTEM_MALLOC=1` is set.
//!
//! Whole-process timing beside a Python peer: `EXTRACT_ONESHOT=4 target/release/deps/extract-*`
//! loads the model, runs 4 batches of 32 and exits, printing seq/s and a JSON line;
//! `EXTRACT_GEMM=1` prints the f32 GEMM rate of candle and faer at the feed-forward's shape.
//!
//! The one-shot on another model or device (a `--features cuda` build): `EXTRACT_MODEL=<dir>`
//! (a BERT-style folder: config.json, model.safetensors, tokenizer.json; default MiniLM),
//! `EXTRACT_TEXTS=<wikitext file>`, `EXTRACT_DEVICE=cuda`, `EXTRACT_DTYPE=bf16`,
//! `EXTRACT_BATCH=<n>` (default 32). Its peer on the GPU: `scripts/peer_extract.py`.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use lmsplit::lmd::encoder::{load, Encoder, LoadOptions, Pooling};
use lmsplit::lmd::extract::{embed_texts, ExtractOptions};

const T: usize = 128;
const BATCH: usize = 32;

fn shared(rel: &str) -> PathBuf {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/")).join(rel);
    assert!(p.exists(), "missing shared data {}", p.display());
    p
}

/// Multiply-adds ×2 of one BERT sequence of `l` tokens: per layer and token the Q, K, V, O
/// projections (4h²), the feed-forward (2hf), and attention scores plus mixing (2lh).
fn bert_flops(layers: usize, h: usize, f: usize, l: usize) -> f64 {
    let per_token = 2.0 * (4 * h * h + 2 * h * f + 2 * l * h) as f64;
    per_token * (l * layers) as f64
}

fn env_or(k: &str, d: &str) -> String {
    std::env::var(k).unwrap_or_else(|_| d.to_string())
}

/// Sequences per batch (`EXTRACT_BATCH`, default 32).
fn batch() -> usize {
    env_or("EXTRACT_BATCH", &BATCH.to_string())
        .parse()
        .expect("EXTRACT_BATCH")
}

/// Wikitext-2 paragraphs long enough to fill T = 128 word pieces.
fn long_texts(n: usize) -> Vec<String> {
    let path = match std::env::var_os("EXTRACT_TEXTS") {
        Some(p) => PathBuf::from(p),
        None => shared("data/wikitext-2/train.txt"),
    };
    let text = std::fs::read_to_string(path).expect("wikitext-2");
    text.lines()
        .map(str::trim)
        .filter(|l| l.split_whitespace().count() > 200 && !l.starts_with('='))
        .take(n)
        .map(String::from)
        .collect()
}

/// Loads MiniLM and tokenizes one batch that fills T.
fn setup() -> (
    lmsplit::lmd::encoder::LoadedEncoder,
    Vec<String>,
    Vec<Vec<u32>>,
) {
    if std::env::var_os("EXTRACT_SYSTEM_MALLOC").is_none() {
        lmsplit::alloc::retain_freed_memory();
    }
    let model = match std::env::var_os("EXTRACT_MODEL") {
        Some(p) => PathBuf::from(p),
        None => shared("models/all-MiniLM-L6-v2"),
    };
    let opts = LoadOptions {
        device: match env_or("EXTRACT_DEVICE", "cpu").as_str() {
            "cpu" => candle_core::Device::Cpu,
            "cuda" => lmsplit::kernels::device::cuda(0).expect("a CUDA device"),
            other => panic!("EXTRACT_DEVICE: cpu or cuda, not {other}"),
        },
        dtype: match env_or("EXTRACT_DTYPE", "f32").as_str() {
            "f32" => candle_core::DType::F32,
            "bf16" => candle_core::DType::BF16,
            other => panic!("EXTRACT_DTYPE: f32 or bf16, not {other}"),
        },
    };
    let enc = load(&model, &opts).expect("the encoder");
    let texts = long_texts(batch());
    assert_eq!(texts.len(), batch());
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let ids = enc.tokenize(&refs, T).expect("tokenize");
    assert!(ids.iter().all(|s| s.len() == T), "every sequence fills T");
    (enc, texts, ids)
}

/// (layers, hidden, ffn) of the model's BERT-style `config.json` (MiniLM's by default).
fn bert_dims() -> (usize, usize, usize) {
    let dir = match std::env::var_os("EXTRACT_MODEL") {
        Some(p) => PathBuf::from(p),
        None => return (6, 384, 1536),
    };
    let text = std::fs::read_to_string(dir.join("config.json")).expect("config.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("config.json is JSON");
    let get = |k: &str| {
        v[k].as_u64()
            .unwrap_or_else(|| panic!("config.json has no {k}")) as usize
    };
    (
        get("num_hidden_layers"),
        get("hidden_size"),
        get("intermediate_size"),
    )
}

/// `EXTRACT_ONESHOT=n`: n timed batches without criterion (for whole-process comparisons).
fn oneshot(reps: usize) {
    let (enc, _, ids) = setup();
    // One untimed batch: a GPU compiles its kernels and fills its allocator on first use.
    enc.embed_ids(&ids, T, Pooling::MaskedMean).expect("embed");
    enc.device().synchronize().expect("sync");
    let start = std::time::Instant::now();
    for i in 0..reps {
        let (t0, c0) = (
            std::time::Instant::now(),
            lmsplit::process::cpu_seconds().unwrap_or(f64::NAN),
        );
        enc.embed_ids(&ids, T, Pooling::MaskedMean).expect("embed");
        // Wall far above CPU / threads means the process waited for a core (a loaded machine).
        eprintln!(
            "batch {i}: wall {:.2} s, process CPU {:.2} s",
            t0.elapsed().as_secs_f64(),
            lmsplit::process::cpu_seconds().unwrap_or(f64::NAN) - c0
        );
    }
    enc.device().synchronize().expect("sync");
    let s = start.elapsed().as_secs_f64();
    let seq_s = (reps * batch()) as f64 / s;
    let (l, h, f) = bert_dims();
    let gflops = seq_s * bert_flops(l, h, f, T) / 1e9;
    println!(
        "{{\"seq_per_s\":{seq_s:.2},\"gflop_per_s\":{gflops:.1},\"batches\":{reps},\"batch\":{},\"dtype\":\"{}\"}}",
        batch(),
        env_or("EXTRACT_DTYPE", "f32")
    );
}

/// `EXTRACT_GEMM=1`: f32 GEMM rate of candle (gemm crate) and faer at the feed-forward's shape
/// (batch 32 × T rows, 384 → 1536), the ceiling the encoder's projections run against.
fn gemm_rate() {
    lmsplit::alloc::retain_freed_memory();
    let (m, k, n) = (BATCH * T, 384, 1536);
    let flop = 2.0 * (m * k * n) as f64;
    let dev = candle_core::Device::Cpu;
    let a = candle_core::Tensor::randn(0f32, 1.0, (m, k), &dev).unwrap();
    let w = candle_core::Tensor::randn(0f32, 1.0, (n, k), &dev).unwrap();
    let reps = 20;
    let _ = a.matmul(&w.t().unwrap()).unwrap();
    let t0 = std::time::Instant::now();
    for _ in 0..reps {
        let _ = a.matmul(&w.t().unwrap()).unwrap();
    }
    let candle = flop * reps as f64 / t0.elapsed().as_secs_f64() / 1e9;
    let faer_r = common::faer_gemm_gflops(m, k, n, 1.0f32, reps);
    println!("{{\"gemm_m\":{m},\"k\":{k},\"n\":{n},\"candle_gflop_s\":{candle:.1},\"faer_gflop_s\":{faer_r:.1}}}");
}

fn bench(c: &mut Criterion) {
    if std::env::var_os("EXTRACT_GEMM").is_some() {
        gemm_rate();
        std::process::exit(0);
    }
    if let Some(n) = std::env::var("EXTRACT_ONESHOT")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        oneshot(n);
        std::process::exit(0);
    }
    let (enc, texts, ids) = setup();
    let flops = bert_flops(6, 384, 1536, T);
    eprintln!(
        "all-MiniLM-L6-v2, T = {T}, batch {BATCH}: {:.2} GFLOP per sequence (peer: HF PyTorch fp32, 2 threads: 62 seq/s)",
        flops / 1e9
    );
    let mut g = c.benchmark_group("extract_minilm_t128");
    g.sample_size(10).measurement_time(Duration::from_secs(20));
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("forward_pool_batch32", |b| {
        b.iter(|| enc.embed_ids(&ids, T, Pooling::MaskedMean).expect("embed"))
    });
    let mut opts = ExtractOptions::new(T);
    opts.progress = false;
    opts.token_budget = BATCH * T;
    g.bench_function("embed_texts_tokenize_bucket_batch32", |b| {
        b.iter(|| embed_texts(&enc, &texts, &opts).expect("embed"))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    // No plots: the plotters backend needs system fonts this machine lacks.
    config = Criterion::default().without_plots();
    targets = bench
}
criterion_main!(benches);
