//! Per-word hidden states: per sentence, per layer, per word, one vector of width H.

use crate::error::{ProbeError, Result};

/// The hidden states of a set of sentences at every layer of one model: what a model source
/// fills and what the probes read. Layer 0 is the model's non-contextual input layer where it
/// has one.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerStates {
    width: usize,
    /// Word offsets of the sentences: sentence s is words offsets[s]..offsets[s + 1].
    offsets: Vec<usize>,
    /// One [n_words × width] row-major block per layer.
    layers: Vec<Vec<f32>>,
}

impl LayerStates {
    /// Zero states for sentences of `sentence_lens` words at `n_layers` layers of `width`.
    pub fn zeros(n_layers: usize, width: usize, sentence_lens: &[usize]) -> Result<Self> {
        if n_layers == 0 || width == 0 {
            return Err(ProbeError::Mismatch(format!(
                "states of {n_layers} layers of width {width}"
            )));
        }
        let mut offsets = Vec::with_capacity(sentence_lens.len() + 1);
        offsets.push(0);
        for &n in sentence_lens {
            offsets.push(offsets.last().copied().unwrap_or(0) + n);
        }
        let words = *offsets.last().unwrap_or(&0);
        Ok(Self {
            width,
            offsets,
            layers: vec![vec![0.0; words * width]; n_layers],
        })
    }

    /// Number of layers.
    pub fn n_layers(&self) -> usize {
        self.layers.len()
    }

    /// Width H of every vector.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Number of sentences.
    pub fn n_sentences(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Words of sentence `s`.
    pub fn sentence_len(&self, s: usize) -> usize {
        self.offsets[s + 1] - self.offsets[s]
    }

    /// Words of all sentences.
    pub fn n_words(&self) -> usize {
        *self.offsets.last().unwrap_or(&0)
    }

    /// The states of sentence `s` at `layer`: [n_words × H] row-major.
    pub fn sentence(&self, s: usize, layer: usize) -> &[f32] {
        let w = self.width;
        &self.layers[layer][self.offsets[s] * w..self.offsets[s + 1] * w]
    }

    /// The vector of word `i` of sentence `s` at `layer`.
    pub fn word(&self, s: usize, layer: usize, i: usize) -> &[f32] {
        let start = (self.offsets[s] + i) * self.width;
        &self.layers[layer][start..start + self.width]
    }

    /// Every word's vector at `layer`, sentences in order: [n_words × H] row-major.
    pub fn layer(&self, layer: usize) -> &[f32] {
        &self.layers[layer]
    }

    /// Writes the states of sentence `s` at `layer` ([n_words × H] row-major).
    pub fn set_sentence(&mut self, s: usize, layer: usize, values: &[f32]) -> Result<()> {
        if s >= self.n_sentences() || layer >= self.n_layers() {
            return Err(ProbeError::Mismatch(format!(
                "sentence {s} layer {layer} of {} sentences, {} layers",
                self.n_sentences(),
                self.n_layers()
            )));
        }
        let (a, b) = (
            self.offsets[s] * self.width,
            self.offsets[s + 1] * self.width,
        );
        if values.len() != b - a {
            return Err(ProbeError::Mismatch(format!(
                "sentence {s}: {} values for {} words of width {}",
                values.len(),
                self.sentence_len(s),
                self.width
            )));
        }
        self.layers[layer][a..b].copy_from_slice(values);
        Ok(())
    }

    /// States from whole layers ([n_words × H] each, sentences in order) and sentence lengths.
    pub fn from_layers(
        width: usize,
        sentence_lens: &[usize],
        layers: Vec<Vec<f32>>,
    ) -> Result<Self> {
        let mut s = Self::zeros(layers.len().max(1), width, sentence_lens)?;
        let want = s.n_words() * width;
        if layers.is_empty() {
            return Err(ProbeError::Mismatch("no layer".into()));
        }
        for (l, v) in layers.iter().enumerate() {
            if v.len() != want {
                return Err(ProbeError::Mismatch(format!(
                    "layer {l}: {} values for {} words of width {width}",
                    v.len(),
                    s.n_words()
                )));
            }
        }
        s.layers = layers;
        Ok(s)
    }

    /// The same sentences with each one's words permuted by `perm(sentence, len)`: word `i`
    /// gets the vector of word `perm[i]` (a control: shuffled words keep no tree).
    pub fn permute_words(&self, mut perm: impl FnMut(usize, usize) -> Vec<usize>) -> Result<Self> {
        let mut out = self.clone();
        let w = self.width;
        for s in 0..self.n_sentences() {
            let n = self.sentence_len(s);
            let p = perm(s, n);
            let mut seen = vec![false; n];
            if p.len() != n
                || p.iter()
                    .any(|&j| j >= n || std::mem::replace(&mut seen[j], true))
            {
                return Err(ProbeError::Mismatch(format!(
                    "sentence {s}: not a permutation of {n} words"
                )));
            }
            for l in 0..self.n_layers() {
                let src = self.sentence(s, l);
                let mut dst = Vec::with_capacity(n * w);
                for &j in &p {
                    dst.extend_from_slice(&src[j * w..(j + 1) * w]);
                }
                out.set_sentence(s, l, &dst)?;
            }
        }
        Ok(out)
    }

    /// The states of the sentences `indices` (in that order; a sentence may repeat).
    pub fn select(&self, indices: &[usize]) -> Result<Self> {
        if let Some(&k) = indices.iter().find(|&&k| k >= self.n_sentences()) {
            return Err(ProbeError::Mismatch(format!(
                "sentence {k} of {} sentences",
                self.n_sentences()
            )));
        }
        let lens: Vec<usize> = indices.iter().map(|&k| self.sentence_len(k)).collect();
        let mut out = Self::zeros(self.n_layers(), self.width, &lens)?;
        for (r, &k) in indices.iter().enumerate() {
            for l in 0..self.n_layers() {
                out.set_sentence(r, l, self.sentence(k, l))?;
            }
        }
        Ok(out)
    }
}
