//! Gold trees: the path distance between every two words and each word's depth, from the heads
//! of a treebank sentence.

use std::collections::VecDeque;

use corpus::{ParsedSentence, Upos};

use crate::error::{ProbeError, Result};

/// One gold sentence as the probes see it: its tree metric, depths, tags and punctuation.
#[derive(Debug, Clone, PartialEq)]
pub struct GoldTree {
    n: usize,
    heads: Vec<usize>,
    tags: Vec<Upos>,
    distances: Vec<u16>,
    depths: Vec<u16>,
}

impl GoldTree {
    /// The tree of a parsed sentence (heads 0 = root, else 1-based).
    pub fn new(s: &ParsedSentence) -> Result<Self> {
        Self::from_heads(&s.heads, &s.tags)
    }

    /// A tree from heads (0 = root, else the 1-based head) and one tag per word; the heads
    /// must form one tree (one root, no cycle, heads in range).
    pub fn from_heads(heads: &[usize], tags: &[Upos]) -> Result<Self> {
        let n = heads.len();
        if n == 0 || tags.len() != n {
            return Err(ProbeError::Mismatch(format!(
                "a tree needs words: {n} heads, {} tags",
                tags.len()
            )));
        }
        if n > u16::MAX as usize {
            return Err(ProbeError::Mismatch(format!("sentence of {n} words")));
        }
        let mut adj = vec![Vec::new(); n];
        for (i, &h) in heads.iter().enumerate() {
            if h > n || h == i + 1 {
                return Err(ProbeError::Mismatch(format!("word {} has head {h}", i + 1)));
            }
            if h > 0 {
                adj[i].push(h - 1);
                adj[h - 1].push(i);
            }
        }
        let roots = heads.iter().filter(|&&h| h == 0).count();
        if roots != 1 {
            return Err(ProbeError::Mismatch(format!("{roots} roots, expected 1")));
        }
        // Breadth-first search from every word: O(n²), cheap for sentences.
        let mut distances = vec![u16::MAX; n * n];
        let mut queue = VecDeque::new();
        for s in 0..n {
            let row = &mut distances[s * n..(s + 1) * n];
            row[s] = 0;
            queue.push_back(s);
            while let Some(u) = queue.pop_front() {
                for &v in &adj[u] {
                    if row[v] == u16::MAX {
                        row[v] = row[u] + 1;
                        queue.push_back(v);
                    }
                }
            }
            if row.contains(&u16::MAX) {
                return Err(ProbeError::Mismatch(
                    "the heads do not connect every word (a cycle)".into(),
                ));
            }
        }
        let root = heads.iter().position(|&h| h == 0).unwrap_or(0);
        let depths = distances[root * n..(root + 1) * n].to_vec();
        Ok(Self {
            n,
            heads: heads.to_vec(),
            tags: tags.to_vec(),
            distances,
            depths,
        })
    }

    /// Number of words.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Always false: a tree has at least one word.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Path length between words `i` and `j` (0-based), d_T(w_i, w_j) of Hewitt & Manning.
    pub fn distance(&self, i: usize, j: usize) -> usize {
        self.distances[i * self.n + j] as usize
    }

    /// Every distance, row-major n × n.
    pub fn distances(&self) -> &[u16] {
        &self.distances
    }

    /// Edges to the root of word `i`, ‖w_i‖ of Hewitt & Manning (the root has depth 0).
    pub fn depth(&self, i: usize) -> usize {
        self.depths[i] as usize
    }

    /// Every depth.
    pub fn depths(&self) -> &[u16] {
        &self.depths
    }

    /// The heads (0 = root, else 1-based).
    pub fn heads(&self) -> &[usize] {
        &self.heads
    }

    /// The gold UPOS tags.
    pub fn tags(&self) -> &[Upos] {
        &self.tags
    }

    /// 0-based index of the root word.
    pub fn root(&self) -> usize {
        self.heads.iter().position(|&h| h == 0).unwrap_or(0)
    }

    /// Whether word `i` is punctuation (UPOS `PUNCT`), which UUAS and root accuracy leave out.
    pub fn is_punct(&self, i: usize) -> bool {
        self.tags[i] == Upos::Punct
    }

    /// Indices of the words that are not punctuation.
    pub fn scored_words(&self) -> Vec<usize> {
        (0..self.n).filter(|&i| !self.is_punct(i)).collect()
    }

    /// The gold undirected edges between two non-punctuation words, each as (min, max).
    pub fn edges_without_punct(&self) -> Vec<(usize, usize)> {
        let mut e: Vec<(usize, usize)> = self
            .heads
            .iter()
            .enumerate()
            .filter(|&(i, &h)| h > 0 && !self.is_punct(i) && !self.is_punct(h - 1))
            .map(|(i, &h)| (i.min(h - 1), i.max(h - 1)))
            .collect();
        e.sort_unstable();
        e
    }
}

/// The gold trees of parsed sentences.
pub fn gold_trees(sentences: &[ParsedSentence]) -> Result<Vec<GoldTree>> {
    sentences
        .iter()
        .enumerate()
        .map(|(k, s)| {
            GoldTree::new(s).map_err(|e| ProbeError::Mismatch(format!("sentence {k}: {e}")))
        })
        .collect()
}
