//! Shared helpers: random trees and their classical-MDS embeddings.

#![allow(dead_code)]

use corpus::Upos;
use nalgebra::{DMatrix, SymmetricEigen};
use probe::{GoldTree, LayerStates};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A random tree of n words: a random root, the others attached in random order to a random
/// word already in the tree. Heads are 0 (root) or 1-based.
pub fn random_heads(n: usize, rng: &mut ChaCha8Rng) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(rng);
    let mut heads = vec![0; n];
    for k in 1..n {
        let parent = order[rng.random_range(0..k)];
        heads[order[k]] = parent + 1;
    }
    heads
}

/// `count` random trees of 5..=max_len words, all tagged NOUN.
pub fn random_trees(count: usize, max_len: usize, seed: u64) -> Vec<GoldTree> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..count)
        .map(|_| {
            let n = rng.random_range(5..=max_len);
            GoldTree::from_heads(&random_heads(n, &mut rng), &vec![Upos::Noun; n]).unwrap()
        })
        .collect()
}

/// Classical MDS of a tree's distance matrix taken as squared distances: rows x_i (padded with
/// zeros to `width`) with ‖x_i − x_j‖² = d_T(i, j) (a tree metric is of negative type).
pub fn mds(tree: &GoldTree, width: usize) -> Vec<f32> {
    let n = tree.len();
    assert!(n <= width);
    let d = DMatrix::from_fn(n, n, |i, j| tree.distance(i, j) as f64);
    let j = DMatrix::identity(n, n) - DMatrix::from_element(n, n, 1.0 / n as f64);
    let b = -0.5 * &j * d * &j;
    let eig = SymmetricEigen::new(b);
    let mut out = vec![0f32; n * width];
    for i in 0..n {
        for k in 0..n {
            let l = eig.eigenvalues[k].max(0.0);
            out[i * width + k] = (eig.eigenvectors[(i, k)] * l.sqrt()) as f32;
        }
    }
    out
}

/// One-layer states of the trees' MDS embeddings.
pub fn mds_states(trees: &[GoldTree], width: usize) -> LayerStates {
    let lens: Vec<usize> = trees.iter().map(GoldTree::len).collect();
    let mut s = LayerStates::zeros(1, width, &lens).unwrap();
    for (k, t) in trees.iter().enumerate() {
        s.set_sentence(k, 0, &mds(t, width)).unwrap();
    }
    s
}

/// The same states with each sentence's words in a seeded random order.
pub fn shuffled(states: &LayerStates, seed: u64) -> LayerStates {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    states
        .permute_words(|_, n| {
            let mut p: Vec<usize> = (0..n).collect();
            p.shuffle(&mut rng);
            p
        })
        .unwrap()
}

/// UUAS of a random relabelling: each of the n − 1 predicted edges is a gold edge with
/// probability (n − 1) / C(n, 2) = 2 / n; pooled over the trees.
pub fn chance_uuas(trees: &[GoldTree]) -> f64 {
    let (mut expected, mut edges) = (0.0, 0.0);
    for t in trees {
        let n = t.len() as f64;
        expected += (n - 1.0) * 2.0 / n;
        edges += n - 1.0;
    }
    expected / edges
}
