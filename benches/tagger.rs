//! Tagging throughput of the averaged-perceptron UPOS tagger (tokens/s), and the synthetic
//! corpus generator (sentences/s).
//!
//! The tagger is trained once, before timing, on the first 4,000 sentences of UD English EWT
//! train for 3 epochs (about a second; its accuracy is a little lower than the full model's,
//! its tagging speed the same) and tags the whole EWT dev set (25,147 tokens) per iteration.
//!
//! `cargo bench -p lmsplit --bench tagger`

use std::hint::black_box;

use corpus::pos::TagScratch;
use corpus::{PerceptronTagger, SyntheticConfig, SyntheticCorpus, TaggedSentence, TaggerConfig};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const EWT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/data/ud-english-ewt/"
);

fn read(split: &str) -> Vec<TaggedSentence> {
    let path = format!("{EWT}en_ewt-ud-{split}.conllu");
    corpus::read_conllu(&path).unwrap_or_else(|e| panic!("missing shared data {path}: {e}"))
}

fn tagging(c: &mut Criterion) {
    let train = read("train");
    let dev = read("dev");
    let cfg = TaggerConfig {
        epochs: 3,
        ..TaggerConfig::default()
    };
    let tagger = PerceptronTagger::train(&train[..4000], &cfg).unwrap();
    let tokens: usize = dev.iter().map(TaggedSentence::len).sum();
    let mut group = c.benchmark_group("tagger");
    group.throughput(Throughput::Elements(tokens as u64));
    group.sample_size(20);
    group.bench_function("tag_ewt_dev", |b| {
        let mut scratch = TagScratch::default();
        let mut tags = Vec::new();
        b.iter(|| {
            for s in &dev {
                tagger.tag_into(black_box(&s.words), &mut scratch, &mut tags);
                black_box(&tags);
            }
        })
    });
    group.finish();
}

fn synthetic(c: &mut Criterion) {
    let corpus = SyntheticCorpus::new(SyntheticConfig::default()).unwrap();
    let sentences = corpus.sentences().count();
    let mut group = c.benchmark_group("synthetic");
    group.throughput(Throughput::Elements(sentences as u64));
    group.sample_size(20);
    group.bench_function("default_corpus", |b| {
        b.iter(|| black_box(corpus.to_documents()))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    // No plots: criterion's plotters backend needs a system font this machine may lack.
    config = Criterion::default().without_plots();
    targets = tagging, synthetic
}
criterion_main!(benches);
