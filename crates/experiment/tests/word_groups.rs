//! Known truth for the word groups (paper section 5.3): an embedding built from planted sparse
//! groups goes through the analysis the study runs (`groups::ica_groups`: PCA below the width,
//! Amari ICA, clusters at 2.5, Table 3, the paper's statistics) and the groups come back; a fit
//! stopped by its step cap says it did not converge.

use std::path::Path;

use corpus::Tokenizer;
use experiment::groups::{fit_table, ica_groups, FitRows, GroupInput, IcaGroups};
use experiment::WordGroupSettings;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Planted groups: `K` sparse sources over `V` words; a word of group k ([`group_of`]) loads 8
/// on source k, the other words on none; every source also carries Laplace
/// noise of scale 0.5. With 5% of the words per group a member stands at about √(0.95/0.05) ≈ 4.4
/// standard deviations, well past the paper's threshold 2.5, a non-member near 0. The embedding is a random mix to width `WIDTH` plus small noise.
const K: usize = 8;
const V: usize = 2000;

/// The planted group of word `w`: 8 of every 20 words, spread evenly over the frequency ranks
/// (so each group holds about 5% of the words and of the corpus positions).
fn group_of(w: usize) -> Option<usize> {
    let h = (w * 7919 + 13) % 20;
    (h < K).then_some(h)
}
const WIDTH: usize = 16;

fn shared(rel: &str) -> std::path::PathBuf {
    let p = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared")).join(rel);
    assert!(p.exists(), "shared test input {} is missing", p.display());
    p
}

struct Planted {
    sources: Vec<[f64; K]>,
    embedding: Vec<Vec<f32>>,
    freq: Vec<u64>,
    scores: Vec<Option<f64>>,
    tokens: Vec<u32>,
}

fn planted(seed: u64) -> Planted {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut laplace = |b: f64| {
        let u: f64 = rng.random_range(-0.5..0.5);
        -b * u.signum() * (1.0 - 2.0 * u.abs()).ln()
    };
    // Token ids from 1000 up: ordinary word pieces of the bert-base-uncased vocabulary.
    let id = |w: usize| (1000 + w) as u32;
    let mut sources = vec![[0f64; K]; V];
    for (w, s) in sources.iter_mut().enumerate() {
        for v in s.iter_mut() {
            *v = laplace(0.5);
        }
        if let Some(k) = group_of(w) {
            s[k] += 8.0;
        }
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed + 1);
    let mixing: Vec<[f64; K]> = (0..WIDTH)
        .map(|_| std::array::from_fn(|_| rng.random_range(-1.0..1.0)))
        .collect();
    let vocab = 1000 + V + 8;
    let mut embedding = vec![vec![0f32; WIDTH]; vocab];
    let mut freq = vec![0u64; vocab];
    let mut scores = vec![None; vocab];
    for (w, s) in sources.iter().enumerate() {
        for (c, row) in mixing.iter().enumerate() {
            let x: f64 = row.iter().zip(s).map(|(a, b)| a * b).sum();
            embedding[id(w) as usize][c] = (x + 0.01 * rng.random_range(-1.0..1.0)) as f32;
        }
        freq[id(w) as usize] = 1_000_000 / (w as u64 + 10);
        // Group k prefers the primary tower by k − 3.5 (no group: 0), plus noise.
        let planted = group_of(w).map_or(0.0, |k| k as f64 - 3.5);
        scores[id(w) as usize] = Some(planted + 0.3 * rng.random_range(-1.0..1.0));
    }
    Planted {
        sources,
        embedding,
        freq,
        scores,
        tokens: (0..V).map(id).collect(),
    }
}

fn analyse(p: &Planted, tok: &Tokenizer, settings: &WordGroupSettings) -> IcaGroups {
    let input = GroupInput {
        embedding: &p.embedding,
        tokens: &p.tokens,
        freq: &p.freq,
        scores: &p.scores,
        tok,
    };
    ica_groups(&input, settings).unwrap()
}

/// The Amari index of |corr(recovered i, planted j)| over the words, and the same index of the
/// planted sources against themselves: the floor, since disjoint groups make the planted
/// sources mildly correlated (the index is 0 only for uncorrelated truth perfectly separated).
fn amari_of_correlations(g: &IcaGroups, p: &Planted) -> (f64, f64) {
    let d = g.sources.cols();
    assert_eq!(d, K);
    let col = |f: &dyn Fn(usize) -> f64| -> Vec<f64> {
        let v: Vec<f64> = (0..V).map(f).collect();
        let m = v.iter().sum::<f64>() / V as f64;
        let sd = (v.iter().map(|x| (x - m).powi(2)).sum::<f64>()).sqrt();
        v.iter().map(|x| (x - m) / sd).collect()
    };
    let rec: Vec<Vec<f64>> = (0..d)
        .map(|i| col(&|w| g.sources.get(w, i) as f64))
        .collect();
    let pla: Vec<Vec<f64>> = (0..K).map(|j| col(&|w| p.sources[w][j])).collect();
    let corr = |x: &[Vec<f64>]| -> Vec<f64> {
        (0..K)
            .flat_map(|i| (0..K).map(move |j| (i, j)))
            .map(|(i, j)| x[i].iter().zip(&pla[j]).map(|(a, b)| a * b).sum::<f64>())
            .collect()
    };
    (
        ica::amari_index_of(&corr(&rec), K).unwrap(),
        ica::amari_index_of(&corr(&pla), K).unwrap(),
    )
}

#[test]
fn planted_sparse_groups_are_recovered_with_the_papers_statistics() {
    let tok = Tokenizer::load(shared("data/bert-base-uncased/bert_base_uncased.json")).unwrap();
    let p = planted(3);
    for rows in [
        FitRows::Vocabulary,
        FitRows::CorpusTokens {
            positions: 20_000,
            seed: 1,
        },
    ] {
        let settings = WordGroupSettings {
            top_n: V,
            dim: K,
            rows,
            ..WordGroupSettings::default()
        };
        let g = analyse(&p, &tok, &settings);
        assert!(g.ica.converged, "{rows:?}: {:?}", g.ica);
        let (ai, floor) = amari_of_correlations(&g, &p);
        assert!(
            ai < floor + 0.02 && ai < 0.1,
            "{rows:?}: Amari index {ai} (floor {floor})"
        );
        // Each planted group comes back as one component's members (Jaccard ≥ 0.9).
        for k in 0..K {
            let planted: Vec<u32> = (0..V)
                .filter(|&w| group_of(w) == Some(k))
                .map(|w| p.tokens[w])
                .collect();
            let best = g
                .groups
                .iter()
                .map(|gr| {
                    let inter = gr.members.iter().filter(|m| planted.contains(m)).count();
                    inter as f64 / (gr.members.len() + planted.len() - inter) as f64
                })
                .fold(0.0, f64::max);
            assert!(best >= 0.9, "{rows:?}: group {k} best Jaccard {best}");
        }
        // The statistics: 60% of words planted in no group, 40% in exactly one.
        assert!(
            (g.counts.none - 0.6).abs() < 0.03,
            "{rows:?}: {:?}",
            g.counts
        );
        assert!((g.counts.exactly_one - 0.4).abs() < 0.03, "{:?}", g.counts);
        assert!(
            g.within_unit > 0.5 && g.within_unit < 0.95,
            "{}",
            g.within_unit
        );
        // Table 3 ranks the groups by their planted preference: the group planted at +3.5
        // (group 7) first, the one at −3.5 (group 0) last.
        let md = g.table.to_markdown();
        let rows: Vec<&str> = md.lines().skip(4).take(g.groups.len()).collect();
        let rank_of = |k: usize| -> usize {
            let w = (0..V).find(|&w| group_of(w) == Some(k)).unwrap();
            let i = g
                .groups
                .iter()
                .position(|gr| gr.members.contains(&p.tokens[w]))
                .unwrap();
            rows[i].split('|').nth(8).unwrap().trim().parse().unwrap()
        };
        assert_eq!((rank_of(7), rank_of(0)), (1, K), "{md}");
    }
}

#[test]
fn a_fit_stopped_by_its_cap_is_flagged_as_not_converged() {
    let tok = Tokenizer::load(shared("data/bert-base-uncased/bert_base_uncased.json")).unwrap();
    let p = planted(4);
    let settings = WordGroupSettings {
        top_n: V,
        dim: K,
        ica: ica::AmariConfig {
            max_steps: 5,
            ..ica::AmariConfig::default()
        },
        ..WordGroupSettings::default()
    };
    let g = analyse(&p, &tok, &settings);
    assert!(!g.ica.converged && g.ica.steps == 5, "{:?}", g.ica);
    assert_eq!(g.ica.trajectory.last().map(|t| t.step), Some(5));
    let table = fit_table(&g).to_markdown();
    assert!(
        table
            .lines()
            .any(|l| l.contains("converged") && l.contains("no")),
        "{table}"
    );
}

#[test]
fn the_fits_unmixing_gives_the_sources_it_signed() {
    // Negating the embedding leaves PCA's covariance and the odd score function's path as they
    // were and negates every source: each component is flipped to a positive skew in exactly
    // one of the two analyses, so their unmixings must come out opposite, row by row.
    let tok = Tokenizer::load(shared("data/bert-base-uncased/bert_base_uncased.json")).unwrap();
    let p = planted(5);
    let mut neg = planted(5);
    neg.embedding
        .iter_mut()
        .for_each(|r| r.iter_mut().for_each(|v| *v = -*v));
    // PCA on the words themselves, so the check below can fit the same whitening.
    let settings = WordGroupSettings {
        top_n: V,
        dim: K,
        rows: FitRows::Vocabulary,
        ..WordGroupSettings::default()
    };
    let (g, h) = (analyse(&p, &tok, &settings), analyse(&neg, &tok, &settings));
    for (a, b) in g
        .ica
        .unmixing
        .as_slice()
        .iter()
        .zip(h.ica.unmixing.as_slice())
    {
        assert!((a + b).abs() < 1e-5, "{a} vs {b}");
    }
    // And `fit.sources` of the whitened words gives the signed sources the groups came from.
    let rows: Vec<f32> = p
        .tokens
        .iter()
        .flat_map(|&t| p.embedding[t as usize].clone())
        .collect();
    let x = ica::Matrix::new(V, WIDTH, rows).unwrap();
    let pca = ica::Pca::fit(&x, &ica::PcaConfig::new(K)).unwrap();
    let again = g.ica.sources(&pca.transform(&x).unwrap()).unwrap();
    for (a, b) in again.as_slice().iter().zip(g.sources.as_slice()) {
        assert!((a - b).abs() < 1e-4, "{a} vs {b}");
    }
}

#[test]
fn few_distinct_words_cap_the_dimension_and_foreign_ids_are_refused() {
    let tok = Tokenizer::load(shared("data/bert-base-uncased/bert_base_uncased.json")).unwrap();
    let mut p = planted(6);
    // 12 words drawn 5,000 times: the centred rows have rank 11 however many positions.
    p.tokens.truncate(12);
    let settings = WordGroupSettings {
        top_n: 12,
        dim: 64,
        rows: FitRows::CorpusTokens {
            positions: 5_000,
            seed: 2,
        },
        ..WordGroupSettings::default()
    };
    let g = analyse(&p, &tok, &settings);
    assert_eq!(g.dim, 11);
    // A token id past the embedding (and the frequencies) is an error, not an index panic.
    p.tokens.push(p.embedding.len() as u32 + 3);
    let input = GroupInput {
        embedding: &p.embedding,
        tokens: &p.tokens,
        freq: &p.freq,
        scores: &p.scores,
        tok: &tok,
    };
    for rows in [FitRows::Vocabulary, settings.rows] {
        let settings = WordGroupSettings {
            rows,
            ..settings.clone()
        };
        let e = match ica_groups(&input, &settings) {
            Ok(_) => panic!("{rows:?}: a foreign token id was analysed"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains("is outside it"), "{e}");
    }
}
