//! Tokenizing + counting a WikiText-2 slice with the BERT uncased tokenizer, in tokens/s.
//!
//! Peers: the `tokenizers` crate called directly on the same lines (the wrapper's overhead) and
//! a one-line-at-a-time loop on one thread (what the parallel batches buy). Also the BERT
//! window builder (sentence splitting + tokenizing + packing) on the same slice.
//!
//! `cargo bench -p lmsplit --bench tokenize` (TOKENIZE_BENCH_DOCS overrides the slice, 40
//! WikiText-2 train documents ≈ 150k tokens by default).

mod common;

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use lmsplit::corpus::{
    bert_windows, Document, Documents, Format, SentenceSplitter, TokenCounts, Tokenizer,
};

fn shared(rel: &str) -> PathBuf {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data")).join(rel);
    assert!(p.exists(), "shared data missing: {}", p.display());
    p
}

fn slice() -> Vec<Document> {
    let n = common::env_usize("TOKENIZE_BENCH_DOCS", 40);
    Documents::open(shared("wikitext-2/train.txt"), Format::WikiText)
        .expect("open WikiText-2")
        .take(n)
        .collect::<Result<_, _>>()
        .expect("read WikiText-2")
}

fn tokenize(c: &mut Criterion) {
    let tok = Tokenizer::from_file(shared("bert-base-uncased/bert_base_uncased.json")).unwrap();
    let docs = slice();
    let lines: Vec<&str> = docs.iter().flat_map(|d| d.text.lines()).collect();
    let (_, summary) =
        TokenCounts::count_documents(&tok, docs.iter().cloned().map(Ok), 4096).unwrap();
    println!(
        "slice: {} documents, {} words, {} tokens",
        summary.documents, summary.words, summary.tokens
    );

    let mut g = c.benchmark_group("tokenize_count");
    g.sample_size(10);
    g.throughput(Throughput::Elements(summary.tokens));
    g.bench_function("corpus_count_documents", |b| {
        b.iter(|| TokenCounts::count_documents(&tok, docs.iter().cloned().map(Ok), 4096).unwrap())
    });
    g.bench_function("tokenizers_encode_batch_fast", |b| {
        b.iter(|| {
            let enc = tok.inner().encode_batch_fast(lines.clone(), false).unwrap();
            let mut counts = vec![0u64; tok.vocab_size()];
            for e in &enc {
                for &id in e.get_ids() {
                    counts[id as usize] += 1;
                }
            }
            black_box(counts)
        })
    });
    g.bench_function("one_thread_line_by_line", |b| {
        b.iter(|| {
            let mut counts = TokenCounts::new(tok.vocab_size());
            for line in &lines {
                counts.add(tok.inner().encode_fast(*line, false).unwrap().get_ids());
            }
            black_box(counts)
        })
    });
    g.bench_function("bert_windows_128", |b| {
        let splitter = SentenceSplitter::new();
        b.iter(|| bert_windows(&tok, docs.iter().cloned().map(Ok), &splitter, 128).unwrap())
    });
    g.finish();
}

criterion_group! {
    name = benches;
    // No plots: criterion's plotting needs system fonts this machine may not have.
    config = Criterion::default().without_plots();
    targets = tokenize
}
criterion_main!(benches);
