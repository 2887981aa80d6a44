//! Extraction throughput of all-MiniLM-L6-v2 (BERT, 6 layers, width 384) on CPU at T = 128,
//! batch 32, masked mean: sequences/s beside the FLOPs per sequence.
//!
//! Peer (issue 5): Hugging Face transformers + PyTorch fp32, 2 threads, batch 32, masked mean,
//! T = 128: 62 sequences/s on this kind of machine.
//!
//! Run: `cargo bench -p lmsplit --bench extract` (needs ../shared/models/all-MiniLM-L6-v2 and
//! ../shared/data/wikitext-2/train.txt).

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

/// Wikitext-2 paragraphs long enough to fill T = 128 word pieces.
fn long_texts(n: usize) -> Vec<String> {
    let text = std::fs::read_to_string(shared("data/wikitext-2/train.txt")).expect("wikitext-2");
    text.lines()
        .map(str::trim)
        .filter(|l| l.split_whitespace().count() > 200 && !l.starts_with('='))
        .take(n)
        .map(String::from)
        .collect()
}

fn bench(c: &mut Criterion) {
    let enc = load(shared("models/all-MiniLM-L6-v2"), &LoadOptions::default()).expect("MiniLM");
    let texts = long_texts(BATCH);
    assert_eq!(texts.len(), BATCH);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let ids = enc.tokenize(&refs, T).expect("tokenize");
    assert!(ids.iter().all(|s| s.len() == T), "every sequence fills T");
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
