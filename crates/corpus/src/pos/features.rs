//! Hashed feature extraction for the perceptron tagger.
//!
//! Every feature is a 64-bit hash of (template id, values). Per-word values (lower-cased word,
//! affixes, shape) are hashed once per sentence; a position's features are then combinations of
//! those hashes and the previous predicted tags, so the hot path allocates nothing per feature.
//! The hash functions are written here (FNV-1a + SplitMix64 finaliser), not taken from `std`,
//! because saved models store the hashes and `std`'s hasher is not stable across releases.

/// Hash values describing one word, computed once per sentence.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct WordInfo {
    word: u64,
    pre: [u64; 3],
    suf: [u64; 3],
    shape: u64,
    flags: u64,
}

// Sentinels for positions before the start / after the end of the sentence.
const START: [u64; 2] = [0x5354_4152_5431, 0x5354_4152_5432];
const END: [u64; 2] = [0x454e_4431, 0x454e_4432];
// "No previous tag" values (outside the tag index range 0..17).
pub(crate) const NO_TAG: [u64; 2] = [100, 101];

/// SplitMix64 finaliser: spreads the bits so that the keys can be used directly by a hash map.
#[inline]
fn finalize(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Combines a running hash with one more value (order-dependent).
#[inline]
fn mix(h: u64, v: u64) -> u64 {
    finalize(h.rotate_left(23) ^ v.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// FNV-1a over a sequence of chars (as u32), finalised.
#[inline]
fn hash_chars(kind: u64, chars: &[char]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ kind;
    for &c in chars {
        h ^= c as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    finalize(h)
}

/// Reusable buffers for feature extraction of one sentence at a time.
#[derive(Default)]
pub(crate) struct Extractor {
    chars: Vec<char>,
    shape: Vec<char>,
    infos: Vec<WordInfo>,
    /// Features of the current position (filled by [`Extractor::features`]).
    pub(crate) feats: Vec<u64>,
}

impl Extractor {
    /// Hashes the words of a sentence; must be called before [`Extractor::features`].
    pub(crate) fn load<S: AsRef<str>>(&mut self, words: &[S]) {
        self.infos.clear();
        for w in words {
            let info = self.word_info(w.as_ref());
            self.infos.push(info);
        }
    }

    fn word_info(&mut self, word: &str) -> WordInfo {
        self.chars.clear();
        self.shape.clear();
        let (mut upper, mut lower, mut digit, mut hyphen) = (0usize, 0usize, 0usize, false);
        for c in word.chars() {
            let class = if c.is_uppercase() {
                upper += 1;
                'X'
            } else if c.is_lowercase() {
                lower += 1;
                'x'
            } else if c.is_ascii_digit() {
                digit += 1;
                'd'
            } else {
                hyphen |= c == '-';
                c
            };
            // Collapsed shape: runs of one class count once ("Xx", "d.d", "x-x").
            if self.shape.last() != Some(&class) {
                self.shape.push(class);
            }
            self.chars.extend(c.to_lowercase());
        }
        let n = self.chars.len();
        let mut pre = [0u64; 3];
        let mut suf = [0u64; 3];
        for k in 0..3 {
            let len = (k + 1).min(n);
            pre[k] = hash_chars(10 + k as u64, &self.chars[..len]);
            suf[k] = hash_chars(20 + k as u64, &self.chars[n - len..]);
        }
        let first_upper = word.chars().next().is_some_and(char::is_uppercase);
        let flags = (first_upper as u64)
            | ((upper > 1 && lower == 0) as u64) << 1
            | ((digit > 0) as u64) << 2
            | (hyphen as u64) << 3
            | ((digit > 0 && digit + 1 >= n) as u64) << 4;
        WordInfo {
            word: hash_chars(1, &self.chars),
            pre,
            suf,
            shape: hash_chars(2, &self.shape),
            flags,
        }
    }

    fn word_at(&self, i: isize) -> u64 {
        if i < 0 {
            START[(-i - 1).min(1) as usize]
        } else if i as usize >= self.infos.len() {
            END[(i as usize - self.infos.len()).min(1)]
        } else {
            self.infos[i as usize].word
        }
    }

    fn info_at(&self, i: isize) -> WordInfo {
        if i >= 0 && (i as usize) < self.infos.len() {
            self.infos[i as usize]
        } else {
            let w = self.word_at(i);
            WordInfo {
                word: w,
                pre: [w; 3],
                suf: [w; 3],
                shape: w,
                flags: w,
            }
        }
    }

    /// Fills `self.feats` with the features of position `i` given the previous two tags
    /// (tag indices, or [`NO_TAG`] values at the start of a sentence).
    pub(crate) fn features(&mut self, i: usize, prev: u64, prev2: u64) {
        let me = self.infos[i];
        let i = i as isize;
        let (p1, p2, n1, n2) = (
            self.info_at(i - 1),
            self.word_at(i - 2),
            self.info_at(i + 1),
            self.word_at(i + 2),
        );
        let first = (i == 0) as u64;
        let f = &mut self.feats;
        f.clear();
        let t = |id: u64| finalize(id.wrapping_mul(0x2545_f491_4f6c_dd1d));
        f.push(t(0)); // bias
        f.push(mix(t(1), me.word));
        for k in 0..3 {
            f.push(mix(t(2 + k as u64), me.pre[k]));
            f.push(mix(t(5 + k as u64), me.suf[k]));
        }
        f.push(mix(t(8), me.shape));
        f.push(mix(t(9), me.flags | first << 5));
        f.push(mix(t(10), prev));
        f.push(mix(t(11), prev2));
        f.push(mix(mix(t(12), prev), prev2));
        f.push(mix(mix(t(13), prev), me.word));
        f.push(mix(mix(t(14), prev), me.suf[2]));
        f.push(mix(t(15), p1.word));
        f.push(mix(t(16), p1.suf[2]));
        f.push(mix(t(17), p1.shape));
        f.push(mix(t(18), p2));
        f.push(mix(t(19), n1.word));
        f.push(mix(t(20), n1.suf[2]));
        f.push(mix(t(21), n1.shape));
        f.push(mix(t(22), n2));
        f.push(mix(mix(t(23), p1.word), me.word));
        f.push(mix(mix(t(24), me.word), n1.word));
        f.push(mix(mix(t(25), prev), n1.word));
        f.push(mix(mix(t(26), me.shape), n1.shape));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_are_deterministic_and_case_folded() {
        let mut a = Extractor::default();
        a.load(&["The", "dog", "barked"]);
        a.features(1, 5, NO_TAG[0]);
        let f1 = a.feats.clone();
        a.load(&["the", "dog", "barked"]);
        a.features(1, 5, NO_TAG[0]);
        // The previous word's shape differs, its lower-cased form does not.
        let same = f1.iter().zip(&a.feats).filter(|(x, y)| x == y).count();
        assert_eq!(f1.len(), a.feats.len());
        assert_eq!(same, f1.len() - 1);
        // A different previous tag changes the tag features.
        a.features(1, 6, NO_TAG[0]);
        assert_ne!(f1, a.feats);
    }
}
