//! An averaged-perceptron UPOS tagger (greedy, left to right).
//!
//! Features (see `features.rs`): the lower-cased word, prefixes and suffixes of 1-3 characters,
//! the word's shape and flags (capitalised, all caps, digits, hyphen, sentence start), the
//! neighbouring words (two each side) with their suffixes and shapes, and the previous two
//! predicted tags alone and combined with the word. Frequent words that are (almost) always
//! given one tag in training go into a tag dictionary and skip the model. Training runs several
//! epochs over the sentences in a seeded shuffled order and returns the averaged weights
//! (Collins 2002), which generalise much better than the last ones.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::path::Path;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::features::{Extractor, NO_TAG};
use super::{read_conllu, TaggedSentence, Upos};
use crate::error::{CorpusError, Result};
use crate::split::fnv1a;

const N: usize = Upos::COUNT;

/// A hasher for keys that are already well-mixed 64-bit hashes: it passes them through.
#[derive(Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are hashed; fold anything else so the hasher stays correct.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

type FeatureIndex = HashMap<u64, u32, BuildHasherDefault<PassThrough>>;

/// Training settings of [`PerceptronTagger::train`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaggerConfig {
    /// Passes over the training sentences (each in a new shuffled order).
    pub epochs: usize,
    /// Seed of the shuffling.
    pub seed: u64,
    /// A word enters the tag dictionary when it occurs at least this often ...
    pub tagdict_min_count: usize,
    /// ... and its most frequent tag has at least this share of its occurrences.
    pub tagdict_min_share: f64,
}

impl Default for TaggerConfig {
    fn default() -> Self {
        Self {
            epochs: 8,
            seed: 0,
            tagdict_min_count: 20,
            tagdict_min_share: 0.97,
        }
    }
}

/// Token accuracy of a tagger on gold-tagged sentences, overall and per gold tag.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Accuracy {
    /// Correctly tagged tokens.
    pub correct: usize,
    /// All tokens.
    pub total: usize,
    /// `(correct, total)` per gold tag, indexed by [`Upos::index`].
    pub per_tag: [(usize, usize); Upos::COUNT],
}

impl Accuracy {
    /// `correct / total` (0 when there are no tokens).
    pub fn accuracy(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.correct as f64 / self.total as f64
        }
    }

    /// Accuracy on tokens whose gold tag is `tag` (`None` when there are none).
    pub fn tag_accuracy(&self, tag: Upos) -> Option<f64> {
        let (c, t) = self.per_tag[tag.index()];
        (t > 0).then(|| c as f64 / t as f64)
    }

    /// Adds one token.
    pub fn add(&mut self, gold: Upos, predicted: Upos) {
        let ok = (gold == predicted) as usize;
        self.correct += ok;
        self.total += 1;
        self.per_tag[gold.index()].0 += ok;
        self.per_tag[gold.index()].1 += 1;
    }
}

/// The trained tagger: hashed feature weights (one row of 17 class weights per feature) and a
/// tag dictionary.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PerceptronTagger {
    index: FeatureIndex,
    weights: Vec<f32>,
    tagdict: HashMap<String, Upos>,
}

/// Running state of the averaged perceptron (Collins 2002): for every weight its sum over all
/// training steps so far, kept lazily with the step of its last change.
struct Averager {
    totals: Vec<f64>,
    stamps: Vec<u64>,
    step: u64,
}

impl PerceptronTagger {
    /// Trains on gold-tagged sentences.
    ///
    /// Errors: no sentences or no words, a sentence whose words and tags differ in length,
    /// `epochs == 0`, a share outside `(0, 1]`.
    pub fn train(sentences: &[TaggedSentence], cfg: &TaggerConfig) -> Result<Self> {
        Self::train_with_progress(sentences, cfg, |_, _| {})
    }

    /// [`PerceptronTagger::train`] calling `on_epoch(epoch, training_accuracy)` after each epoch
    /// (the accuracy of the running, not averaged, weights during that pass).
    pub fn train_with_progress(
        sentences: &[TaggedSentence],
        cfg: &TaggerConfig,
        mut on_epoch: impl FnMut(usize, f64),
    ) -> Result<Self> {
        validate(sentences, cfg)?;
        let mut model = Self {
            tagdict: build_tagdict(sentences, cfg),
            ..Self::default()
        };
        let mut avg = Averager {
            totals: Vec::new(),
            stamps: Vec::new(),
            step: 0,
        };
        let mut order: Vec<usize> = (0..sentences.len()).collect();
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let mut ex = Extractor::default();
        for epoch in 0..cfg.epochs {
            order.shuffle(&mut rng);
            let (mut correct, mut total) = (0usize, 0usize);
            for &s in &order {
                let sent = &sentences[s];
                ex.load(&sent.words);
                let (mut prev, mut prev2) = (NO_TAG[0], NO_TAG[1]);
                for (i, (word, &gold)) in sent.words.iter().zip(&sent.tags).enumerate() {
                    let guess = match model.tagdict.get(word.as_str()) {
                        Some(&t) => t,
                        None => {
                            ex.features(i, prev, prev2);
                            let guess = model.predict(&ex.feats);
                            avg.step += 1;
                            if guess != gold {
                                model.update(&mut avg, &ex.feats, gold, guess);
                            }
                            guess
                        }
                    };
                    correct += (guess == gold) as usize;
                    total += 1;
                    prev2 = prev;
                    prev = guess.index() as u64;
                }
            }
            on_epoch(epoch, correct as f64 / total as f64);
        }
        model.average(&avg);
        Ok(model)
    }

    /// Class scores of a feature set; the best class, the first (alphabetical) on ties.
    fn predict(&self, feats: &[u64]) -> Upos {
        let mut scores = [0f32; N];
        for f in feats {
            if let Some(&row) = self.index.get(f) {
                let w = &self.weights[row as usize * N..][..N];
                for (s, w) in scores.iter_mut().zip(w) {
                    *s += w;
                }
            }
        }
        let mut best = 0;
        for (c, &s) in scores.iter().enumerate().skip(1) {
            if s > scores[best] {
                best = c;
            }
        }
        Upos::ALL[best]
    }

    fn update(&mut self, avg: &mut Averager, feats: &[u64], gold: Upos, guess: Upos) {
        for &f in feats {
            let next = (self.weights.len() / N) as u32;
            let row = *self.index.entry(f).or_insert(next) as usize;
            if row == next as usize {
                self.weights.extend([0.0; N]);
                avg.totals.extend([0.0; N]);
                avg.stamps.extend([0; N]);
            }
            for (class, delta) in [(gold, 1.0f32), (guess, -1.0)] {
                let k = row * N + class.index();
                // Catch the running sum up with the steps since this weight last changed.
                avg.totals[k] += (avg.step - avg.stamps[k]) as f64 * self.weights[k] as f64;
                avg.stamps[k] = avg.step;
                self.weights[k] += delta;
            }
        }
    }

    /// Replaces the weights by their average over all training steps; drops all-zero rows.
    fn average(&mut self, avg: &Averager) {
        let steps = avg.step.max(1) as f64;
        let mut averaged: Vec<(u64, [f32; N])> = Vec::with_capacity(self.index.len());
        for (&key, &row) in &self.index {
            let mut w = [0f32; N];
            let mut any = false;
            for (c, w) in w.iter_mut().enumerate() {
                let k = row as usize * N + c;
                let total =
                    avg.totals[k] + (avg.step - avg.stamps[k]) as f64 * self.weights[k] as f64;
                *w = (total / steps) as f32;
                any |= *w != 0.0;
            }
            if any {
                averaged.push((key, w));
            }
        }
        self.set_rows(averaged);
    }

    /// Rebuilds the index and weights from rows sorted by key (a canonical layout, so that equal
    /// models compare equal and save to identical bytes).
    fn set_rows(&mut self, mut rows: Vec<(u64, [f32; N])>) {
        rows.sort_unstable_by_key(|r| r.0);
        self.index = FeatureIndex::with_capacity_and_hasher(rows.len(), Default::default());
        self.weights = Vec::with_capacity(rows.len() * N);
        for (i, (key, w)) in rows.into_iter().enumerate() {
            self.index.insert(key, i as u32);
            self.weights.extend(w);
        }
    }

    /// Tags one sentence of words.
    pub fn tag<S: AsRef<str>>(&self, words: &[S]) -> Vec<Upos> {
        let mut out = Vec::with_capacity(words.len());
        self.tag_into(words, &mut TagScratch::default(), &mut out);
        out
    }

    /// Tags one sentence into `out` (cleared first), reusing `scratch`'s buffers across calls:
    /// the allocation-free path for tagging a large corpus.
    pub fn tag_into<S: AsRef<str>>(
        &self,
        words: &[S],
        scratch: &mut TagScratch,
        out: &mut Vec<Upos>,
    ) {
        out.clear();
        let ex = &mut scratch.0;
        ex.load(words);
        let (mut prev, mut prev2) = (NO_TAG[0], NO_TAG[1]);
        for (i, word) in words.iter().enumerate() {
            let tag = match self.tagdict.get(word.as_ref()) {
                Some(&t) => t,
                None => {
                    ex.features(i, prev, prev2);
                    self.predict(&ex.feats)
                }
            };
            out.push(tag);
            prev2 = prev;
            prev = tag.index() as u64;
        }
    }

    /// Tags every sentence and compares with its gold tags.
    pub fn evaluate(&self, sentences: &[TaggedSentence]) -> Accuracy {
        let mut acc = Accuracy::default();
        let mut scratch = TagScratch::default();
        let mut predicted = Vec::new();
        for s in sentences {
            self.tag_into(&s.words, &mut scratch, &mut predicted);
            for (&g, &p) in s.tags.iter().zip(&predicted) {
                acc.add(g, p);
            }
        }
        acc
    }

    /// Number of features with non-zero weights.
    pub fn n_features(&self) -> usize {
        self.index.len()
    }

    /// Number of words in the tag dictionary.
    pub fn tagdict_len(&self) -> usize {
        self.tagdict.len()
    }

    /// Saves the model in the binary format of [`PerceptronTagger::to_bytes`], atomically
    /// (temporary file, then rename).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        Ok(files::write_atomic(path, &self.to_bytes())?)
    }

    /// Loads a model saved by [`PerceptronTagger::save`]; a truncated or corrupt file gives
    /// [`CorpusError::Corrupt`].
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| CorpusError::io(path, e))?;
        Self::from_bytes_named(&bytes, path)
    }

    /// The tagger saved at `cache`, else one trained on the CoNLL-U file `conllu` with
    /// [`TaggerConfig::default`] and saved at `cache`, so training happens once per cache.
    ///
    /// A missing `conllu` (when no cache is there) gives [`CorpusError::Missing`] naming it.
    pub fn load_or_train(conllu: impl AsRef<Path>, cache: impl AsRef<Path>) -> Result<Self> {
        let (conllu, cache) = (conllu.as_ref(), cache.as_ref());
        if cache.is_file() {
            return Self::load(cache);
        }
        if !conllu.is_file() {
            return Err(CorpusError::Missing {
                path: conllu.to_path_buf(),
                what: "the CoNLL-U file that trains the POS tagger".into(),
            });
        }
        let tagger = Self::train(&read_conllu(conllu)?, &TaggerConfig::default())?;
        tagger.save(cache)?;
        Ok(tagger)
    }

    /// The compact binary format (little endian): magic `LMSPTAG1`, `u32` tag count, `u64` row
    /// count, rows of (`u64` feature hash, 17 × `f32`), `u64` dictionary size, entries of
    /// (`u32` length, UTF-8 word, `u8` tag index), and an FNV-1a 64 checksum of all the above.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut rows: Vec<(u64, u32)> = self.index.iter().map(|(&k, &r)| (k, r)).collect();
        rows.sort_unstable();
        let mut out = Vec::with_capacity(32 + rows.len() * (8 + 4 * N));
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(N as u32).to_le_bytes());
        out.extend_from_slice(&(rows.len() as u64).to_le_bytes());
        for (key, row) in rows {
            out.extend_from_slice(&key.to_le_bytes());
            for w in &self.weights[row as usize * N..][..N] {
                out.extend_from_slice(&w.to_le_bytes());
            }
        }
        let mut dict: Vec<(&String, &Upos)> = self.tagdict.iter().collect();
        dict.sort_unstable();
        out.extend_from_slice(&(dict.len() as u64).to_le_bytes());
        for (word, tag) in dict {
            out.extend_from_slice(&(word.len() as u32).to_le_bytes());
            out.extend_from_slice(word.as_bytes());
            out.push(tag.index() as u8);
        }
        let sum = fnv1a(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    /// Parses [`PerceptronTagger::to_bytes`]' format.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        Self::from_bytes_named(bytes, Path::new("<bytes>"))
    }

    fn from_bytes_named(bytes: &[u8], path: &Path) -> Result<Self> {
        Self::parse(bytes).map_err(|message| CorpusError::Corrupt {
            path: path.to_path_buf(),
            message,
        })
    }

    /// The tagger in `bytes`, or what is wrong with them.
    fn parse(bytes: &[u8]) -> std::result::Result<Self, String> {
        let mut r = checked_body(bytes)?;
        let rows = read_rows(&mut r)?;
        let tagdict = read_tagdict(&mut r)?;
        if r.remaining() != 0 {
            return Err(format!("{} trailing bytes", r.remaining()));
        }
        let mut model = Self {
            tagdict,
            ..Self::default()
        };
        let n = rows.len();
        model.set_rows(rows);
        if model.index.len() != n {
            return Err("duplicate feature rows".into());
        }
        Ok(model)
    }
}

/// A reader after the magic of a file whose checksum holds (the checksum itself left out).
fn checked_body(bytes: &[u8]) -> std::result::Result<ByteReader<'_>, String> {
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        return Err("not a lmsplit tagger file (bad magic)".into());
    }
    if bytes.len() < MAGIC.len() + 8 {
        return Err("truncated header".into());
    }
    let (body, sum) = bytes.split_at(bytes.len() - 8);
    if fnv1a(body).to_le_bytes() != sum {
        return Err("checksum mismatch (truncated or modified)".into());
    }
    Ok(ByteReader {
        bytes: body,
        pos: MAGIC.len(),
    })
}

/// The tag count (checked) and the feature rows: a key and N finite weights each.
fn read_rows(r: &mut ByteReader<'_>) -> std::result::Result<Vec<(u64, [f32; N])>, String> {
    let n_tags = r.u32().ok_or("truncated header")?;
    if n_tags as usize != N {
        return Err(format!("{n_tags} tags, expected {N}"));
    }
    let n_rows = r.u64().ok_or("truncated header")? as usize;
    if n_rows > r.remaining() / (8 + 4 * N) {
        return Err(format!("{n_rows} feature rows do not fit the file"));
    }
    let mut rows = Vec::with_capacity(n_rows);
    for i in 0..n_rows {
        let key = r.u64().ok_or("truncated weights")?;
        let mut w = [0f32; N];
        for w in &mut w {
            *w = r.f32().ok_or("truncated weights")?;
            if !w.is_finite() {
                return Err(format!("non-finite weight in row {i}"));
            }
        }
        rows.push((key, w));
    }
    Ok(rows)
}

/// The tag dictionary: (UTF-8 word, tag index) entries.
fn read_tagdict(r: &mut ByteReader<'_>) -> std::result::Result<HashMap<String, Upos>, String> {
    let truncated = "truncated dictionary";
    let n_dict = r.u64().ok_or(truncated)? as usize;
    if n_dict > r.remaining() / 5 {
        return Err(format!("{n_dict} dictionary entries do not fit the file"));
    }
    let mut tagdict = HashMap::with_capacity(n_dict);
    for _ in 0..n_dict {
        let len = r.u32().ok_or(truncated)? as usize;
        let word = r.take(len).ok_or(truncated)?;
        let word = std::str::from_utf8(word).map_err(|_| "dictionary word is not UTF-8")?;
        let tag = r.take(1).ok_or(truncated)?[0];
        let tag = Upos::from_index(tag as usize)
            .ok_or_else(|| format!("tag index {tag} out of range"))?;
        tagdict.insert(word.to_string(), tag);
    }
    Ok(tagdict)
}

/// Reusable buffers for [`PerceptronTagger::tag_into`].
#[derive(Default)]
pub struct TagScratch(Extractor);

const MAGIC: &[u8; 8] = b"LMSPTAG1";

struct ByteReader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> ByteReader<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.bytes.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn f32(&mut self) -> Option<f32> {
        Some(f32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
}

fn validate(sentences: &[TaggedSentence], cfg: &TaggerConfig) -> Result<()> {
    if cfg.epochs == 0 {
        return Err(CorpusError::InvalidArgument(
            "tagger epochs must be >= 1".into(),
        ));
    }
    if !(cfg.tagdict_min_share > 0.0 && cfg.tagdict_min_share <= 1.0) {
        return Err(CorpusError::InvalidArgument(format!(
            "tagdict_min_share must be in (0, 1], got {}",
            cfg.tagdict_min_share
        )));
    }
    for (i, s) in sentences.iter().enumerate() {
        if s.words.len() != s.tags.len() {
            return Err(CorpusError::InvalidArgument(format!(
                "sentence {i} has {} words but {} tags",
                s.words.len(),
                s.tags.len()
            )));
        }
    }
    if sentences.iter().all(|s| s.is_empty()) {
        return Err(CorpusError::NotEnoughData(
            "no tagged words to train the tagger on".into(),
        ));
    }
    Ok(())
}

/// Words seen at least `tagdict_min_count` times whose majority tag has at least
/// `tagdict_min_share` of their occurrences.
fn build_tagdict(sentences: &[TaggedSentence], cfg: &TaggerConfig) -> HashMap<String, Upos> {
    let mut counts: HashMap<&str, [u32; N]> = HashMap::new();
    for s in sentences {
        for (w, t) in s.words.iter().zip(&s.tags) {
            counts.entry(w.as_str()).or_insert([0; N])[t.index()] += 1;
        }
    }
    let mut dict = HashMap::new();
    for (word, c) in counts {
        let total: u32 = c.iter().sum();
        // First maximum = alphabetically first tag on ties (deterministic).
        let (best, &n) = c.iter().enumerate().fold(
            (0, &0),
            |acc, (i, n)| if *n > *acc.1 { (i, n) } else { acc },
        );
        if total as usize >= cfg.tagdict_min_count
            && n as f64 / total as f64 >= cfg.tagdict_min_share
        {
            dict.insert(word.to_string(), Upos::ALL[best]);
        }
    }
    dict
}
