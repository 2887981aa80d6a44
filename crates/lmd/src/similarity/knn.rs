//! Mutual k-NN (Huh et al. 2024, "The Platonic Representation Hypothesis"): for each sequence
//! of a sample, its k nearest neighbours among the sample in model a and in model b; the
//! measure is the mean over sequences of |N_a(r) ∩ N_b(r)| / k. Neighbours by cosine
//! similarity of the sample-centred embeddings (the centring keeps a large common offset from
//! making every pair of sequences look alike), ties broken towards the lower index.
//!
//! It needs embeddings, not moments: a sample of s sequences drawn by seed
//! ([`sample_indices`]), one [s, d_i] block per model ([`KnnSample`]). Cost: one s × s
//! similarity matrix per model (2 s² d_i flops, s² f64 at a time) and a partial sort of each of
//! its rows; memory s · D f64 for the sample and s · k indices per model. The null derangs the
//! sample as the streamed nulls derange a chunk: model p reads row σᵖ(r), σ a seeded s-cycle.

use faer::Mat;
use rand::seq::index;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::stream::chunk_cycle;
use super::{Measure, MeasureResult};
use crate::error::{LmdError, Result};
use crate::pair_matrix::PairMatrix;

/// The embeddings of a sample of sequences, one row-major [rows, widths\[i\]] block per model.
#[derive(Clone, Debug, PartialEq)]
pub struct KnnSample {
    /// Model names.
    pub names: Vec<String>,
    /// Embedding width of each model.
    pub widths: Vec<usize>,
    /// Sequences in the sample.
    pub rows: usize,
    /// One row-major [rows, widths\[i\]] block per model.
    pub blocks: Vec<Vec<f64>>,
}

impl KnnSample {
    /// A sample from one block per model (every block `rows` × its width, finite).
    pub fn new(names: Vec<String>, widths: Vec<usize>, blocks: Vec<Vec<f64>>) -> Result<Self> {
        let what = Measure::MutualKnn.name();
        if names.len() != widths.len() || names.len() != blocks.len() || names.is_empty() {
            let why = format!(
                "{} names, {} widths and {} blocks",
                names.len(),
                widths.len(),
                blocks.len()
            );
            return Err(LmdError::measure(what, why));
        }
        let rows = blocks[0].len() / widths[0].max(1);
        for ((name, &w), b) in names.iter().zip(&widths).zip(&blocks) {
            if w == 0 || b.len() != rows * w {
                let why = format!(
                    "the block of {name} holds {} values, not {rows} × {w}",
                    b.len()
                );
                return Err(LmdError::measure(what, why));
            }
            if b.iter().any(|x| !x.is_finite()) {
                return Err(LmdError::measure(
                    what,
                    format!("{name} has a non-finite value"),
                ));
            }
        }
        Ok(Self {
            names,
            widths,
            rows,
            blocks,
        })
    }
}

/// `s` distinct row indices of 0..n drawn by `seed`, ascending (the k-NN sample); all of them
/// when s ≥ n.
pub fn sample_indices(n: usize, s: usize, seed: u64) -> Vec<usize> {
    if s >= n {
        return (0..n).collect();
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut idx = index::sample(&mut rng, n, s).into_vec();
    idx.sort_unstable();
    idx
}

/// The k nearest neighbours (cosine of the centred rows, self excluded) of every row of a
/// row-major [s, d] block: s × k indices, row-major.
fn neighbours(block: &[f64], s: usize, d: usize, k: usize, name: &str) -> Result<Vec<usize>> {
    let mut mean = vec![0.0; d];
    for row in block.chunks_exact(d) {
        for (m, x) in mean.iter_mut().zip(row) {
            *m += x / s as f64;
        }
    }
    let mut x = Mat::<f64>::zeros(s, d);
    for (r, row) in block.chunks_exact(d).enumerate() {
        let norm = row
            .iter()
            .zip(&mean)
            .map(|(a, m)| (a - m) * (a - m))
            .sum::<f64>()
            .sqrt();
        if norm.is_nan() || norm <= 0.0 {
            let why = format!(
                "sequence {r} of the sample has {name}'s mean embedding (zero variance about it)"
            );
            return Err(LmdError::measure(Measure::MutualKnn.name(), why));
        }
        for (c, (a, m)) in row.iter().zip(&mean).enumerate() {
            x[(r, c)] = (a - m) / norm;
        }
    }
    let sim = &x * x.transpose();
    let mut out = Vec::with_capacity(s * k);
    let mut order: Vec<usize> = Vec::with_capacity(s);
    for r in 0..s {
        order.clear();
        order.extend((0..s).filter(|&c| c != r));
        let key = |c: &usize| (std::cmp::Reverse(OrdF64(sim[(r, *c)])), *c);
        order.select_nth_unstable_by_key(k - 1, key);
        let mut top = order[..k].to_vec();
        top.sort_unstable_by_key(key);
        out.extend(top);
    }
    Ok(out)
}

/// A total order on f64 for sorting (`f64::total_cmp`).
struct OrdF64(f64);
impl PartialEq for OrdF64 {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}
impl Eq for OrdF64 {}
impl PartialOrd for OrdF64 {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for OrdF64 {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Mean over r of |A(r) ∩ B(r)| / k, neighbour lists of k (row-major s × k).
fn overlap(a: &[usize], b: &[usize], s: usize, k: usize) -> f64 {
    let mut total = 0usize;
    for r in 0..s {
        let (na, nb) = (&a[r * k..(r + 1) * k], &b[r * k..(r + 1) * k]);
        total += na.iter().filter(|x| nb.contains(x)).count();
    }
    total as f64 / (s * k) as f64
}

/// The neighbour lists of the sample reordered by `from` (row r of the reordered sample is
/// row from\[r\]): N'(r) = from⁻¹(N(from(r))).
fn relabel(nb: &[usize], from: &[usize], k: usize) -> Vec<usize> {
    let mut inv = vec![0; from.len()];
    for (r, &f) in from.iter().enumerate() {
        inv[f] = r;
    }
    from.iter()
        .flat_map(|&f| nb[f * k..(f + 1) * k].iter().map(|&c| inv[c]))
        .collect()
}

/// Mutual k-NN of every pair of models on `sample`, with its null (the sample's pairing
/// broken by the seeded derangement).
pub fn mutual_knn(sample: &KnnSample, k: usize, seed: u64) -> Result<MeasureResult> {
    let what = Measure::MutualKnn.name();
    let s = sample.rows;
    if k == 0 {
        return Err(LmdError::measure(what, "k must be ≥ 1"));
    }
    if k >= s {
        let why = format!("k = {k} is not smaller than the sample of {s} sequences");
        return Err(LmdError::measure(what, why));
    }
    let m = sample.names.len();
    let lists = (0..m)
        .map(|p| neighbours(&sample.blocks[p], s, sample.widths[p], k, &sample.names[p]))
        .collect::<Result<Vec<_>>>()?;
    let sigma = chunk_cycle(seed, 0, s);
    let mut from: Vec<usize> = (0..s).collect();
    let mut broken = Vec::with_capacity(m);
    for list in &lists {
        broken.push(relabel(list, &from, k));
        for f in from.iter_mut() {
            *f = sigma[*f];
        }
    }
    let (mut values, mut null) = (vec![1.0; m * m], vec![1.0; m * m]);
    for i in 0..m {
        for j in 0..i {
            let v = overlap(&lists[i], &lists[j], s, k);
            let z = overlap(&broken[i], &broken[j], s, k);
            (values[i * m + j], values[j * m + i]) = (v, v);
            (null[i * m + j], null[j * m + i]) = (z, z);
        }
    }
    let matrix = |values| PairMatrix {
        names: sample.names.clone(),
        values,
    };
    Ok(MeasureResult {
        measure: Measure::MutualKnn,
        values: matrix(values),
        null: matrix(null),
    })
}
