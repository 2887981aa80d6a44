//! Preference-score statistics: accumulation of per-position log-probs into `TokenStats`
//! (positions/s), scoring a BERT-sized vocabulary, and correlations of two runs over the 5000
//! most frequent tokens with 1000 bootstrap resamples and 1000 permutations (Tables 2 and 4).
//!
//! Synthetic inputs (seeded): Zipf-like targets over 30,522 token ids, uniform log-probs.
//!
//! `cargo bench -p lmsplit --bench prefscore`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use prefscore::{correlate, CorrOptions, Method, ScoreKind, Scores, TokenStats};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const VOCAB: usize = 30_522;
const POSITIONS: usize = 1_000_000;

fn inputs(seed: u64) -> (Vec<u32>, Vec<f32>, Vec<f32>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let targets = (0..POSITIONS)
        .map(|_| (rng.random::<f64>().powi(3) * VOCAB as f64) as u32)
        .collect();
    let a = (0..POSITIONS)
        .map(|_| -rng.random_range(0.0f32..10.0))
        .collect();
    let b = (0..POSITIONS)
        .map(|_| -rng.random_range(0.0f32..10.0))
        .collect();
    (targets, a, b)
}

fn stats_of(seed: u64) -> TokenStats {
    let (t, a, b) = inputs(seed);
    let mut st = TokenStats::new(VOCAB, 2).unwrap();
    st.add(&t, &[&a, &b]).unwrap();
    st
}

fn accumulate(c: &mut Criterion) {
    // criterion draws its report with plotters, which here has no system fonts.
    report::register_fonts();
    let (t, a, b) = inputs(1);
    let mut group = c.benchmark_group("prefscore");
    group.throughput(Throughput::Elements(POSITIONS as u64));
    group.sample_size(20);
    group.bench_function("token_stats_add_2_towers", |bench| {
        bench.iter(|| {
            let mut st = TokenStats::new(VOCAB, 2).unwrap();
            st.add(black_box(&t), &[&a, &b]).unwrap();
            st
        })
    });
    group.finish();
    let st = stats_of(1);
    c.bench_function("prefscore/scores_arithmetic_30522", |bench| {
        bench.iter(|| black_box(&st).scores(ScoreKind::ArithmeticMean).unwrap())
    });
}

fn correlations(c: &mut Criterion) {
    let (s1, freq) = {
        let st = stats_of(1);
        (
            st.scores(ScoreKind::ArithmeticMean).unwrap(),
            st.counts().to_vec(),
        )
    };
    let s2: Scores = stats_of(2).scores(ScoreKind::ArithmeticMean).unwrap();
    let opts = CorrOptions::default();
    let mut group = c.benchmark_group("prefscore_correlate_top5000_boot1000_perm1000");
    group.sample_size(10);
    for method in [Method::Pearson, Method::Spearman] {
        group.bench_function(format!("{method:?}"), |bench| {
            bench.iter(|| correlate(&s1.values, &s2.values, &freq, 5000, method, &opts).unwrap())
        });
    }
    group.finish();
}

criterion_group!(benches, accumulate, correlations);
criterion_main!(benches);
